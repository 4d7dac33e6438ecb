"""Times the 125-configuration sweep: cold cache, warm cache, and a naive pipeline.

    python bench/sweep_bench.py [--data ../shared/datasets/chroma_general] [--corpus state_of_the_union] [--backend auto]

The grid: fixed_token (all-MiniLM-L6-v2, dense), chunk sizes 100..500 step 100, overlaps 10..50 %, k 1,3,5,7,9 (125 rows).
- probe: `--backend auto` (the default) resolved: the one-time probe of the backends, cached for the phases after it
- cold:  `run_sweep` on the backend chosen, with an empty embedding cache (the model is loaded, every distinct text embedded once)
- warm:  the same sweep again over the cache it left (no model load, nothing embedded); it also times the
         summary with and without the bootstrap intervals of every macro mean
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
        if name == "warm":  # what the intervals of every macro mean cost: the summary with and without them
            table = result.per_query.drop_columns(["has_gold"])
            timings = {}
            for intervals in (False, True):
                t0 = time.perf_counter()
                M.summarize(table, CONFIG_KEYS, intervals=intervals)
                timings[intervals] = time.perf_counter() - t0
            extra = {"summary_seconds": timings[False], "summary_with_intervals_seconds": timings[True]}
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
        **(extra if name == "warm" else {}),
        "phase": name,
        "backend": "torch" if name == "naive" else backend,
        "seconds": time.perf_counter() - start,
        "configurations": rows,
        "texts_embedded": embedded,
        "texts_shared": embedder.texts_shared,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "datasets" / "chroma_general"))
    ap.add_argument("--corpus", default="state_of_the_union")
    ap.add_argument("--phases", default="probe,cold,warm,naive")
    ap.add_argument("--backend", default="auto", help="the sweep's backend (default auto, as a new experiment's)")
    ap.add_argument("--phase", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.phase:
        print(json.dumps(phase(args.phase, args.data, args.corpus)))
        return
    results = []
    with tempfile.TemporaryDirectory() as home:
        env = dict(os.environ, CHUNKEVAL_HOME=home, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
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
    by = {r["phase"]: r["seconds"] for r in results}
    if {"cold", "warm", "naive"} <= by.keys():
        print(
            f"\ncold / naive = {by['cold'] / by['naive']:.2f} (target <= 1); warm / cold = {by['warm'] / by['cold']:.3f} (target <= 0.1)"
        )


if __name__ == "__main__":
    main()
