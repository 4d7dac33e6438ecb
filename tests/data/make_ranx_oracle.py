"""Regenerate tests/data/ranx_oracle.json: ranx's `compare` on two seeded TREC runs, the oracle of
`tests/test_compare.py::test_compare_agrees_with_ranx`.

ranx's metrics and tests are numba functions that a fresh installation compiles on first use (about a
minute on 2 cores), so the suite reads the stored values instead of running ranx. Run this after
changing the TREC files below or upgrading ranx, and commit the JSON:

    python tests/data/make_ranx_oracle.py           # rewrite the JSON
    python tests/data/make_ranx_oracle.py --check   # recompute, and fail if the JSON differs
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

import numpy as np

ORACLE = Path(__file__).with_name("ranx_oracle.json")
FILES = ("qrels.txt", "a.run", "b.run")
# chunkeval's metric names and ranx's, at the cutoff 10 the test scores with
METRICS = {
    "ndcg_at_k": "ndcg@10",
    "map": "map",
    "mrr": "mrr",
    "precision_at_k": "precision@10",
    "recall_at_k": "recall@10",
}
TESTS = ("student", "fisher")
N_PERMUTATIONS = 10_000


def write_trec_files(folder: Path) -> dict[str, str]:
    """40 queries of 1 to 4 relevant documents among 40, and two runs (the second noisier) ranking all 40;
    returns each file's SHA-256."""
    rng = np.random.default_rng(11)
    relevant = {q: set(rng.choice(40, int(rng.integers(1, 5)), replace=False).tolist()) for q in range(40)}
    (folder / "qrels.txt").write_text("".join(f"q{q} 0 d{d} 1\n" for q, docs in relevant.items() for d in sorted(docs)))
    for name, noise in (("a.run", 0.8), ("b.run", 1.2)):
        lines = []
        for q, docs in relevant.items():
            scores = {d: rng.normal() * noise + (1.0 if d in docs else 0.0) for d in range(40)}
            ranked = sorted(scores, key=scores.get, reverse=True)
            lines += [f"q{q} Q0 d{d} {r + 1} {scores[d]:.6f} {name}\n" for r, d in enumerate(ranked)]
        (folder / name).write_text("".join(lines))
    return {name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in FILES}


def compute() -> dict:
    import ranx

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        hashes = write_trec_files(folder)
        runs = [ranx.Run.from_file(str(folder / n), kind="trec") for n in ("a.run", "b.run")]
        for run, name in zip(runs, ("a", "b"), strict=True):
            run.name = name
        qrels = ranx.Qrels.from_file(str(folder / "qrels.txt"), kind="trec")
        oracle: dict = {
            "ranx": version("ranx"),
            "n_permutations": N_PERMUTATIONS,
            "files_sha256": hashes,
            "metrics": METRICS,
        }
        for test in TESTS:
            report = ranx.compare(
                qrels, runs, list(METRICS.values()), stat_test=test, n_permutations=N_PERMUTATIONS, max_p=0.05
            ).to_dict()
            oracle[test] = {
                "mean_a": {m: float(report["a"]["scores"][m]) for m in METRICS.values()},
                "mean_b": {m: float(report["b"]["scores"][m]) for m in METRICS.values()},
                "p": {m: float(report["a"]["comparisons"]["b"][m]) for m in METRICS.values()},
            }
    return oracle


def _same(a, b, tol: float = 1e-12) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k], tol) for k in a)
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=0, abs_tol=tol)
    return a == b


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the stored JSON instead of writing it")
    args = parser.parse_args(argv)
    oracle = compute()
    if args.check:
        stored = json.loads(ORACLE.read_text(encoding="utf-8"))
        # Fisher's p-values are Monte-Carlo estimates (ranx seeds nothing inside numba): equal within 0.01
        fisher_p = stored["fisher"].pop("p"), oracle["fisher"].pop("p")
        stored.pop("ranx", None)
        fresh = {k: v for k, v in oracle.items() if k != "ranx"}
        if not (_same(stored, fresh) and _same(*fisher_p, tol=0.01)):
            print(f"{ORACLE} differs from what ranx {oracle['ranx']} computes now", file=sys.stderr)
            return 1
        print(f"{ORACLE} agrees with ranx {oracle['ranx']}")
        return 0
    ORACLE.write_text(json.dumps(oracle, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {ORACLE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
