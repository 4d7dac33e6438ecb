"""The reranking keys of a configuration (reranker, candidates) and the reranking stage."""

from __future__ import annotations

import duckdb
import numpy as np
import pytest

from chunkeval.engine.embedding.embedders import Embedders
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.engine.pipeline.sweep import run_sweep
from chunkeval.paths import DEMO_DIR
from chunkeval.run_result import RunResult
from chunkeval.vocabulary import CONFIG_KEYS, METRICS, RERANK_KEYS
from chunkeval.warehouse import Warehouse

DEMO = dict(corpus_dir=str(DEMO_DIR / "corpora"), questions=str(DEMO_DIR / "questions.csv"), chunk_sizes=(200,))


@pytest.fixture(scope="module")
def bm25_result():
    """A demo sweep that loads no model (bm25 over fixed chunks)."""
    return run_sweep(Experiment(name="old", **DEMO, retriever=("bm25",), k=(1, 5)), Embedders(None))


def test_runs_recorded_before_the_reranking_keys_read_as_reranker_none(tmp_path, bm25_result):
    """A warehouse of schema 6 holding a run whose files have no reranker or candidates columns: after
    the migration its rows read reranker `none` and candidates null, beside a new run's, everywhere."""
    old = Warehouse(tmp_path)
    with duckdb.connect(str(old.db_path)) as con:
        old._migrate(con, upto=6)
        for table in ("summaries", "corpus_summaries"):  # as chunkeval made them before the keys existed
            for key in RERANK_KEYS:
                con.execute(f"ALTER TABLE {table} DROP COLUMN {key}")
        assert old.schema_version(con) == 6
    older = [c for c in bm25_result.per_query.column_names if c not in RERANK_KEYS]
    first = old.begin_run("old", {}, "manual", {})
    summary = bm25_result.summary.drop_columns(list(RERANK_KEYS))
    old.complete_run(first, RunResult(bm25_result.per_query.select(older), summary, texts_embedded=0))
    wh = Warehouse(tmp_path)
    second = wh.begin_run("old", {}, "manual", {})
    wh.complete_run(second, RunResult(bm25_result.per_query, bm25_result.summary, texts_embedded=0))
    with wh.connect() as con:
        for view in ("config_summary", "query_results", "corpus_summary", "trend"):
            rows = con.execute(f"SELECT DISTINCT run_id, reranker, candidates FROM {view}").fetchall()
            assert sorted(rows) == sorted([(first, "none", None), (second, "none", None)]), view
    trend = wh.trend("old", "mrr", {"k": 5, "reranker": "none", "candidates": None})
    assert {r["run_id"] for r in trend} == {first, second} and trend[-1]["change"] == pytest.approx(0)
    assert bm25_result.summary.column_names[: len(CONFIG_KEYS)] == CONFIG_KEYS


def _steps(exp: Experiment, embedders: Embedders):
    """The sweep's steps up to the embeddings, for checks on the retrieved indices themselves."""
    from chunkeval.engine.pipeline import sweep

    embedders = embedders.for_experiment(exp)
    inputs = sweep.load_inputs(exp)
    chunkings = [sweep.chunk_one(inputs.corpora, s, m, embedders) for s, m in sweep.chunking_jobs(exp)]
    configs = sweep.plan(exp, chunkings)
    return inputs, chunkings, configs, sweep.embed_all(inputs, chunkings, configs, embedders)


def test_reranking_every_chunk_by_a_model_is_dense_retrieval_by_it(embedder_factory):
    """A first stage that returns every chunk (the last first), reranked by MiniLM: exactly dense
    retrieval by MiniLM, indices and tie rule included; with candidates = k, the first stage's set."""
    from chunkeval.engine.pipeline import ranking

    exp = Experiment(
        name="rerank",
        **DEMO,
        k=(1, 3, 5),
        retriever=("dense", "plugins_for_tests:every_chunk_backwards", "bm25"),
        reranker=("none", "all-MiniLM-L6-v2"),
        candidates=(10_000, 5),
    )
    inputs, chunkings, configs, embedded = _steps(exp, Embedders.of(embedder_factory()))
    (dense,) = [c for c in configs if c.retriever == "dense" and c.reranker == "none"]
    expected, cosines = ranking.retrieve_scored(inputs, chunkings[0], dense, embedded, 5)
    (every,) = [c for c in configs if c.retriever.endswith("backwards") and c.candidates == 10_000]
    first = ranking.retrieve(inputs, chunkings[0], every, embedded, every.candidates)
    assert (first[:, : len(chunkings[0].chunks)] >= 0).all()  # every chunk is a candidate
    reranked, scores = ranking.rerank_top(inputs, chunkings[0], every, embedded, first, 5)
    assert np.array_equal(reranked, expected) and np.allclose(scores, cosines, atol=1e-6)  # its scores: the cosines
    (bm25,) = [c for c in configs if c.retriever == "bm25" and c.candidates == 5]
    first = ranking.retrieve(inputs, chunkings[0], bm25, embedded, 5)
    again = ranking.rerank_top(inputs, chunkings[0], bm25, embedded, first, 5)[0]
    assert [set(r) for r in again] == [set(r) for r in first] and not np.array_equal(again, first)
    exp = exp.with_overrides(
        k=(1, 5), retriever=("dense", "plugins_for_tests:every_chunk_backwards"), candidates=(10_000,)
    )
    result = run_sweep(exp, embedder_factory())
    rows = {}
    for r in result.per_query.to_pylist():
        rows[(r["retriever"], r["reranker"], r["candidates"], r["k"], r["query_id"])] = r
    for (retriever, _, candidates, k, q), r in rows.items():
        if retriever.endswith("backwards") and candidates == 10_000:
            twin = rows[("dense", "none", None, k, q)]
            assert all(r[m] == twin[m] or (r[m] != r[m] and twin[m] != twin[m]) for m in METRICS), (k, q)
    assert result.summary.num_rows == 2 * 2 * 2  # two first stages, each alone and reranked, at two k


def test_candidates_below_k_are_left_out_with_a_note(embedder_factory):
    exp = Experiment(
        name="few", **DEMO, k=(1, 5), retriever=("bm25",), reranker=("all-MiniLM-L6-v2",), candidates=(3, 8)
    )
    result = run_sweep(exp, embedder_factory())
    combos = {(r["candidates"], r["k"]) for r in result.summary.to_pylist()}
    assert combos == {(3, 1), (8, 1), (8, 5)}
    assert any("candidates 3 at k 5" in note for note in result.notes)


@pytest.mark.slow
def test_a_cross_encoder_built_from_minilm_reranks_and_its_scores_are_cached(tmp_path, monkeypatch):
    """Plumbing, not quality: a CrossEncoder folder made from the bundled MiniLM with a fresh (seeded)
    head reranks bm25's top 10; a second run scores no pair again."""
    import torch
    from sentence_transformers import CrossEncoder

    from chunkeval.engine.embedding.folders import bundled_folder

    monkeypatch.setenv("CHUNKEVAL_HOME", str(tmp_path / "home"))
    torch.manual_seed(18)
    CrossEncoder(str(bundled_folder()), num_labels=1).save_pretrained(str(tmp_path / "ce"))
    exp = Experiment(
        name="ce", **DEMO, k=(1, 5), retriever=("bm25",), reranker=("none", str(tmp_path / "ce")), candidates=(10,)
    )
    first = run_sweep(exp, Embedders(None))
    reranked = [r for r in first.summary.to_pylist() if r["reranker"] != "none"]
    assert len(reranked) == 2 and all(r["candidates"] == 10 for r in reranked)
    parts = sorted((tmp_path / "home" / "cache" / "rerank").glob("*/part-*.parquet"))
    assert parts
    again = run_sweep(exp, Embedders(None))
    assert sorted((tmp_path / "home" / "cache" / "rerank").glob("*/part-*.parquet")) == parts
    assert again.summary.equals(first.summary)
