"""Production against a grid on judged production queries (docs/traces.md, "Replay, judge and decide"): every
ranked list scored over the judged pool (`chunkeval.stats.judged`), each configuration compared with production
through the one verdict in both directions, and production's fall against its previous judged result."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from chunkeval.analysis.regression import verdict
from chunkeval.stats.judged import METRICS, PRODUCTION, gains, ideal, list_metrics, measurable
from chunkeval.vocabulary import CONFIG_KEYS, config_label

__all__ = ["METRICS", "PRODUCTION", "compare", "gains", "items", "measurable", "per_query", "production_fell",
           "summary"]  # fmt: skip


def per_query(lists: dict[tuple, dict[str, list[tuple]]], queries: list[str], gain: dict, k: int) -> pa.Table:
    """One row per (list's configuration, query): the configuration keys (`lists`' keys are tuples of
    (key, value) pairs; production's is `((PRODUCTION, True),)`), query_id, `label`, every metric of METRICS, and
    `judged` and `listed` of its top k. A query a configuration retrieved nothing for scores 0."""
    best = ideal(gain)
    rows = []
    for config, by_query in lists.items():
        keys = dict(config)
        label = PRODUCTION if PRODUCTION in keys else config_label(keys | {"k": k})
        for q in queries:
            m = list_metrics(by_query.get(q, []), q, gain, best, k)
            rows.append({key: keys.get(key) for key in CONFIG_KEYS if key in keys} | {"k": k, "query_id": q,
                        "label": label} | m)  # fmt: skip
    return pa.Table.from_pylist(rows)


def _as_config(table: pa.Table, keys: dict) -> pa.Table:
    """Production's rows under a configuration's keys (so the verdict pairs them with that configuration)."""
    n = table.num_rows
    cols = {k: pa.array([v] * n) for k, v in keys.items()}
    base = {name: table.column(name) for name in ("query_id", *METRICS)}
    return pa.table(cols | base)


def compare(configs: pa.Table, production: pa.Table, run_id: str, metrics=METRICS, threshold: float = 0.02,
            alpha: float = 0.05) -> dict:  # fmt: skip
    """Every configuration against production on the same judged queries, paired, through the one verdict
    (`chunkeval.analysis.regression.verdict`), both ways: `beaten` (production the newest, each configuration its
    baseline: a regression there is a configuration that beats production) and `behind` (each configuration the
    newest, production its baseline: a configuration that falls short of production)."""
    keys = [k for k in CONFIG_KEYS if k in configs.column_names]
    seen, mirrored = set(), []
    for row in configs.select(keys).to_pylist():
        key = tuple(row[k] for k in keys)
        if key not in seen:
            seen.add(key)
            mirrored.append(_as_config(production, row))
    prod = pa.concat_tables(mirrored) if mirrored else production
    cols = ["query_id", *keys, *metrics]
    mine = configs.select(cols)
    prod = prod.select(cols)
    return {
        "beaten": verdict(PRODUCTION, run_id, prod, mine, list(metrics), threshold, alpha),
        "behind": verdict(run_id, PRODUCTION, mine, prod, list(metrics), threshold, alpha),
    }


def production_fell(today: pa.Table, before: dict[str, dict[str, float]], result_id: str, metrics=METRICS,
                    threshold: float = 0.02, alpha: float = 0.05) -> dict:  # fmt: skip
    """Production's judged values now against its previous judged result (`before`: metric → query_id → value),
    queries paired by id (the same text asked again is the same query), through the one verdict. Too few queries
    asked in both is `nothing comparable`, said as such."""
    metrics = [m for m in metrics if m in before]
    rows = [
        {"query_id": q, "k": 0} | {m: before[m].get(q) for m in metrics} for q in sorted(set().union(*before.values()))
    ]
    past = pa.Table.from_pylist(rows) if rows else pa.table({"query_id": pa.array([], pa.string()), "k": []})
    past = pa.table({"query_id": past.column("query_id"), "k": past.column("k")} | {m: pa.array(
        [np.nan if v is None else v for v in past.column(m).to_pylist()], pa.float64()) for m in metrics})  # fmt: skip
    now = pa.table({"query_id": today.column("query_id"), "k": pa.array([0] * today.num_rows)}
                   | {m: today.column(m) for m in metrics})  # fmt: skip
    return verdict(PRODUCTION, result_id, now, past, metrics, threshold, alpha)


def summary(table: pa.Table, metrics=METRICS) -> list[dict]:
    """Per configuration (label): the mean of each metric and the share of its top k that was judged."""
    out: dict[str, dict] = {}
    for r in table.to_pylist():
        s = out.setdefault(
            r["label"], {"label": r["label"], "n": 0, "judged": 0, "listed": 0} | dict.fromkeys(metrics, 0.0)
        )
        s["n"] += 1
        s["judged"] += r["judged"]
        s["listed"] += r["listed"]
        for m in metrics:
            s[m] += r[m]
    for s in out.values():
        for m in metrics:
            s[m] /= max(s["n"], 1)
        s["judged_share"] = s["judged"] / s["listed"] if s["listed"] else None
    return list(out.values())


def items(rows: list[dict], keys: list[str]) -> dict[tuple, dict[str, list[tuple]]]:
    """Ranked lists by configuration (a tuple of (key, value) of `keys`) and query, from rows of query_id, rank,
    corpus_id, start, end (a run's retrieved table, or production's rows with no keys)."""
    out: dict[tuple, dict[str, list]] = {}
    for r in sorted(rows, key=lambda r: (r["query_id"], r["rank"])):
        config = tuple((k, r[k]) for k in keys) if keys else ((PRODUCTION, True),)
        out.setdefault(config, {}).setdefault(r["query_id"], []).append(
            (str(r["corpus_id"]), int(r["start"]), int(r["end"]))
        )
    return out
