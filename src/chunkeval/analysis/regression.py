"""The rules over recorded runs: what the regression check watches and by how much a mean may fall, which
runs may be compared, and what their per-query rows say. The warehouse finds the runs and reads their rows
(`Warehouse.compare`, `Warehouse.regressions`); the decisions are here. Definitions: docs/statistics.md
and docs/warehouse.md ("Regressions")."""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa

from chunkeval.analysis import comparisons as C
from chunkeval.errors import InputError
from chunkeval.stats.power import DETECT_FALL, questions_for_fall, smallest_fall
from chunkeval.vocabulary import MIN_SLICE_QUERIES, check_metric

# what the regression check watches by default, and by how much (absolute) a macro mean may fall
# ann_recall_at_k: a night whose approximate index loses recall is flagged like one whose model does (it is 1 for
# exact search, and absent where no index is searched)
# doc_ndcg_at_k, doc_recall_at_k: what runs over document gold (qrels) are watched by in place of the span metrics,
# which they do not measure (a metric all-NULL on a side is skipped: comparisons.regressions)
REGRESSION_METRICS = (
    "span_recall", "span_precision", "span_iou", "recall_at_k", "mrr", "ndcg_at_k", "ann_recall_at_k",
    "doc_ndcg_at_k", "doc_recall_at_k",
)  # fmt: skip
DEFAULT_THRESHOLD = 0.02
# the sign flips of the step-down max-T that adjusts the family (seeded: a verdict is the same on every rerun)
N_RESAMPLES = 10_000
SEED = 0


def check_request(metric: str, alpha: float) -> None:
    """A comparison of `metric` at significance level `alpha` is one chunkeval makes."""
    C.check_alpha(alpha)
    check_metric(metric)


def check_runs(runs: list[dict], experiment: str | None) -> None:
    """What a comparison of recorded runs takes (their catalogue rows): one run, or two of one experiment;
    completed runs only, of `experiment` where it is given."""
    if len(runs) > 2:
        raise InputError("compare takes at most two runs")
    for run in runs:
        if run["status"] != "completed":
            raise InputError(f"run {run['run_id']} is {run['status']}: only completed runs have results")
        if experiment and run["experiment"] != experiment:
            raise InputError(f"run {run['run_id']} belongs to experiment {run['experiment']!r}, not {experiment!r}")
    if len(runs) == 2 and runs[0]["experiment"] != runs[1]["experiment"]:
        raise InputError(
            f"runs {runs[0]['run_id']} and {runs[1]['run_id']} are of different experiments "
            f"({runs[0]['experiment']!r}, {runs[1]['experiment']!r})"
        )


def check_same_scoring(run_a: str, settings_a: dict[str, str], run_b: str, settings_b: dict[str, str]) -> None:
    """Runs scored with different run settings (`chunkeval.vocabulary.RUN_SETTINGS`) are never compared."""
    differ = [name for name in settings_a if settings_a[name] != settings_b.get(name)]
    if differ == ["duplicates"]:
        raise InputError(
            f"runs {run_a} (duplicates: {settings_a['duplicates']}) and {run_b} (duplicates: {settings_b['duplicates']}) "
            "score repeated passages differently and are never compared; compare runs with the same setting"
        )
    if differ:
        shown = "; ".join(f"{n}: {settings_a[n]} against {settings_b.get(n)}" for n in differ)
        raise InputError(
            f"runs {run_a} and {run_b} were scored under different run settings ({shown}) and are never compared"
        )


def compare_runs(
    per_query: Iterable[pa.Table], run_ids: list[str], metric: str, config: dict, all_pairs: bool, alpha: float
) -> list[dict]:
    """One run's configurations against its best (or every pair), or the configurations two runs share,
    queries paired by query_id; only the configurations with the settings of `config`. `per_query` gives
    the runs' per-query tables in the order of `run_ids` (a generator reads each only when it is matched)."""
    tables = [C.matching(table, config or {}, f"run {r}") for table, r in zip(per_query, run_ids)]
    if len(run_ids) == 1:
        return C.within_run(tables[0], metric, run_ids[0], all_pairs, alpha)
    return C.across_runs(tables[0], tables[1], metric, run_ids[0], run_ids[1], alpha)


REGRESSION = "regression"
NO_REGRESSION = "no regression"
NOTHING_COMPARABLE = "nothing comparable"


def verdict(
    newest: str,
    reference: str,
    after,
    before,
    metrics: list[str] | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    alpha: float = 0.05,
    config: dict | None = None,
    questions: dict[str, str] | None = None,
    slices: dict[str, set[str]] | None = None,
    in_slice: str | None = None,
    n_resamples: int = N_RESAMPLES,
    seed: int = SEED,
    detect_fall: float = DETECT_FALL,
) -> dict:
    """The one regression verdict of run `newest` (its per-query columns `after`) against its baseline run
    `reference` (`before`): what `trend --fail-on-regression`, the `trend-report` flow, `chunkeval.regressions()`,
    `diff` and the HTML report all say. Definition: docs/statistics.md ("One verdict").

    The family is every (configuration, metric) pair checked: the configurations both runs have (narrowed by
    `config`) × `metrics` (by default the watched list, REGRESSION_METRICS), each measured on both sides, and
    × the slices of `slices` large enough to test (the newest run's; with `in_slice`, that slice alone). A check
    is a regression when its paired mean change (new − baseline, questions paired by id) is below −threshold
    AND its adjusted p-value is below `alpha`: the step-down max-T over paired sign flips of the questions, taken
    jointly over the whole family (Westfall and Young; `n_resamples` flips drawn with `seed`), so that metrics and
    configurations that fall on the same questions are counted once.

    Returns `verdict` (REGRESSION, NO_REGRESSION or NOTHING_COMPARABLE, with `reason` for the last), every
    check (`checks`: configuration, metric, slice, before, after, change, sd, n_queries, n_unmatched, p_ttest,
    p_adjusted, mde, regression, worst, run ids), the `regressions` among them (largest fall first), what was
    paired (`configurations`, `newest_only`, `reference_only`, `paired_questions`), the correction (`procedure`,
    `n_resamples`, `exact`, `seed`) and what the gate can see (`detectable`: the largest `mde` of the checks of
    the whole gold set, or of the slice, the check it belongs to, and `fall`, that or the threshold where it is
    larger; a check's `mde` is `chunkeval.stats.power.smallest_fall` of its questions and spread, Bonferroni-bounded
    over the family)."""
    C.check_alpha(alpha)
    C.check_threshold(threshold)
    metrics = list(REGRESSION_METRICS if metrics is None else metrics)
    if in_slice is not None:
        slices = {in_slice: (slices or {}).get(in_slice, set())}
    checks, pairing, correction = C.paired_checks(
        after, before, metrics, questions, slices=slices, config=config, whole=in_slice is None,
        n_resamples=n_resamples, seed=seed,
    )  # fmt: skip
    for c in checks:
        c.update(
            mde=smallest_fall(c["n_queries"], c["sd"], len(checks), alpha),
            regression=bool(c["change"] < -threshold and c["p_adjusted"] < alpha),
            run_id=newest,
            reference_run_id=reference,
        )
    falls = sorted((c for c in checks if c["regression"]), key=lambda c: c["change"])
    reason = ""
    if not checks:
        if not pairing["configurations"]:
            reason = f"runs {newest} and {reference} share no configuration"
        elif pairing["paired_questions"] < 2:
            reason = (
                f"runs {newest} and {reference} share {pairing['configurations']} configuration(s) but "
                f"{pairing['paired_questions']} paired question(s): a paired check needs 2"
            )
        else:
            reason = f"no metric of {', '.join(metrics)} was measured by both runs {newest} and {reference}"
            if in_slice is not None:
                reason = f"slice {in_slice} has fewer than {MIN_SLICE_QUERIES} paired questions in runs {newest} and {reference}"
        if config:
            reason += " with --config " + ",".join(f"{k}={v}" for k, v in config.items())
    return {
        "verdict": NOTHING_COMPARABLE if not checks else REGRESSION if falls else NO_REGRESSION,
        "reason": reason,
        "run_id": newest,
        "reference_run_id": reference,
        "metrics": metrics,
        "config": dict(config or {}),
        "slice": in_slice,
        "threshold": threshold,
        "alpha": alpha,
        **pairing,
        **correction,
        "detectable": _detectable(checks, threshold, detect_fall, alpha),
        "checks": checks,
        "regressions": falls,
    }


def _detectable(
    checks: list[dict], threshold: float, detect_fall: float = DETECT_FALL, alpha: float = 0.05
) -> dict | None:
    """What the gate can see (None without checks): the check of the whole gold set (of the slice where every check
    is of one) whose smallest detectable fall, `mde`, is largest; `fall`, the larger of it and the threshold (the
    gate flags no smaller fall by its rule): 'no regression larger than fall'. Where that check cannot see a fall of
    `detect_fall`, `needed` is how many questions would (`questions_for_fall`, at the check's own spread of changes
    and the family's size), else None."""
    whole = [c for c in checks if c["slice"] is None] or checks
    if not whole:
        return None
    weakest = max(whole, key=lambda c: c["mde"])
    blind = 0 < detect_fall < 1 and weakest["mde"] > detect_fall
    return {
        "fall": max(threshold, weakest["mde"]),
        "mde": weakest["mde"],
        "metric": weakest["metric"],
        "config": {k: weakest[k] for k in C.KEYS if k in weakest},
        "n_queries": weakest["n_queries"],
        "detect_fall": detect_fall,
        "needed": questions_for_fall(detect_fall, weakest["sd"], len(checks), alpha) if blind else None,
    }


def first_sight(n_questions: int, checks: int, detect_fall: float = DETECT_FALL, alpha: float = 0.05) -> str:
    """What a first run's gold set will let the gate see, said where there is nothing to compare yet: the smallest
    fall `smallest_fall` gives its questions over the family the next verdict will check (its configurations × the
    watched metrics it measured), with no night-to-night spread (the best case: a second run of the same inputs
    changes nothing), and where that is above `detect_fall`, how many questions would see it."""
    if n_questions < 2 or checks < 1:
        return ""
    sight = smallest_fall(n_questions, 0.0, checks, alpha)
    said = f"; its {n_questions} question(s) will let the gate see falls larger than {sight:.2g}"
    if 0 < detect_fall < 1 and sight > detect_fall:
        said += f" (a fall of {detect_fall:g} needs {questions_for_fall(detect_fall, 0.0, checks, alpha):,})"
    return said


def left_out_text(left: list[dict], shown: int = 3) -> str:
    """`; left out: run A (raced: …); run B (…)` for the runs a verdict left out (the first `shown`, the rest
    counted), or ''."""
    if not left:
        return ""
    named = "; ".join(f"run {x['run_id']} ({x['why']})" for x in left[:shown])
    return f"; left out: {named}" + (f" and {len(left) - shown} more" if len(left) > shown else "")


def verdict_line(v: dict) -> str:
    """The verdict as one line: what a terminal, a flow's log and the report say first."""
    against = f"run {v['run_id']} against {v['reference_run_id']}"
    left = [
        f"{v[k]} configuration(s) only in the {w}"
        for k, w in (("newest_only", "newest"), ("reference_only", "baseline"))
        if v[k]
    ]
    paired = f"{v['configurations']} configuration(s), up to {v['paired_questions']} paired question(s)"
    paired += f"; left out: {'; '.join(left)}" if left else ""
    if v["verdict"] == NOTHING_COMPARABLE:
        return f"nothing comparable: {v['reason']}; no verdict (a new baseline: `chunkeval baseline`)"
    what = ", ".join(v["metrics"]) if len(v["metrics"]) <= 2 else f"{len(v['metrics'])} watched metrics"
    family = f"{v['procedure']} over {len(v['checks'])} check(s), {v['n_resamples']:,} sign flips"
    if v["verdict"] == NO_REGRESSION:
        seen = v["detectable"]
        why = (
            f"what {seen['n_queries']} question(s) detect with power 0.8"
            if seen["mde"] > v["threshold"]
            else "the threshold"
        )
        if seen.get("needed") and seen["mde"] > v["threshold"]:  # the gold set too small for the fall asked for
            why += f"; a fall of {seen['detect_fall']:g} needs {seen['needed']:,} question(s)"
        return (
            f"no regression of {what} larger than {seen['fall']:.2g} ({why}) in {against} (threshold "
            f"{v['threshold']:g}, alpha {v['alpha']:g}, {family}; {paired})"
        )
    sliced = sum(1 for f in v["regressions"] if f.get("slice"))
    where = f" ({sliced} of them in a slice of the gold set)" if sliced else ""
    fell = sorted({f["metric"] for f in v["regressions"]})
    return (
        f"REGRESSION: {', '.join(fell)} fell in {len(v['regressions'])} check(s){where}, {against} ({family}; {paired})"
    )
