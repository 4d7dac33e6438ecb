"""Years of nightly history: fill a warehouse with N completed runs, then time the commands that read it.

    python bench/warehouse_bench.py --runs 10000 [--home DIR] [--repeat 3]

Fills `$CHUNKEVAL_HOME/warehouse` (a temporary home unless --home names one; a home that already holds
runs of experiment `bench` is topped up to N) through the library's own API: one real sweep of the
demo experiment, then N nights of `Warehouse.begin_run` + `complete_run` with those results, one run
per day ending today (in one `Warehouse.session`, as an import of history would run). Then it times, as a user runs them (a fresh process each, median of --repeat):

- `chunkeval runs --experiment bench`
- `chunkeval trend --experiment bench --metric span_recall --config <one configuration>`
- the same with `--fail-on-regression`
- `chunkeval report --experiment bench --html <file>`
- `chunkeval report --experiment bench --since 7d`
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path


def fill(n_runs: int) -> tuple[int, float]:
    from chunkeval.engine.experiment import Experiment
    from chunkeval.engine.fingerprints import input_fingerprints
    from chunkeval.engine.gold_check import check_gold
    from chunkeval.engine.sweep import Embedders, load_inputs, run_sweep
    from chunkeval.paths import cache_dir
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
                run_id, result.per_query, result.summary, 0, result.references, result.models, check, result.by_corpus
            )
            if (night + 1) % 500 == 0:
                print(f"  {night + 1} runs recorded ({time.perf_counter() - started:.0f} s)", flush=True)
    return result.summary.num_rows, time.perf_counter() - started


def timed(argv: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "chunkeval.cli", *argv], capture_output=True, text=True)
        times.append(time.perf_counter() - start)
        if done.returncode not in (0, 1):
            raise SystemExit(f"chunkeval {' '.join(argv)} failed: {done.stderr.strip()}")
    return statistics.median(times)


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
    commands = {
        "runs": ["runs", "--experiment", "bench"],
        "trend --config": ["trend", "--experiment", "bench", "--metric", "span_recall", "--config", config],
        "trend --fail-on-regression": [
            "trend",
            "--experiment",
            "bench",
            "--metric",
            "span_recall",
            "--config",
            config,
            "--fail-on-regression",
        ],
        "report --html": ["report", "--experiment", "bench", "--html", str(out)],
        "report --since 7d": ["report", "--experiment", "bench", "--since", "7d"],
    }
    print(f"| command ({args.runs} runs) | seconds (median of {args.repeat}, fresh process each) |")
    print("|---|---|")
    for name, argv in commands.items():
        print(f"| `{name}` | {timed(argv, args.repeat):.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
