"""Regenerate tests/data/demo_bm25.json: the demo experiment's bm25 rows, per query, as chunkeval scores them.

    python tests/data/make_demo_bm25.py [--src SRC]   (SRC: the `src` folder of the chunkeval to run; default this tree's)

bm25 reads no vectors, so these numbers do not depend on the CPU's float rounding and travel between
machines; tests/test_demo_numbers.py holds every later version to them (within 1e-12). The committed file
was made by the code before the architecture move (commit 0a10c0c), with `--src` pointing at a worktree of it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
METRICS = (
    "span_precision", "span_recall", "span_f1", "span_iou", "precision_omega",
    "precision", "recall", "f1", "precision_at_k", "recall_at_k", "hit_rate", "mrr", "map", "ndcg_at_k",
)  # fmt: skip
KEYS = ("chunker", "chunk_size", "chunk_overlap", "k")


def demo_bm25(src: Path, out: Path, home: Path) -> dict:
    """Run `chunkeval sweep` of the demo with bm25 alone (no model is loaded) and collect its per-query rows."""
    argv = ["sweep", str(ROOT / "data" / "demo" / "experiment.yaml"), "--retriever", "bm25", "--out", str(out)]
    code = f"from chunkeval.cli import main; raise SystemExit(main({argv!r}))"
    env = dict(os.environ, PYTHONPATH=str(src), CHUNKEVAL_HOME=str(home))
    subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True)
    table = pq.read_table(out.with_name(out.stem + ".per_query.parquet"))
    rows = table.sort_by([(k, "ascending") for k in (*KEYS, "query_id")]).to_pylist()
    configs: dict[str, dict] = {}
    for row in rows:
        label = ",".join(f"{k}={row[k]}" for k in KEYS)
        entry = configs.setdefault(label, {"query_id": [], **{m: [] for m in METRICS}})
        entry["query_id"].append(row["query_id"])
        for m in METRICS:
            entry[m].append(row[m])
    return configs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", type=Path, default=ROOT / "src")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        configs = demo_bm25(args.src.resolve(), Path(tmp) / "demo.parquet", Path(tmp) / "home")
    (HERE / "demo_bm25.json").write_text(json.dumps(configs, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"{len(configs)} configurations written to {HERE / 'demo_bm25.json'}")


if __name__ == "__main__":
    main()
