"""`chunkeval compare`: paired significance tests between configurations, runs or ranked-list files."""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path

from chunkeval.analysis import comparisons as C
from chunkeval.analysis.comparisons import check_alpha
from chunkeval.cli.commands import summary
from chunkeval.cli.options import (
    add_alpha,
    add_config,
    add_experiment,
    add_json,
    add_metric,
    add_metric_flags,
    add_run,
    add_run_file_options,
    config_filter,
    metric_flags,
)
from chunkeval.cli.output import clean, print_json
from chunkeval.cli.session import WarehouseAccess
from chunkeval.engine.inputs.run_files import load_gold_and_run
from chunkeval.engine.scoring.metrics import RANK_METRICS, score_run
from chunkeval.engine.settings.table import check_k
from chunkeval.errors import InputError
from chunkeval.report.terminal import (
    RANK_HEADLINE,
    SPAN_HEADLINE,
    TERMINAL_WIDTH,
    ceiling_note,
    chosen_metrics,
    comparison_table,
    fold,
    format_rows,
    power_sentence,
)

WAREHOUSE_SESSION = True  # only reads


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "compare",
        help=summary("compare"),
        description="Compare configurations query by query: within a run (each against the best, or --all-pairs), "
        "two runs of one experiment (the configurations they share), or two ranked-list files "
        "(--gold G --run-file A --run-file B), on --metric, on each of --metrics (one table each), on every metric "
        "measured (--wide), or by default on the headline metrics of the run's kind of gold (of run files: "
        f"{', '.join(RANK_HEADLINE)}). Paired t-test, paired randomisation test (10,000 sign "
        "flips, seeded), the bootstrap interval of the mean difference, Holm over the call's comparisons of one "
        "metric (one family per metric: docs/statistics.md); and what the "
        "questions can tell: the smallest difference (MDE) a paired t-test at --alpha detects with power 0.8 given the "
        "spread of each pair's differences, and the questions 0.02, 0.05 and 0.10 would need (per comparison, before "
        "Holm; docs/statistics.md).",
    )
    add_run(p, "a completed run (give two to compare runs)", many=True)
    add_experiment(p, "the experiment (its last completed run when no --run is given)")
    add_metric(p, "one per-query metric, e.g. span_recall, recall_at_k, mrr (or --metrics, --wide)", required=False)
    add_metric_flags(p)
    add_config(p, "only configurations with these settings")
    p.add_argument("--all-pairs", action="store_true", help="every pair of configurations, not each against the best")
    add_alpha(p)
    p.add_argument("--gold", help="a gold file, to compare two --run-file")
    p.add_argument("--run-file", action="append", metavar="FILE", help="a ranked-list file of a retriever (twice)")
    add_run_file_options(
        p, format_help="run-file format", k_help="cutoff of the *_at_k metrics for run files (default 10)"
    )
    add_json(p, "print a JSON list of comparisons")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace, warehouse: WarehouseAccess) -> int:
    check_alpha(args.alpha)
    named, wide = metric_flags(args)
    if args.gold or args.run_file:
        results = _compare_files(args, named, wide)
    else:
        wh, config = warehouse(), config_filter(args.config)
        if not args.run and not args.experiment:
            raise InputError(
                "give --run ID (twice to compare two runs), or --experiment NAME for its last completed run"
            )
        if len(args.run or []) > 2:
            raise InputError("compare takes at most two --run")
        metrics = named or _run_metrics(wh, args, wide)
        results = [
            r
            for m in metrics
            for r in wh.compare(m, args.run or [], args.experiment, config, args.all_pairs, args.alpha)
        ]  # Holm within each metric's comparisons: one family per metric
    if args.json:
        print_json([{k: clean(v) for k, v in r.items()} for r in results], default=str)
        return 0
    by_metric: dict[str, list[dict]] = {}
    for r in results:
        by_metric.setdefault(r["metric"], []).append(r)
    for i, (metric, found) in enumerate(by_metric.items()):
        print("\n" if i else "", end="")
        _print_table(found, metric, args.alpha)
    return 0


def _run_metrics(wh, args: argparse.Namespace, wide: bool) -> tuple[str, ...]:
    """The metrics compared where none is named: those the (first, else the experiment's last completed) run
    measured (`--wide`), else the headline metrics of its kind of gold (`chunkeval.report.terminal.chosen_metrics`).
    Where there is no such run, the span headline: `Warehouse.compare` then says what is missing."""
    if args.run:
        run_id = wh.run(args.run[0])["run_id"]
    else:
        wh.check_experiment(args.experiment)
        last = wh.last_completed(args.experiment)
        if last is None:
            return SPAN_HEADLINE
        run_id = last["run_id"]
    return chosen_metrics(wh.summary(run_id), None, wide)


def _compare_files(args: argparse.Namespace, named: list[str] | None, wide: bool) -> list[dict]:
    """The two ranked-list files of --run-file, scored against --gold and compared query by query on each metric
    (`named`, every rank metric where `wide`, else RANK_HEADLINE), Holm within each metric."""
    if not args.gold or len(args.run_file or []) != 2 or args.run:
        raise InputError("compare ranked-list files with --gold G --run-file A --run-file B (and no --run)")
    if any(m not in RANK_METRICS for m in named or ()):
        raise InputError(f"run files have set and rank metrics only: choose one of {', '.join(RANK_METRICS)}")
    check_k(args.k, "--k")
    tables = []
    for path in args.run_file:
        gold, ranked = load_gold_and_run(Path(args.gold), Path(path), args.format)
        tables.append(score_run(gold, ranked, args.k)[0])
    sides = [{"run_file": path, "k": args.k} for path in args.run_file]
    found = []
    for metric in named or (RANK_METRICS if wide else RANK_HEADLINE):
        values = [dict(zip(t["query_id"].to_pylist(), t[metric].to_pylist())) for t in tables]
        found += C.adjust([C.compare(values[0], values[1], sides[0], sides[1], metric, alpha=args.alpha)], args.alpha)
    return found


def _print_table(results: list[dict], metric: str, alpha: float) -> None:
    """One metric's comparisons within 120 columns where labels allow (`comparison_table`); the t-test and
    randomisation p-values, and each comparison's queries needed, are in --json (the sentence below gives the
    median comparison's)."""
    where, header, rows = comparison_table(results)
    queries = len({r["n_queries"] for r in results}) > 1
    n = "" if queries else f", {results[0]['n_queries']} queries"
    print(
        fold(
            f"{metric}{where}: paired by query{n}; differences a − b with 95 % bootstrap intervals; Holm over "
            f"{len(results)} comparison(s) of {metric} (p Holm: the randomisation test's, adjusted; yes: below "
            f"α={alpha})",
            indent="",
        )
    )
    print(format_rows(header, rows))
    typical = sorted(results, key=lambda r: (r["mde"] != r["mde"], r["mde"]))[(len(results) - 1) // 2]
    sentence = power_sentence(typical["n_queries"], metric, typical["mde"], typical["n_needed"], typical.get("ceiling"))
    if not ceiling_note(typical.get("ceiling")):
        median = " (the median MDE of these comparisons)" if len(results) > 1 else ""
        sentence += (
            f"{median}. MDE: the smallest paired difference a t-test at α={alpha} detects with power 0.8, from the "
            "spread of the pair's per-query differences; needed queries at that spread, per comparison, before Holm"
        )
    print("\n" + textwrap.fill(sentence, TERMINAL_WIDTH))
    unmatched = sum(r["n_unmatched"] for r in results)
    if unmatched:
        print(f"\n{unmatched} query row(s) present on one side only were left out of the pairing")
