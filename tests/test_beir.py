"""Document-level gold (issue 20): BEIR folders, corpus folders with queries and qrels, MaxP document metrics
checked against trec_eval (pytrec_eval) on the TREC run file chunkeval writes. Small folders, bm25 only."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from chunkeval.engine.embedding.embedders import Embedders
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.engine.pipeline.sweep import run_sweep
from chunkeval.engine.scoring.doc_metrics import maxp_ranking, trec_runs
from chunkeval.errors import InputError
from chunkeval.vocabulary import CONFIG_KEYS

WORDS = (
    "river stone lamp orchard copper violin harbor meadow lantern glacier falcon ember quartz willow "
    "saffron beacon canyon thistle marble pepper compass tundra velvet cobalt"
).split()


def make_beir(root: Path, n_docs: int = 24, n_queries: int = 10, seed: int = 7) -> Path:
    """A BEIR folder: documents of random words (ids holding `:`), queries drawn from a relevant document's
    words (each with a `type` under `metadata`, a slice column), graded qrels (with grade-0 rows, a query without
    qrels, and a row naming an unknown document)."""
    rng = np.random.default_rng(seed)
    (root / "qrels").mkdir(parents=True)
    docs = []
    for i in range(n_docs):
        words = rng.choice(WORDS, size=int(rng.integers(15, 90)))
        docs.append({"_id": f"doc:{i}", "title": f"Title {i}" if i % 3 else "", "text": " ".join(words)})
    (root / "corpus.jsonl").write_text("\n".join(json.dumps(d) for d in docs) + "\n")
    queries, qrels = [], ["query-id\tcorpus-id\tscore"]
    for q in range(n_queries):
        judged = rng.choice(n_docs, size=4, replace=False)
        text = " ".join(rng.choice(docs[judged[0]]["text"].split(), size=3))
        queries.append({"_id": f"q{q}", "text": text, "metadata": {"type": "odd" if q % 2 else "even"}})
        if q == n_queries - 1:
            continue  # a query without qrels: left out
        for j, d in enumerate(judged.tolist()):
            qrels.append(f"q{q}\tdoc:{d}\t{[2, 1, 0, 3][j]}")
    qrels.append("q0\tdoc:missing\t1")
    (root / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in queries) + "\n")
    (root / "qrels" / "test.tsv").write_text("\n".join(qrels) + "\n")
    return root


def beir_qrels(root: Path) -> dict[str, dict[str, int]]:
    """The qrels as trec_eval reads them, less the row naming an unknown document."""
    out: dict[str, dict[str, int]] = {}
    for line in (root / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        q, d, g = line.split("\t")
        if d != "doc:missing":
            out.setdefault(q, {})[d] = int(g)
    return out


def read_run(text: str) -> dict[str, dict[str, float]]:
    run: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        q, _, d, _, score, _ = line.split()
        run.setdefault(q, {})[d] = float(score)
    return run


@pytest.fixture(scope="module")
def beir(tmp_path_factory) -> Path:
    return make_beir(tmp_path_factory.mktemp("beir") / "tiny")


@pytest.fixture(scope="module")
def swept(beir):
    settings = {"retriever": "bm25", "chunker": ["fixed_token", "none"], "chunk_sizes": [12, 40, 4000], "k": [1, 3, 10]}
    exp = Experiment.from_dict({"beir": str(beir), **settings})
    return exp, run_sweep(exp, Embedders())


def test_every_doc_metric_agrees_with_pytrec_eval_on_the_written_run_file(beir, swept):
    import pytrec_eval

    _, result = swept
    per_query = result.per_query
    runs = trec_runs(per_query, CONFIG_KEYS)
    assert len(runs) == 12  # (3 chunk sizes and chunker none) × 3 k
    qrels = beir_qrels(beir)
    rows = per_query.to_pylist()
    checked = 0
    for name, text in runs.items():
        k = int(name.rsplit("_", 1)[1].removesuffix(".trec"))
        size = int(name.split("_")[-3])
        run = read_run(text)
        for scores in run.values():  # raw scores in chunkeval's order: exact ties by document id, descending
            listed = list(scores.items())
            assert all((b[1], b[0]) < (a[1], a[0]) for a, b in zip(listed, listed[1:]))
        measures = {f"ndcg_cut.{k}", f"recall.{k}", f"P.{k}", "recip_rank", "map"}
        oracle = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
        for row in rows:
            if row["k"] != k or row["chunk_size"] != size:
                continue
            want = oracle.get(row["query_id"])
            if want is None:  # nothing retrieved: trec_eval has no line, chunkeval scores 0
                assert row["doc_ndcg_at_k"] == row["doc_map"] == 0.0
                continue
            assert row["doc_ndcg_at_k"] == pytest.approx(want[f"ndcg_cut_{k}"], abs=1e-9)
            assert row["doc_recall_at_k"] == pytest.approx(want[f"recall_{k}"], abs=1e-9)
            assert row["doc_precision_at_k"] == pytest.approx(want[f"P_{k}"], abs=1e-9)
            assert row["doc_mrr"] == pytest.approx(want["recip_rank"], abs=1e-9)
            assert row["doc_map"] == pytest.approx(want["map"], abs=1e-9)
            checked += 1
    assert checked > 60
    assert any(r["doc_ndcg_at_k"] > 0 for r in rows)


def test_queries_without_qrels_are_left_out_and_span_metrics_do_not_exist(swept):
    exp, result = swept
    per_query = result.per_query
    assert set(per_query["query_id"].to_pylist()) == {f"q{i}" for i in range(9)}
    assert set(per_query["corpus_id"].to_pylist()) == {"tiny"}  # a BEIR set is one corpus
    assert per_query["span_recall"].null_count == per_query.num_rows
    assert result.summary["span_recall_mean"].null_count == result.summary.num_rows
    assert result.summary["doc_ndcg_at_k_ci_low"].null_count == 0
    assert result.references.num_rows == 0
    assert exp.to_dict()["beir"] and exp.to_dict()["questions"] == ""


def test_a_document_in_one_chunk_scores_the_same_at_chunk_and_document_level(swept):
    """Chunker none, and chunk_size 4000, hold each document whole: a chunk is its document, so chunk-level
    metrics (a chunk relevant with its document's grade) equal the document-level ones."""
    _, result = swept
    rows = [r for r in result.per_query.to_pylist() if r["chunk_size"] in (0, 4000)]
    assert {(r["chunker"], r["chunk_overlap"]) for r in rows if r["chunk_size"] == 0} == {("none", 0)}
    for r in rows:
        assert r["ndcg_at_k"] == pytest.approx(r["doc_ndcg_at_k"], abs=1e-12)
        assert r["recall_at_k"] == pytest.approx(r["doc_recall_at_k"], abs=1e-12)
        assert r["mrr"] == pytest.approx(r["doc_mrr"], abs=1e-12)


def test_maxp_ranks_documents_by_their_best_chunk_and_makes_shorter_lists():
    topk = np.array([[4, 0, 5, 1, 2, -1], [3, 3, -1, -1, -1, -1]])  # chunk indices, -1 padding
    doc_of_chunk = np.array([0, 0, 1, 2, 2, 2])
    ranking = maxp_ranking(topk, doc_of_chunk, 3, 3)
    assert ranking.tolist() == [[2, 0, 1], [2, -1, -1]]


def test_a_corpus_folder_with_queries_and_trec_qrels(tmp_path):
    corpora = tmp_path / "corpora"
    corpora.mkdir()
    (corpora / "keeper.md").write_text("The lighthouse keeper trims the lamp every evening before dusk.\n")
    (corpora / "notes" / "deep").mkdir(parents=True)
    (corpora / "notes" / "deep" / "lamp.txt").write_text("Oil lamps smoke when the wick is cut unevenly.\n")
    (corpora / "misc.jsonl").write_text(
        json.dumps({"id": "orchard", "title": "Orchards", "text": "Apple trees need pruning in late winter."})
        + "\n"
        + json.dumps({"_id": "harbor", "text": "Boats wait in the harbor while the tide turns."})
        + "\n"
    )
    queries = tmp_path / "queries.jsonl"
    queries.write_text(
        "\n".join(json.dumps(q) for q in [{"_id": "a", "text": "when to prune apple trees"}, {"_id": "b", "text": "x"}])
    )
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("a 0 orchard 1\na 0 keeper 0\n")
    exp = Experiment.from_dict(
        {"corpus_dir": str(corpora), "queries": str(queries), "qrels": str(qrels), "retriever": "bm25", "k": [2]}
    )
    from chunkeval.engine.inputs.corpus import load_documents

    docs = load_documents(corpora)  # a subfolder is a corpus of the files under it, named by their paths
    assert docs.corpus_of == {"keeper": "keeper", "notes/deep/lamp": "notes", "orchard": "misc", "harbor": "misc"}
    result = run_sweep(exp, Embedders())
    row = result.per_query.to_pylist()[0]
    assert result.per_query.num_rows == 1 and row["query_id"] == "a" and row["corpus_id"] == "misc"
    assert row["doc_ranking"].split()[0] == "orchard" and row["doc_mrr"] == 1.0


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"questions": "q.csv"}, "questions (span gold) and beir (document gold)"),
        ({"own_corpus": True}, "own_corpus is a setting of span gold"),
        ({"split": "../x"}, "split must be a qrels file name"),
    ],
)
def test_document_gold_settings_that_cannot_go_together(beir, settings, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Experiment.from_dict({"beir": str(beir), **settings})


def test_a_split_without_a_beir_folder_is_refused():
    with pytest.raises(InputError, match="split names the qrels of a BEIR folder"):
        Experiment.from_dict({"split": "dev"})


def test_the_sweep_command_writes_the_run_files_and_shows_document_metrics(beir, tmp_path):
    out = tmp_path / "res.csv"
    argv = ["--beir", str(beir), "--retriever", "bm25", "--chunk-sizes", "30", "--k", "5", "--out", str(out)]
    done = subprocess.run(
        [sys.executable, "-m", "chunkeval.cli", "sweep", *argv], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "doc_ndcg_at_k" in done.stdout and "span_recall" not in done.stdout
    files = list((tmp_path / "res.doc_runs").iterdir())
    assert len(files) == 1 and files[0].read_text().startswith("q0 Q0 ")


def test_the_worked_example_of_docs_metrics_md():
    from chunkeval.engine.inputs.document_gold import DocGold
    from chunkeval.engine.scoring.doc_metrics import Grades, doc_metrics

    names = ("A", "B", "C", "D", "E")
    topk = np.array([[0, 1, 2, 3, 4]])  # chunks of documents B, A, B, C, D
    ranking = maxp_ranking(topk, np.array([1, 0, 1, 2, 3]), len(names), 3)
    assert [names[d] for d in ranking[0]] == ["B", "A", "C"]
    gold = DocGold(["q"], ["?"], ["set"], {"q": {"A": 2.0, "C": 1.0, "E": 1.0}})
    got = {m: float(v[0]) for m, v in doc_metrics(Grades(gold, names).judged(ranking), 3).items()}
    assert got["doc_ndcg_at_k"] == pytest.approx(0.5627272554209044, abs=1e-12)
    assert got["doc_recall_at_k"] == pytest.approx(2 / 3) and got["doc_precision_at_k"] == pytest.approx(2 / 3)
    assert got["doc_mrr"] == 0.5 and got["doc_map"] == pytest.approx((1 / 2 + 2 / 3) / 3)


def test_chunker_none_makes_one_chunk_per_document_of_span_gold_too():
    from chunkeval.engine.chunking import ChunkerSpec, chunk_corpora

    exp = Experiment.from_dict({"chunker": ["none", "fixed_token"], "chunk_sizes": [50, 100], "overlaps": ["0", "10"]})
    specs = exp.grid()
    assert specs[0] == ChunkerSpec("none", 0, 0) and sum(s.chunker == "none" for s in specs) == 1
    chunks = chunk_corpora({"a": "one two three", "b": "four"}, specs[0])
    assert chunks.ids() == ["a:0-13", "b:0-4"]
    with pytest.raises(InputError, match="takes chunk_size 0"):
        ChunkerSpec("none", 10, 0).validate()


def test_the_evaluate_flow_records_a_document_gold_run_with_its_run_files_and_report(
    beir, tmp_path, monkeypatch, prefect_api
):
    from chunkeval.flows.evaluate import evaluate
    from chunkeval.warehouse import Warehouse

    monkeypatch.setenv("CHUNKEVAL_HOME", str(tmp_path / "home"))
    settings = {"name": "tiny", "beir": str(beir), "retriever": "bm25", "chunker": ["none"], "k": [3]}
    result = evaluate(experiment={**settings, "slice_by": ["type"]})
    wh = Warehouse(tmp_path / "home" / "warehouse")
    summary = wh.summary(result["run_id"]).to_pylist()
    assert len(summary) == 1 and summary[0]["doc_ndcg_at_k_mean"] > 0 and summary[0]["span_recall_mean"] is None
    sliced = wh.slice_summary(result["run_id"]).to_pylist()  # the flow keeps the slices: q0–q8 judged, 5 even, 4 odd
    assert [(r["slice_value"], r["n_queries"], r["too_small"]) for r in sliced] == [("even", 5, True), ("odd", 4, True)]
    files = list((wh.results_dir / result["run_id"] / "doc_runs").iterdir())
    assert [f.name for f in files] == [
        "none_bm25_none_none_none_0_0_3.trec"
    ]  # model retriever index reranker chunker …
    page = Path(result["report"]).read_text()
    assert "doc_ndcg_at_k" in page and 'href="#budget"' not in page and 'href="#slices"' in page


def test_evaluate_run_scores_a_chunk_run_against_document_qrels_by_maxp(tmp_path, capsys):
    """The worked example of docs/metrics.md as files: chunks of B, A, B, C, D (document ids holding `:`)."""
    from chunkeval.cli.main import main

    gold = tmp_path / "qrels.tsv"
    gold.write_text("query-id\tcorpus-id\tscore\nq\tx:A\t2\nq\tx:C\t1\nq\tx:E\t1\n")
    chunks = ["x:B:0-10", "x:A:5-9", "x:B:10-20", "x:C:0-3", "x:D:0-3"]
    run = tmp_path / "run.jsonl"
    run.write_text(json.dumps({"query_id": "q", "retrieved_chunk_ids": chunks}) + "\n")
    argv = ["evaluate-run", "--gold", str(gold), "--run", str(run), "--format", "doc-qrels", "--k", "3", "--json"]
    assert main(argv) == 0
    macro = json.loads(capsys.readouterr().out)["macro"]
    assert macro["doc_ndcg_at_k"] == pytest.approx(0.5627272554209044, abs=1e-9)
    assert macro["doc_recall_at_k"] == pytest.approx(2 / 3) and macro["doc_mrr"] == 0.5
    assert macro["doc_map"] == pytest.approx((1 / 2 + 2 / 3) / 3)
    run.write_text(json.dumps({"query_id": "q", "retrieved_chunk_ids": ["x:B"]}) + "\n")
    assert main(argv) == 2
    assert "'x:B' is not a chunk id <doc_id>:<start>-<end>" in capsys.readouterr().err


def test_a_dense_maxp_search_looks_deeper_only_for_queries_that_need_it():
    """`shallow_first` (a run's exact dense search under document gold): the first k documents of every query
    equal those of one search 1,000 chunks deep, and only a query whose first 100 chunks hold fewer than k
    documents is searched again (here the first: its best 150 chunks are one document's)."""
    from chunkeval.engine.retrieval.retrievers.dense import top_k
    from chunkeval.engine.scoring.doc_metrics import shallow_first

    rng = np.random.default_rng(5)
    chunks = rng.standard_normal((2000, 16)).astype(np.float32)
    queries = rng.standard_normal((6, 16)).astype(np.float32)
    chunks[:150] = queries[0] + 0.01 * chunks[:150]  # document 0: 150 chunks near the first query
    chunks /= np.linalg.norm(chunks, axis=1, keepdims=True)
    # On a grid of 1/64 every inner product is a multiple of 2**-12 below 16 that float32 holds exactly, partial sums
    # included, whatever the BLAS and the batch: both searches see bit-equal scores. Unrounded, near-ties of about
    # 3e-7 were ordered one way in a batch of 6 queries and the other in a batch of 2 under OpenBLAS.
    chunks, queries = np.round(chunks * 64) / 64, np.round(queries / np.linalg.norm(queries, axis=1)[:, None] * 64) / 64
    doc_of_chunk = np.r_[np.zeros(150, dtype=np.int64), 1 + np.arange(1850) // 10]
    asked = []

    def search(rows, depth):
        asked.append((None if rows is None else rows.tolist(), depth))
        return top_k(queries if rows is None else queries[rows], chunks, depth)

    found, scores = shallow_first(search, 10, 1000, doc_of_chunk)
    assert asked == [(None, 100), ([0, 1], 1000)]  # with another query: a one-row product rounds apart
    deep, deep_scores = top_k(queries, chunks, 1000)
    assert np.array_equal(found[0], deep[0]) and np.array_equal(found[1:, :100], deep[1:, :100])
    assert np.array_equal(scores[0], deep_scores[0]) and np.array_equal(scores[1:, :100], deep_scores[1:, :100])
    assert np.isnan(scores[1:, 100:]).all()  # the scores follow their chunks
    n_docs = int(doc_of_chunk.max()) + 1
    assert np.array_equal(maxp_ranking(found, doc_of_chunk, n_docs, 10), maxp_ranking(deep, doc_of_chunk, n_docs, 10))
