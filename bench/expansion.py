"""What small-to-big retrieval (`expand`) does on the shared general evaluation, against the chunks themselves.

    python bench/expansion.py [--data ../shared/datasets/chroma_general] [--small 100] [--size 200]

One `run_sweep` of the general evaluation (its corpora pooled, fixed_token chunks, overlap 0, k 5, dense by
all-MiniLM-L6-v2): the small units are chunks of `--small` tokens, returned as they are (`none`), with 1 and 2
neighbours on each side (`window:n=1`, `window:n=2`), or as their 400-token parent (`parent:size=400`); chunks
of `--size` tokens without expansion are the usual setting beside them. Prints a Markdown table of the macro
means at k 5 of span recall, span precision, span IoU, recall_at_k and retrieved tokens, and for each expansion
the paired difference against `none` of the same small units (a − b, its 95 % bootstrap interval and the
paired permutation test's p, `chunkeval.stats.tests.compare_paired`). Exits 0 with a reason where the data
set is absent.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXPANSIONS = ("none", "window:n=1", "window:n=2", "parent:size=400")
METRICS = ("span_recall", "span_precision", "span_iou", "recall_at_k", "retrieved_tokens")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "datasets" / "chroma_general"))
    parser.add_argument("--small", type=int, default=100)
    parser.add_argument("--size", type=int, default=200)
    args = parser.parse_args()
    data = Path(args.data)
    if not (data / "questions_df.csv").is_file():
        print(f"skipped: no shared data set at {data} (questions_df.csv and corpora/)")
        return

    import numpy as np

    from chunkeval.engine.embedding.embedders import Embedders
    from chunkeval.engine.pipeline.experiment import Experiment
    from chunkeval.engine.pipeline.sweep import run_sweep
    from chunkeval.stats.tests import compare_paired

    exp = Experiment(
        name="expand-bench",
        corpus_dir=str(data / "corpora"),
        questions=str(data / "questions_df.csv"),
        chunker=("fixed_token",),
        chunk_sizes=(args.small, args.size),
        overlaps=("0",),
        k=(5,),
        expand=EXPANSIONS,
    )
    started = time.perf_counter()
    result = run_sweep(exp, Embedders())
    seconds = time.perf_counter() - started
    pq = result.per_query.to_pandas()
    rows = {(r["chunk_size"], r["expand"]): r for r in result.summary.to_pylist()}
    n = rows[(args.small, "none")]["n_queries"]
    print(f"all-MiniLM-L6-v2, dense exact, fixed_token overlap 0, k 5, {n} questions; {seconds:.0f} s")
    print("| chunks | expand | " + " | ".join(METRICS) + " |")
    print("| ---: | --- |" + " ---: |" * len(METRICS))
    for size, expand in [(args.small, e) for e in EXPANSIONS] + [(args.size, "none")]:
        r = rows[(size, expand)]
        cells = [f"{r[f'{m}_mean']:.1f}" if m == "retrieved_tokens" else f"{r[f'{m}_mean']:.4f}" for m in METRICS]
        print(f"| {size} ({r['n_chunks']} chunks) | {expand} | " + " | ".join(cells) + " |")

    def column(size, expand, metric):
        rows = pq[(pq.chunk_size == size) & (pq.expand == expand)].sort_values("query_id")
        return rows[metric].to_numpy(dtype=np.float64)

    print(f"\nPaired against `none` of the same {args.small}-token units (a − b [95 % CI], permutation p):")
    print("| expand | " + " | ".join(METRICS) + " |")
    print("| --- |" + " --- |" * len(METRICS))
    for expand in EXPANSIONS[1:]:
        cells = []
        for m in METRICS:
            c = compare_paired(column(args.small, expand, m), column(args.small, "none", m))
            digits = 1 if m == "retrieved_tokens" else 4
            cells.append(
                f"{c['mean_diff']:+.{digits}f} [{c['ci_low']:+.{digits}f}, {c['ci_high']:+.{digits}f}], "
                f"p {c['p_permutation']:.4f}"
            )
        print(f"| {expand} | " + " | ".join(cells) + " |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
