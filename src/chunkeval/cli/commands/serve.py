"""`chunkeval serve`: every deployment of a Prefect deployments file, served from this process."""

from __future__ import annotations

import argparse
from pathlib import Path

from chunkeval.cli.commands import summary
from chunkeval.cli.session import WarehouseAccess
from chunkeval.paths import DEPLOYMENTS_FILE

WAREHOUSE_SESSION = False  # the flows it serves open the warehouse themselves, run by run


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "serve",
        help=summary("serve"),
        description="Serve the deployments of the deployments file (chunkeval's: nightly, on-change, poll, weekly and "
        "production) from one process (no work pool). "
        "Needs a Prefect server (PREFECT_API_URL).",
    )
    p.add_argument(
        "--prefect-file",
        default=str(DEPLOYMENTS_FILE),
        help="the deployments file (default: the one chunkeval ships, deployments/prefect.yaml in a checkout)",
    )
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace, warehouse: WarehouseAccess) -> int:
    from chunkeval.flows.serve import (
        serve_all,  # Prefect (seconds to import) loads only for the commands that run flows
    )

    serve_all(Path(args.prefect_file))
    return 0
