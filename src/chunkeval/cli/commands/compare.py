"""`chunkeval compare`: paired significance tests between configurations, runs or ranked-list files."""

from __future__ import annotations

import argparse
from pathlib import Path

from chunkeval.analysis import comparisons as C
from chunkeval.analysis.comparisons import check_alpha
from chunkeval.cli.options import (
    add_alpha,
    add_config,
    add_experiment,
    add_json,
    add_metric,
    add_run,
    add_run_file_options,
    config_filter,
)
from chunkeval.cli.output import clean, print_json
from chunkeval.cli.session import WarehouseAccess
from chunkeval.engine.inputs.run_files import load_gold_and_run
from chunkeval.engine.scoring.metrics import RANK_METRICS, score_run
from chunkeval.engine.settings.table import check_k
from chunkeval.errors import InputError
from chunkeval.report.terminal import format_rows, power_sentence, side_label
from chunkeval.vocabulary import check_metric

WAREHOUSE_SESSION = True  # only reads

HEADER = ["a", "b", "queries", "mean a", "mean b", "difference", "p t-test", "p randomisation", "p Holm"]
POWER_HEADER = ["MDE", "queries for 0.02 / 0.05 / 0.10"]


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "compare",
        help="paired significance tests between configurations, runs or run files",
        description="Compare configurations query by query: within a run (each against the best, or --all-pairs), "
        "two runs of one experiment (the configurations they share), or two ranked-list files "
        "(--gold G --run-file A --run-file B). Paired t-test, paired randomisation test (10,000 sign "
        "flips, seeded), the bootstrap interval of the mean difference, Holm over the call's comparisons; and what the "
        "questions can tell: the smallest difference (MDE) a paired t-test at --alpha detects with power 0.8 given the "
        "spread of each pair's differences, and the questions 0.02, 0.05 and 0.10 would need (per comparison, before "
        "Holm; docs/statistics.md).",
    )
    add_run(p, "a completed run (give two to compare runs)", many=True)
    add_experiment(p, "the experiment (its last completed run when no --run is given)")
    add_metric(p, "the per-query metric, e.g. span_recall, recall_at_k, mrr")
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
    check_metric(args.metric)
    if args.gold or args.run_file:
        results = _compare_files(args)
    else:
        wh, config = warehouse(), config_filter(args.config)
        if not args.run and not args.experiment:
            raise InputError(
                "give --run ID (twice to compare two runs), or --experiment NAME for its last completed run"
            )
        if len(args.run or []) > 2:
            raise InputError("compare takes at most two --run")
        results = wh.compare(args.metric, args.run or [], args.experiment, config, args.all_pairs, args.alpha)
    if args.json:
        print_json([{k: clean(v) for k, v in r.items()} for r in results], default=str)
        return 0
    _print_table(results, args.metric, args.alpha)
    return 0


def _compare_files(args: argparse.Namespace) -> list[dict]:
    """The two ranked-list files of --run-file, scored against --gold and compared query by query."""
    if not args.gold or len(args.run_file or []) != 2 or args.run:
        raise InputError("compare ranked-list files with --gold G --run-file A --run-file B (and no --run)")
    if args.metric not in RANK_METRICS:
        raise InputError(f"run files have set and rank metrics only: choose one of {', '.join(RANK_METRICS)}")
    check_k(args.k, "--k")
    tables = []
    for path in args.run_file:
        gold, ranked = load_gold_and_run(Path(args.gold), Path(path), args.format)
        tables.append(score_run(gold, ranked, args.k)[0])
    values = [dict(zip(t["query_id"].to_pylist(), t[args.metric].to_pylist())) for t in tables]
    sides = [{"run_file": path, "k": args.k} for path in args.run_file]
    return C.adjust([C.compare(values[0], values[1], sides[0], sides[1], args.metric, alpha=args.alpha)], args.alpha)


def _print_table(results: list[dict], metric: str, alpha: float) -> None:
    rows = [
        [
            side_label(r["a"]),
            side_label(r["b"]),
            str(r["n_queries"]),
            f"{r['mean_a']:.3f}",
            f"{r['mean_b']:.3f}",
            f"{r['mean_diff']:+.3f} [{r['ci_low']:+.3f}, {r['ci_high']:+.3f}]",
            f"{r['p_ttest']:.4f}",
            f"{r['p_permutation']:.4f}",
            f"{r['p_adjusted']:.4f}",
            "yes" if r["significant"] else "no",
            "–" if r["mde"] != r["mde"] else f"{r['mde']:.3f}",
            " / ".join("–" if n is None else str(n) for n in r["n_needed"].values()),
        ]
        for r in results
    ]
    print(
        f"{metric}: paired by query; differences a − b with 95 % bootstrap intervals; Holm over {len(results)} comparison(s)"
    )
    print(format_rows([*HEADER, f"significant (α={alpha})", *POWER_HEADER], rows))
    typical = sorted(results, key=lambda r: (r["mde"] != r["mde"], r["mde"]))[(len(results) - 1) // 2]
    median = " (the median MDE of these comparisons)" if len(results) > 1 else ""
    print(
        f"\n{power_sentence(typical['n_queries'], metric, typical['mde'], typical['n_needed'])}{median}. MDE: the "
        f"smallest paired difference a t-test at α={alpha} detects with power 0.8, from the spread of the pair's "
        "per-query differences; needed queries at that spread, per comparison, before Holm"
    )
    unmatched = sum(r["n_unmatched"] for r in results)
    if unmatched:
        print(f"\n{unmatched} query row(s) present on one side only were left out of the pairing")
