"""The index axis at scale: chunkeval's hnsw and ivf beside faiss used directly, with the same parameters.

    pip install -e '.[indexes]'
    python bench/indexes.py [--chunks 1000000] [--queries 10000] [--dim 384] [--k 10] [--real-only | --random-only]
                             [--kinds hnsw,ivf]

Two parts (docs/indexes.md says why both):
- random: `--chunks` random unit float32 vectors of `--dim` dimensions and `--queries` queries (seeded).
  Random vectors in 384 dimensions are a degenerate case for approximate search (every neighbour is
  about as far as every other), so this part measures time and memory only: build seconds, bytes, the
  batched search's milliseconds per query (best of two rounds), and p50/p95 of one query at a time (1,000
  queries after 10 warm-up searches), for chunkeval (`chunkeval.engine.retrieval.indexes`: hashing the vectors and
  building with one thread until the index is usable; its file, written in the background while a run
  searches, is timed apart as "file s" and waited for before faiss builds; then searching through
  `Built.search`) and for faiss alone (the same index class, parameters and threads, no persistence). The
  two sides' searches are timed in turn (each query by both, the side that goes first alternating), so
  that the load of a shared machine moves both alike.
- real: the chunks of the shared general evaluation (`../shared/datasets/chroma_general`, fixed_token 200,
  all-MiniLM-L6-v2 vectors through chunkeval's cache) and its 472 questions: ann_recall_at_k at k, as
  `chunkeval.engine.retrieval.indexes.measure` computes it, beside the same formula applied to faiss's own output
  (they must be equal), and the same times.

Settings: hnsw (M 32, ef_construction 40: faiss's defaults) at ef_search 16, 64 and 256, one build; ivf
(nlist 1024 for the random part, 64 for the real one) at nprobe 8 and 32, one build. Peak memory is the
process's maximum resident set. Prints a Markdown table per part.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "datasets" / "chroma_general"
LATENCY_QUERIES, WARMUP, BATCH_ROUNDS = 1000, 10, 2


def unit(rows: int, dim: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    out = np.empty((rows, dim), dtype=np.float32)
    for lo in range(0, rows, 65536):
        x = rng.standard_normal((min(65536, rows - lo), dim), dtype=np.float32)
        out[lo : lo + len(x)] = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


def peak_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def paired(ours, theirs, queries: np.ndarray, k: int) -> dict:
    """Both sides timed in turn, so that a change of the machine's load between two measurements moves both
    alike: the batch of every query (best of BATCH_ROUNDS rounds, the side that goes first alternating), and
    one query at a time (LATENCY_QUERIES of them after WARMUP, each searched by both sides, in alternating
    order), as p50 and p95 in milliseconds."""
    sides = {"ours": ours, "theirs": theirs}
    batch = {side: [] for side in sides}
    for r in range(BATCH_ROUNDS):
        for side in list(sides)[:: 1 if r % 2 == 0 else -1]:
            t = time.perf_counter()
            sides[side](queries, k)
            batch[side].append(1000 * (time.perf_counter() - t) / len(queries))
    picks = np.unique(np.linspace(0, len(queries) - 1, min(len(queries), LATENCY_QUERIES)).astype(np.int64))
    for i in picks[:WARMUP]:
        for search in sides.values():
            search(queries[i : i + 1], k)
    one = {side: [] for side in sides}
    for n, i in enumerate(picks):
        for side in list(sides)[:: 1 if n % 2 == 0 else -1]:
            t = time.perf_counter()
            sides[side](queries[i : i + 1], k)
            one[side].append(1000 * (time.perf_counter() - t))
    return {
        side: (min(batch[side]), float(np.percentile(one[side], 50)), float(np.percentile(one[side], 95)))
        for side in sides
    }


def faiss_build(spec, x: np.ndarray):
    """faiss alone: the index class chunkeval builds, one thread for the build (as chunkeval's)."""
    import faiss

    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    t = time.perf_counter()
    d = x.shape[1]
    if spec.kind == "hnsw":
        index = faiss.IndexHNSWFlat(d, spec.get("m"), faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = spec.get("ef_construction")
    else:
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(d), d, spec.get("nlist"), faiss.METRIC_INNER_PRODUCT)
        index.train(x)
    index.add(x)
    seconds = time.perf_counter() - t
    faiss.omp_set_num_threads(threads)
    return index, seconds, faiss.serialize_index(index).nbytes


def faiss_search(index, spec, queries, k):
    import faiss

    if spec.kind == "hnsw":
        params = faiss.SearchParametersHNSW(efSearch=spec.get("ef_search"))
    else:
        params = faiss.SearchParametersIVF(nprobe=spec.get("nprobe"))
    return index.search(queries, k, params=params)[1]


def settings(nlist: int, kinds: tuple[str, ...] = ("hnsw", "ivf")) -> list[list[str]]:
    """Groups of settings that share one build."""
    groups = {
        "hnsw": [f"hnsw:ef_search={ef}" for ef in (16, 64, 256)],
        "ivf": [f"ivf:nlist={nlist}:nprobe={p}" for p in (8, 32)],
    }
    return [groups[kind] for kind in kinds]


def compare(
    chunks: np.ndarray, queries: np.ndarray, k: int, nlist: int, recall: bool, kinds=("hnsw", "ivf")
) -> list[list[str]]:
    from chunkeval.engine.retrieval import indexes
    from chunkeval.engine.retrieval.indexes import parse_index, persist
    from chunkeval.engine.retrieval.indexes.measure import found_at
    from chunkeval.engine.retrieval.retrievers.dense import top_k

    exact = top_k(queries, chunks, k)[0] if recall else None
    rows = []
    warm = chunks[
        : min(len(chunks), 4096)
    ]  # one throwaway build of each kind: the first pays for OpenMP and allocation
    for group in settings(min(nlist, 16), kinds):
        faiss_build(parse_index(group[0]), warm)
    for group in settings(nlist, kinds):
        specs = [parse_index(s) for s in group]
        indexes.forget()
        t = time.perf_counter()
        built = indexes.get(specs[0], chunks)  # hashing the vectors and the build: the index is usable
        ours_build = time.perf_counter() - t
        persist.wait_all()  # its file, written in the background while a run searches; waited for here
        ours_file = time.perf_counter() - t - ours_build  # so that it does not share the core with faiss's build
        theirs, theirs_build, theirs_bytes = faiss_build(specs[0], chunks)
        for spec in specs:
            built.search(spec, queries[:WARMUP], k)  # a warm-up search each
            faiss_search(theirs, spec, queries[:WARMUP], k)
            ours_ids = built.search(spec, queries, k)[0]
            their_ids = faiss_search(theirs, spec, queries, k)
            times = paired(
                lambda q, kk, s=spec, b=built: b.search(s, q, kk),
                lambda q, kk, s=spec, t=theirs: faiss_search(t, s, q, kk),
                queries,
                k,
            )
            (ours_batch, *ours_lat), (their_batch, *their_lat) = times["ours"], times["theirs"]
            same = bool(np.array_equal(ours_ids, their_ids))
            cells = [
                spec.key,
                f"{ours_build:.1f} / {theirs_build:.1f}",
                f"{ours_file:.1f}",
                f"{built.nbytes / 2**20:.0f} / {theirs_bytes / 2**20:.0f}",
                f"{ours_batch:.3f} / {their_batch:.3f}",
                f"{ours_lat[0]:.3f} / {their_lat[0]:.3f}",
                f"{ours_lat[1]:.3f} / {their_lat[1]:.3f}",
                "yes" if same else "no",
            ]
            if recall:
                ours_r = found_at(queries, chunks, ours_ids, exact).mean() / k
                their_r = found_at(queries, chunks, their_ids.astype(np.int64), exact).mean() / k
                cells.append(f"{ours_r:.4f} / {their_r:.4f}")
            rows.append(cells)
            print("  " + " | ".join(cells), file=sys.stderr, flush=True)
    return rows


def table(rows: list[list[str]], recall: bool) -> str:
    header = [
        "setting",
        "build s (chunkeval / faiss)",
        "file s",
        "MiB",
        "batch ms/query",
        "p50 ms",
        "p95 ms",
        "same ids",
    ] + (["ann_recall_at_k"] if recall else [])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def real_vectors(k: int) -> tuple[np.ndarray, np.ndarray]:
    from chunkeval.engine.chunking import ChunkerSpec
    from chunkeval.engine.embedding.embedders import Embedders
    from chunkeval.engine.pipeline.experiment import Experiment
    from chunkeval.engine.pipeline.records import Config
    from chunkeval.engine.pipeline.sweep import chunk_one, embed_all, load_inputs
    from chunkeval.paths import cache_dir

    exp = Experiment(
        name="bench-indexes",
        corpus_dir=str(SHARED / "corpora"),
        questions=str(SHARED / "questions_df.csv"),
        chunk_sizes=(200,),
        k=(k,),
    )
    inputs = load_inputs(exp)
    embedders = Embedders(cache_dir())
    chunking = chunk_one(inputs.corpora, ChunkerSpec("fixed_token", 200, 0), None, embedders)
    embedded = embed_all(inputs, [chunking], [Config(0, exp.model[0], "dense")], embedders)
    return embedded.chunks[(0, exp.model[0])], embedded.queries[exp.model[0]]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--chunks", type=int, default=1_000_000)
    p.add_argument("--queries", type=int, default=10_000)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--nlist", type=int, default=1024)
    p.add_argument("--real-only", action="store_true")
    p.add_argument("--random-only", action="store_true")
    p.add_argument("--kinds", default="hnsw,ivf", help="the index kinds to measure (hnsw, ivf or both)")
    args = p.parse_args()
    try:
        import faiss
    except ImportError:
        print("bench/indexes.py needs faiss-cpu: pip install -e '.[indexes]'", file=sys.stderr)
        return 2
    kinds = tuple(args.kinds.split(","))
    os.environ.setdefault("CHUNKEVAL_HOME", tempfile.mkdtemp(prefix="bench-indexes-"))
    print(f"faiss {faiss.__version__}, {faiss.omp_get_max_threads()} OpenMP threads for searches", file=sys.stderr)
    if not args.random_only:
        if not (SHARED / "questions_df.csv").is_file():
            print(f"the shared data set is absent ({SHARED}): real part skipped", file=sys.stderr)
        else:
            chunks, queries = real_vectors(args.k)
            print(f"\nreal: {len(chunks):,} chunks × {len(queries):,} questions, k = {args.k}")
            print(table(compare(chunks, queries, args.k, 64, True, kinds), recall=True))
    if not args.real_only:
        chunks, queries = unit(args.chunks, args.dim, 0), unit(args.queries, args.dim, 1)
        print(f"\nrandom: {args.chunks:,} chunks × {args.queries:,} queries, {args.dim} dimensions, k = {args.k}")
        print(table(compare(chunks, queries, args.k, args.nlist, False, kinds), recall=False))
    print(f"\npeak memory {peak_gib():.1f} GiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
