"""What a run's gold set can tell about its grid: for each metric and configuration, the smallest paired
difference from the best configuration that the questions detect (`chunkeval.stats.power`: a two-sided paired
t-test at alpha, power 0.8, from the spread of the per-query differences against the best configuration).
What the report's grid shows; `chunkeval compare` gives the same for each of its comparisons.
Definitions: docs/statistics.md ("How much a gold set can tell")."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from chunkeval.analysis.pairing import configurations, grid_means, query_grid
from chunkeval.stats.columns import numbers
from chunkeval.stats.power import ALPHA, ceiling_share, detectable, mde, n_needed
from chunkeval.vocabulary import CONFIG_KEYS


@dataclass(frozen=True)
class Detectable:
    """One metric of a run: each configuration's MDE against the best (by its configuration-key tuple), and
    the median configuration's: its queries, MDE and queries needed for 0.02, 0.05 and 0.10; the share of
    its values (every configuration's) at its ceiling (`chunkeval.stats.power.ceiling_share`); the largest
    observed difference of means (best − worst) and the queries it needs at the spread of those two's
    paired differences."""

    by_config: dict[tuple, float]
    n: int
    mde: float
    n_needed: dict[str, int | None]
    ceiling: float = float("nan")
    largest: float = float("nan")
    largest_needed: int | None = None


def against_best(per_query: pa.Table, metrics, alpha: float = ALPHA) -> dict[str, Detectable]:
    """Per metric measured by at least two configurations: every other configuration's differences from the
    best one (the highest mean; queries paired by query_id), their MDE, and the median one's queries needed."""
    present = [k for k in CONFIG_KEYS if k in per_query.column_names]
    out = {}
    for metric in metrics:
        if metric not in per_query.column_names:
            continue
        rows = per_query.filter(pc.is_valid(per_query[metric])) if per_query[metric].null_count else per_query
        found = _differences(rows, metric, present)
        if found is None:
            continue
        means, best, diffs = found
        smallest = {key: mde(float(d.std(ddof=1)), len(d), alpha) for key, d in diffs.items()}
        median = sorted(diffs, key=lambda key: smallest[key])[(len(diffs) - 1) // 2]
        value, needed = detectable(diffs[median], alpha)
        worst = min(diffs, key=means.get)
        largest = float(means[best] - means[worst])
        sd = float(diffs[worst].std(ddof=1))
        largest_needed = n_needed(sd, largest, alpha) if largest > 0 and sd > 0 else None
        share = ceiling_share(numbers(rows[metric]).astype(np.float64))
        out[metric] = Detectable(smallest, len(diffs[median]), value, needed, share, largest, largest_needed)
    return out


def _differences(rows: pa.Table, metric: str, present: list[str]):
    """(each configuration's mean, the best one, best − other per query for every other configuration that
    shares at least 2 queries with it): by the question × configuration grid where every configuration answered
    every question (`pairing.query_grid`), else query by query. None for fewer than 2 configurations or no
    difference. Means are summed in table order, the first of equal means is the best."""
    grid = query_grid(rows)
    if grid is not None:
        column = numbers(rows[metric]).astype(np.float64)
        keys = [tuple(c[k] for k in present) for c in configurations(rows)]
        means = dict(zip(keys, grid_means(column, grid)))
        b = keys.index(max(keys, key=means.get))
        diffs = {key: column[grid[:, b]] - column[grid[:, j]] for j, key in enumerate(keys) if j != b}
        return (means, keys[b], diffs) if diffs else None
    values: dict[tuple, dict[str, float]] = {}  # configuration → query_id → value (keys as lists: None stays None)
    keys = zip(*(rows[k].to_pylist() for k in present))
    for key, query, value in zip(keys, rows["query_id"].to_pylist(), rows[metric].to_pylist()):
        values.setdefault(key, {})[query] = value
    if len(values) < 2:
        return None
    means = {key: np.mean(list(values[key].values())) for key in values}
    best = max(values, key=means.get)
    diffs = {}
    for key, mine in values.items():
        common = sorted(set(mine) & set(values[best]))
        if key != best and len(common) >= 2:
            diffs[key] = np.asarray([values[best][q] - mine[q] for q in common])
    return (means, best, diffs) if diffs else None
