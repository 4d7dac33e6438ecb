"""Production against a grid on judged production queries (issue 43 part 2, docs/traces.md "Replay, judge and
decide"): traces of the real OpenTelemetry SDK imported and sampled, a grid run over the sample, `gold judge
--production` pooling production's passages with the grid's, `traces compare` scoring both on the judged pool
through the one verdict (its metrics held to pytrec_eval on the same qrels and run), and the same comparison judged
here with `--race` and `--budget`.

The judge is `chat_server.ChatServer`, a stand-in that REPLAYS grades by a written rule over the demo's gold set:
it is not a model. With CHUNKEVAL_TEST_CHAT_URL set (and CHUNKEVAL_TEST_CHAT_MODEL), `test_what_holds_for_any_judge`
runs the comparison against that endpoint too, asserting only what holds for any model."""

from __future__ import annotations

import csv
import json
import math
import os

import pytest

from chat_server import ChatServer
from chunkeval.analysis import production as P
from chunkeval.cli import main
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.engine.pipeline.sweep import run_sweep
from chunkeval.run_result import RunResult
from chunkeval.warehouse import Warehouse
from otel_traces import DEMO_CORPORA, Collector, make_traces
from test_traces import edit, questions

K = 3


@pytest.fixture(scope="module")
def replayed(tmp_path_factory, embedder_factory):
    """A home with a day of production imported (a third of its passages text the corpus never held), a sample of
    16 questions, a grid (two chunkers × two sizes, bm25: no model to load, k 3) recorded over it, and its pool judged with
    production's passages by the stand-in."""
    t = tmp_path_factory.mktemp("compare")
    qs = questions()
    (t / "traces").mkdir()
    with Collector(t / "traces" / "day2.jsonl") as endpoint:
        make_traces(endpoint, qs, edit=edit, start_ns=1_767_312_000 * 10**9, sessions=2)
    home = t / "home"
    with pytest.MonkeyPatch.context() as mp, ChatServer() as server:
        mp.setenv("CHUNKEVAL_HOME", str(home))
        assert main(["traces", "import", str(t / "traces" / "day2.jsonl"), "--corpus-dir", str(DEMO_CORPORA)]) == 0
        assert main(["traces", "sample", "--out", str(t / "q.csv"), "--size", "16", "--seed", "3"]) == 0
        exp = Experiment(name="prod", questions=str(t / "q.csv"), corpus_dir=str(DEMO_CORPORA),
                         chunker=("fixed_token", "recursive_token"), chunk_sizes=(100, 200), overlaps=("0",), k=(K,),
                         retriever=("bm25",))  # fmt: skip
        result = run_sweep(exp, embedder_factory())
        wh = Warehouse(home / "warehouse")
        run_id = wh.begin_run("prod", {}, "manual", exp.to_dict())
        kept = {"retrieved": result.retrieved, "corpora": result.corpora}
        wh.complete_run(run_id, RunResult(result.per_query, result.summary, references=result.references, **kept))
        production = str(t / "q.production.jsonl")
        argv = ["gold", "judge", "--questions", str(t / "q.csv"), "--run", run_id, "--out", str(t / "j.csv")]
        assert main([*argv, "--production", production, "--endpoint", server.url, "--chat-model", "stand-in",
                     "--depth", str(K)]) == 0  # fmt: skip
        asked = server.requests
    prov = json.loads((t / "j.provenance.json").read_text())
    return {"t": t, "home": home, "run_id": run_id, "production": production, "prov": prov, "asked": asked}


def compare(r: dict, *extra: str) -> int:
    t = r["t"]
    argv = ["traces", "compare", "--questions", str(t / "q.csv"), "--run", r["run_id"], "--production"]
    return main([*argv, r["production"], "--k", str(K), *extra])


def test_the_pool_holds_production_s_passages_marked_as_judged_by_a_model(replayed):
    prov = replayed["prov"]
    assert prov["judged_by"] == "model" and prov["production"] == replayed["production"]
    assert prov["counts"]["pooled_from_production"] > 0 and prov["canaries"]["asked"] > 0
    with open(replayed["t"] / "j.csv", newline="", encoding="utf-8") as f:
        judged = list(csv.DictReader(f))
    unplaced = [j for j in judged if j["corpus_id"].startswith("production:")]
    assert unplaced and all(j["judged_by"] == "model" for j in judged)
    assert all(int(j["grade"]) == 0 for j in unplaced)  # foreign text: the stand-in's rule grades it 0


def test_compare_scores_production_as_pytrec_eval_does_and_gives_the_verdict(replayed, monkeypatch, capsys):
    import pytrec_eval

    monkeypatch.setenv("CHUNKEVAL_HOME", str(replayed["home"]))
    assert compare(replayed, "--judged", str(replayed["t"] / "j.csv"), "--race") == 0
    out = capsys.readouterr().out
    assert "offline beats production? " in out and "production beats offline? " in out and "race (ndcg_at_k" in out
    wh = Warehouse(replayed["home"] / "warehouse")
    rows = wh.production_results("prod")
    prod = [r for r in rows if r["source"] == "production"]
    assert {r["metric"] for r in prod} == set(P.METRICS) and {r["source"] for r in rows} == {"production", "offline"}
    details = json.loads(prod[0]["details"])
    assert details["beaten"] in ("regression", "no regression") and details["compared"] >= 2
    # the same qrels and run through pytrec_eval: the judged passages by id, production's lists by rank
    qrels, run = {}, {}
    with open(replayed["t"] / "j.csv", newline="", encoding="utf-8") as f:
        for j in csv.DictReader(f):
            g = int(j["grade"])
            qrels.setdefault(j["query_id"], {})[f"{j['corpus_id']}:{j['start']}-{j['end']}"] = g if g >= 2 else 0
    for line in open(replayed["production"], encoding="utf-8"):
        p = json.loads(line)
        run.setdefault(p["query_id"], {})[f"{p['corpus_id']}:{p['start']}-{p['end']}"] = 1.0 / p["rank"]
    asked = set(details["per_query"]["ndcg_at_k"])
    evaluator = pytrec_eval.RelevanceEvaluator({q: qrels[q] for q in asked}, {f"ndcg_cut_{K}", f"P_{K}", f"recall_{K}", "recip_rank"})  # fmt: skip
    said = evaluator.evaluate({q: run.get(q, {}) for q in asked})
    names = {
        "ndcg_at_k": f"ndcg_cut_{K}",
        "precision_at_k": f"P_{K}",
        "recall_at_k": f"recall_{K}",
        "mrr": "recip_rank",
    }
    for ours, theirs in names.items():
        for q in asked:
            assert details["per_query"][ours][q] == pytest.approx(said[q][theirs], abs=1e-9), (ours, q)
    mean = sum(details["per_query"]["ndcg_at_k"].values()) / len(asked)
    assert math.isclose(next(r["value"] for r in prod if r["metric"] == "ndcg_at_k"), mean)


def test_judged_here_with_a_race_and_a_budget(replayed, monkeypatch, capsys):
    monkeypatch.setenv("CHUNKEVAL_HOME", str(replayed["home"]))
    with ChatServer("no-429") as server:
        judge = ["--endpoint", server.url, "--chat-model", "stand-in", "--batch", "4"]
        assert compare(replayed, *judge, "--race") == 0
        asked = server.requests
        out = capsys.readouterr().out
        assert "race (ndcg_at_k" in out and "cells judged" in out and "offline beats production? " in out
        assert compare(replayed, *judge, "--race") == 0 and server.requests == asked  # a rerun pays for nothing
        assert " 0 request(s) made" in capsys.readouterr().out
        assert compare(replayed, *judge, "--budget", "1") == 2  # no batch fits: nothing to compare
    assert "--budget 1 requests pays for no batch of 4 question(s)" in capsys.readouterr().err


ENDPOINTS = ["stand-in"] + (["real"] if os.environ.get("CHUNKEVAL_TEST_CHAT_URL") else [])


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_what_holds_for_any_judge(endpoint, replayed, monkeypatch, capsys):
    monkeypatch.setenv("CHUNKEVAL_HOME", str(replayed["home"]))
    with ChatServer("no-429") as server:
        url = os.environ["CHUNKEVAL_TEST_CHAT_URL"] if endpoint == "real" else server.url
        model = os.environ.get("CHUNKEVAL_TEST_CHAT_MODEL", "") if endpoint == "real" else "stand-in"
        assert compare(replayed, "--endpoint", url, "--chat-model", model, "--race", "--budget", "400") == 0
    capsys.readouterr()
    rows = Warehouse(replayed["home"] / "warehouse").production_results("prod")
    newest = [r for r in rows if r["result_id"] == rows[-1]["result_id"]]
    assert all(0 <= r["value"] <= 1 and r["judged_by"] == "model" for r in newest)
    per_query = json.loads(next(r for r in newest if r["source"] == "production")["details"])["per_query"]
    assert all(0 <= v <= 1 for m in per_query.values() for v in m.values())


def test_trend_and_the_report_show_production_beside_the_runs(replayed, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("CHUNKEVAL_HOME", str(replayed["home"]))
    assert compare(replayed, "--judged", str(replayed["t"] / "j.csv")) == 0
    capsys.readouterr()
    assert main(["trend", "--experiment", "prod", "--metric", "ndcg_at_k"]) == 0
    out = capsys.readouterr().out
    assert "production, judged by a model on its own sampled queries (ndcg_at_k" in out and "best offline" in out
    assert main(["report", "--experiment", "prod", "--html", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "Production beside the runs" in page and "judged by" in page
