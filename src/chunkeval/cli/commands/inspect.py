"""`chunkeval inspect`: one question of a recorded run, what each configuration retrieved for it."""

from __future__ import annotations

import argparse
import sys

from chunkeval.cli.commands import summary
from chunkeval.cli.options import add_config, add_json, add_run, config_filter
from chunkeval.cli.output import print_json
from chunkeval.cli.session import WarehouseAccess
from chunkeval.report.inspect import format_inspect, inspect_doc

WAREHOUSE_SESSION = True  # only reads


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "inspect",
        help=summary("inspect"),
        description="Show one question of a recorded run: each reference with 200 characters of context, and for "
        "each configuration the chunks it retrieved at its k, with rank, score and text, the characters they "
        "share with a reference marked (colour on a terminal, [[…]] otherwise). Texts come from the copy of the "
        "corpus version the run read.",
    )
    add_run(p, "a completed run", required=True)
    p.add_argument("--query", required=True, metavar="QUERY_ID", help="the question's query_id")
    add_config(p, "only configurations with these settings, e.g. chunk_size=200,k=5")
    p.add_argument(
        "--all", action="store_true", help="show every configuration (by default the first 8, the rest counted)"
    )
    add_json(p, "print the question, its references and the retrieved chunks as one JSON object")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace, warehouse: WarehouseAccess) -> int:
    doc = inspect_doc(warehouse(), args.run, args.query, config_filter(args.config))
    if args.json:
        print_json(doc)
    else:
        print(format_inspect(doc, colour=sys.stdout.isatty(), every=args.all))
    return 0
