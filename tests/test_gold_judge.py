"""`chunkeval gold judge` (issue 34 part 2, docs/gold.md): graded relevance of a recorded run's pooled passages.

No chat model runs on these machines: `chat_server.ChatServer` is a stand-in that REPLAYS written answers; it is
not a model. For judging it grades by a written rule over the demo's gold set (`chat_server.stand_in_grade`),
answers one question with prose that holds no grade and its first request 429 with Retry-After. With
CHUNKEVAL_TEST_CHAT_URL set (and CHUNKEVAL_TEST_CHAT_MODEL), `test_what_holds_for_any_judge` runs against that
endpoint too, asserting only what holds for any model.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from chat_server import DEMO_GOLD, NO_GRADE_QUESTION, ChatServer, demo_gold, stand_in_grade
from chunkeval.cli import main
from chunkeval.engine.gold import judge as gj
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.engine.pipeline.sweep import run_sweep
from chunkeval.run_result import RunResult
from chunkeval.warehouse import Warehouse
from prefect_server import BIN

DEPTH = 2


def rows(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def judge(out: Path, run_id: str, endpoint: str, *extra: str, model: str = "stand-in") -> dict:
    argv = ["gold", "judge", "--questions", str(DEMO_GOLD), "--run", run_id, "--out", str(out)]
    assert main([*argv, "--endpoint", endpoint, "--chat-model", model, "--depth", str(DEPTH), *extra]) == 0
    return json.loads(out.with_name(f"{out.stem}.provenance.json").read_text())


@pytest.fixture(scope="module")
def judged(tmp_path_factory, embedder_factory):
    """A home with one recorded run of the demo (two chunkings, dense and bm25, k 3), judged against the stand-in
    twice (the second from the cache), with the demo's span gold as human gold."""
    t = tmp_path_factory.mktemp("judged")
    exp = Experiment(
        name="judge",
        chunker=("fixed_token",),
        chunk_sizes=(100, 200),
        overlaps=("0",),
        k=(3,),
        retriever=("dense", "bm25"),
    )
    result = run_sweep(exp, embedder_factory())
    wh = Warehouse(t / "home" / "warehouse")
    run_id = wh.begin_run("judge", {}, "manual", exp.to_dict())
    kept = {"retrieved": result.retrieved, "corpora": result.corpora}
    wh.complete_run(run_id, RunResult(result.per_query, result.summary, references=result.references, **kept))
    said = io.StringIO()  # stderr, off a terminal
    with pytest.MonkeyPatch.context() as mp, ChatServer() as server:
        mp.setenv("CHUNKEVAL_HOME", str(t / "home"))
        with contextlib.redirect_stderr(said):
            prov = judge(t / "j.csv", run_id, server.url, "--human", str(DEMO_GOLD))
        calls, answered = server.calls, server.requests
        again = judge(t / "again.csv", run_id, server.url)
        resumed = server.calls - calls
    retrieved = wh.retrieved(run_id).to_pylist()
    return {"t": t, "run_id": run_id, "prov": prov, "again": again, "calls": calls, "answered": answered} | {
        "resumed": resumed,
        "retrieved": retrieved,
        "corpora": result.corpora,
        "stderr": said.getvalue(),
    }


def test_judging_shows_its_progress(judged):
    """docs/gold.md promises progress (issue 42; 1,193 passages were judged in silence): off a terminal, a line as
    the pool's requests begin and one when the last is answered, then the canaries' likewise."""
    said = judged["stderr"]
    pooled, canaries = judged["prov"]["counts"]["pooled"], judged["prov"]["canaries"]["asked"]
    for what, n in (("judging the pool", pooled), ("judging the canaries", canaries)):
        counts = [line.split("]")[1].split()[0] for line in said.splitlines() if line.startswith(what)]
        assert len(counts) >= 2 and counts[0] == f"0/{n}" and counts[-1] == f"{n}/{n}", said
    assert "WARNING" not in said


def test_the_pool_is_every_configuration_to_the_depth(judged):
    pool = {(r["query_id"], r["corpus_id"], r["start"], r["end"]) for r in judged["retrieved"] if r["rank"] <= DEPTH}
    c = judged["prov"]["counts"]
    assert c["pooled"] == len(pool) == c["judged"] + c["unusable"]
    configs = {(r["chunk_size"], r["retriever"]) for r in judged["retrieved"]}
    assert len(configs) == 4 and len(pool) > 28 * DEPTH  # the configurations retrieved different chunks
    judged_spans = {
        (r["query_id"], r["corpus_id"], int(r["start"]), int(r["end"])) for r in rows(judged["t"] / "j.csv")
    }
    assert judged_spans <= pool and len(judged_spans) == c["judged"]


def test_every_verdict_is_the_replayed_grade_and_the_unusable_are_unjudged(judged):
    gold, texts = demo_gold(), judged["corpora"]
    verdicts = rows(judged["t"] / "j.csv")
    for v in verdicts:
        passage = texts[v["corpus_id"]][int(v["start"]) : int(v["end"])]
        assert int(v["grade"]) == stand_in_grade(gold, v["question"], v["corpus_id"], passage)
        assert (v["judge_model"], v["prompt_version"], v["judged_by"]) == ("stand-in", gj.PROMPT_VERSION, "model")
    assert NO_GRADE_QUESTION not in {v["question"] for v in verdicts}
    unusable = judged["prov"]["unusable_answers"]
    assert unusable and all("no grade in the answer" in u["reason"] for u in unusable)
    assert {u["query_id"] for u in unusable} == {"honeybees:28"}  # the question answered with prose
    assert judged["calls"] == judged["answered"] + 1  # the first was answered 429 with Retry-After, then retried
    by_grade = judged["prov"]["counts"]["by_grade"]
    assert by_grade == {g: sum(v["grade"] == g for v in verdicts) for g in ("0", "1", "2", "3")}
    assert by_grade["0"] and by_grade["1"] and by_grade["3"]  # both answer forms (##final score, JSON) were read


def test_a_rerun_pays_for_no_verdict_twice(judged):
    again = judged["again"]
    asked = again["counts"]["pooled"] + again["canaries"]["asked"]
    assert again["requests"] == {"made": 0, "from_cache": asked}  # the unusable answers are cached too (issue 41)
    assert judged["resumed"] == 0 and again["counts"]["unusable"] == judged["prov"]["counts"]["unusable"]
    assert rows(judged["t"] / "again.csv") == rows(judged["t"] / "j.csv")


def test_canaries_of_other_documents_are_graded_and_reported(judged):
    """Issue 41: every judged question also grades canary passages (pooled for other questions, from documents
    its own pool does not hold); the stand-in grades another document's passage 0, so none is graded relevant."""
    canary = judged["prov"]["canaries"]
    questions = {q: "" for q in dict.fromkeys(r["query_id"] for r in judged["retrieved"])}
    pooled = gj.pool(judged["retrieved"], questions, DEPTH)
    chosen = gj.canaries(pooled, questions)
    own = {(p.query_id, p.corpus_id) for p in pooled}
    assert chosen and all((c.query_id, c.corpus_id) not in own for c in chosen)
    assert all(sum(c.query_id == q for c in chosen) <= gj.CANARIES for q in questions)
    assert canary["per_question"] == gj.CANARIES and canary["asked"] == len(chosen)
    prose = sum(c.query_id == "honeybees:28" for c in chosen)  # the question answered with prose: no grade
    assert canary["graded"] == canary["asked"] - prose
    assert canary["graded_relevant"] == 0 and canary["rate"] == 0 and canary["warning"] is False


def test_document_qrels_are_the_best_passage_and_chunk_qrels_follow_the_rule(judged):
    t, verdicts = judged["t"], rows(judged["t"] / "j.csv")
    best: dict = {}
    for v in verdicts:
        key = (v["query_id"], v["corpus_id"])
        best[key] = max(best.get(key, 0), int(v["grade"]))
    with open(t / "j.qrels.tsv", encoding="utf-8") as f:
        assert next(f).split() == ["query-id", "corpus-id", "score"]
        written = {(q, d): int(g) for q, d, g in (line.split("\t") for line in f)}
    assert written == {k: (g if g >= gj.MIN_GRADE else 0) for k, g in best.items()}
    queries = [json.loads(line) for line in (t / "j.queries.jsonl").read_text().splitlines()]
    assert {q["_id"] for q in queries} == {q for q, _ in written}
    chunk_qrels = {r["query_id"]: r["relevant_chunk_ids"] for r in map(json.loads, (t / "j.chunk_qrels.jsonl").open())}
    for v in verdicts:  # a pooled chunk itself is judged with its own grade
        grade = chunk_qrels[v["query_id"]][f"{v['corpus_id']}:{v['start']}-{v['end']}"]
        assert grade >= (int(v["grade"]) if int(v["grade"]) >= gj.MIN_GRADE else 0)


def test_verdicts_are_spans_that_survive_rechunking():
    verdicts = [{"query_id": "q", "corpus_id": "d", "start": 100, "end": 200, "grade": 3}] + [
        {"query_id": "q", "corpus_id": "d", "start": 300, "end": 400, "grade": 1}
    ]
    chunks = [("q", "d", 0, 120), ("q", "d", 120, 180), ("q", "d", 180, 350), ("q", "d", 500, 600), ("p", "d", 0, 999)]
    grades, judged = gj.chunk_grades(verdicts, chunks, "overlap")
    assert grades.tolist() == [3, 3, 3, 0, 0] and judged.tolist() == [True, True, True, False, False]
    grades, _ = gj.chunk_grades(verdicts, chunks, "coverage:0.5")
    assert grades.tolist() == [0, 3, 1, 0, 0]  # 60 of the first passage's 100; 50 of the second's 100
    grades, _ = gj.chunk_grades(verdicts, chunks, "contains")
    assert grades.tolist() == [0, 0, 0, 0, 0]


def test_kappa_is_sklearns():
    sklearn = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(3)
    for _ in range(30):
        a = rng.integers(0, 4, 40)
        b = np.clip(a + rng.integers(-1, 2, 40), 0, 3) if rng.random() < 0.7 else rng.integers(0, 4, 40)
        labels = list(range(min(a.min(), b.min()), max(a.max(), b.max()) + 1))
        for weights in (None, "quadratic"):
            want = sklearn.cohen_kappa_score(a, b, weights=weights, labels=labels)
            assert gj.cohen_kappa(a, b, weights) == pytest.approx(want, abs=1e-12)
    # the worked example of docs/gold.md: 10 passages
    a, b = [0, 0, 1, 1, 2, 2, 3, 3, 3, 0], [0, 1, 1, 0, 2, 3, 3, 3, 2, 0]
    assert gj.cohen_kappa(a, b) == pytest.approx(17 / 37)  # (0.6 - 0.26) / (1 - 0.26)
    assert gj.cohen_kappa(a, b, "quadratic") == pytest.approx(1 - 4 / 29)


def test_agreement_with_human_gold(judged, tmp_path, monkeypatch):
    """With the demo's span gold (binary) and with graded qrels a person might write, the agreement recorded is
    the kappa of the verdicts against the human grades, and the confusion table counts every compared passage."""
    sklearn = pytest.importorskip("sklearn.metrics")
    t, verdicts = judged["t"], rows(judged["t"] / "j.csv")
    span = judged["prov"]["agreement"]
    assert span["weighted_kappa"] is None and span["passages"] == len(verdicts)  # binary human gold: no grades
    assert sum(n for r in span["confusion"].values() for n in r.values()) == len(verdicts)
    human = {}
    for i, (doc, _) in enumerate(demo_gold().values(), start=1):
        human[(f"{doc}:{i}", doc)] = i % 4  # graded 0-3, another document unjudged
    path = tmp_path / "human.tsv"
    path.write_text("query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{g}\n" for (q, d), g in human.items()))
    monkeypatch.setenv("CHUNKEVAL_HOME", str(t / "home"))
    with ChatServer("no-429") as server:
        prov = judge(tmp_path / "h.csv", judged["run_id"], server.url, "--human", str(path))
    both = [
        (int(v["grade"]), human[(v["query_id"], v["corpus_id"])])
        for v in verdicts
        if (v["query_id"], v["corpus_id"]) in human
    ]
    a, b = np.array([x for x, _ in both]), np.array([y for _, y in both])
    labels = list(range(min(a.min(), b.min()), max(a.max(), b.max()) + 1))
    got = prov["agreement"]
    assert got["passages"] == len(both)
    assert got["weighted_kappa"] == pytest.approx(
        sklearn.cohen_kappa_score(a, b, weights="quadratic", labels=labels), abs=1e-4
    )
    assert got["kappa_relevant"] == pytest.approx(sklearn.cohen_kappa_score(a >= gj.MIN_GRADE, b > 0), abs=1e-4)


def check_any_judge(t: Path, out: Path, prov: dict, corpora: dict) -> None:
    """What holds for any model: grades 0-3, spans inside their documents, counts that add up, provenance whole."""
    verdicts = rows(out)
    for v in verdicts:
        assert int(v["grade"]) in gj.GRADES and v["judged_by"] == "model"
        assert 0 <= int(v["start"]) < int(v["end"]) <= len(corpora[v["corpus_id"]])
    c = prov["counts"]
    assert c["pooled"] == c["judged"] + c["unusable"] and c["judged"] == len(verdicts) == sum(c["by_grade"].values())
    for key in ("kind", "model", "prompt_version", "date", "run_id", "settings", "tokens", "endpoint"):
        assert prov[key] not in (None, ""), key
    assert prov["kind"] == "judged"


ENDPOINTS = ["stand-in"] + (["real"] if os.environ.get("CHUNKEVAL_TEST_CHAT_URL") else [])


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_what_holds_for_any_judge(endpoint, judged, tmp_path, monkeypatch):
    if endpoint == "stand-in":
        check_any_judge(judged["t"], judged["t"] / "j.csv", judged["prov"], judged["corpora"])
        return
    monkeypatch.setenv("CHUNKEVAL_HOME", str(judged["t"] / "home"))
    model = os.environ.get("CHUNKEVAL_TEST_CHAT_MODEL", "")
    prov = judge(
        tmp_path / "j.csv", judged["run_id"], os.environ["CHUNKEVAL_TEST_CHAT_URL"], "--depth", "1", model=model
    )
    check_any_judge(tmp_path, tmp_path / "j.csv", prov, judged["corpora"])


def test_a_run_over_judged_gold_says_so(judged, prefect_server, shared_home, tmp_path):
    """The judged qrels run as document gold through `chunkeval run`: the run records gold kind `judged`, its note
    says so, and it prints and keeps the share of its top k that was judged."""
    t = judged["t"]
    env = {**os.environ, **prefect_server, "CHUNKEVAL_HOME": str(shared_home)}
    corpora = Path(__file__).resolve().parent / "data" / "tiny_demo" / "corpora"
    argv = [str(BIN / "chunkeval"), "run", "--corpus-dir", str(corpora), "--queries", str(t / "j.queries.jsonl")]
    grid = ["--qrels", str(t / "j.qrels.tsv"), "--chunk-sizes", "100", "--overlaps", "0", "--k", "3,10"]
    grid += ["--retriever", "bm25", "--experiment", "judged-demo"]
    proc = subprocess.run([*argv, *grid], env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    said = proc.stdout + proc.stderr
    assert "gold set judged by a model (stand-in, prompt gold-judge/2)" in said
    assert "of the top 3 was judged" in said and "of the top 10 was judged" in said
    import re

    run_id = re.search(r"run (\S+) completed", proc.stdout)[1]
    wh = Warehouse(shared_home / "warehouse")
    settings = json.loads(wh.run(run_id)["settings"])
    assert settings["gold_kind"] == "judged" and settings["gold_provenance"]["model"] == "stand-in"
    shares = {s["k"]: s["judged_share"] for s in wh.gold_check(run_id)["judged_share"]}
    assert 0 < shares[10] <= shares[3] <= 1  # deeper than the pool, less of the list was judged
