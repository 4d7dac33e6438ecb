"""`chunkeval warehouse repair`: a damaged catalogue rebuilt from the run manifests and pins."""

from __future__ import annotations

import argparse

from chunkeval.cli.session import WarehouseAccess
from chunkeval.errors import InputError

WAREHOUSE_SESSION = False  # a repair may move the catalogue file aside: no connection may stay open


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("warehouse", help="look after the warehouse: `warehouse repair` rebuilds a damaged catalogue")
    wsub = p.add_subparsers(dest="warehouse_command", metavar="command", required=True)
    w = wsub.add_parser(
        "repair",
        help="move a damaged chunkeval.duckdb aside and rebuild it from the run manifests and pins",
        description="Rebuild the catalogue of runs from each run's manifest.json and the pinned baselines' files. "
        "A readable catalogue is kept; only manifests missing for older runs are written.",
    )
    w.set_defaults(func=repair)
    return p


def repair(args: argparse.Namespace, warehouse: WarehouseAccess) -> int:
    wh = warehouse(must_exist=False)
    if not wh.exists() and not wh.results.is_dir():
        raise InputError("no warehouse here: nothing to repair", wh.db_path)
    done = wh.repair()
    if not done["damaged"]:
        print(
            f"{wh.db_path} is readable: nothing to rebuild ({done['runs']} run(s); "
            f"{done['manifests_written']} manifest(s) written for runs that had none)"
        )
    else:
        aside = f"the damaged file was moved to {done['moved_to']}; " if done["moved_to"] else ""
        print(
            f"{wh.db_path} rebuilt from the run manifests: {aside}{done['runs']} run(s) and {done['pins']} pinned baseline(s) restored"
        )
    return 0
