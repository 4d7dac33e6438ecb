"""Times the 125-configuration sweep: cold cache, warm cache, and a naive pipeline.

    python bench/sweep_bench.py [--data ../shared/datasets/chroma_general] [--corpus state_of_the_union] [--backend auto]

The grid: fixed_token (all-MiniLM-L6-v2, dense), chunk sizes 100..500 step 100, overlaps 10..50 %, k 1,3,5,7,9 (125 rows).
- probe: `--backend auto` (the default) resolved: the one-time probe of the backends, cached for the phases after it
- cold:  `run_sweep` on the backend chosen, with an empty embedding cache (the model is loaded, every distinct text embedded once)
- warm:  the same sweep again over the cache it left (no model load, nothing embedded); it also times the
         summary with and without the bootstrap intervals of every macro mean
- limit: the cold sweep's own limit: the distinct texts it embeds (every chunking's chunks and the questions, each
         text once), embedded in one call on the backend the sweep used, the model loaded and warmed up beforehand
         (the time the model itself needs; the sweep's every other cost is what it adds to this)
- batched: the naive batched pipeline: sentence-transformers on torch fp32 as shipped, no cache; per chunking its
         chunks encoded in one `encode` call (batch 32, sentence-transformers' default), the questions once for the
         sweep, each k retrieved from one exact search and scored
- naive: every configuration on its own, on torch fp32 (sentence-transformers as shipped): chunk, embed its chunks afresh (model loaded once), retrieve, score
Each phase runs in its own process; its time is measured inside that process from before the first
import of chunkeval to the end, and its peak memory is that process's maximum resident set size.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GRID = dict(
    chunker=["fixed_token"],
    chunk_sizes=[100, 200, 300, 400, 500],
    overlaps=["10%", "20%", "30%", "40%", "50%"],
    k=[1, 3, 5, 7, 9],
)


def phase(name: str, data: str, corpus: str, backend: str = "auto") -> dict:
    start = time.perf_counter()
    import resource

    from chunkeval.engine.chunking import chunk_corpora
    from chunkeval.engine.embedding import Embedder
    from chunkeval.engine.pipeline.experiment import Experiment
    from chunkeval.engine.pipeline.sweep import load_inputs, run_sweep
    from chunkeval.engine.retrieval.retrievers.dense import top_k
    from chunkeval.engine.scoring import metrics as M
    from chunkeval.engine.scoring.configuration import score_chunking
    from chunkeval.paths import cache_dir
    from chunkeval.vocabulary import CONFIG_KEYS

    exp = Experiment.from_dict(
        {
            "name": "bench",
            "corpus_dir": f"{data}/corpora",
            "questions": f"{data}/questions_df.csv",
            "corpus": [corpus],
            "backend": backend,
            **GRID,
        }
    )
    from chunkeval.engine.embedding.resolution import resolved

    backend = resolved(exp).backend  # auto: probed once (the probe phase), read from its cache after
    if name == "probe":
        rows = embedded = 0
        embedder = Embedder(cache_dir=None)
    elif name in ("cold", "warm"):
        embedder = Embedder(cache_dir=cache_dir(), backend=backend)
        result = run_sweep(exp, embedder)
        rows, embedded = result.summary.num_rows, embedder.texts_embedded
        extra = {"model_seconds": embedder.embed_seconds}  # the model's own time inside the sweep
        swept = time.perf_counter()  # the phase's time (what follows times the summary apart, for the docs)
        if name == "warm":  # what the intervals of every macro mean cost: the summary with and without them
            table = result.per_query.drop_columns(["has_gold"])
            timings = {}
            for intervals in (False, True):
                t0 = time.perf_counter()
                M.summarize(table, CONFIG_KEYS, intervals=intervals)
                timings[intervals] = time.perf_counter() - t0
            extra.update(summary_seconds=timings[False], summary_with_intervals_seconds=timings[True])
    elif name == "limit":
        inputs = load_inputs(exp)
        texts = list(
            dict.fromkeys(t for spec in exp.grid() for t in chunk_corpora(inputs.corpora, spec).texts(inputs.corpora))
        )
        questions = list(dict.fromkeys(inputs.gold.questions))
        embedder = Embedder(cache_dir=None, backend=backend)
        embedder.embed(["a warm-up text, not timed"] * 2 + texts[:16])  # the model loaded, its first batch run
        loaded = time.perf_counter()
        embedder = Embedder(cache_dir=None, backend=backend, _st=embedder._st, batch_size=embedder.batch_size)
        embedder.embed(texts)
        embedder.embed(questions, kind="query")
        rows, embedded = 0, embedder.texts_embedded
        extra = {"limit_seconds": time.perf_counter() - loaded, "model_seconds": embedder.embed_seconds}
    elif name == "batched":
        rows, embedded = _batched(exp, load_inputs(exp), chunk_corpora, top_k, score_chunking)
        embedder = None
    else:
        embedder = Embedder(cache_dir=None)
        inputs = load_inputs(exp)
        rows = embedded = 0
        for spec in exp.grid():
            for k in exp.k:  # each configuration is evaluated from scratch
                chunks = chunk_corpora(inputs.corpora, spec)
                vectors, _ = embedder.embed(chunks.texts(inputs.corpora))
                queries, _ = embedder.embed(list(inputs.gold.questions), kind="query")
                score_chunking(inputs.gold, spec, chunks, top_k(queries, vectors, k)[0], (k,), embedder.model, "dense")
                rows += 1
        embedded = embedder.texts_embedded
    return {
        **(extra if name in ("cold", "warm", "limit") else {}),
        "phase": name,
        "backend": "torch" if name in ("naive", "batched") else backend,
        "seconds": (swept if name in ("cold", "warm") else time.perf_counter()) - start,
        "configurations": rows,
        "texts_embedded": embedded,
        "texts_shared": embedder.texts_shared if embedder else 0,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def _batched(exp, inputs, chunk_corpora, top_k, score_chunking) -> tuple[int, int]:
    """The naive batched pipeline (sentence-transformers as shipped, torch fp32, no cache): (rows, texts embedded)."""
    from sentence_transformers import SentenceTransformer

    from chunkeval.engine.embedding.registry import resolve_model

    model = SentenceTransformer(str(resolve_model(exp.model[0])), device="cpu")
    questions = model.encode(list(inputs.gold.questions), batch_size=32, normalize_embeddings=True)
    rows, embedded = 0, len(questions)
    for spec in exp.grid():
        chunks = chunk_corpora(inputs.corpora, spec)
        vectors = model.encode(chunks.texts(inputs.corpora), batch_size=32, normalize_embeddings=True)
        embedded += len(vectors)
        ks = tuple(exp.k)
        score_chunking(inputs.gold, spec, chunks, top_k(questions, vectors, max(ks))[0], ks, exp.model[0], "dense")
        rows += len(ks)
    return rows, embedded


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "datasets" / "chroma_general"))
    ap.add_argument("--corpus", default="state_of_the_union")
    ap.add_argument("--phases", default="probe,cold,warm,limit,batched")
    ap.add_argument("--backend", default="auto", help="the sweep's backend (default auto, as a new experiment's)")
    ap.add_argument("--phase", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.phase:
        print(json.dumps(phase(args.phase, args.data, args.corpus)))
        return
    results = []
    with tempfile.TemporaryDirectory() as home:
        env = dict(os.environ, CHUNKEVAL_HOME=home, HF_HUB_OFFLINE="1")  # tokenizers as a user runs them
        for name in args.phases.split(","):
            out = subprocess.run(
                [sys.executable, __file__, "--phase", name, "--data", args.data, "--corpus", args.corpus]
                + ["--backend", args.backend],
                env=env,
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            results.append(json.loads(out.strip().splitlines()[-1]))
            print(json.dumps(results[-1]), file=sys.stderr)
    print(
        "| phase | backend | configurations | texts embedded | of which shared (the model read them alike) | seconds | "
        "peak RSS (MiB) |\n|---|---|---:|---:|---:|---:|---:|"
    )
    for r in results:
        print(
            f"| {r['phase']} | {r['backend']} | {r['configurations']} | {r['texts_embedded']} | {r['texts_shared']} | {r['seconds']:.1f} | "
            f"{r['peak_rss_mib']:.0f} |"
        )
    for r in results:
        if "summary_with_intervals_seconds" in r:
            print(
                f"\nsummary of the {r['configurations']} configurations: {r['summary_seconds']:.3f} s without intervals, "
                f"{r['summary_with_intervals_seconds']:.3f} s with the 95 % bootstrap interval of every macro mean (10,000 resamples)"
            )
    by = {r["phase"]: r for r in results}
    for r in results:
        if "model_seconds" in r:
            print(f"{r['phase']}: the model ran {r['model_seconds']:.1f} s of its {r['seconds']:.1f} s")
    if "cold" in by and "limit" in by:
        limit = by["limit"]["limit_seconds"]
        print(
            f"\ncold / its limit = {by['cold']['seconds'] / limit:.2f} (the distinct texts alone: {limit:.1f} s; goal <= 1.15)"
        )
    for base in ("batched", "naive"):
        if base in by:
            for r in ("cold", "warm"):
                if r in by:
                    ratio = by[r]["seconds"] / by[base]["seconds"]
                    goal = {"batched": {"cold": 0.45, "warm": 0.05}, "naive": {"cold": 1, "warm": 0.1}}[base][r]
                    print(f"{r} / {base} = {ratio:.3f} (goal <= {goal})")


if __name__ == "__main__":
    main()
