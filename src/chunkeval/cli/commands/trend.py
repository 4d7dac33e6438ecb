"""`chunkeval trend`: a metric per completed run and configuration, and the regression alert."""

from __future__ import annotations

import argparse
import sys

from chunkeval.cli.options import (
    add_alpha,
    add_config,
    add_experiment,
    add_json,
    add_metric,
    add_threshold,
    check_at_least_one,
    config_filter,
)
from chunkeval.cli.output import iso, print_json
from chunkeval.cli.session import WarehouseAccess
from chunkeval.errors import InputError

WAREHOUSE_SESSION = True  # only reads


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "trend",
        help="a metric per completed run and configuration, oldest first, with the change",
        description="A metric (macro mean) per completed run and configuration, oldest first, with the change "
        "against the previous completed run.",
    )
    add_experiment(p, "the experiment", required=True)
    add_metric(p, "a metric name, e.g. span_recall, recall_at_k, mrr")
    add_config(
        p,
        "only configurations with these settings, e.g. chunk_size=200,k=5 (keys: chunker, chunk_size, chunk_overlap, k)",
    )
    p.add_argument("--last", type=int, metavar="N", help="only the last N completed runs")
    add_json(p, "print JSON rows (run_id, started_at, configuration, value, change)")
    p.add_argument(
        "--fail-on-regression",
        action="store_true",
        help="exit 1 when the metric fell in the newest run, against the baseline or the previous run, by more than "
        "--threshold and significantly (paired t-test over the queries, Holm over the configurations, --alpha)",
    )
    add_threshold(p, "the smallest fall that matters (absolute, default 0.02)")
    add_alpha(p)
    p.add_argument(
        "--baseline",
        metavar="RUN_ID",
        help="compare with this run (default: the pinned baseline, else the previous run)",
    )
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace, warehouse: WarehouseAccess) -> int:
    from chunkeval.analysis.comparisons import check_alpha, check_threshold
    from chunkeval.report.terminal import regression_message
    from chunkeval.stats.aggregate import check_metric

    check_metric(args.metric)
    check_at_least_one(args.last, "--last")
    check_threshold(args.threshold)
    check_alpha(args.alpha)
    wh = warehouse()
    wh.check_experiment(args.experiment)
    if args.baseline:
        wh.run(args.baseline)
    config = config_filter(args.config)
    rows = wh.trend(args.experiment, args.metric, config, args.last)
    if config and not rows and wh.last_completed(args.experiment):
        raise InputError(
            f"no configuration of experiment {args.experiment!r} matches --config "
            + ",".join(f"{k}={v}" for k, v in config.items())
        )
    if args.json:
        print_json([{**r, "started_at": iso(r["started_at"])} for r in rows])
    elif rows:
        print(_table(rows, args.metric))
    else:
        print(f"no completed run of experiment {args.experiment!r} with {args.metric}")
    if args.fail_on_regression:
        falls = wh.regressions(args.experiment, [args.metric], args.threshold, args.baseline, args.alpha)
        falls = [f for f in falls if all(f[k] == v for k, v in config.items())]
        for f in falls:
            print(regression_message(f), file=sys.stderr)
        if falls:
            return 1
    return 0


def _table(rows: list[dict], metric: str) -> str:
    from chunkeval.report.terminal import format_rows
    from chunkeval.vocabulary import shown_keys

    keys = shown_keys(rows)
    if len({r["duplicates"] for r in rows}) > 1:  # changes are only against runs scored the same way
        keys.insert(0, "duplicates")
    cols = ["run_id", "started_at", *keys, metric, "change"]
    return format_rows(
        cols,
        [
            [
                r["run_id"],
                iso(r["started_at"]),
                *(str(r[k]) for k in keys),
                "–" if r["value"] is None else f"{r['value']:.3f}",
                "" if r["change"] is None else f"{r['change']:+.3f}",
            ]
            for r in rows
        ],
    )
