"""`chunkeval diff`: what changed between two recorded runs, question by question."""

from __future__ import annotations

import argparse
import sys

from chunkeval.analysis.comparisons import check_alpha, check_threshold
from chunkeval.cli.commands import summary
from chunkeval.cli.options import add_alpha, add_config, add_json, add_run, add_threshold, config_filter
from chunkeval.cli.output import print_json
from chunkeval.cli.session import WarehouseAccess
from chunkeval.errors import InputError
from chunkeval.files import write_text
from chunkeval.report.diff import diff_doc, diff_page, format_diff
from chunkeval.report.terminal import check_output_path
from chunkeval.vocabulary import check_metric

WAREHOUSE_SESSION = True  # only reads


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "diff",
        help=summary("diff"),
        description="For each configuration two runs of one experiment share: the questions that got better, worse "
        "or stayed on --metric (a change of at most 1e-9 is none), the check of the one regression verdict of b "
        "against a (change b - a, as trend --fail-on-regression gives it: docs/statistics.md, 'One verdict'), "
        "and for each question that changed the chunks it retrieved before (a) and after (b), worse ones first.",
    )
    add_run(p, "a completed run: give two, the earlier (a) first", many=True)
    add_config(p, "only configurations with these settings, e.g. chunk_size=200,k=5")
    p.add_argument(
        "--metric",
        help="the per-query metric shown, and the only one the verdict checks (default: the verdict checks every "
        "metric of the regression rule, and the first the runs measure is shown, span_recall)",
    )
    add_threshold(p, "the smallest fall that counts as a regression in the verdict (absolute, default 0.02)")
    add_alpha(p)
    add_json(p, "print a JSON list with one object per configuration")
    p.add_argument("--html", metavar="OUT.html", help="also write the diff as one offline HTML page")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace, warehouse: WarehouseAccess) -> int:
    if not args.run or len(args.run) != 2:
        raise InputError("diff takes two runs: --run A --run B")
    if args.metric is not None:
        check_metric(args.metric)
    check_threshold(args.threshold)
    check_alpha(args.alpha)
    out = None
    if args.html:
        out = check_output_path(args.html)
    wh = warehouse()
    docs = diff_doc(wh, args.run[0], args.run[1], config_filter(args.config), args.metric, args.threshold, args.alpha)
    if args.html:
        write_text(out, diff_page(docs, args.run[0], args.run[1], wh.run(args.run[1])["experiment"]))
    if args.json:
        print_json(docs)
    else:
        print(format_diff(docs, args.run[0], args.run[1], colour=sys.stdout.isatty()))
    if args.html:
        print(f"diff page: {args.html}", file=sys.stderr if args.json else sys.stdout)
    return 0
