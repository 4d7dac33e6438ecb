"""The engine at scale: chunkeval's exact top-k and metrics beside faiss's exact IndexFlatIP search.

    pip install -e '.[bench]'        # faiss-cpu, for this benchmark only
    python bench/engine_scale.py [--queries 10000] [--chunks 1000000] [--k 10] [--dim 384] [--corpora 4] [--seed 0]

The data are synthetic and seeded: `--chunks` chunks laid end to end over `--corpora` corpora (lengths of
400 to 1,599 characters, a token per 4 characters), each with a random unit float32 vector of `--dim`
dimensions; `--queries` questions of one corpus each, with 1 to 3 references of 50 to 499 characters at
random places in it. A question's vector is a random unit vector nudged toward the chunk that holds the
start of its first reference (by a weight drawn from 0 to 0.6, then normalised), so that some questions
find that chunk at the top, some lower, and some not at all.

Phases, each in its own process (its peak memory is that process's maximum resident set size, data and
imports included; "data" is the resident set once the phase's inputs are made, before the timed work):
- faiss:    `faiss.IndexFlatIP` over the chunk vectors, exact `search` at k (the `add` is timed apart),
            OpenMP threads = the cores this process may use
- top_k:    `chunkeval.engine.retrieval.retrievers.dense.top_k` at k (numpy's BLAS uses every core)
- metrics:  `chunkeval.engine.scoring.configuration.score_chunking` (span, set and rank metrics per question) on top_k's result
            at every depth of 1, 5 and k (those at most k); then, apart, the time of each step it chains
Seconds are wall-clock seconds of the timed call only (data generation and imports excluded); "cpu" is
the user + system time of the process over the same call. The check: chunkeval's indices against
faiss's, row by row; a row that differs only where the two scores tie (within 1e-6: faiss's BLAS may
round differently) counts as tied, any other difference as a mismatch (exit status 1).
Exit status 2 when faiss is not installed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
ROWS = 65536  # chunk vectors made per step (bounds the temporaries of the data generation)
TIE_TOLERANCE = 1e-6


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def rss_mib() -> float:
    """The current resident set of this process."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# --------------------------------------------------------------------------- synthetic data


def make_chunks(n_chunks: int, n_corpora: int, seed: int):
    from chunkeval.engine.chunking import Chunks

    rng = np.random.default_rng([seed, 0])
    lengths = rng.integers(400, 1600, n_chunks).astype(np.int64)
    corpus = np.repeat(
        np.arange(n_corpora, dtype=np.int32), [len(a) for a in np.array_split(np.arange(n_chunks), n_corpora)]
    )
    end = np.cumsum(lengths)
    first = np.r_[0, np.flatnonzero(np.diff(corpus)) + 1]  # each corpus's first chunk
    end -= np.repeat(np.r_[0, end[first[1:] - 1]], np.diff(np.r_[first, n_chunks]))  # offsets restart per corpus
    return Chunks(tuple(f"corpus{i}" for i in range(n_corpora)), corpus, end - lengths, end, lengths // 4)


def make_gold(chunks, n_queries: int, seed: int):
    from chunkeval.engine.inputs.span_gold import SpanGold

    rng = np.random.default_rng([seed, 1])
    n_corpora = len(chunks.corpus_names)
    q_corpus = rng.integers(0, n_corpora, n_queries)
    n_refs = rng.integers(1, 4, n_queries)
    ref_query = np.repeat(np.arange(n_queries, dtype=np.int64), n_refs)
    corpus_len = np.array([chunks.end[chunks.corpus == c].max() for c in range(n_corpora)])
    ref_len = rng.integers(50, 500, len(ref_query))
    ref_start = (rng.random(len(ref_query)) * (corpus_len[q_corpus[ref_query]] - ref_len)).astype(np.int64)
    return SpanGold(
        query_ids=[f"q{i}" for i in range(n_queries)],
        questions=[""] * n_queries,
        corpus_ids=[chunks.corpus_names[c] for c in q_corpus.tolist()],
        ref_query=ref_query,
        ref_start=ref_start,
        ref_end=ref_start + ref_len,
        source="synthetic",
    ), q_corpus


def make_chunk_vectors(n_chunks: int, dim: int, seed: int) -> np.ndarray:
    out = np.empty((n_chunks, dim), dtype=np.float32)
    for step, lo in enumerate(range(0, n_chunks, ROWS)):
        v = np.random.default_rng([seed, 3, step]).standard_normal((min(ROWS, n_chunks - lo), dim), dtype=np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        out[lo : lo + len(v)] = v
    return out


def make_query_vectors(chunks, gold, q_corpus: np.ndarray, vectors: np.ndarray, seed: int) -> np.ndarray:
    """Random unit vectors nudged toward the chunk at the start of each question's first reference."""
    n_q = gold.n_queries
    first_ref = np.r_[0, np.flatnonzero(np.diff(gold.ref_query)) + 1]
    offset = np.searchsorted(chunks.corpus, np.arange(len(chunks.corpus_names)))  # each corpus's first chunk
    target = np.empty(n_q, dtype=np.int64)
    for c in range(len(chunks.corpus_names)):
        mine = np.flatnonzero(q_corpus == c)
        lo, hi = offset[c], offset[c + 1] if c + 1 < len(offset) else len(chunks)
        target[mine] = lo + np.searchsorted(chunks.start[lo:hi], gold.ref_start[first_ref[mine]], side="right") - 1
    rng = np.random.default_rng([seed, 2])
    noise = rng.standard_normal((n_q, vectors.shape[1]), dtype=np.float32)
    noise /= np.linalg.norm(noise, axis=1, keepdims=True)
    q = noise + rng.uniform(0, 0.6, n_q).astype(np.float32)[:, None] * vectors[target]
    return q / np.linalg.norm(q, axis=1, keepdims=True)


def make_vectors(args):
    chunks = make_chunks(args.chunks, args.corpora, args.seed)
    gold, q_corpus = make_gold(chunks, args.queries, args.seed)
    vectors = make_chunk_vectors(args.chunks, args.dim, args.seed)
    return vectors, make_query_vectors(chunks, gold, q_corpus, vectors, args.seed)


# --------------------------------------------------------------------------- phases


def phase_faiss(args, out: Path) -> dict:
    import faiss

    threads = cores()
    faiss.omp_set_num_threads(threads)
    vectors, queries = make_vectors(args)
    data = rss_mib()
    t0, c0 = time.perf_counter(), cpu_seconds()
    index = faiss.IndexFlatIP(args.dim)
    index.add(vectors)
    add = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), cpu_seconds()
    score, found = index.search(queries, args.k)
    seconds, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    np.save(out / "faiss_index.npy", found)
    np.save(out / "faiss_score.npy", score)
    return {
        "seconds": seconds,
        "cpu": cpu,
        "data_mib": data,
        "extra": f"add {add:.1f} s; faiss {faiss.__version__}, {threads} OpenMP threads",
    }


def phase_top_k(args, out: Path) -> dict:
    from chunkeval.engine.retrieval.retrievers.dense import top_k

    vectors, queries = make_vectors(args)
    data = rss_mib()
    t0, c0 = time.perf_counter(), cpu_seconds()
    index, score = top_k(queries, vectors, args.k)
    seconds, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    np.save(out / "chunkeval_index.npy", index)
    np.save(out / "chunkeval_score.npy", score)
    return {
        "seconds": seconds,
        "cpu": cpu,
        "data_mib": data,
        "extra": f"numpy {np.__version__}, BLAS over {cores()} cores",
    }


def phase_metrics(args, out: Path) -> dict:
    from chunkeval.engine.chunking import ChunkerSpec
    from chunkeval.engine.scoring import metrics as M
    from chunkeval.engine.scoring.configuration import score_chunking, span_scoring

    chunks = make_chunks(args.chunks, args.corpora, args.seed)
    gold, _ = make_gold(chunks, args.queries, args.seed)
    topk = np.load(out / "chunkeval_index.npy")
    ks = tuple(sorted({d for d in (1, 5, args.k) if d <= args.k}))
    spec = ChunkerSpec("synthetic", 400, 0)
    data = rss_mib()
    t0, c0 = time.perf_counter(), cpu_seconds()
    table = score_chunking(gold, spec, chunks, topk, ks, "synthetic", "dense")
    seconds, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    peak = peak_rss_mib()
    means = {
        m: round(float(np.mean(table.filter(table["k"].to_numpy() == args.k)[m].to_numpy())), 4)
        for m in ("span_recall", "recall_at_k", "mrr")
    }
    # The same chain, one step at a time: where the time goes.
    steps = {}

    def timed(name, fn, *a):
        t = time.perf_counter()
        result = fn(*a)
        steps[name] = steps.get(name, 0.0) + time.perf_counter() - t
        return result

    ref = timed("reference_chars", M.reference_chars, gold, chunks.corpus_names)
    first = timed("first_covering_rank", M.first_covering_rank, ref, topk, chunks)
    relevance = timed("chunk_relevance", M.chunk_relevance, gold, ref, chunks)
    for k in ks:
        timed("span_metrics (every k)", M.span_metrics, ref, first, topk, chunks, k)
        judged = timed(
            "judge_topk (every k)", M.judge_topk, topk[:, :k], relevance.keys, relevance.n_relevant, len(chunks)
        )
        timed("rank_metrics (every k)", M.rank_metrics, judged, k)
    t = time.perf_counter()
    span_scoring(gold, topk, chunks)
    steps["(span_scoring, for reference)"] = time.perf_counter() - t
    return {
        "seconds": seconds,
        "cpu": cpu,
        "data_mib": data,
        "peak_rss_mib": peak,
        "rows": table.num_rows,
        "references": int(len(gold.ref_start)),
        "reference_chars": int(len(ref.pos)),
        "ks": list(ks),
        "means_at_k": means,
        "steps": steps,
        "extra": f"{table.num_rows} rows, k in {ks}",
    }


PHASES = {"faiss": phase_faiss, "top_k": phase_top_k, "metrics": phase_metrics}


# --------------------------------------------------------------------------- check and report


def check(out: Path) -> dict:
    """Rows where chunkeval's indices equal faiss's; rows that differ only among tied scores; others."""
    mine, theirs = np.load(out / "chunkeval_index.npy"), np.load(out / "faiss_index.npy")
    my_score, their_score = np.load(out / "chunkeval_score.npy"), np.load(out / "faiss_score.npy")
    same = (mine == theirs).all(axis=1)
    # Both lists are ordered by score: where they hold other chunks (or the same in another order) with the
    # same scores, rank by rank, the difference is one of ties (faiss's BLAS may round the last digit apart).
    close = np.isclose(my_score, their_score, rtol=0, atol=TIE_TOLERANCE).all(axis=1)
    tied = int((~same & close).sum())
    return {
        "rows": int(len(same)),
        "identical": int(same.sum()),
        "tied": tied,
        "mismatched": int((~same).sum()) - tied,
        "max_score_difference": float(np.max(np.abs(my_score - their_score), initial=0.0)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--chunks", type=int, default=1_000_000)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--corpora", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--phases", default="faiss,top_k,metrics", help="a subset, in order (metrics reads top_k's result)")
    ap.add_argument("--phase", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.phase:
        result = PHASES[args.phase](args, Path(args.out))
        result.setdefault("peak_rss_mib", peak_rss_mib())
        print(json.dumps({"phase": args.phase, **result}))
        return
    try:
        import faiss  # noqa: F401
    except ImportError:
        print("skipped: faiss is not installed (pip install -e '.[bench]', or pip install faiss-cpu)", file=sys.stderr)
        sys.exit(2)
    names = args.phases.split(",")
    results = {}
    common = [f"--{name}={getattr(args, name)}" for name in ("queries", "chunks", "k", "dim", "corpora", "seed")]
    print(
        f"{args.queries:,} questions x {args.chunks:,} chunks of {args.dim} dimensions, k = {args.k}, "
        f"{args.corpora} corpora, seed {args.seed}; {cores()} cores",
        file=sys.stderr,
        flush=True,
    )
    with tempfile.TemporaryDirectory() as out:
        for name in names:
            proc = subprocess.run(
                [sys.executable, __file__, "--phase", name, "--out", out, *common], capture_output=True, text=True
            )
            if proc.returncode:
                sys.exit(f"phase {name} failed:\n{proc.stderr}")
            results[name] = json.loads(proc.stdout.strip().splitlines()[-1])
            print(json.dumps(results[name]), file=sys.stderr, flush=True)
        matched = check(Path(out)) if {"faiss", "top_k"} <= set(names) else None
    print(
        f"\n{args.queries:,} questions x {args.chunks:,} chunks, {args.dim} dimensions, k = {args.k}, {cores()} cores\n"
    )
    print("| phase | seconds | cpu seconds | data (MiB) | peak RSS (MiB) | notes |\n|---|---:|---:|---:|---:|---|")
    for name, r in results.items():
        print(
            f"| {name} | {r['seconds']:.2f} | {r['cpu']:.2f} | {r['data_mib']:.0f} | {r['peak_rss_mib']:.0f} | {r['extra']} |"
        )
    if "metrics" in results:
        steps = results["metrics"]["steps"]
        print(
            f"\nmetrics, step by step ({results['metrics']['references']:,} references, "
            f"{results['metrics']['reference_chars']:,} reference characters):"
        )
        print("| step | seconds |\n|---|---:|")
        for step, seconds in steps.items():
            print(f"| {step} | {seconds:.2f} |")
        print(f"\nmeans at k = {args.k}: {results['metrics']['means_at_k']}")
    print()
    if {"faiss", "top_k"} <= results.keys():
        ratio = results["top_k"]["seconds"] / results["faiss"]["seconds"]
        cpu = results["top_k"]["cpu"] / results["faiss"]["cpu"]
        print(f"top_k / faiss search = {ratio:.2f} (goal <= 1.3); in cpu seconds {cpu:.2f}")
    if {"top_k", "metrics"} <= results.keys():
        ratio = results["metrics"]["seconds"] / results["top_k"]["seconds"]
        cpu = results["metrics"]["cpu"] / results["top_k"]["cpu"]
        print(f"metrics / top_k = {ratio:.2f} (goal <= 0.5); in cpu seconds {cpu:.2f}")
    peak = max(r["peak_rss_mib"] for r in results.values())
    print(f"largest peak RSS = {peak / 1024:.2f} GiB (goal < 8)")
    if matched is not None:
        print(
            f"indices: {matched['identical']:,} of {matched['rows']:,} rows identical to faiss's, {matched['tied']} differ only "
            f"among tied scores, {matched['mismatched']} mismatched; largest score difference {matched['max_score_difference']:.2e}"
        )
        if matched["mismatched"]:
            sys.exit(1)


if __name__ == "__main__":
    main()
