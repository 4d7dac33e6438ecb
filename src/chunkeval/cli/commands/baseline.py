"""`chunkeval baseline`: pin a completed run as the one regressions are measured against."""

from __future__ import annotations

import argparse

from chunkeval.cli.options import add_experiment, add_run
from chunkeval.cli.session import WarehouseAccess

WAREHOUSE_SESSION = True  # one short change of the catalogue


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("baseline", help="pin a completed run as the baseline that regressions are measured against")
    add_experiment(p, required=True)
    add_run(p, required=True)
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace, warehouse: WarehouseAccess) -> int:
    wh = warehouse()
    wh.check_experiment(args.experiment)
    wh.pin_baseline(args.experiment, args.run)
    print(f"run {args.run} is now the baseline of experiment {args.experiment}")
    return 0
