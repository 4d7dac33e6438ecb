"""The rules over recorded runs: what the regression check watches and by how much a mean may fall, which
runs may be compared, and what their per-query rows say. The warehouse finds the runs and reads their rows
(`Warehouse.compare`, `Warehouse.regressions`); the decisions are here. Definitions: docs/statistics.md
and docs/warehouse.md ("Regressions")."""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa

from chunkeval.analysis import comparisons as C
from chunkeval.errors import InputError
from chunkeval.stats.aggregate import METRICS

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


def check_request(metric: str, alpha: float) -> None:
    """A comparison of `metric` at significance level `alpha` is one chunkeval makes."""
    C.check_alpha(alpha)
    if metric not in METRICS:
        raise InputError(f"unknown metric {metric!r}; choose one of {', '.join(METRICS)}")


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


def regressions_between(
    newest: str,
    reference: str,
    after,
    before,
    metrics: list[str],
    threshold: float,
    alpha: float,
    questions: dict[str, str],
    slices: dict[str, set[str]] | None = None,
) -> list[dict]:
    """The regressions of run `newest` (its per-query columns `after`) against run `reference` (`before`):
    the alert rule `chunkeval.analysis.comparisons.regressions`, each naming both runs; with `slices` (the
    newest run's: slice name → query ids), per slice too, in the same Holm family."""
    falls = C.regressions(after, before, metrics, threshold, alpha, questions, slices=slices)
    return [{**f, "run_id": newest, "reference_run_id": reference} for f in falls]
