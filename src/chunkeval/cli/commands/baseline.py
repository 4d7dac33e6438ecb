"""`chunkeval baseline`: pin a completed run as the one regressions are measured against."""

from __future__ import annotations

import argparse

from chunkeval.cli.commands import summary
from chunkeval.cli.options import add_experiment, add_run
from chunkeval.cli.session import WarehouseAccess

WAREHOUSE_SESSION = True  # one short change of the catalogue


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "baseline",
        help=summary("baseline"),
        description="Pin a completed run of an experiment as its baseline: `trend --fail-on-regression`, the "
        "nightly's gate and the report then judge the newest run against it rather than against the run before "
        "(docs/commands.md). Pinning again replaces it.",
    )
    add_experiment(p, required=True, help="the experiment whose baseline it becomes")
    add_run(p, "the completed run to pin (chunkeval runs lists them)", required=True)
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace, warehouse: WarehouseAccess) -> int:
    wh = warehouse()
    wh.check_experiment(args.experiment)
    wh.pin_baseline(args.experiment, args.run)
    print(f"run {args.run} is now the baseline of experiment {args.experiment}")
    return 0
