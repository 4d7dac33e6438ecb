"""The `production` deployment (docs/traces.md, "The production deployment"; deployments/prefect.yaml): every day,
import the traces a folder gathered, sample the last day's production queries, replay them through the
experiment's grid, judge production's and the grid's passages within a budget (raced: what is decided is judged
no further), record the result beside the runs (production_results) and raise the alarms of docs/loop.md:
`production_beaten` when an offline configuration beats production, `production_fell` when production's judged
quality fell against its previous judged result (on the queries asked both times), through the one verdict.

`watch_production` is the work, a plain function (what the tests call); `production` the flow around it.
"""

from __future__ import annotations

import json
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
from prefect import flow

from chunkeval import paths
from chunkeval.analysis import production as P
from chunkeval.analysis.regression import DEFAULT_THRESHOLD, REGRESSION, verdict_line
from chunkeval.cli.commands.traces import draw_sample, import_files, trace_files
from chunkeval.engine.gold import judge as gj
from chunkeval.engine.gold.chat import Chat
from chunkeval.engine.gold.production import judge_race
from chunkeval.engine.inputs.trace_sample import read_production
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.engine.pipeline.prepare import prepare
from chunkeval.engine.pipeline.sweep import run_steps
from chunkeval.flows.alerts import emit
from chunkeval.publish import alerts as A
from chunkeval.stats.racing import DELTA, Racer
from chunkeval.vocabulary import CONFIG_KEYS
from chunkeval.warehouse import Warehouse

SIZE = 100  # production queries judged a day, at most
BUDGET = 2000  # judge requests a day, at most


def previous(wh: Warehouse, experiment: str) -> tuple[str, dict] | None:
    """The last recorded judged result of production: its id and per-query values (metric → query → value)."""
    rows = wh.production_results(experiment, source="production")
    if not rows:
        return None
    last = rows[-1]
    return last["result_id"], json.loads(last["details"] or "{}").get("per_query") or {}


def replay(exp: Experiment, questions: Path):
    """The experiment's grid over the sampled questions: what every configuration retrieved, and the texts."""
    replayed = Experiment.from_dict({**exp.to_dict(), "questions": str(questions), "alerts": []})
    return run_steps(prepare(replayed))


def watch_production(
    experiment: str,
    traces: str,
    endpoint: str,
    chat_model: str,
    days: float = 1.0,
    size: int = SIZE,
    budget: float | None = BUDGET,
    budget_unit: str = "requests",
    k: int = 10,
    metric: str = "ndcg_at_k",
    seed: int | None = None,
    alpha: float = 0.05,
    delta: float = DELTA,
    threshold: float = DEFAULT_THRESHOLD,
    now: datetime | None = None,
) -> dict:
    """One day of production: imported, sampled, replayed, judged, compared, recorded. What happened, with the
    payloads of the alarms to raise (`alarms`)."""
    exp = Experiment.resolve(experiment)
    wh = Warehouse.at_home()
    imported = import_files(trace_files([traces]), "auto", False, exp.corpus_dir, None, lambda: wh)["row"]
    now = now or datetime.now(UTC).replace(tzinfo=None)
    since = now - timedelta(days=days)
    seed = int(now.strftime("%Y%m%d")) if seed is None else seed  # a new sample each day, the same on a rerun
    with tempfile.TemporaryDirectory(prefix="chunkeval-production-") as scratch:
        out = Path(scratch) / "sample.csv"
        beside = out.with_name("sample.production.jsonl")
        drawn = draw_sample(wh, since, now, size, seed, exp.corpus_dir, {"--out": out, "production": beside})
        questions = gj.read_questions(out)
        result = replay(exp, out)
        production, production_texts = read_production(beside, questions)
    retrieved = result.retrieved.to_pylist()
    keys = [c for c in CONFIG_KEYS if c in result.retrieved.column_names and c != "k"]
    lists = P.items(retrieved, keys) | P.items(production, [])
    configs = [c for c in lists if c != ((P.PRODUCTION, True),)]
    texts = dict(result.corpora or {}) | production_texts
    order = [q for q in questions if any(q in lists[c] for c in lists)]
    order = [order[i] for i in np.random.default_rng(seed).permutation(len(order))]
    chat = Chat(endpoint, chat_model, cache_dir=paths.home() / "cache" / "chat")
    try:
        racer = Racer(len(configs), len(order), alpha, delta, reference=True)
        got = judge_race(lists, questions, texts, chat, order, k, gj.MIN_GRADE, metric, True, budget, budget_unit,
                         racer)  # fmt: skip
    finally:
        chat.close()
    gain = P.gains(got["grades"], gj.MIN_GRADE)
    kept, empty = P.measurable(got["questions"], gain)
    said = {"experiment": exp.name, "import": imported["import_id"], "sampled": len(drawn["chosen"]),
            "judged_questions": len(got["questions"]), "compared": len(kept), "race": got["race"], "alarms": []}  # fmt: skip
    if len(kept) < 2:
        said["line"] = f"{len(kept)} judged question(s) with a relevant passage: nothing to compare today"
        return said
    tables = {c: P.per_query({c: lists[c]}, [q for q in kept if c not in got["raced"] or q in set(got["raced"][c])],
                             gain, k) for c in lists}  # fmt: skip
    prod = tables[((P.PRODUCTION, True),)]
    offline = pa.concat_tables([tables[c] for c in configs], promote_options="default")
    both = P.compare(offline, prod, "replay", P.METRICS, threshold, alpha)
    before = previous(wh, exp.name)
    fell = P.production_fell(prod, before[1], before[0], P.METRICS, threshold, alpha) if before else None
    rows = P.summary(prod) + P.summary(offline)
    details = {"import": imported["import_id"], "k": k, "judge": chat_model, "compared": len(kept), "left_out": len(empty),
               "beaten": both["beaten"]["verdict"], "fell": fell["verdict"] if fell else "first result",
               "verdict_lines": [verdict_line(both["beaten"])] + ([verdict_line(fell)] if fell else []),
               "per_query": {m: dict(zip(prod.column("query_id").to_pylist(), prod.column(m).to_pylist()))
                             for m in P.METRICS},
               "race": {"stopped": got["race"].stopped, "share": got["race"].share, "spent": got["spent"]}}  # fmt: skip
    records = [{"source": "production" if s["label"] == P.PRODUCTION else "offline", "label": s["label"], "metric": m,
                "value": s[m], "n_queries": s["n"], "judged_by": "model"} for s in rows for m in P.METRICS]  # fmt: skip
    result_id = wh.record_production(exp.name, records, (since, now), details)
    if both["beaten"]["verdict"] == REGRESSION:
        said["alarms"].append(A.production_beaten_payload(exp.name, result_id, both["beaten"], chat_model))
    if fell and fell["verdict"] == REGRESSION:
        said["alarms"].append(A.production_fell_payload(exp.name, result_id, fell, chat_model))
    said |= {"result_id": result_id, "beaten": both["beaten"], "fell": fell,
             "line": f"production {result_id}: " + "; ".join(details["verdict_lines"])}  # fmt: skip
    return said


@flow(name="production", log_prints=True)
def production(
    experiment: str,
    traces: str,
    endpoint: str,
    chat_model: str,
    days: float = 1.0,
    size: int = SIZE,
    budget: float | None = BUDGET,
    budget_unit: str = "requests",
    k: int = 10,
) -> dict:
    """The deployment's flow: one day of production (`watch_production`), its line, and its alarms emitted."""
    said = watch_production(experiment, traces, endpoint, chat_model, days, size, budget, budget_unit, k)
    print(said["line"])
    for payload in said["alarms"]:
        emit(payload)
    return {k: v for k, v in said.items() if k in ("experiment", "result_id", "line", "compared", "sampled")}
