"""Same numbers before and after a change of code: runs another commit (a git worktree) and this tree side by
side on this machine, and compares their result tables value by value.

    python bench/same_numbers.py [--base REV] [--data ../shared/datasets/chroma_general] [--tolerance 1e-12]

Three workloads, each run by both sides in a fresh `CHUNKEVAL_HOME` (so each side embeds for itself):
- demo: `chunkeval sweep` of the three-document demo of before (tests/data/tiny_demo: the same files for both
  sides, whatever demo the base shipped; 48 configurations, with minilm-static built on the way);
- beir: document gold (a BEIR folder written from that demo: each paragraph of its corpora a document, its
  questions the queries, the paragraphs that hold a reference their qrels), chunked by fixed_token at 40 and
  120 tokens and whole documents (`none`), retrieved by dense and bm25 at k 1, 5 and 10;
- shared: two corpora of the shared general evaluation (chatlogs, state_of_the_union) chunked by
  fixed_token, recursive_token and cluster_semantic at 200 tokens, retrieved by dense, bm25 and hybrid at
  k 1, 5 and 10 (skipped, with a line saying so, where the data set is absent).

For each workload the summary, per-query and per-corpus tables must hold the same rows and columns (a column added
since the base that holds an axis's default, or nothing, in every row is left out), equal
strings, and numbers within the tolerance. Why side by side and not against stored numbers: MiniLM's
near-ties follow the CPU's float rounding, so numbers stored on one machine do not travel to another.
Exit 0 when every table agrees, 1 otherwise.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from chunkeval.vocabulary import OPTIONAL_KEYS

ROOT = Path(__file__).resolve().parents[1]
MAIN = "from chunkeval.cli import main; raise SystemExit(main({argv!r}))"


def demo_beir(root: Path, demo: Path = ROOT / "tests" / "data" / "tiny_demo") -> Path:
    """A BEIR folder made from the demo: each paragraph of each corpus a document (`<corpus>:<n>`, titled by its
    corpus), each question a query, judged relevant (grade 1) in every paragraph a reference of it overlaps."""
    (root / "qrels").mkdir(parents=True)
    docs, spans = [], {}
    for path in sorted((demo / "corpora").glob("*.md")):
        text, start = path.read_text(encoding="utf-8"), 0
        for n, part in enumerate(text.split("\n\n")):
            if part.strip():
                docs.append({"_id": f"{path.stem}:{n}", "title": path.stem, "text": part})
                spans.setdefault(path.stem, []).append((start, start + len(part), f"{path.stem}:{n}"))
            start += len(part) + 2
    queries, qrels = [], ["query-id\tcorpus-id\tscore"]
    with open(demo / "questions.csv", newline="", encoding="utf-8") as fh:
        for i, row in enumerate(csv.DictReader(fh)):
            queries.append({"_id": f"q{i}", "text": row["question"]})
            judged = {
                doc
                for ref in json.loads(row["references"])
                for a, b, doc in spans[row["corpus_id"]]
                if a < ref["end_index"] and ref["start_index"] < b
            }
            qrels += [f"q{i}\t{doc}\t1" for doc in sorted(judged)]
    (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    (root / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries), encoding="utf-8")
    (root / "qrels" / "test.tsv").write_text("\n".join(qrels) + "\n", encoding="utf-8")
    return root


def workloads(data: Path, beir: Path) -> dict[str, list[str]]:
    """Each workload's arguments; `{tree}` is the side's checkout. The demo workload reads this tree's copy of
    the three-document demo on both sides (the shipped demo changed with issue 52)."""
    out = {"demo": [str(ROOT / "tests" / "data" / "tiny_demo" / "experiment.yaml")]}
    out["beir"] = [
        "--beir", str(beir), "--model", "all-MiniLM-L6-v2", "--chunker", "fixed_token,none",
        "--chunk-sizes", "40,120", "--overlaps", "0", "--retriever", "dense,bm25", "--k", "1,5,10",
    ]  # fmt: skip
    if (data / "questions_df.csv").is_file():
        out["shared"] = [
            "--corpus-dir", str(data / "corpora"), "--questions", str(data / "questions_df.csv"),
            "--corpus", "chatlogs", "state_of_the_union",
            "--chunker", "fixed_token,recursive_token,cluster_semantic", "--chunk-sizes", "200", "--overlaps", "0",
            "--retriever", "dense,bm25,hybrid", "--k", "1,5,10",
        ]  # fmt: skip
    else:
        print(f"shared: skipped, no data set at {data}")
    return out


def run_side(tree: Path, argv: list[str], out: Path, home: Path) -> None:
    # backend auto (the default since issue 35) pinned to torch, the base's default: the same vectors on both sides
    env = dict(os.environ, PYTHONPATH=str(tree / "src"), CHUNKEVAL_HOME=str(home), HF_HUB_OFFLINE="1")
    env["CHUNKEVAL_AUTO_BACKEND"] = "torch"
    cmd = [sys.executable, "-c", MAIN.format(argv=["sweep", *argv, "--out", str(out)])]
    done = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"{tree}: chunkeval sweep failed ({done.returncode}): {done.stderr.strip().splitlines()[-1:]}")


def differences(a: pa.Table, b: pa.Table, tolerance: float) -> list[str]:
    """What differs between two result tables, rows matched by their string columns."""
    times = {"index_build_seconds", "latency_p50_ms", "latency_p95_ms", "batch_ms_per_query"}  # measured times
    a, b = (t.drop_columns([c for c in t.column_names if c in times]) for t in (a, b))
    # an axis added since the base (vectors, dims, expand, context) at its default in every row changes no number,
    # nor does a statistic added since that no row measures (vector_bytes of float32 vectors): their columns are
    # left out of the comparison (a value other than the default, or a measured one, is a difference)
    added = [
        c for c in set(b.column_names) - set(a.column_names)
        if all(v in (None, OPTIONAL_KEYS.get(c)) for v in b[c].to_pylist())
    ]  # fmt: skip
    named = [c for c in ("label", "config_id") if c in b.column_names and c not in a.column_names]  # what names
    b = b.drop_columns(added + named)  # each configuration (written since issue 42): no number of its own
    if sorted(a.column_names) != sorted(b.column_names):
        return [f"columns differ: {sorted(set(a.column_names) ^ set(b.column_names))}"]
    if a.num_rows != b.num_rows:
        return [f"{a.num_rows} rows against {b.num_rows}"]
    keys = [c for c in a.column_names if pa.types.is_string(a.schema.field(c).type)]
    order = [(c, "ascending") for c in keys + [c for c in a.column_names if c not in keys]]
    a, b = a.sort_by(order), b.sort_by(order)
    found = []
    for name in a.column_names:
        x, y = a[name].to_numpy(zero_copy_only=False), b[name].to_numpy(zero_copy_only=False)
        if x.dtype.kind in "fiub" and y.dtype.kind in "fiub":
            x, y = x.astype(np.float64), y.astype(np.float64)
            both_nan = np.isnan(x) & np.isnan(y)
            worst = float(np.max(np.where(both_nan, 0.0, np.abs(x - y)), initial=0.0))
            if not worst <= tolerance:
                found.append(f"{name}: max difference {worst:.3g}")
        elif not np.array_equal(x.astype(str), y.astype(str)):
            found.append(f"{name}: values differ")
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default="adc4bd8", help="the commit to compare with (default: the one before the move)")
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "datasets" / "chroma_general")
    ap.add_argument("--tolerance", type=float, default=1e-12)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="same-numbers-") as tmp:
        tmp = Path(tmp)
        base = tmp / "base"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(base), args.base], check=True)
        try:
            failed = False
            for name, argv in workloads(args.data, demo_beir(tmp / "beir")).items():
                tables = {}
                for side, tree in (("base", base), ("this", ROOT)):
                    out = tmp / f"{name}-{side}.parquet"
                    run_side(tree, [a.format(tree=tree) for a in argv], out, tmp / f"home-{side}")
                    tables[side] = {part: pq.read_table(out.with_name(out.stem + suffix + ".parquet"))
                                    for part, suffix in (("summary", ""), ("per_query", ".per_query"),
                                                         ("by_corpus", ".by_corpus"))}  # fmt: skip
                for part in ("summary", "per_query", "by_corpus"):
                    a, b = tables["base"][part], tables["this"][part]
                    found = differences(a, b, args.tolerance)
                    print(f"{name} {part}: {a.num_rows} rows, {'equal' if not found else '; '.join(found)}")
                    failed |= bool(found)
            return 1 if failed else 0
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], check=False)


if __name__ == "__main__":
    sys.exit(main())
