"""The `production` deployment (issue 43 part 5, docs/traces.md "The production deployment"): two days of traces of
the real OpenTelemetry SDK land in a folder; each day's run imports them, samples the day's queries, replays them
through the experiment's grid (bm25: no model to load), judges within its budget, records the result and says
which alarms of docs/loop.md to raise. Day two's production is worse (a third of its passages are text the corpus
never held): production's judged quality falls on the queries asked both days. The judge is the stand-in
`chat_server.ChatServer`: it REPLAYS grades by a rule over the demo's gold set, it is not a model."""

from __future__ import annotations

from datetime import datetime

import yaml

from chat_server import ChatServer
from chunkeval.analysis.regression import REGRESSION
from chunkeval.flows.production import watch_production
from chunkeval.publish.alerts import render
from chunkeval.vocabulary import ALERT_EVENTS, DEFAULT_ALERTS
from chunkeval.warehouse import Warehouse
from otel_traces import DEMO_CORPORA, Collector, make_traces
from test_traces import edit, questions

HALF_HOUR = 1_800 * 10**9


def test_a_day_of_production_is_judged_recorded_and_alarms_when_it_falls(tmp_path, monkeypatch):
    monkeypatch.setenv("CHUNKEVAL_HOME", str(tmp_path / "home"))
    exp = tmp_path / "prod.yaml"
    exp.write_text(yaml.safe_dump({"name": "prod", "corpus_dir": str(DEMO_CORPORA), "chunker": ["fixed_token"],
                                   "chunk_sizes": [100, 200], "k": [3], "retriever": ["bm25"]}))  # fmt: skip
    folder = tmp_path / "traces"
    folder.mkdir()
    qs = questions()
    with Collector(folder / "day1.jsonl") as endpoint:
        make_traces(endpoint, qs, step_ns=HALF_HOUR)
    said = []
    with ChatServer("no-429") as server:
        run = lambda day: watch_production(str(exp), str(folder), server.url, "stand-in", k=3, seed=1,  # noqa: E731
                                           now=datetime(2026, 1, day))  # fmt: skip
        said.append(run(2))
        with Collector(folder / "day2.jsonl") as endpoint:
            make_traces(endpoint, qs, edit=edit, start_ns=1_767_312_000 * 10**9, step_ns=HALF_HOUR)
        said.append(run(3))
    first, second = said
    assert first["sampled"] == len(qs) and first["fell"] is None and first["compared"] >= 2
    assert second["fell"]["verdict"] == REGRESSION and second["fell"]["paired_questions"] >= 20
    kinds = [a["kind"] for a in second["alarms"]]
    assert "production_fell" in kinds and set(kinds) <= {"production_fell", "production_beaten"}
    fell = next(a for a in second["alarms"] if a["kind"] == "production_fell")
    assert fell["event"] == ALERT_EVENTS["production_fell"] and fell["reference_result_id"] == first["result_id"]
    assert "production fell" in fell["subject"] and fell["falls"][0]["change"] < -0.02
    for kind in ("webhook", "slack", "teams", "email"):
        subject, body = render(kind, fell["event"], fell)
        assert "fell" in subject and body
    assert {"production_fell", "production_beaten"} <= set(DEFAULT_ALERTS)
    rows = Warehouse(tmp_path / "home" / "warehouse").production_results("prod", source="production")
    assert len({r["result_id"] for r in rows}) == 2 and all(r["judged_by"] == "model" for r in rows)
    ndcg = [r["value"] for r in rows if r["metric"] == "ndcg_at_k"]
    assert ndcg[1] < ndcg[0]  # day two's production is worse
