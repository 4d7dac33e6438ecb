"""How many bytes the kept retrieved lists and corpus copies take, beside a run's other result files.

    python bench/retrieved_size.py demo             # the demo experiment (48 configurations)
    python bench/retrieved_size.py shared [N]       # the shared general evaluation: bm25, k 10, fixed_char
                                                    # at N x 5 chunkings (N sizes from 200 characters, 5 overlaps)

Runs the sweep with the library (`run_sweep`), records it in a temporary warehouse with its retrieved lists
and corpora (`Warehouse.complete_run`), and prints the bytes of `retrieved.parquet`, of the run's other
result files together, and of the corpus copies (`corpora/*.txt.gz`) against the corpora's own bytes. Then
where the bytes of `retrieved.parquet` are: each column's compressed bytes in the file, and the entropy of
each byte of the float32 scores (bits out of 8, over all rows): what an encoding that codes each byte stream
apart, as Parquet's byte-stream split does, cannot go below.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = (ROOT.parent / "shared" / "datasets" / "chroma_general").resolve()


def experiment(which: str, n_sizes: int):
    from chunkeval.engine.pipeline.experiment import Experiment

    if which == "demo":
        return Experiment.demo()
    return Experiment.from_dict(
        {
            "name": "shared",
            "corpus_dir": str(SHARED / "corpora"),
            "questions": str(SHARED / "questions_df.csv"),
            "chunker": ["fixed_char"],
            "chunk_sizes": [200 + 40 * i for i in range(n_sizes)],
            "overlaps": [0, "10%", "20%", "30%", "40%"],
            "k": [10],
            "retriever": ["bm25"],
        }
    )


def main() -> None:
    which = sys.argv[1] if len(sys.argv) > 1 else "demo"
    n_sizes = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    with tempfile.TemporaryDirectory() as tmp:
        import os

        os.environ.setdefault("CHUNKEVAL_HOME", tmp)
        from chunkeval.engine.embedding import Embedder
        from chunkeval.engine.pipeline.sweep import run_sweep
        from chunkeval.paths import cache_dir
        from chunkeval.run_result import RunResult
        from chunkeval.warehouse import Warehouse

        exp = experiment(which, n_sizes)
        began = time.perf_counter()
        result = run_sweep(exp, Embedder(cache_dir=cache_dir()))
        swept = time.perf_counter() - began
        wh = Warehouse(Path(tmp) / "bench-warehouse")
        run_id = wh.begin_run(exp.name, {}, "manual", exp.to_dict())
        wh.complete_run(
            run_id,
            RunResult(
                result.per_query,
                result.summary,
                texts_embedded=0,
                references=result.references,
                models=result.models,
                gold_check=None,
                by_corpus=result.by_corpus,
                retrieved=result.retrieved,
                corpora=result.corpora,
            ),
        )
        folder = wh.results_dir / run_id
        retrieved = (folder / "retrieved.parquet").stat().st_size
        others = sum(p.stat().st_size for p in folder.glob("*.parquet") if p.name != "retrieved.parquet")
        copies = sum(p.stat().st_size for p in wh.corpora_dir.iterdir())
        raw = sum(len(t.encode("utf-8")) for t in result.corpora.values())
        configs = result.summary.num_rows
        queries = len(set(result.per_query["query_id"].to_pylist()))
        columns(folder / "retrieved.parquet")
        print(
            f"{which}: {configs} configurations x {queries} questions, {result.retrieved.num_rows} retrieved rows "
            f"(sweep {swept:.0f} s)\n"
            f"  retrieved.parquet {retrieved:,} bytes; the run's other result files {others:,} bytes "
            f"(ratio {retrieved / others:.2f})\n"
            f"  corpus copies {copies:,} bytes gzip for {raw:,} bytes of text ({len(result.corpora)} corpora)"
        )


def columns(path: Path) -> None:
    """Each column's compressed bytes in the file, and the entropy of each byte of its float32 scores."""
    import numpy as np
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(path).metadata
    sizes: dict[str, int] = {}
    for g in range(meta.num_row_groups):
        for c in range(meta.num_columns):
            column = meta.row_group(g).column(c)
            sizes[column.path_in_schema] = sizes.get(column.path_in_schema, 0) + column.total_compressed_size
    print("  bytes per column: " + ", ".join(f"{name} {n:,}" for name, n in sorted(sizes.items(), key=lambda x: -x[1])))
    scores = pq.read_table(path, columns=["score"])["score"].drop_null().to_numpy().astype(np.float32)
    if len(scores):
        words = scores.view(np.uint32)
        bits = []
        for shift in (0, 8, 16, 24):  # least significant byte first
            p = np.bincount((words >> shift) & 255, minlength=256) / len(words)
            p = p[p > 0]
            bits.append(float(-(p * np.log2(p)).sum()))
        floor = sum(bits) / 8 * len(words)
        print(
            f"  score bytes' entropy (low to high): {', '.join(f'{b:.2f}' for b in bits)} bits of 8; "
            f"{len(words):,} scores, their byte streams coded apart, need at least {floor:,.0f} bytes"
        )


if __name__ == "__main__":
    main()
