"""Paired comparisons of configurations: which differences are real. Definitions: docs/statistics.md.

A comparison pairs two per-query tables by `query_id` (queries present on one side only stay out and
are counted), and reports both means, the paired mean difference (a − b) with its 95 % bootstrap
interval, the two-sided paired t-test and the two-sided paired randomisation test (sign flips). The
Holm–Bonferroni adjustment runs over every comparison of one call. The regression check's paired checks of two
runs (`paired_checks`) are adjusted together by the step-down max-T instead (`chunkeval.stats.maxt`).
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from chunkeval import stats
from chunkeval.analysis.pairing import configurations, grid_means, query_grid
from chunkeval.errors import InputError, NothingComparable
from chunkeval.limits import short
from chunkeval.stats.columns import numbers
from chunkeval.stats.maxt import PROCEDURE
from chunkeval.stats.power import ceiling_share, detectable, t_quantile
from chunkeval.vocabulary import CONFIG_KEYS as KEYS
from chunkeval.vocabulary import DEFAULT_LABEL, MIN_SLICE_QUERIES, config_id, config_label, no_match


class TooFewQuestions(InputError):
    """A paired comparison of fewer than 2 questions: no test can be made. Bad input where a person asked for the
    comparison (`chunkeval compare`, exit 2); where a command makes it on its own after a run is recorded (the ties
    of its summary and report), what the questions cannot tell is said after the table (`ties`' `untested`)."""

    def __init__(self, n: int):
        self.n = n
        super().__init__(f"only {n} query in common: a paired comparison needs at least 2")


class Ties(dict):
    """Per metric, the configurations tied with the best (`ties`); `untested`: metric → the questions paired,
    for each metric whose ties no test could make (fewer than 2 questions), starred nowhere."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.untested: dict[str, int] = {}


def select(per_query: pa.Table, config: dict) -> pa.Table:
    """The rows of a per-query table whose settings equal `config` (all rows for an empty one)."""
    mask = None
    for key, value in config.items():
        column = per_query[key]
        # a null setting (candidates without a reranker) matches null
        eq = pc.is_null(column) if value is None else pc.equal(column, pa.scalar(value, column.type))
        mask = eq if mask is None else pc.and_(mask, eq)
    return per_query.filter(mask) if mask is not None else per_query


def matching(per_query: pa.Table, config: dict, what: str) -> pa.Table:
    """`select`, with an error naming `what` when a filter given matches nothing."""
    rows = select(per_query, config)
    if config and rows.num_rows == 0:
        raise InputError(no_match(config, configurations(per_query), what))
    return rows


def values_of(per_query: pa.Table, config: dict, metric: str) -> dict[str, float]:
    """query_id → value of `metric` for one configuration."""
    rows = select(per_query, config)
    return dict(zip(rows["query_id"].to_pylist(), rows[metric].to_pylist()))


def pair(a: dict[str, float], b: dict[str, float]) -> tuple[np.ndarray, np.ndarray, int]:
    """The values of the queries both sides have (in query order), and how many queries one side lacks."""
    common = sorted(set(a) & set(b))
    if not common:
        raise NothingComparable("the two sides have no query in common: nothing to pair")
    unmatched = len(set(a) ^ set(b))
    return (
        np.asarray([a[q] for q in common], dtype=np.float64),
        np.asarray([b[q] for q in common], dtype=np.float64),
        unmatched,
    )


MEASURED = ("mean_a", "mean_b", "mean_diff", "ci_low", "ci_high", "p_ttest", "p_permutation")
RESULT_FIELDS = (*MEASURED, "p_adjusted", "significant")  # the numbers of a comparison, in this order


def compare(
    a: dict[str, float],
    b: dict[str, float],
    side_a: dict,
    side_b: dict,
    metric: str,
    seed: int = 0,
    alpha: float = 0.05,
    power: bool = True,
) -> dict:
    """One paired comparison (p_adjusted is filled by `adjust`), with what the queries can tell (unless not
    `power`: None): `mde`, the smallest difference a paired t-test at `alpha` detects with power 0.8 given the
    spread of these differences, and `n_needed`, the queries 0.02, 0.05 and 0.10 would need (`chunkeval.stats.power`);
    `ceiling`, the share of both sides' values at the metric's ceiling (`chunkeval.stats.power.ceiling_share`)."""
    x, y, unmatched = pair(a, b)
    if len(x) < 2:
        raise TooFewQuestions(len(x))
    return _compared(x, y, unmatched, stats.compare_paired(x, y, seed=seed), side_a, side_b, metric, alpha, power)


def _compared(x, y, unmatched: int, result: dict, side_a, side_b, metric: str, alpha: float, power: bool) -> dict:
    """`compare`'s answer from the paired test's `result` of the values x and y."""
    smallest, needed = detectable(x - y, alpha) if power else (None, None)
    return {
        "a": side_a,
        "b": side_b,
        "metric": metric,
        "n_queries": int(result["n_queries"]),
        "n_unmatched": unmatched,
        **{k: float(result[k]) for k in MEASURED},
        "p_adjusted": float("nan"),
        "mde": smallest,
        "n_needed": needed,
        "ceiling": ceiling_share(np.concatenate([x, y])),  # over a half at or near 1: power figures mislead
    }


def adjust(comparisons: list[dict], alpha: float = 0.05) -> list[dict]:
    """Holm–Bonferroni over the randomisation-test p-values of every comparison; `significant` at alpha. Each side
    that is a configuration gets its label and config_id beside it (`label_a`, `config_id_a`, …; the sides stay
    filters of configuration keys)."""
    adjusted = stats.holm([c["p_permutation"] for c in comparisons]) if comparisons else []
    for c, p in zip(comparisons, adjusted):
        c["p_adjusted"] = float(p)
        c["significant"] = bool(p < alpha)
        for side in ("a", "b"):
            if isinstance(c.get(side), dict) and any(k in c[side] for k in KEYS):
                c[f"label_{side}"], c[f"config_id_{side}"] = config_label(c[side]), config_id(c[side])
    return comparisons


def check_alpha(alpha: float, what: str = "--alpha") -> float:
    """A significance level, strictly between 0 and 1 (`what` names it as the caller's user wrote it: the CLI's
    --alpha, the Python API's alpha)."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not (math.isfinite(alpha) and 0 < alpha < 1):
        raise InputError(f"{what} must be strictly between 0 and 1, got {short(alpha)}")
    return alpha


def check_threshold(threshold: float, what: str = "--threshold") -> float:
    """The smallest fall of a metric that counts as a regression: 0 or more (`what` names it as the
    caller's user wrote it: --threshold, threshold)."""
    if not math.isfinite(threshold) or threshold < 0:
        raise InputError(f"{what} must be 0 or more and finite, got {threshold}")
    return threshold


def within_run(
    per_query: pa.Table, metric: str, run_id: str, all_pairs: bool = False, alpha: float = 0.05, power: bool = True
) -> list[dict]:
    """Each configuration of one run against the best one by the metric's mean (or every pair); `power`: with
    each comparison's `mde` and `n_needed` (`compare`)."""
    configs = configurations(per_query)
    if len(configs) < 2:
        raise InputError(f"run {run_id} has {len(configs)} configuration(s) here: a comparison needs two")
    values = [values_of(per_query, c, metric) for c in configs]
    means = [np.nanmean(list(v.values())) for v in values]
    side = lambda i: {**configs[i], "run_id": run_id}  # noqa: E731
    if all_pairs:
        pairs = [(i, j) for i in range(len(configs)) for j in range(i + 1, len(configs))]
    else:
        best = int(np.argmax(means))
        pairs = [(best, j) for j in range(len(configs)) if j != best]
    paired = [pair(values[i], values[j]) for i, j in pairs]
    few = next((len(x) for x, _, _ in paired if len(x) < 2), None)
    if few is not None:
        raise TooFewQuestions(few)
    found = [None] * len(pairs)
    width = len(paired[0][0])  # pairs of as many questions, none NaN: one batch (each meets what it would alone)
    same = [n for n, (x, y, _) in enumerate(paired) if len(x) == width and not np.isnan(x - y).any()]
    if same:
        results = stats.compare_paired_rows([paired[n][0] for n in same], [paired[n][1] for n in same])
        for n, result in zip(same, results):
            (i, j), (x, y, unmatched) = pairs[n], paired[n]
            found[n] = _compared(x, y, unmatched, result, side(i), side(j), metric, alpha, power)
    for n, ((i, j), (x, y, unmatched)) in enumerate(zip(pairs, paired)):
        if found[n] is None:  # values missing on one side (NaN): compared alone, without them
            found[n] = _compared(x, y, unmatched, stats.compare_paired(x, y), side(i), side(j), metric, alpha, power)
    # within a run, the ceiling is the metric's over every configuration compared, as the run's summary and the
    # report say it (one share, one test: `stats.power.at_ceiling`), not each pair's own
    share = ceiling_share(np.array([x for v in values for x in v.values()], dtype=np.float64))
    for f in found:
        f["ceiling"] = share
    return adjust(found, alpha)


def across_runs(pq_a: pa.Table, pq_b: pa.Table, metric: str, run_a: str, run_b: str, alpha: float = 0.05) -> list[dict]:
    """The configurations two runs share, each run against the other, queries matched by query_id."""
    configs_b = {tuple(sorted(c.items())) for c in configurations(pq_b)}
    shared = [c for c in configurations(pq_a) if tuple(sorted(c.items())) in configs_b]
    if not shared:
        raise NothingComparable(f"runs {run_a} and {run_b} share no configuration")
    return adjust(
        [
            compare(
                values_of(pq_a, c, metric),
                values_of(pq_b, c, metric),
                {**c, "run_id": run_a},
                {**c, "run_id": run_b},
                metric,
                alpha=alpha,
            )
            for c in shared
        ],
        alpha,
    )


def tied_with_best(per_query: pa.Table, metric: str, alpha: float = 0.05) -> list[dict]:
    """The configurations not significantly worse than the best by `metric` (Holm over that metric's
    comparisons), the best included."""
    configs = configurations(per_query)
    if len(configs) < 2:
        return configs
    decided = decision(per_query, metric, alpha)  # every configuration answered the same queries: one batch
    if decided is not None:
        return decided["tied_configs"]
    comparisons = within_run(per_query, metric, "", alpha=alpha, power=False)
    best = {k: v for k, v in comparisons[0]["a"].items() if k != "run_id"}
    return [best] + [{k: v for k, v in c["b"].items() if k != "run_id"} for c in comparisons if not c["significant"]]


def decision(per_query: pa.Table, metric: str, alpha: float = 0.05) -> dict | None:
    """What a person decides from one run on `metric`: the best configuration, and what it beats by how much, the
    runner-up (the next mean) and the default configuration (every key at its default, where the grid has it),
    each with the mean paired difference best − other, its 95 % paired t interval (cut to [−1, 1], the differences a
    metric in [0, 1] can have) and its adjusted p: the same paired randomisation tests, Holm over every other
    configuration, that star the ties (`tied_with_best`), so the two never disagree; and `tied`, the number of
    others not significantly worse. None where the configurations did not all answer the same questions."""
    configs = configurations(per_query)
    grid = query_grid(per_query) if len(configs) > 1 and metric in per_query.column_names else None
    if grid is None:
        return None
    column = numbers(per_query[metric]).astype(np.float64)
    matrix = column[grid]
    if np.isnan(matrix).any():
        return None
    means = grid_means(column, grid)
    best = int(np.argmax(means))
    others = [j for j in range(len(configs)) if j != best]
    diffs = matrix[:, [best]] - matrix[:, others]
    adjusted = stats.holm(stats.paired_permutation_columns(diffs))
    n = diffs.shape[0]

    def against(j: int | None) -> dict | None:
        if j is None or j == best:
            return None
        i = others.index(j)
        change = float(diffs[:, i].mean())
        half = t_quantile(0.975, n - 1) * float(diffs[:, i].std(ddof=1)) / math.sqrt(n)
        return {"config": configs[j], "mean": float(means[j]), "difference": change, "ci_low": max(change - half, -1.0),
                "ci_high": min(change + half, 1.0), "p_adjusted": float(adjusted[i]),
                "significant": bool(adjusted[i] < alpha)}  # fmt: skip

    default = next((j for j, c in enumerate(configs) if config_label(c) == DEFAULT_LABEL), None)
    runner_up = max(others, key=lambda j: (means[j], -j))
    return {
        "metric": metric,
        "best": configs[best],
        "mean": float(means[best]),
        "n_queries": n,
        "n_configs": len(configs),
        "runner_up": against(runner_up),
        "default": against(default),
        "tied": int(sum(1 for p in adjusted if not p < alpha)),
        "tied_configs": [configs[best]] + [configs[j] for j, p in zip(others, adjusted) if not p < alpha],
        "alpha": alpha,
    }


def ties(per_query: pa.Table, metrics, alpha: float = 0.05, known: dict | None = None) -> Ties:
    """Per metric, the configurations (as tuples of KEYS values) tied with the best one; `known`: a metric's
    `decision`, whose tests are these (its `tied_configs`), so that they are not made twice. A metric whose
    questions are too few to test (a gold set of one question) ties nothing and is named in `untested`: the
    summary says so after its table, and the run stays recorded and reported (issue 55)."""
    import pyarrow.compute as pc

    present = [k for k in KEYS if k in per_query.column_names]
    out = Ties()
    for m in metrics:
        if m not in per_query.column_names:
            continue
        decided = (known or {}).get(m)
        if decided is not None and decided["alpha"] == alpha and not per_query[m].null_count:
            out[m] = {tuple(c[k] for k in present) for c in decided["tied_configs"]}
            continue
        rows = per_query
        if per_query[m].null_count:  # only the configurations that measured it (searched an index; its gold kind)
            rows = per_query.filter(pc.is_valid(per_query[m]))
        try:
            out[m] = {tuple(c[k] for k in present) for c in tied_with_best(rows, m, alpha)} if rows.num_rows else set()
        except TooFewQuestions as few:
            out[m], out.untested[m] = set(), few.n
    return out


def untested_line(untested: dict[str, int]) -> str | None:
    """The notice of the metrics whose ties no test could make (`Ties.untested`), said after the summary table;
    None where every metric was tested."""
    if not untested:
        return None
    names = list(untested)
    which = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    n = min(untested.values())
    return f"{which}: no tie with the best was tested: {n} question(s) paired, and a paired comparison needs at least 2"


TIE_NOTE = (
    "* tied with the best of its metric: not significantly worse (paired randomisation test, "
    "Holm over that metric's comparisons, alpha = {alpha})"
)


def rows_by_config(table, keys: list[str]) -> dict[tuple, dict[str, int]]:
    """configuration values → {query_id: row}, in one pass over the table (Arrow, or columns of numpy)."""
    out: dict[tuple, dict[str, int]] = {}
    for i, (key, qid) in enumerate(
        zip(zip(*(_column(table, k).tolist() for k in keys)), _column(table, "query_id").tolist())
    ):
        out.setdefault(key, {})[qid] = i
    return out


def _column(table, name: str) -> np.ndarray:
    """A column of an Arrow table or of a mapping of numpy columns (`Warehouse.run_columns`), as numpy. A
    null in a column that is not floating reads as None (as `run_columns` reads it): numpy would make it NaN,
    and NaN equals nothing, so each row of a configuration with a null key (`candidates` of a row that was
    not reranked) would become a configuration of its own. Read without pyarrow's numpy conversion, which
    imports pandas (`chunkeval.stats.columns`)."""
    if isinstance(table, pa.Table):
        column = table[name]
        if column.null_count and not pa.types.is_floating(column.type):
            return np.asarray(column.to_pylist(), dtype=object)
        return numbers(column)
    return table[name]


def _names(table) -> list[str]:
    return table.column_names if isinstance(table, pa.Table) else list(table)


def paired_checks(
    after,
    before,
    metrics,
    questions: dict[str, str] | None = None,
    worst: int = 5,
    slices: dict[str, set[str]] | None = None,
    config: dict | None = None,
    whole: bool = True,
    n_resamples: int = 10_000,
    seed: int = 0,
) -> tuple[list[dict], dict, dict]:
    """Every paired check of two runs' per-query tables (after = the newer, before = its baseline), adjusted together
    by the step-down max-T over paired sign flips (`chunkeval.stats.maxt`): what
    `chunkeval.analysis.regression.verdict` decides on (the decision is there, not here).

    One check per configuration both tables have (with the settings of `config`) × metric measured on both sides,
    queries matched by query_id and, per check, only those where the metric has a value on both sides (a NULL one
    leaves that check alone): the means, the signed change (after − before), the spread of the changes (`sd`), the
    paired t-test and the adjusted p over every check returned, whose sign flips flip each question in every check
    at once. With `slices` (slice name → its query ids), each slice of at least MIN_SLICE_QUERIES paired queries is
    checked too, in the same family (a check's `slice` names it; None for the whole gold set, left out when not
    `whole`). Each check lists the `worst` queries that lost the most, with their question text where `questions`
    has it. The tables are per-query tables, as Arrow or as mappings of numpy columns.
    Also what was paired: `configurations` (shared), `newest_only` and `reference_only` (configurations one side
    lacks) and `paired_questions` (the most questions one configuration paired); and the correction: its
    `procedure`, `n_resamples` (2^N where all N questions' sign flips were enumerated: `exact`) and `seed`."""
    present = [k for k in KEYS if k in _names(after) and k in _names(before)]
    wanted = lambda key: all(dict(zip(present, key)).get(k, v) == v for k, v in (config or {}).items())  # noqa: E731
    rows_a = {k: v for k, v in rows_by_config(after, present).items() if wanted(k)}
    rows_b = {k: v for k, v in rows_by_config(before, present).items() if wanted(k)}
    values_a = {m: _column(after, m).astype(np.float64) for m in metrics}
    values_b = {m: _column(before, m).astype(np.float64) for m in metrics}
    found, changes, paired = [], [], 0  # changes: each check's (query ids, after − before), for the family's matrix
    for key, mine in rows_a.items():  # one pass over each table, not a filter per configuration
        theirs = rows_b.get(key)
        if theirs is None:
            continue
        config_values = dict(zip(present, key))
        common = sorted(set(mine) & set(theirs))
        paired = max(paired, len(common))
        if len(common) < 2:
            continue
        unmatched = len(set(mine) ^ set(theirs))
        groups = ([(None, common)] if whole else []) + [
            (name, [q for q in common if q in members]) for name, members in sorted((slices or {}).items())
        ]
        for name, queries in groups:
            if name is not None and len(queries) < MIN_SLICE_QUERIES:
                continue  # too small to test
            at_a = np.fromiter((mine[q] for q in queries), dtype=np.int64, count=len(queries))
            at_b = np.fromiter((theirs[q] for q in queries), dtype=np.int64, count=len(queries))
            for metric in metrics:
                x, y = values_a[metric][at_a], values_b[metric][at_b]
                kept = ~(np.isnan(x) | np.isnan(y))
                if np.count_nonzero(kept) < 2:
                    continue  # a metric a run did not measure: no index searched (bm25), span metrics under document
                    # gold and document metrics under span gold, or an older run that predates the metric
                ids = [q for q, k in zip(queries, kept) if k]
                fall = _fall(x[kept], y[kept], ids, worst, questions)
                found.append({**config_values, "metric": metric, "slice": name, **fall, "n_unmatched": unmatched})
                changes.append((ids, x[kept] - y[kept]))
    family = stats.maxt_adjusted(_family_matrix(changes), n_resamples, seed)
    for f, p in zip(found, family.adjusted):
        f["p_adjusted"] = float(p)
    pairing = {
        "configurations": len(rows_a.keys() & rows_b.keys()),
        "newest_only": len(rows_a.keys() - rows_b.keys()),
        "reference_only": len(rows_b.keys() - rows_a.keys()),
        "paired_questions": paired,
    }
    correction = {"procedure": PROCEDURE, "n_resamples": family.n_resamples, "exact": family.exact, "seed": seed}
    return found, pairing, correction


def _family_matrix(changes: list[tuple[list[str], np.ndarray]]) -> np.ndarray:
    """The changes of every check as one matrix (every question any check paired, in sorted order × the checks),
    NaN where a check did not pair the question: the rows a sign flip turns over in every check at once."""
    index = {q: i for i, q in enumerate(sorted({q for ids, _ in changes for q in ids}))}
    matrix = np.full((len(index), len(changes)), np.nan)
    for j, (ids, diff) in enumerate(changes):
        matrix[np.fromiter((index[q] for q in ids), dtype=np.int64, count=len(ids)), j] = diff
    return matrix


def _fall(x: np.ndarray, y: np.ndarray, queries: list[str], worst: int, questions: dict[str, str] | None) -> dict:
    """What one paired check of a regression says: the means, the change with its 95 % interval (the paired t
    interval, mean ± t₀.₉₇₅,ₙ₋₁ · s/√n: the t-test's own, cut to the changes the metric can make: every metric
    lies in [0, 1], so from the reference's mean `before` the change lies in [−before, 1 − before]; docs/statistics.md),
    the t-test, the queries that lost most."""
    diff = x - y
    order = np.argsort(diff, kind="stable")[:worst]
    change = float(np.mean(diff))
    before = float(np.mean(y))
    half = t_quantile(0.975, len(diff) - 1) * float(np.std(diff, ddof=1)) / math.sqrt(len(diff))
    return {
        "before": before,
        "after": float(np.mean(x)),
        "change": change,
        "ci_low": max(change - half, -before),
        "ci_high": min(change + half, 1.0 - before),
        "sd": float(np.std(diff, ddof=1)),
        "n_queries": len(queries),
        "p_ttest": stats.paired_ttest(x, y),
        "worst": [
            {
                "query_id": queries[i],
                "question": (questions or {}).get(queries[i], ""),
                "before": float(y[i]),
                "after": float(x[i]),
            }
            for i in order
            if diff[i] < 0
        ],
    }
