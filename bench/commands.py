"""Every command a person types many times a day, timed as a whole process beside the floor.

    python bench/commands.py [--runs 5] [--home DIR]

The floor is what any of these commands must pay: a Python process that imports duckdb, numpy and pyarrow and reads
the warehouse's catalogue (`SELECT count(*) FROM runs`). Each command runs `--runs` times, alternating with the floor
so that both see the same machine; printed are the minimum and the median of each, the median's ratio to the floor's,
and the command's import time alone (`python -c "import <its module>"`, the same minimum of `--runs`).

Without `--home`, a fresh `CHUNKEVAL_HOME` gets the demo run twice first (a first and a warm run, which `diff`
compares); that takes minutes. With `--home`, the commands read a home that already holds at least two demo runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHUNKEVAL = str(Path(sys.executable).with_name("chunkeval"))
FLOOR = "import duckdb, numpy, pyarrow, sys; duckdb.connect(sys.argv[1], read_only=True).sql('SELECT count(*) FROM runs').fetchall()"


def commands(first: str, newest: str, query: str, html: str) -> list[tuple[str, list[str], str]]:
    """(name, argv after `chunkeval`, the module its handler lives in)."""
    c = "chunkeval.cli.commands."
    return [
        ("--version", ["--version"], "chunkeval.cli"),
        ("--help", ["--help"], "chunkeval.cli"),
        ("runs", ["runs"], c + "runs"),
        ("report", ["report", "--experiment", "demo"], c + "report"),
        ("trend", ["trend", "--experiment", "demo", "--metric", "span_recall"], c + "trend"),
        ("the gate", ["trend", "--experiment", "demo", "--fail-on-regression"], c + "trend"),
        ("compare", ["compare", "--experiment", "demo", "--metric", "span_recall"], c + "compare"),
        ("sql", ["sql", "SELECT count(*) FROM runs"], c + "sql"),
        ("inspect", ["inspect", "--run", newest, "--query", query], c + "inspect"),
        ("diff", ["diff", "--run", first, "--run", newest], c + "diff"),
        ("baseline", ["baseline", "--experiment", "demo", "--run", first], c + "baseline"),
        ("backends", ["backends"], c + "backends"),
        ("report --html", ["report", "--experiment", "demo", "--html", html], c + "report"),
    ]


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    took = time.perf_counter() - start
    if done.returncode not in (0, 3):  # 3: the gate found nothing to compare, an answer too
        sys.exit(f"{' '.join(argv[1:])} exited {done.returncode}: {done.stderr.strip()[-400:]}")
    return took


def column(sql: str, env: dict[str, str]) -> list[str]:
    done = subprocess.run(
        [CHUNKEVAL, "sql", sql, "--csv"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return [line.strip() for line in done.stdout.splitlines()[1:] if line.strip()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5, help="times each command runs (minimum and median)")
    ap.add_argument("--home", help="a CHUNKEVAL_HOME that already holds two demo runs (else one is made)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        env = {k: v for k, v in os.environ.items() if k not in ("CHUNKEVAL_DEMO_DIR",)}
        env.update(CHUNKEVAL_HOME=args.home or str(Path(scratch) / "home"), HF_HUB_OFFLINE="1")
        if not args.home:
            for _ in range(2):
                subprocess.run([CHUNKEVAL, "run"], env=env, capture_output=True, check=True)
        ids = column(
            "SELECT run_id FROM runs WHERE experiment = 'demo' AND status = 'completed' ORDER BY started_at", env
        )
        if len(ids) < 2:
            sys.exit(f"{env['CHUNKEVAL_HOME']} holds {len(ids)} completed demo run(s); two are needed")
        db = str(Path(env["CHUNKEVAL_HOME"]) / "warehouse" / "chunkeval.duckdb")
        floor_argv = [sys.executable, "-c", FLOOR, db]
        rows = []
        floors: list[float] = []
        query = column(f"SELECT min(query_id) FROM query_results WHERE run_id = '{ids[-1]}'", env)[0]
        for name, argv, module in commands(ids[0], ids[-1], query, str(Path(scratch) / "report.html")):
            took, floor, imported = [], [], []
            for _ in range(args.runs):
                floor.append(timed(floor_argv, env))
                took.append(timed([CHUNKEVAL, *argv], env))
                imported.append(timed([sys.executable, "-c", f"import {module}"], env))
            floors += floor
            rows.append((name, min(took), statistics.median(took), statistics.median(floor), min(imported)))
        print(
            f"floor: min {min(floors):.3f} s, median {statistics.median(floors):.3f} s ({args.runs} runs per command)"
        )
        print(f"{'command':<16}{'min s':>8}{'median s':>10}{'× floor':>9}{'import s':>10}")
        for name, low, mid, floor, imported in rows:
            print(f"{name:<16}{low:>8.3f}{mid:>10.3f}{mid / floor:>9.1f}{imported:>10.3f}")


if __name__ == "__main__":
    main()
