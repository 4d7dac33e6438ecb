"""A raced run's score step (`race: true`, `chunkeval run --race`; docs/statistics.md, "Racing"): the corpus is
chunked and embedded once, as for any run; then the questions are taken in a seeded uniformly random order, in
batches of `race_batch`, and each batch is retrieved, reranked and scored only for the configurations that still
hold an arm of the race (an arm is a configuration at one k). After each batch the race (`chunkeval.stats.racing.
Racer`, on `race_metric`) drops every arm it shows worse than the leader by more than `race_delta`, at an error of
at most `race_alpha` over every arm and look; it stops when one arm is left, when the leader is certified within
δ of every arm left, when the next batch would pass `budget` cells, or when every question is in. The run keeps
the per-query rows of the cells it evaluated and the race's summary (`summary`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pyarrow as pa

from chunkeval.engine.inputs.document_gold import DocGold
from chunkeval.engine.pipeline.records import Embedded, Inputs
from chunkeval.errors import InputError
from chunkeval.stats.racing import Racer
from chunkeval.vocabulary import CONFIG_KEYS, config_id, config_label


def subset(inputs: Inputs, embedded: Embedded, rows: np.ndarray) -> tuple[Inputs, Embedded]:
    """The run's inputs and question vectors restricted to the questions `rows` (ascending), as if the gold set
    held them alone: a batch of the race is retrieved and scored as any run is."""
    gold = inputs.gold
    ids = [gold.query_ids[i] for i in rows.tolist()]
    common = dict(
        query_ids=ids,
        questions=[gold.questions[i] for i in rows.tolist()],
        corpus_ids=[gold.corpus_ids[i] for i in rows.tolist()],
        anchoring=(),
    )
    if isinstance(gold, DocGold):
        part = replace(gold, qrels={q: gold.qrels[q] for q in ids if q in gold.qrels}, left_out=(), **common)
    else:
        at = np.full(gold.n_queries, -1, np.int64)
        at[rows] = np.arange(len(rows))
        keep = at[gold.ref_query] >= 0
        corpora = tuple(gold.corpora[i] for i in rows.tolist()) if gold.corpora else ()
        part = replace(gold, ref_query=at[gold.ref_query[keep]], ref_start=gold.ref_start[keep],
                       ref_end=gold.ref_end[keep], corpora=corpora, **common)  # fmt: skip
    queries = {model: vectors[rows] for model, vectors in embedded.queries.items()}
    return replace(inputs, gold=part), replace(embedded, queries=queries)


def race_all(inputs: Inputs, chunkings, configs, embedded: Embedded, exp, score: Callable, first_stage: Callable,
             kept: list | None = None, clock=None) -> tuple[pa.Table, dict, dict]:  # fmt: skip
    """The raced score step: (the per-query rows of the evaluated cells, what each first-stage configuration's index
    cost, the race's summary). `score` scores one configuration on a batch's inputs (`sweep.score_config`)."""
    n = inputs.gold.n_queries
    order = np.random.default_rng(exp.race_seed).permutation(n)
    scorers: dict = {}
    stats: dict = {}
    tables: list[pa.Table] = []
    racer: Racer | None = None
    arms: list[tuple[int, int]] = []  # (configuration, k), in the order of the configurations, then of k
    keys: dict[tuple[int, int], dict] = {}
    spent, looks, stopped, t = 0, 0, "all questions", 0
    while t < n:
        batch = order[t : t + exp.race_batch]
        live = range(len(configs)) if racer is None else sorted({arms[a][0] for a in racer.configs()})
        step = len(batch) * (len(configs) * len(set(exp.k)) if racer is None else len(racer.configs()))
        if exp.budget and spent + step > exp.budget:
            if racer is None:  # nothing would be evaluated: no run to record
                raise InputError(f"budget {exp.budget:,} cells is less than the race's first batch: {len(batch)} "
                                 f"question(s) × {step // len(batch)} configurations (each at each k)")  # fmt: skip
            stopped = "budget"
            break
        rows = np.sort(batch)
        part, vectors = subset(inputs, embedded, rows)
        got: dict[int, pa.Table] = {}
        for i in live:
            table, cost = score(part, chunkings, configs[i], vectors, exp, scorers, {}, kept, clock)
            got[i] = table
            stats.setdefault(first_stage(configs[i]), cost)
        if racer is None:
            for i in live:
                for k in sorted(set(got[i].column("k").to_pylist())):
                    arms.append((i, k))
            racer = Racer(len(arms), n, exp.race_alpha, exp.race_delta)
        on = {arms[a] for a in racer.configs()}
        where = {q: j for j, q in enumerate(part.gold.query_ids)}
        values = np.zeros((len(rows), len(arms)))
        index = {arm: a for a, arm in enumerate(arms)}
        for i, table in got.items():
            ks = np.asarray(table.column("k").to_pylist())
            wanted = np.array([(i, int(k)) in on for k in ks], dtype=bool)
            table = table.filter(pa.array(wanted))
            tables.append(table)
            metric = np.nan_to_num(np.asarray(table.column(exp.race_metric).to_numpy(zero_copy_only=False), float))
            for q, k, v, row in zip(table.column("query_id").to_pylist(), table.column("k").to_pylist(), metric,
                                    range(table.num_rows)):  # fmt: skip
                arm = (i, int(k))
                values[where[q], index[arm]] = v
                if arm not in keys:
                    keys[arm] = {
                        key: table.column(key)[row].as_py() for key in CONFIG_KEYS if key in table.schema.names
                    }
        position = {int(r): j for j, r in enumerate(rows.tolist())}
        for r in batch.tolist():  # in the race's order
            racer.add(values[position[r]])
        spent += step
        t += len(batch)
        looks += 1
        racer.look()
        if len(racer.configs()) == 1:
            stopped = "one left"
            break
        if t < n and racer.certified():
            stopped = "certified"
            break
    per_query = pa.concat_tables(tables) if tables else pa.table({})
    return per_query, stats, summary(racer, arms, keys, exp, stopped, looks, n)


def summary(racer: Racer, arms, keys, exp, stopped: str, looks: int, n: int) -> dict:
    """What the race decided, as the run records it (JSON): each arm by its configuration's label and id."""

    def named(a: int) -> dict:
        key = keys[arms[a]]
        return {"label": config_label(key), "config_id": config_id(key)}

    said = {"metric": exp.race_metric, "alpha": exp.race_alpha, "delta": exp.race_delta, "batch": exp.race_batch,
            "seed": exp.race_seed, "budget": exp.budget or None, "stopped": stopped, "looks": looks,
            "questions_total": n}  # fmt: skip
    res = racer.result(stopped, looks)
    means = racer.means()
    return {
        **said,
        "questions": res.questions,
        "cells": res.cells,
        "total_cells": res.total_cells,
        "share": res.share,
        "winner": None if res.winner is None else named(res.winner),
        "tied": [{**named(a), "mean": float(means[a])} for a in res.tied],
        "leader": named(res.leader),
        "bound": res.bound,
        "dropped": [
            {**named(d["config"]), "after": d["after"], "p": d["p"], "mean": float(means[d["config"]])}
            for d in res.dropped
        ],  # fmt: skip
    }


def race_lines(race: dict | None, width: int = 120, shown: int = 10) -> list[str]:
    """The race's summary for a terminal (the first `shown` drops), each line within `width` columns."""
    if not race:
        return []
    share = f"{race['cells']:,} of {race['total_cells']:,} cells ({race['share']:.1%})"
    if race["bound"] is None:
        bound = "not shown within delta of the best (the race stopped undecided)"
    elif race["bound"] == 0 and race["questions"] == race["questions_total"]:
        bound = "the best (every question is in: the means are exact)"
    elif race["bound"] == 0:
        bound = f"the best, with probability at least {1 - race['alpha']:g}"
    else:
        bound = f"within {race['bound']} of the best, with probability at least {1 - race['alpha']:g}"
    if race["winner"]:
        who = f"winner {race['winner']['label']} [{race['winner']['config_id']}]"
    else:
        who = f"{len(race['tied'])} tied, leader {race['leader']['label']} [{race['leader']['config_id']}]"
    lines = [
        f"race on {race['metric']} (alpha {race['alpha']}, delta {race['delta']}): {share} evaluated, "
        f"{race['questions']} of {race['questions_total']} questions",
        f"  stopped ({race['stopped']}): {who}",
        f"  the leader is {bound}",
    ]
    if race["dropped"]:
        lines.append(
            "  a dropped configuration's rows cover the questions before its drop: its n_queries says how many"
        )
    for d in race["dropped"][:shown]:
        lines.append(f"  dropped {d['label']} [{d['config_id']}] after {d['after']} questions (mean {d['mean']:.3f})")
    if len(race["dropped"]) > shown:
        lines.append(f"  … and {len(race['dropped']) - shown} more dropped (the run's race.json lists them)")
    return [line if len(line) <= width else line[: width - 1] + "…" for line in lines]
