"""The design space on the shared data set: chunkers × retrievers at one size, k = 5, the bundled model.

    python bench/design_space.py [--corpus chatlogs state_of_the_union wikitexts] [--chunk-size 200]

Runs in one process with an empty embedding cache (a temporary CHUNKEVAL_HOME), chunker by chunker,
and times each step with the library's own functions: chunking (for the semantic chunkers this
includes embedding their 50-token pieces and windows), embedding the chunks and questions, then per
retriever the retrieval and the metrics. Prints a Markdown table of span recall, span precision,
span IoU, precision Ω and recall_at_k (macro means) with the seconds of each cell.
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
CHUNKERS = ("fixed_token", "recursive_token", "cluster_semantic", "semantic_breakpoint")
RETRIEVERS = ("dense", "bm25", "hybrid")
METRICS = ("span_recall", "span_precision", "span_iou", "precision_omega", "recall_at_k")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--corpus",
        nargs="*",
        default=["chatlogs", "state_of_the_union", "wikitexts"],
        help="corpora of the shared data set (default: the three small ones; all five take about 20 minutes)",
    )
    parser.add_argument("--chunk-size", type=int, default=200)
    args = parser.parse_args()
    if not (DATA / "questions_df.csv").is_file():
        print(f"the shared data set is absent: expected it at {DATA}", file=sys.stderr)
        return 2
    os.environ["CHUNKEVAL_HOME"] = tempfile.mkdtemp(prefix="chunkeval-design-")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from chunkeval.engine.embedding.embedders import Embedders
    from chunkeval.engine.pipeline.experiment import Experiment
    from chunkeval.engine.pipeline.sweep import chunk_one, embed_all, load_inputs, plan, score_config
    from chunkeval.engine.scoring import metrics as M
    from chunkeval.paths import cache_dir

    embedders = Embedders(cache_dir())
    rows = []
    for chunker in CHUNKERS:
        exp = Experiment(
            name="design",
            corpus_dir=str(DATA / "corpora"),
            questions=str(DATA / "questions_df.csv"),
            corpus=tuple(args.corpus),
            chunker=(chunker,),
            chunk_sizes=(args.chunk_size,),
            overlaps=("0",),
            k=(5,),
            retriever=RETRIEVERS,
        )
        inputs = load_inputs(exp)
        (spec,) = exp.grid()
        before = embedders.texts_embedded
        t0 = time.perf_counter()
        chunking = chunk_one(
            inputs.corpora, spec, "all-MiniLM-L6-v2" if chunker.startswith(("cluster", "semantic")) else None, embedders
        )
        t_chunk = time.perf_counter() - t0
        pieces = embedders.texts_embedded - before
        configs = plan(exp, [chunking])
        t0 = time.perf_counter()
        embedded = embed_all(inputs, [chunking], configs, embedders)
        t_embed = time.perf_counter() - t0
        for config in configs:
            t0 = time.perf_counter()
            table, _ = score_config(inputs, [chunking], config, embedded, exp)
            t_score = time.perf_counter() - t0
            summary = M.summarize(table.drop_columns(["has_gold"]), ["retriever"]).to_pylist()[0]
            rows.append(
                (
                    chunker,
                    config.retriever,
                    len(chunking.chunks),
                    [summary[f"{m}_mean"] for m in METRICS],
                    t_chunk,
                    pieces,
                    t_embed,
                    t_score,
                )
            )
        print(
            f"{chunker}: {len(chunking.chunks)} chunks; chunking {t_chunk:.1f} s ({pieces} piece/window texts embedded), "
            f"chunk embedding {t_embed:.1f} s",
            file=sys.stderr,
        )
    n_q = inputs.gold.n_queries
    print(
        f"\n{', '.join(args.corpus)}: {n_q} questions, chunk_size {args.chunk_size}, overlap 0, k = 5, all-MiniLM-L6-v2, "
        f"pooled corpora, cold cache\n"
    )
    print(
        "| chunker | retriever | chunks | "
        + " | ".join(METRICS)
        + " | chunking s | embedding s | retrieval + metrics s |"
    )
    print("|---|---|---:|" + "---:|" * len(METRICS) + "---:|---:|---:|")
    for chunker, retriever, n, values, t_chunk, _pieces, t_embed, t_score in rows:
        needs = retriever != "bm25"
        print(
            f"| {chunker} | {retriever} | {n} | "
            + " | ".join(f"{v:.3f}" for v in values)
            + f" | {t_chunk:.1f} | {t_embed if needs else 0:.1f} | {t_score:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
