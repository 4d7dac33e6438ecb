"""`chunkeval report`: a run's macro/micro table, an experiment's HTML page, or a period's rollup."""

from __future__ import annotations

import argparse
from pathlib import Path

from chunkeval.analysis.comparisons import check_threshold
from chunkeval.cli.ages import parse_age
from chunkeval.cli.commands import summary
from chunkeval.cli.options import add_config, add_experiment, add_metric_flags, add_run, add_threshold, config_filter
from chunkeval.cli.output import iso
from chunkeval.cli.session import WarehouseAccess
from chunkeval.errors import InputError
from chunkeval.report.terminal import (
    TERMINAL_WIDTH,
    approximate,
    check_output_path,
    chosen_metrics,
    fold,
    format_index_costs,
    format_summary,
    summary_block,
)
from chunkeval.vocabulary import CONFIG_KEYS, METRICS

WAREHOUSE_SESSION = True  # only reads


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "report",
        help=summary("report"),
        description="Print a run's macro/micro table, or with --html write the experiment's self-contained HTML report.",
    )
    add_run(p, "the run (default: the experiment's last completed run)")
    add_experiment(p, "the experiment")
    p.add_argument("--html", metavar="FILE", help="write the HTML report (readable offline) to FILE")
    add_config(
        p,
        "the configuration of the failure analysis, e.g. chunker=fixed_token,chunk_size=200,chunk_overlap=0,k=5 "
        "(default: the best by span F1)",
    )
    add_threshold(p, "the fall marked as a regression in the trend (default 0.02)")
    p.add_argument(
        "--since",
        metavar="AGE",
        help="with --experiment: the rollup of the runs started within AGE (7d, 36h, 2w): "
        "macro over every query row of those runs, micro summed over them",
    )
    add_metric_flags(p)
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace, warehouse: WarehouseAccess) -> int:
    check_threshold(args.threshold)
    out = None
    if args.html:
        out = check_output_path(Path(args.html))  # resolved: never a warehouse file, a device or a folder
    if not args.run and not args.experiment:
        raise InputError("give --run ID or --experiment NAME")
    # --config chooses the HTML page's failure analysis: on the terminal it would do nothing
    if args.config and not args.html:
        raise InputError("--config chooses the configuration of the HTML report's failure analysis: give --html PATH")
    if args.since is not None:
        age = parse_age(args.since, "--since")
        if args.run or args.html or not args.experiment:
            raise InputError(
                "--since prints the rollup of an experiment's period: give --experiment NAME, without --run or --html"
            )
    wh = warehouse()
    if args.experiment:
        wh.check_experiment(args.experiment)
    if args.since is not None:
        return _rollup(wh, args.experiment, args.since, age, args)
    if args.run:
        run = wh.run(args.run)
        if args.experiment and run["experiment"] != args.experiment:
            raise InputError(f"run {args.run!r} belongs to experiment {run['experiment']!r}, not {args.experiment!r}")
    else:
        run = wh.last_completed(args.experiment)
        if run is None:
            raise InputError(f"experiment {args.experiment!r} has no completed run")
    if run["status"] != "completed":
        raise InputError(f"run {run['run_id']} is {run['status']}: only completed runs have results")
    if args.html:
        from chunkeval.report.html import write_report  # the page's sections, only for a page

        write_report(
            wh, args.experiment or run["experiment"], out, run["run_id"], args.threshold, config_filter(args.config)
        )
        print(f"report of run {run['run_id']} written to {args.html}")
        return 0
    _print_run(wh, run, args)
    return 0


def _micro(table) -> list[str]:
    return [m for m in METRICS if f"{m}_micro" in table.column_names]


def _rollup(wh, experiment: str, since: str, age, args) -> int:
    rollup, run_ids = wh.rollup(experiment, age)
    print(
        fold(
            f"experiment {experiment}: {len(run_ids)} completed run(s) started within {since} "
            f"({run_ids[-1]} to {run_ids[0]}; raced runs left out); macro = mean over every query row of those runs, "
            "micro = sums over them",
            indent="",
        )
        + "\n"
    )
    keys = (["duplicates"] if len(set(rollup["duplicates"].to_pylist())) > 1 else []) + CONFIG_KEYS + ["n_runs"]
    metrics = chosen_metrics(rollup, args.metrics, args.wide)  # the columns a single run's report shows
    print("macro (mean ± sample std over query rows)")
    width = None if args.wide else TERMINAL_WIDTH
    print(format_summary(rollup, keys, metrics=metrics, width=width))
    print("\nmicro (counts summed over the period's query rows before dividing)")
    print(format_summary(rollup, keys, metrics=[m for m in _micro(rollup) if m in metrics], micro=True, width=width))
    return 0


def _print_run(wh, run: dict, args) -> None:
    summary = wh.summary(run["run_id"])
    metrics = chosen_metrics(summary, args.metrics, args.wide)  # the index metric only where an index approximates
    print(
        f"run {run['run_id']} of experiment {run['experiment']} ({run['trigger']}), "
        f"{iso(run['started_at'])} to {iso(run['finished_at'])}\n"
    )
    print("macro (mean ± sample std over queries)")
    print(summary_block(summary, wh.query_results(run["run_id"]), metrics, args.wide))
    width = None if args.wide else TERMINAL_WIDTH
    if (
        f"{metrics[0]}_ci_low" in summary.column_names
        and summary.num_rows
        and summary[f"{metrics[0]}_ci_low"].null_count == 0
    ):
        print("\n95 % bootstrap interval of each macro mean above (low–high: queries resampled 10,000 times)")
        print(format_summary(summary, CONFIG_KEYS, metrics=metrics, intervals=True, width=width))
    else:
        print("\n(this run was recorded before chunkeval kept intervals: none are shown)")
    print("\nmicro (counts summed over queries before dividing)")
    print(format_summary(summary, CONFIG_KEYS, metrics=[m for m in _micro(summary) if m in metrics], micro=True,
                         width=width))  # fmt: skip
    if approximate(summary):
        print("\nindexes (build seconds, size, and milliseconds per query: one at a time p50/p95, and batched)")
        print(format_index_costs(summary, CONFIG_KEYS))
