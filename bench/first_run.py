"""The demo's first run from an empty home, end to end: what a newcomer waits for after install.

    python bench/first_run.py [--runs 2]

Each run is `chunkeval run` (the demo) in a fresh process, with `CHUNKEVAL_HOME` an empty temporary folder and the
working directory another: the one-time build of `minilm-static`, the probe of `backend: auto` (exports included,
where onnxruntime or OpenVINO is installed), the sweep and its recording all happen, as on a fresh install.
`--runs 2` times a second run over the home the first left (nothing built, probed or embedded again), which finds
the temporary Prefect server the first kept (`PREFECT_HOME` is a fresh temporary folder too, as on a new machine;
`CHUNKEVAL_SERVER_KEEP=0` in the environment times a server started and stopped by every run). The kept server is
stopped at the end. Printed: wall seconds of each run, its `stage seconds` line, and the lines it printed on stderr.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=2, help="runs over the same home (the first from empty)")
    args = ap.parse_args()
    from chunkeval.flows.temporary_server import stop_kept

    with (
        tempfile.TemporaryDirectory() as home,
        tempfile.TemporaryDirectory() as cwd,
        tempfile.TemporaryDirectory() as prefect,
    ):
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("CHUNKEVAL_AUTO_BACKEND", "CHUNKEVAL_DEMO_DIR") and not k.startswith("PREFECT_")
        }  # as installed
        env.update(CHUNKEVAL_HOME=home, HF_HUB_OFFLINE="1", PREFECT_HOME=prefect)
        try:
            runs(args.runs, env, cwd, Path(home))
        finally:
            stop_kept(Path(prefect))


def runs(count: int, env: dict[str, str], cwd: str, home: Path) -> None:
    """`count` runs of the demo over one home, each timed as a whole process."""
    for n in range(count):
        start = time.perf_counter()
        done = subprocess.run(
            [str(Path(sys.executable).with_name("chunkeval")), "run"],  # the command a newcomer types
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
        )
        seconds = time.perf_counter() - start
        lines = (done.stdout + done.stderr).splitlines()
        at = next((i for i, line in enumerate(lines) if line.startswith("stage seconds:")), None)
        stages = "(no stage line)"
        if at is not None:  # the line and the lines it folds onto
            rest = [line.strip() for line in lines[at + 1 :]]
            stages = " ".join([lines[at], *rest[: next((i for i, r in enumerate(rest) if r.startswith("report:")), 0)]])
        shown = [line for line in done.stderr.splitlines() if not line.startswith(("INFO", "DEBUG", "  "))]
        print(f"run {n + 1} ({'empty home' if n == 0 else 'the same home'}): exit {done.returncode}, {seconds:.1f} s")
        print(f"  {stages}")
        for line in shown[:12]:
            print(f"  | {line}")
        if done.returncode == 0:
            print(f"  {figures(home, done.stdout)}")


def figures(home: Path, out: str) -> str:
    """What issue 52 asks of the demo, measured by the run itself: each headline metric's share of per-question
    values at or above 0.95 (the run's ceiling rule, over every configuration's questions), the configurations its
    table stars as tied with the best, and the smallest fall the gate sees (its verdict line, from a second run)."""
    import re

    import duckdb

    from chunkeval.stats.power import CEILING

    metrics = ("span_recall", "span_iou", "recall_at_k", "mrr")
    with duckdb.connect(str(home / "warehouse" / "chunkeval.duckdb"), read_only=True) as con:
        run = con.execute(
            "SELECT run_id FROM runs WHERE status = 'completed' ORDER BY started_at DESC LIMIT 1"
        ).fetchone()
        shares = con.execute(
            "SELECT "
            + ", ".join(f"avg(({m} >= {CEILING})::INT)" for m in metrics)
            + " FROM query_results WHERE run_id = ?",
            [run[0]],
        ).fetchone()
    rows = [line.split() for line in out.splitlines() if re.match(r"^\S+\s+[0-9a-f]{8}\s", line)]
    tied = [sum(row[2 + i].endswith("*") for row in rows) for i in range(len(metrics))]
    seen = re.search(r"larger than ([0-9.]+) \(what", " ".join(out.split()))
    return (
        "at or above 0.95: " + ", ".join(f"{m} {s:.1%}" for m, s in zip(metrics, shares))
        + "; tied with the best: " + ", ".join(f"{m} {n} of {len(rows)}" for m, n in zip(metrics, tied))
        + f"; the gate sees falls larger than {seen.group(1) if seen else '– (first run)'}"
    )  # fmt: skip


if __name__ == "__main__":
    main()
