"""What contextual chunk headers change (issue 33): `context: none | title | headings`, paired per question.

    python bench/context_headers.py [--work DIR] [--model all-MiniLM-L6-v2]

1. The shared set (../shared/datasets/chroma_general; skipped where absent): fixed_token chunks of 200 tokens,
   k 5, dense retrieval with the model and bm25, every context. For each retriever, span_recall and recall_at_k of
   title and headings against none: the means, the mean difference with its 95 % bootstrap interval, the paired
   t-test and randomisation p-values, and Holm over the comparisons printed (`chunkeval.stats.compare_paired`).
2. The BEIR-format data the tests make (`tests/test_beir.make_beir`, enlarged to 300 documents and 100 queries):
   dense retrieval, MaxP document ranking, k 10, doc_ndcg_at_k with `context: none` and `title`, at chunks of 200
   tokens (most documents are one chunk, which begins with its title already: nothing is added) and of 20. Its
   documents and queries are random words: a check that the axis runs on document gold, not a finding.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "datasets" / "chroma_general"


def paired_rows(per_query, metrics, retrievers, contexts, baseline="none"):
    """One comparison per retriever, metric and context against `baseline`, queries paired by query_id."""
    import numpy as np

    from chunkeval.stats import holm
    from chunkeval.stats.tests import compare_paired

    rows = per_query.to_pylist()
    found = []
    for retriever in retrievers:
        for metric in metrics:
            values = {}
            for r in rows:
                if r["retriever"] == retriever:
                    values.setdefault(r["context"], {})[r["query_id"]] = r[metric]
            base = values[baseline]
            queries = sorted(base)
            for context in contexts:
                if context == baseline:
                    continue
                a = np.array([values[context][q] for q in queries], dtype=float)
                b = np.array([base[q] for q in queries], dtype=float)
                found.append({"retriever": retriever, "metric": metric, "context": context, **compare_paired(a, b)})
    for row, p in zip(found, holm([r["p_permutation"] for r in found]) if found else []):
        row["p_adjusted"] = float(p)
    return found


def print_rows(rows) -> None:
    print(
        "| retriever | metric | context | none | context's | difference (95 % CI) | p t-test | p randomisation | p Holm |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(
            f"| {r['retriever']} | {r['metric']} | {r['context']} | {r['mean_b']:.4f} | {r['mean_a']:.4f} | "
            f"{r['mean_diff']:+.4f} ({r['ci_low']:+.4f} … {r['ci_high']:+.4f}) | {r['p_ttest']:.3g} | "
            f"{r['p_permutation']:.3g} | {r['p_adjusted']:.3g} |"
        )


def shared_set(model: str) -> None:
    import chunkeval

    if not (SHARED / "questions_df.csv").is_file():
        print(f"the shared data set is absent (expected at {SHARED}): skipped")
        return
    started = time.perf_counter()
    result = chunkeval.evaluate(
        corpus_dir=str(SHARED / "corpora"),
        questions=str(SHARED / "questions_df.csv"),
        chunker=["fixed_token"],
        chunk_sizes=[200],
        overlaps=["0"],
        k=[5],
        model=[model],
        retriever=["dense", "bm25"],
        context=["none", "title", "headings"],
    )
    seconds = time.perf_counter() - started
    n = len(set(result.per_query["query_id"].to_pylist()))
    print(f"shared set: {n} questions, {seconds:.0f} s (embedding included)")
    print_rows(paired_rows(result.per_query, ["span_recall", "recall_at_k"], ["dense", "bm25"], ["title", "headings"]))


def beir(model: str, work: Path) -> None:
    import chunkeval

    sys.path.insert(0, str(ROOT / "tests"))
    from test_beir import make_beir

    folder = make_beir(work / "beir", n_docs=300, n_queries=100)
    for size in (200, 20):
        result = chunkeval.evaluate(
            beir=str(folder),
            chunker=["fixed_token"],
            chunk_sizes=[size],
            overlaps=["0"],
            k=[10],
            model=[model],
            retriever=["dense"],
            context=["none", "title"],
        )
        print(f"BEIR-format test data, chunks of {size} tokens:")
        print_rows(paired_rows(result.per_query, ["doc_ndcg_at_k"], ["dense"], ["title"]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    work = args.work or Path(tempfile.mkdtemp(prefix="chunkeval-context-"))
    os.environ.setdefault("CHUNKEVAL_HOME", str(work / "home"))
    shared_set(args.model)
    beir(args.model, work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
