"""What `duplicates: credit` changes on the shared data set, against `positional` (today's numbers).

    python bench/duplicates.py [--corpus finance …] [--chunker fixed_token,recursive_token] [--chunk-size 200]
                               [--retriever dense,bm25] [--k 5] [--home DIR]

Runs one sweep of the grid with each setting in one process (the second reuses the first's
embeddings), then prints per corpus and configuration the macro mean of span recall, span precision,
span IoU, precision Ω, recall_at_k and mrr under each setting, and the queries whose span recall
changed. `--home` keeps the embedding cache between calls (default: a temporary folder).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "datasets" / "chroma_general"
METRICS = ("span_recall", "span_precision", "span_iou", "precision_omega", "recall_at_k", "mrr")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", nargs="*", default=[], help="corpora of the shared data set (default: all five)")
    parser.add_argument("--chunker", default="fixed_token,recursive_token")
    parser.add_argument("--chunk-size", default="200")
    parser.add_argument("--retriever", default="dense,bm25")
    parser.add_argument("--k", default="5")
    parser.add_argument("--home", help="CHUNKEVAL_HOME to use (its embedding cache is kept)")
    args = parser.parse_args()
    if not (DATA / "questions_df.csv").is_file():
        print(f"the shared data set is absent: expected it at {DATA}", file=sys.stderr)
        return 2
    os.environ["CHUNKEVAL_HOME"] = args.home or tempfile.mkdtemp(prefix="chunkeval-duplicates-")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import numpy as np
    import pyarrow.compute as pc

    from chunkeval.engine.embedding.embedders import Embedders
    from chunkeval.engine.gold.check import check_gold
    from chunkeval.engine.pipeline.experiment import Experiment
    from chunkeval.engine.pipeline.sweep import load_inputs, run_sweep
    from chunkeval.paths import cache_dir
    from chunkeval.vocabulary import CONFIG_KEYS

    base = Experiment.from_dict(
        {
            "name": "duplicates",
            "corpus_dir": str(DATA / "corpora"),
            "questions": str(DATA / "questions_df.csv"),
            "corpus": args.corpus,
            "chunker": args.chunker,
            "chunk_sizes": args.chunk_size,
            "overlaps": "0",
            "retriever": args.retriever,
            "k": args.k,
        }
    )
    inputs = load_inputs(base)
    ambiguous = check_gold(inputs.gold, inputs.corpora).ambiguous_references
    by_corpus = {}
    for item in ambiguous:
        by_corpus[item["corpus_id"]] = by_corpus.get(item["corpus_id"], 0) + 1
    print(
        f"{len(ambiguous)} of {len(inputs.gold.ref_start)} references occur more than once in their corpus: "
        + ", ".join(f"{c} {n}" for c, n in sorted(by_corpus.items()))
    )
    embedders = Embedders(cache_dir())
    results = {}
    for mode in ("positional", "credit"):
        started = time.perf_counter()
        results[mode] = run_sweep(base.with_overrides(duplicates=mode), embedders)
        print(
            f"{mode}: {time.perf_counter() - started:.1f} s, {results[mode].texts_embedded} text(s) embedded in total so far"
        )
    keys = CONFIG_KEYS + ["corpus_id"]
    rows = {mode: {tuple(r[c] for c in keys): r for r in results[mode].by_corpus.to_pylist()} for mode in results}
    print()
    print("| corpus | chunker | retriever | " + " | ".join(f"{m} pos → credit" for m in METRICS) + " |")
    print("|---|---|---|" + "---|" * len(METRICS))
    for key, pos in sorted(rows["positional"].items()):
        cred = rows["credit"][key]
        r = dict(zip(keys, key))
        cells = [f"{pos[f'{m}_mean']:.4f} → {cred[f'{m}_mean']:.4f}" for m in METRICS]
        print(
            f"| {r['corpus_id']} | {r['chunker']} {r['chunk_size']} | {r['retriever']} k={r['k']} | "
            + " | ".join(cells)
            + " |"
        )
    a, b = results["positional"].per_query, results["credit"].per_query
    changed = pc.not_equal(a["span_recall"], b["span_recall"]).to_numpy(zero_copy_only=False)
    moved = np.asarray(a["corpus_id"].to_pylist(), dtype=object)[changed]
    print()
    print(
        f"per-query rows whose span recall changed: {int(changed.sum())} of {len(changed)} "
        f"({', '.join(f'{c} {n}' for c, n in zip(*np.unique(moved, return_counts=True)))})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
