"""What was retrieved, kept: two real bm25 runs of the demo, the second after a corpus changed; `inspect`
shows a question with the text of the version each run read, `diff` what changed between the runs, and
the corpus copies go with the last run that needs them."""

from __future__ import annotations

import json
import os
import re
import shutil
import time

import numpy as np
import pytest

import chunkeval
from chunkeval.cli import main
from chunkeval.engine.embedding.embedders import Embedders
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.engine.pipeline.sweep import run_sweep
from chunkeval.paths import DEMO_DIR
from chunkeval.report.diff import VERDICT_FIELDS
from chunkeval.run_result import RunResult
from chunkeval.warehouse import Warehouse

DISTRACTOR = (
    "\n\n## Later towers\n\nThe first stone lighthouse on the northern coast was finished long after the harbour "
    "lights, people say; what it burned on its first night is not recorded here, nor when it was finished.\n"
)


def record(wh: Warehouse, exp: Experiment, embedder, gold_check: dict | None = None) -> str:
    result = run_sweep(exp, embedder or Embedders())
    run_id = wh.begin_run(exp.name, {}, "manual", exp.to_dict())
    wh.complete_run(
        run_id,
        RunResult(
            result.per_query,
            result.summary,
            texts_embedded=0,
            references=result.references,
            by_corpus=result.by_corpus,
            retrieved=result.retrieved,
            corpora=result.corpora,
            qrels=result.qrels,
            gold_check=gold_check,
        ),
    )
    return run_id


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory, embedder_factory):
    root = tmp_path_factory.mktemp("kept")
    shutil.copytree(DEMO_DIR / "corpora", root / "corpora")
    shutil.copy(DEMO_DIR / "questions.csv", root / "questions.csv")
    exp = Experiment.from_dict(
        {
            "name": "kept",
            "corpus_dir": str(root / "corpora"),
            "questions": str(root / "questions.csv"),
            "chunker": ["fixed_token"],
            "chunk_sizes": [100],
            "overlaps": [0],
            "k": [1, 3],
            "retriever": ["bm25"],
        }
    )
    wh = Warehouse(root / "home" / "warehouse")
    lighthouses = root / "corpora" / "lighthouses.md"
    before = lighthouses.read_text(encoding="utf-8")
    a = record(wh, exp, embedder_factory())
    lighthouses.write_text(before + DISTRACTOR, encoding="utf-8")  # the corpus changes between the nights
    b = record(wh, exp, embedder_factory())
    return root / "home", a, b, before


@pytest.fixture()
def kept(two_runs, monkeypatch):
    home, a, b, before = two_runs
    monkeypatch.setenv("CHUNKEVAL_HOME", str(home))
    return a, b, before


def test_inspect_gives_the_question_its_references_and_what_each_configuration_retrieved(kept, capsys):
    a, _, before = kept
    assert main(["inspect", "--run", a, "--query", "lighthouses:1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"query_id", "question", "references", "configs"} and doc["query_id"] == "lighthouses:1"
    assert doc["question"].startswith("When was the first stone lighthouse")
    ref = doc["references"][0]
    assert ref["text"] == before[ref["start"] : ref["end"]] and ref["text"] in ref["context"]
    assert len(ref["context"]) <= len(ref["text"]) + 400
    assert [(c["k"], len(c["retrieved"])) for c in doc["configs"]] == [(1, 1), (3, 3)]
    for item in doc["configs"][1]["retrieved"]:
        assert set(item) == {
            "rank",
            "chunk_id",
            "corpus_id",
            "start",
            "end",
            "score",
            "relevant",
            "grade",
            "text",
            "overlaps",
        }
        assert item["chunk_id"] == f"{item['corpus_id']}:{item['start']}-{item['end']}"
        if item["corpus_id"] == "lighthouses":  # the text of the version run a read, though the file changed since
            assert item["text"] == before[item["start"] : item["end"]]
        assert item["relevant"] == bool(item["overlaps"]) and item["grade"] == (1.0 if item["relevant"] else 0.0)
        assert all(item["start"] <= s < e <= item["end"] for s, e in item["overlaps"])
    assert doc["configs"][0]["retrieved"] == doc["configs"][1]["retrieved"][:1]  # k 1 reads the first rank
    assert main(["inspect", "--run", a, "--query", "lighthouses:1", "--config", "k=3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("question lighthouses:1: When was") and "[[" in out and "]]" in out
    assert "/k=3 [" in out and "]: 3 retrieved" in out and "/k=1 [" not in out  # named by label and config_id
    assert max(map(len, out.splitlines())) <= 120


def test_inspect_from_python(kept):
    a, _, _ = kept
    found = chunkeval.inspect(a, "lighthouses:1", config={"k": 1})
    assert found["configs"][0]["k"] == 1 and repr(found).startswith("question lighthouses:1")
    assert "<mark>" in found._repr_html_()


def test_diff_says_which_questions_changed_and_what_they_retrieved(kept, capsys):
    a, b, _ = kept
    assert main(["diff", "--run", a, "--run", b, "--json"]) == 0
    docs = json.loads(capsys.readouterr().out)
    assert [d["k"] for d in docs] == [1, 3]
    for d in docs:
        assert d["metric"] == "span_recall" and d["better"] + d["worse"] + d["unchanged"] == 28
        assert set(VERDICT_FIELDS) <= set(d)  # the verdict's check of the configuration
        assert d["change"] == pytest.approx(d["after"] - d["before"])  # new (b) − baseline (a)
        assert len(d["queries"]) == d["better"] + d["worse"]
        changes = [q["b"] - q["a"] for q in d["queries"]]
        assert changes == sorted(changes)  # worse first
        for q in d["queries"]:
            assert set(q) == {"query_id", "question", "a", "b", "retrieved_a", "retrieved_b"}
            assert len(q["retrieved_a"]) == len(q["retrieved_b"]) == d["k"]
    assert sum(d["worse"] + d["better"] for d in docs) > 0, "the distractor must move some question"
    assert main(["diff", "--run", a, "--run", b, "--config", "k=3", "--metric", "mrr"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"diff of run {a} (a) → run {b} (b)") and "mrr" in out and "k=1" not in out
    assert main(["diff", "--run", a, "--run", b]) == 0  # the verdict's line folded, as every line (issue 42)
    out = capsys.readouterr().out
    assert max(map(len, out.splitlines())) <= 120, out
    assert main(["diff", "--run", a, "--run", a]) == 0  # nothing changed: one line names the configurations
    same = capsys.readouterr().out.split("\n\n")[-1]
    assert same.startswith("no question changed on span_recall in 2 configuration(s): ") and "k=3 [" in same, same


def test_diff_as_one_offline_page(kept, tmp_path, capsys):
    a, b, _ = kept
    page = tmp_path / "diff.html"
    assert main(["diff", "--run", a, "--run", b, "--html", str(page)]) == 0
    assert f"diff page: {page}" in capsys.readouterr().out
    html = page.read_text(encoding="utf-8")
    assert "default-src 'none'" in html and "<mark>" in html and "<script" not in html
    assert html.count("<div class=sides>") == json_count(a, b, capsys) > 0  # each changed question, side by side


def json_count(a: str, b: str, capsys) -> int:
    assert main(["diff", "--run", a, "--run", b, "--json"]) == 0
    return sum(len(d["queries"]) for d in json.loads(capsys.readouterr().out))


def test_a_corpus_copy_goes_with_the_last_run_that_read_it(two_runs, tmp_path, monkeypatch, capsys):
    home, a, b, _ = two_runs
    copy = tmp_path / "home"
    shutil.copytree(home, copy)
    monkeypatch.setenv("CHUNKEVAL_HOME", str(copy))
    wh = Warehouse(copy / "warehouse")
    versions_a, versions_b = wh.corpus_versions(a), wh.corpus_versions(b)
    assert versions_a["lighthouses"] != versions_b["lighthouses"]
    assert {k for k in versions_a if versions_a[k] == versions_b[k]} == {"honeybees", "sourdough"}
    old = time.time() - 3600  # written an hour ago: no run is recording itself with them
    for path in wh.corpora_dir.iterdir():
        os.utime(path, (old, old))
    assert main(["runs", "delete", a]) == 0
    left = {p.name.split(".")[0] for p in wh.corpora_dir.iterdir()}
    assert left == set(versions_b.values())
    assert wh.corpus_text(b, "lighthouses").endswith(DISTRACTOR)
    assert main(["inspect", "--run", a, "--query", "lighthouses:1"]) == 2
    assert "no run" in capsys.readouterr().err


def test_diff_of_runs_of_different_experiments_is_one_line(two_runs, tmp_path, monkeypatch, capsys, embedder_factory):
    home, a, _, _ = two_runs
    copy = tmp_path / "home"
    shutil.copytree(home, copy)
    monkeypatch.setenv("CHUNKEVAL_HOME", str(copy))
    wh = Warehouse(copy / "warehouse")
    other = record(
        wh,
        Experiment(
            name="other", chunker=("fixed_token",), chunk_sizes=(100,), overlaps=("0",), k=(1,), retriever=("bm25",)
        ),
        embedder_factory(),
    )
    assert main(["diff", "--run", a, "--run", other]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "of different experiments" in err[0]


def test_the_report_drills_down_into_every_question(kept):
    from chunkeval.report.html import build_report

    _, b, _ = kept
    wh = Warehouse.at_home()
    html = build_report(wh, "kept", b, config={"k": 3})
    failures = html[
        html.index('<section id="failures">') : html.index("</section>", html.index('<section id="failures">'))
    ]
    # every question collapsed inside one closed drill-down, its view drawn on demand from the embedded data
    assert failures.count('<details id="q-') == 28 and not re.search(r"<details[^>]* open", failures)
    assert failures.count('<a href="#q-') == 28 and 'class="sortable"' in failures and "lighthouses:" in failures
    data = json.loads(failures[failures.index('id="questions-data">') + 20 : failures.index("</script>")])
    assert data["k"] == 3 and len(data["questions"]) == 28 and "lighthouses" in data["texts"]
    assert all(len(items) <= 3 for _, items in data["questions"])
    top = html[html.index('<section id="overview">') : html.index("</section>")]  # links to the 5 worst questions,
    linked = re.findall(r'<li><a href="#(q-\d+)"[^(]*\([^)]* ([\d.]+)\)', top)  # those not at or near 1 (issue 52)
    assert linked and [q for q, _ in linked] == [f"q-{i}" for i in range(len(linked))] and len(linked) <= 5
    assert all(float(value) < 0.95 for _, value in linked), linked


def test_the_kept_scores_are_the_retrievers_own_best_first(embedder_factory):
    """bm25 keeps its BM25 score and hybrid its fused score (each corpus on its own), the scores the retriever
    returned, non-increasing by rank: what inspect and diff show beside each chunk."""
    from chunkeval.engine.pipeline import ranking, sweep

    exp = Experiment(
        name="scored", chunk_sizes=(50,), overlaps=("0",), k=(2, 4), retriever=("bm25", "hybrid"), own_corpus=True
    )
    embedders = Embedders.of(embedder_factory()).for_experiment(exp)
    inputs = sweep.load_inputs(exp)
    (chunking,) = [sweep.chunk_one(inputs.corpora, s, m, embedders) for s, m in sweep.chunking_jobs(exp)]
    configs = sweep.plan(exp, [chunking])
    embedded = sweep.embed_all(inputs, [chunking], configs, embedders)
    kept = []
    sweep.score_all(inputs, [chunking], configs, embedded, exp, kept)
    assert [c.retriever for c in configs] == ["bm25", "hybrid"]
    for config, table in zip(configs, kept):
        topk, scores, _ = ranking.retrieve_top(inputs, [chunking], config, embedded, exp, None)  # ties: trec_eval's
        found = topk >= 0
        assert table["start"].to_pylist() == chunking.chunks.start[topk[found]].tolist()
        stored = table["score"].to_numpy()
        assert table["score"].null_count == 0 and np.array_equal(stored, scores[found].astype(np.float32))
        queries, ranks = table["query_id"].to_pylist(), table["rank"].to_pylist()
        same = [i for i in range(1, len(ranks)) if queries[i] == queries[i - 1]]
        assert same and all(ranks[i] == ranks[i - 1] + 1 and stored[i] <= stored[i - 1] for i in same)
    bm25, hybrid = (t["score"].to_numpy() for t in kept)
    assert bm25.max() > 1 and hybrid.max() <= 2 / (exp.rrf_k + 1)  # BM25 scores, and fused reciprocal ranks


@pytest.fixture(scope="module")
def doc_runs(tmp_path_factory):
    """Two runs over document gold (a BEIR folder, bm25): the second after every document's text changed."""
    from test_beir import beir_qrels, make_beir

    root = tmp_path_factory.mktemp("docs")
    beir = make_beir(root / "tiny")
    docs = {d["_id"]: (d["title"] + " " + d["text"]).strip() for d in map(json.loads, (beir / "corpus.jsonl").open())}
    exp = Experiment.from_dict(
        {"name": "docs", "beir": str(beir), "retriever": "bm25", "chunk_sizes": [12], "overlaps": [0], "k": [2, 4]}
    )
    wh = Warehouse(root / "home" / "warehouse")
    a = record(wh, exp, None)
    shutil.copy(make_beir(root / "other", seed=8) / "corpus.jsonl", beir / "corpus.jsonl")  # same ids, new texts
    b = record(wh, exp, None)
    return root / "home", a, b, docs, beir_qrels(beir)


def test_inspect_under_document_gold_lists_the_relevant_documents(doc_runs, monkeypatch, capsys):
    home, a, _, docs, qrels = doc_runs
    monkeypatch.setenv("CHUNKEVAL_HOME", str(home))
    assert main(["inspect", "--run", a, "--query", "q0", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    relevant = sorted(((-g, d) for d, g in qrels["q0"].items() if g > 0))
    assert doc["references"] == [{"doc_id": d, "grade": -g} for g, d in relevant]
    assert [(c["k"], len(c["retrieved"])) for c in doc["configs"]] == [(2, 2), (4, 4)]
    items = doc["configs"][1]["retrieved"]
    assert [i["score"] for i in items] == sorted((i["score"] for i in items), reverse=True)
    for item in items:
        assert item["doc_id"] == item["corpus_id"] and item["chunk_id"].startswith(f"{item['doc_id']}:")
        assert item["grade"] == max(qrels["q0"].get(item["doc_id"], 0), 0) and item["relevant"] == (item["grade"] > 0)
        assert item["text"] == docs[item["doc_id"]][item["start"] : item["end"]] and item["overlaps"] == []
    assert any(i["relevant"] for c in doc["configs"] for i in c["retrieved"]), (
        "q0's words come from a relevant document"
    )
    assert chunkeval.inspect(a, "q0", config={"k": 4})["references"] == doc["references"]
    assert main(["inspect", "--run", a, "--query", "q0", "--config", "k=2"]) == 0
    out = capsys.readouterr().out
    assert f"relevant documents ({len(relevant)}):" in out and f"  {relevant[0][1]} (grade {-relevant[0][0]:g})" in out
    assert ", relevant (grade" in out or ", not relevant:" in out
    assert all(line.split(": ")[0].split(", document ")[1] for line in out.splitlines() if line.startswith("  #"))


def test_diff_under_document_gold_watches_doc_ndcg(doc_runs, monkeypatch, capsys):
    home, a, b, _, qrels = doc_runs
    monkeypatch.setenv("CHUNKEVAL_HOME", str(home))
    assert main(["diff", "--run", a, "--run", b, "--json"]) == 0
    docs = json.loads(capsys.readouterr().out)
    assert [d["k"] for d in docs] == [2, 4]
    for d in docs:
        assert d["metric"] == "doc_ndcg_at_k" and d["better"] + d["worse"] + d["unchanged"] == len(qrels)
        for q in d["queries"]:
            assert q["question"] and all(i["doc_id"] == i["corpus_id"] for i in q["retrieved_a"] + q["retrieved_b"])
    assert sum(len(d["queries"]) for d in docs) > 0, "new texts must move some question"
    assert main(["diff", "--run", a, "--run", b, "--config", "k=4"]) == 0
    assert "doc_ndcg_at_k" in capsys.readouterr().out
