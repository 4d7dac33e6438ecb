"""What compressed vectors and Matryoshka truncation cost all-MiniLM-L6-v2 on the shared general evaluation.

    python bench/vectors.py [--data ../shared/datasets/chroma_general] [--chunk-size 200]

One `run_sweep` of the general evaluation (its corpora pooled, fixed_token chunks of `--chunk-size` tokens,
overlap 0, k 5, dense retrieval by all-MiniLM-L6-v2 under exact search) over the axes `vectors` (float32, int8,
binary, binary-rescore:depth=50) and `dims` (full, 256, 128, 64). Prints two Markdown tables: span recall and
recall_at_k of each setting against float32/full (paired tests of the project's statistics: the bootstrap
interval of the mean difference, the permutation test's p, Holm-adjusted over the table), with the recall lost
against exact float search (ann_recall_at_k); and per quantization at full width the bytes per vector, in all,
and the search time per question (batched, and p50 of one question at a time). The embedding cache is a
temporary one. Skips, saying why, where the shared set is absent.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
VECTORS = ("float32", "int8", "binary", "binary-rescore:depth=50")
DIMS = ("full", "256", "128", "64")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "datasets" / "chroma_general"))
    parser.add_argument("--chunk-size", type=int, default=200)
    args = parser.parse_args()
    if not (Path(args.data) / "questions_df.csv").is_file():
        print(f"skipped: the shared set is not at {args.data}")
        sys.exit(0)

    from chunkeval.engine.embedding.embedders import Embedders
    from chunkeval.engine.pipeline.experiment import Experiment
    from chunkeval.engine.pipeline.sweep import run_sweep
    from chunkeval.stats.tests import compare_paired, holm

    exp = Experiment(
        name="vectors-bench",
        corpus_dir=f"{args.data}/corpora",
        questions=f"{args.data}/questions_df.csv",
        chunker=("fixed_token",),
        chunk_sizes=(args.chunk_size,),
        overlaps=("0",),
        k=(5,),
        retriever=("dense",),
        vectors=VECTORS,
        dims=DIMS,
    )
    with tempfile.TemporaryDirectory() as cache:
        started = time.perf_counter()
        result = run_sweep(exp, Embedders(Path(cache)))
        seconds = time.perf_counter() - started
    per_query = result.per_query.to_pylist()
    summary = {(r["vectors"], r["dims"]): r for r in result.summary.to_pylist()}

    def values(v: str, d: str, metric: str) -> np.ndarray:
        rows = sorted((r for r in per_query if (r["vectors"], r["dims"]) == (v, d)), key=lambda r: r["query_id"])
        return np.array([r[metric] for r in rows], dtype=np.float64)

    base = summary[("float32", "full")]
    print(f"fixed_token {args.chunk_size}/0, k 5, {base['n_queries']} questions, {base['n_chunks']} chunks")
    tests = {}
    for v in VECTORS:
        for d in DIMS:
            if (v, d) != ("float32", "full"):
                for m in ("span_recall", "recall_at_k"):
                    tests[(v, d, m)] = compare_paired(values(v, d, m), values("float32", "full", m))
    adjusted = dict(zip(tests, holm([t["p_permutation"] for t in tests.values()])))
    print(
        "\n| vectors | dims | span recall | Δ [95 % CI] | p (Holm) | recall_at_k | Δ [95 % CI] | p (Holm) | ann_recall_at_k |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for v in VECTORS:
        for d in DIMS:
            r = summary[(v, d)]
            cells = [v, d]
            for m in ("span_recall", "recall_at_k"):
                cells.append(f"{r[f'{m}_mean']:.4f}")
                if (v, d) == ("float32", "full"):
                    cells += ["–", "–"]
                    continue
                t = tests[(v, d, m)]
                cells += [
                    f"{t['mean_diff']:+.4f} [{t['ci_low']:+.4f}, {t['ci_high']:+.4f}]",
                    f"{adjusted[(v, d, m)]:.3g}",
                ]
            cells.append(f"{r['ann_recall_at_k_mean']:.4f}")
            print("| " + " | ".join(cells) + " |")
    print(
        "\n| vectors (dims full) | bytes per vector | bytes in all | batched ms per question | p50 ms, one question |"
    )
    print("| --- | ---: | ---: | ---: | ---: |")
    for v in VECTORS:
        r = summary[(v, "full")]
        print(
            f"| {v} | {r['vector_bytes']} | {r['index_bytes']:,} | {r['batch_ms_per_query']:.4f} | "
            f"{r['latency_p50_ms']:.3f} |"
        )
    print(f"\nthe whole sweep: {seconds:.0f} s, {result.texts_embedded} texts embedded")


if __name__ == "__main__":
    main()
