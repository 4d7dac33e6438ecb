"""What reranking bm25's top 20, 50 and 100 with all-MiniLM-L6-v2 does on the shared general evaluation.

    python bench/rerank_bm25.py [--data ../shared/datasets/chroma_general] [--chunk-size 200]

One `run_sweep` of the general evaluation (its corpora pooled, fixed_token chunks of `--chunk-size`
tokens, overlap 0, k 5): bm25 and dense by all-MiniLM-L6-v2 alone, and bm25's top `candidates` (20, 50,
100) reranked by all-MiniLM-L6-v2 (the cosine of its vectors). Prints a Markdown table of the macro
means of span recall and recall_at_k at k 5 (with their 95 % bootstrap intervals), and seconds.
The embedding cache is a temporary one: every text is embedded once.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "datasets" / "chroma_general"))
    parser.add_argument("--chunk-size", type=int, default=200)
    args = parser.parse_args()

    from chunkeval.engine.embedding.embedders import Embedders
    from chunkeval.engine.pipeline.experiment import Experiment
    from chunkeval.engine.pipeline.sweep import run_sweep

    exp = Experiment(
        name="rerank-bench",
        corpus_dir=f"{args.data}/corpora",
        questions=f"{args.data}/questions_df.csv",
        chunker=("fixed_token",),
        chunk_sizes=(args.chunk_size,),
        overlaps=("0",),
        k=(5,),
        retriever=("bm25", "dense"),
        reranker=("none", "all-MiniLM-L6-v2"),
        candidates=(20, 50, 100),
    )
    with tempfile.TemporaryDirectory() as cache:
        started = time.perf_counter()
        result = run_sweep(exp, Embedders(Path(cache)))
        seconds = time.perf_counter() - started
    rows = [r for r in result.summary.to_pylist() if r["retriever"] == "bm25" or r["reranker"] == "none"]
    order = {("dense", None): 0, ("bm25", None): 1}
    rows.sort(key=lambda r: (order.get((r["retriever"], r["candidates"]), 2), r["candidates"] or 0))
    print(f"fixed_token {args.chunk_size}/0, k 5, {rows[0]['n_queries']} questions, {rows[0]['n_chunks']} chunks")
    print("| first stage | reranked by | candidates | span recall | recall_at_k |")
    print("| --- | --- | ---: | ---: | ---: |")
    for r in rows:
        cells = [
            r["retriever"] + (" (all-MiniLM-L6-v2)" if r["retriever"] == "dense" else ""),
            "–" if r["reranker"] == "none" else r["reranker"],
            "–" if r["candidates"] is None else str(r["candidates"]),
        ]
        for m in ("span_recall", "recall_at_k"):
            cells.append(f"{r[f'{m}_mean']:.4f} [{r[f'{m}_ci_low']:.4f}, {r[f'{m}_ci_high']:.4f}]")
        print("| " + " | ".join(cells) + " |")
    print(f"\nthe whole sweep: {seconds:.0f} s, {result.texts_embedded} texts embedded")


if __name__ == "__main__":
    main()
