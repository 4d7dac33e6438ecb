"""Years of nightly history: fill a warehouse with N completed runs, then time the commands that read it.

    python bench/warehouse_bench.py --runs 10000 [--home DIR] [--repeat 3]

Fills `$CHUNKEVAL_HOME/warehouse` (a temporary home unless --home names one; a home that already holds
runs of experiment `bench` is topped up to N) through the library's own API: one real sweep of the
demo experiment, then N nights of `Warehouse.begin_run` + `complete_run` with those results, one run
per day ending today (in one `Warehouse.session`, as an import of history would run), each with its
retrieved lists and corpus versions as a nightly run keeps them. Then it times, as a user runs them (a fresh
process each, median of --repeat, wall and CPU seconds), the history check of issue 21 (goal: 1 s each at 10,000 runs, the HTML 5 s):

- `chunkeval runs --experiment bench` (and with `--json`)
- `chunkeval trend --experiment bench --metric span_recall --config chunk_size=100,k=5` (a partial filter: 12 of
  the 48 configurations; the last 30 runs, in a terminal and with `--json`), with every configuration, and the
  whole history's JSON of the partial filter (`--json --all`)
- `chunkeval trend --experiment bench --metric span_recall --fail-on-regression` (the regression check)
- `chunkeval report --experiment bench` (the last run's table)
- `chunkeval report --experiment bench --html <file>`

and, beside them, `trend --config <one configuration>` and `report --since 7d`.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path


def fill(n_runs: int) -> tuple[int, float]:
    from chunkeval.engine.embedding.embedders import Embedders
    from chunkeval.engine.gold.check import check_gold
    from chunkeval.engine.pipeline.experiment import Experiment
    from chunkeval.engine.pipeline.fingerprints import input_fingerprints
    from chunkeval.engine.pipeline.sweep import load_inputs, run_sweep
    from chunkeval.paths import cache_dir
    from chunkeval.run_result import RunResult
    from chunkeval.warehouse import Warehouse

    exp = Experiment.demo().with_overrides(name="bench")
    result = run_sweep(exp, Embedders(cache_dir()))
    inputs = load_inputs(exp)
    check = check_gold(inputs.gold, inputs.corpora, min(exp.chunk_sizes)).to_dict()
    fps, settings = input_fingerprints(exp), exp.to_dict()
    wh = Warehouse.at_home()
    have = len(wh.runs("bench")) if wh.exists() else 0
    today = datetime.now(UTC).replace(tzinfo=None, hour=2, minute=0, second=0, microsecond=0)
    started = time.perf_counter()
    with wh.session():  # one connection for the whole import (each close of a connection checkpoints the file)
        for night in range(have, n_runs):
            when = today - timedelta(days=n_runs - 1 - night)
            run_id = wh.begin_run("bench", fps, "schedule", settings, started_at=when)
            wh.complete_run(
                run_id,
                RunResult(
                    result.per_query,
                    result.summary,
                    texts_embedded=0,
                    references=result.references,
                    models=result.models,
                    gold_check=check,
                    by_corpus=result.by_corpus,
                    retrieved=result.retrieved,
                    corpora=result.corpora,
                ),
            )
            if (night + 1) % 500 == 0:
                print(f"  {night + 1} runs recorded ({time.perf_counter() - started:.0f} s)", flush=True)
    return result.summary.num_rows, time.perf_counter() - started


def timed(argv: list[str], repeat: int) -> tuple[float, float]:
    """Median wall seconds and median CPU seconds (user + system) of `chunkeval ARGV` in a fresh process: on
    a machine shared with other work the wall time waits for the CPU, the CPU time does not."""
    walls, cpus = [], []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "chunkeval.cli", *argv], capture_output=True, text=True)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        if done.returncode not in (0, 1):
            raise SystemExit(f"chunkeval {' '.join(argv)} failed: {done.stderr.strip()}")
    return statistics.median(walls), statistics.median(cpus)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--home", help="CHUNKEVAL_HOME to fill and keep (default: a temporary folder)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    os.environ["CHUNKEVAL_HOME"] = args.home or tempfile.mkdtemp(prefix="chunkeval-history-")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    configs, seconds = fill(args.runs)
    print(
        f"{args.runs} completed runs of {configs} configurations in {os.environ['CHUNKEVAL_HOME']} "
        f"(filled in {seconds:.0f} s)"
    )
    from chunkeval.warehouse import Warehouse

    one = Warehouse.at_home().summary(Warehouse.at_home().last_completed("bench")["run_id"]).to_pylist()[0]
    config = ",".join(f"{k}={one[k]}" for k in ("model", "retriever", "chunker", "chunk_size", "chunk_overlap", "k"))
    out = Path(os.environ["CHUNKEVAL_HOME"]) / "bench.html"
    trend = ["trend", "--experiment", "bench", "--metric", "span_recall"]
    commands = {  # name → (argv, goal in seconds)
        "runs --experiment bench": (["runs", "--experiment", "bench"], 1),
        "runs --experiment bench --json": (["runs", "--experiment", "bench", "--json"], 1),
        "trend (every configuration)": (trend, 1),
        "trend (the headline metrics, every configuration)": (["trend", "--experiment", "bench"], 1),
        "trend --config chunk_size=100,k=5": ([*trend, "--config", "chunk_size=100,k=5"], 1),
        "trend --config chunk_size=100,k=5 --json": ([*trend, "--config", "chunk_size=100,k=5", "--json"], 1),
        "trend --json (every configuration)": ([*trend, "--json"], 1),
        "trend --config chunk_size=100,k=5 --json --all (120,000 rows)": (
            [*trend, "--config", "chunk_size=100,k=5", "--json", "--all"],
            None,
        ),
        "trend --fail-on-regression": ([*trend, "--fail-on-regression"], 1),
        "report --experiment bench": (["report", "--experiment", "bench"], 1),
        "report --experiment bench --html": (["report", "--experiment", "bench", "--html", str(out)], 5),
        "trend --config <one configuration>": ([*trend, "--config", config], None),
        "report --experiment bench --since 7d": (["report", "--experiment", "bench", "--since", "7d"], None),
    }
    print(f"| command ({args.runs} runs; median of {args.repeat}, fresh process each) | wall s | CPU s | goal |")
    print("|---|---:|---:|---:|")
    for name, (argv, goal) in commands.items():
        wall, cpu = timed(argv, args.repeat)
        print(f"| `{name}` | {wall:.2f} | {cpu:.2f} | {goal or ''} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
