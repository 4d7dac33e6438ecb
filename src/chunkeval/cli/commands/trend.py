"""`chunkeval trend`: a metric per completed run and configuration, and the regression alert."""

from __future__ import annotations

import argparse
import io
import sys

from chunkeval.analysis.comparisons import check_alpha, check_threshold
from chunkeval.analysis.regression import NOTHING_COMPARABLE, REGRESSION, REGRESSION_METRICS, verdict_line
from chunkeval.cli.commands import summary
from chunkeval.cli.options import (
    add_alpha,
    add_config,
    add_experiment,
    add_json,
    add_metric_flags,
    add_threshold,
    check_at_least_one,
    config_filter,
    metric_flags,
)
from chunkeval.cli.output import iso
from chunkeval.cli.session import WarehouseAccess
from chunkeval.errors import Fault, InputError, NothingComparable
from chunkeval.limits import check_name
from chunkeval.paths import home
from chunkeval.report.diff import diff_path, write_diff
from chunkeval.report.terminal import SPAN_HEADLINE, chosen_metrics, fold, format_rows, regression_message
from chunkeval.stats.judged import METRICS as PRODUCTION_METRICS
from chunkeval.vocabulary import MIN_SLICE_QUERIES, no_match, slice_name

WAREHOUSE_SESSION = True  # only reads
SHOWN_RUNS = 30  # runs a terminal shows by default


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "trend",
        help=summary("trend"),
        description="A metric (macro mean) per completed run and configuration, oldest first, with the change "
        "against the previous completed run: one table per metric (--metric, --metrics, every metric recorded with "
        "--wide; by default the headline metrics of the newest run's kind of gold, or with --fail-on-regression "
        "the metrics it watches), each within 120 columns.",
    )
    add_experiment(p, "the experiment", required=True)
    p.add_argument(
        "--metric",
        help="one metric, e.g. span_recall, recall_at_k, mrr (the verdict of --fail-on-regression then watches it "
        "alone; without --metric or --metrics it watches every metric of the regression rule)",
    )
    add_metric_flags(p)
    add_config(
        p,
        "only configurations with these settings, e.g. chunk_size=200,k=5 (keys: chunker, chunk_size, chunk_overlap, k)",
    )
    p.add_argument(
        "--slice",
        metavar="COLUMN=VALUE",
        help="the metric over one slice of the gold set, e.g. type=numbers (runs recorded with --slice-by); with "
        "--fail-on-regression, only that slice's regressions",
    )
    window = p.add_mutually_exclusive_group()
    window.add_argument(
        "--last",
        type=int,
        metavar="N",
        help=f"only the last N completed runs (default: the last {SHOWN_RUNS}, in a terminal and with --json, unless --all)",
    )
    window.add_argument("--all", action="store_true", help="every completed run, also in a terminal")
    add_json(
        p,
        f"print JSON rows (run_id, started_at, configuration, value, change) of the runs a terminal shows (the last {SHOWN_RUNS} unless --last N or --all)",
    )
    p.add_argument(
        "--fail-on-regression",
        action="store_true",
        help="print the verdict and the regressions (the table only with -v) and exit 1 when --metric (without it, "
        "any metric the regression rule watches) fell in the newest run, against the baseline or the previous run, "
        "by more than --threshold and significantly (step-down max-T over paired sign flips of the queries, taken "
        "jointly over every configuration x metric checked, --alpha); exit 3 when the two runs share no configuration or no paired question "
        "(definition: docs/statistics.md, 'One verdict')",
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
    named, wide = metric_flags(args)
    check_at_least_one(args.last, "--last")
    check_threshold(args.threshold)
    check_alpha(args.alpha)
    if args.fail_on_regression:
        _nothing_recorded_yet(warehouse, args.experiment)
    wh = warehouse()
    wh.check_experiment(args.experiment)
    if args.baseline:
        wh.run(args.baseline)
    config = config_filter(args.config)
    in_slice = _slice(wh, args)
    if args.fail_on_regression and not (args.verbose or args.json):  # the verdict alone: no table to read
        if config and not wh.has_configuration(args.experiment, config):
            _no_match(wh, args.experiment, config)
        return _verdict(wh, args, config, in_slice)
    metrics = named or _default_metrics(wh, args.experiment, wide, args.fail_on_regression)
    shown = args.last or (None if args.all else SHOWN_RUNS)  # the same runs in a terminal and in JSON
    if args.json:  # rows encoded by the warehouse (a Python object per row took seconds for a long history)
        if config and not wh.has_configuration(args.experiment, config):
            _no_match(wh, args.experiment, config)
        sys.stdout.flush()
        binary = getattr(sys.stdout, "buffer", None)  # a text stream without one (a StringIO) gets the text
        out = binary if binary is not None else io.BytesIO()
        wh.trend_json(out, args.experiment, metrics, config, shown, in_slice)
        if binary is None:
            sys.stdout.write(out.getvalue().decode())
        sys.stdout.flush()
        _left_out(wh, args.experiment, shown, sys.stderr)
        return _verdict(wh, args, config, in_slice) if args.fail_on_regression else 0
    by_metric = {m: wh.trend(args.experiment, m, config, shown, in_slice=in_slice) for m in metrics}
    rows = [r for found in by_metric.values() for r in found]
    if config and not rows:
        _no_match(wh, args.experiment, config)
    if not rows:
        print(f"no completed run of experiment {args.experiment!r} with {', '.join(metrics)}")
    elif args.verbose or not args.fail_on_regression:
        raced = {r["run_id"] for r in wh.raced_runs(args.experiment)}
        for r in rows:
            r["raced"] = r["run_id"] in raced
        print("\n\n".join(_table(found, m) for m, found in by_metric.items() if found))
        if raced & {r["run_id"] for r in rows}:
            print("(R: a raced run, scored on part of the questions: its means and changes are not a full run's; the "
                  "gate leaves it out)")  # fmt: skip
        if any(r.get("gold_changed") for r in rows):
            print(
                "(G: the gold set changed since the previous completed run: `gold update`, a generated, accepted "
                "or judged gold set, or an edited file)"
            )
        if any(r.get("model_changed") for r in rows):
            print("(M: the model changed since the previous completed run: another model, backend or precision)")
        if in_slice and any(r["too_small"] for r in rows):
            print(f"(* fewer than {MIN_SLICE_QUERIES} queries: too small to test; no regression is tested on it)")
        _left_out(wh, args.experiment, shown, sys.stdout)
        _production(wh, args.experiment, metrics)
    if args.fail_on_regression:
        return _verdict(wh, args, config, in_slice)
    return 0


def _production(wh, experiment: str, metrics: list[str]) -> None:
    """Production beside the runs: its judged results (`traces compare`, the `production` deployment)."""
    for metric in [m for m in metrics if m in PRODUCTION_METRICS]:
        rows = wh.production_trend(experiment, metric)
        if not rows:
            continue
        print(f"\nproduction, judged by a model on its own sampled queries ({metric}; not the gold set's numbers):")
        for r in rows:
            best = "" if r["best_offline"] is None else f"; best offline {r['best_offline']:.3f} ({r['best_label']})"
            print(f"  {r['result_id']}  {r['recorded_at']:%Y-%m-%d %H:%M}  production {r['production']:.3f} on "
                  f"{r['n_queries']} quer(ies){best}")  # fmt: skip


def _left_out(wh, experiment: str, shown: int | None, out) -> None:
    """Say how many earlier completed runs the window of `shown` runs left out (nothing when none was)."""
    left_out = wh.count_runs(experiment, "completed") - shown if shown else 0
    if left_out > 0:
        print(f"({left_out} earlier completed run(s) not shown: --last N or --all shows them)", file=out)


def _default_metrics(wh, experiment: str, wide: bool, watched: bool) -> list[str]:
    """The tables' metrics where none is named: every metric the newest completed run measured (`--wide`), the
    regression rule's (`watched`, --fail-on-regression), else the headline metrics of its kind of gold."""
    if watched and not wide:
        return list(REGRESSION_METRICS)
    last = wh.last_completed(experiment)
    return list(chosen_metrics(wh.summary(last["run_id"]), None, wide) if last else SPAN_HEADLINE)


def _no_match(wh, experiment: str, config: dict) -> None:
    """The error of a --config that no configuration of the experiment's completed runs has (none when it has
    no completed run yet: the command says so itself)."""
    last = wh.last_completed(experiment)
    if last:
        raise InputError(no_match(config, wh.summary(last["run_id"]).to_pylist(), f"experiment {experiment!r}"))


def _slice(wh, args: argparse.Namespace) -> tuple[str, str] | None:
    """`--slice COLUMN=VALUE` as (column, value), a slice the experiment's runs recorded."""
    if args.slice is None:
        return None
    column, sep, value = args.slice.partition("=")
    if not sep or not column.strip() or not value.strip():
        raise InputError(f"--slice takes COLUMN=VALUE, e.g. type=numbers; got {args.slice!r}")
    known = wh.slices(args.experiment)
    if slice_name(column.strip(), value.strip()) not in known:
        raise InputError(
            f"no slice {args.slice!r} in the runs of experiment {args.experiment!r}; "
            + (f"known: {', '.join(known)}" if known else "its runs recorded no slices (run with --slice-by)")
        )
    return column.strip(), value.strip()


def _verdict(wh, args: argparse.Namespace, config: dict, in_slice: tuple[str, str] | None = None) -> int:
    """The verdict (`chunkeval.analysis.regression.verdict`) on stdout, each regression (with the questions that
    lost most) on stderr: 1 when there is one; nothing comparable is an error of its own (exit status 3)."""
    metrics = metric_flags(args)[0]  # else every metric of the regression rule
    found = wh.verdict(
        args.experiment, metrics, args.threshold, args.baseline, args.alpha, config, in_slice and slice_name(*in_slice)
    )
    out = sys.stderr if args.json else sys.stdout  # JSON on stdout stays one document
    if found is None:  # one full run, or none beside raced ones: nothing to compare, as after a changed grid
        for left in wh.raced_runs(args.experiment):
            _said_left_out(left)
        raise NothingComparable(f"experiment {args.experiment!r} has no full run to compare with yet")
    for left in found["left_out"]:
        _said_left_out(left)
    if found["verdict"] == NOTHING_COMPARABLE:
        raise NothingComparable(verdict_line(found))
    print(fold(verdict_line(found)), file=out)  # within 120 columns; each regression's alert stays one line
    if found["verdict"] != REGRESSION:
        return 0
    print(_diff_link(wh, args, config, found["reference_run_id"], found["run_id"]), file=out)
    for f in found["regressions"]:
        print(regression_message(f), file=sys.stderr)
    return 1


def _nothing_recorded_yet(warehouse: WarehouseAccess, experiment: str) -> None:
    """The gate of an experiment that is defined (the demo, `$CHUNKEVAL_HOME/experiments/NAME.yaml`) but has no
    recorded run yet, in a fresh home too, meets nothing to compare (exit 3), as it does after one run or a changed
    grid; an experiment nobody defined or recorded stays bad input (a typo: exit 2, with what it looks like)."""
    wh = warehouse(must_exist=False)
    if wh.exists() and wh.runs(experiment, limit=1):
        return
    if experiment == "demo" or (home() / "experiments" / f"{check_name(experiment)}.yaml").is_file():
        raise NothingComparable(f"experiment {experiment!r} has no recorded run yet: nothing to compare")


def _said_left_out(left: dict) -> None:
    """A run the verdict leaves out (raced, quarantined), said as every notice is: `chunkeval: left out: run …`."""
    print(f"chunkeval: left out: run {left['run_id']} ({left['why']})", file=sys.stderr)


def _diff_link(wh, args: argparse.Namespace, config: dict, reference: str, newest: str) -> str:
    """Write the diff of the reference run and the newest (`reports/<experiment>/diff-<A>-<B>.html`) and
    say where it is, or why there is none (of the one metric named, else of the watched ones)."""
    metrics = metric_flags(args)[0]
    try:
        path = write_diff(
            wh,
            reference,
            newest,
            diff_path(wh.root, args.experiment, reference, newest),
            config,
            metrics[0] if metrics and len(metrics) == 1 else None,
            args.threshold,
            args.alpha,
        )
    except Fault:
        raise
    except InputError as exc:
        return f"no diff: {exc}"
    return f"diff: {path}"


def _table(rows: list[dict], metric: str) -> str:
    keys = ["label", "config_id"]  # chunkeval.vocabulary.config_label, as every table names a configuration
    if len({r["duplicates"] for r in rows}) > 1:  # changes are only against runs scored the same way
        keys.insert(0, "duplicates")
    if len({r.get("ties") for r in rows}) > 1:  # the tie policy changed: numbers move where ties were broken
        keys.insert(0, "ties")
    sliced = "n_queries" in rows[0]  # rows of one slice: its queries, those too small to test marked
    # a run id made when the run began starts with its start (20260101T020000-…): the column would repeat it
    when = not all(r["run_id"].startswith(r["started_at"].strftime("%Y%m%dT%H%M%S")) for r in rows)
    cols = ["run_id", *(["started_at"] if when else []), *keys, *(["queries"] if sliced else []), metric, "change"]
    return format_rows(
        cols,
        [
            [
                r["run_id"]
                + (" G" if r.get("gold_changed") else "")
                + (" M" if r.get("model_changed") else "")
                + (" R" if r.get("raced") else ""),
                *([iso(r["started_at"])] if when else []),
                *(str(r[k]) for k in keys),
                *([f"{r['n_queries']}{'*' if r['too_small'] else ''}"] if sliced else []),
                "–" if r["value"] is None else f"{r['value']:.3f}",
                "" if r["change"] is None else f"{r['change']:+.3f}",
            ]
            for r in rows
        ],
    )
