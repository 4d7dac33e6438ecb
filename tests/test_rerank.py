"""The reranking keys of a configuration (reranker, candidates) and the reranking stage."""

from __future__ import annotations

import duckdb
import pytest

from chunkeval.engine.experiment import Experiment
from chunkeval.engine.sweep import Embedders, run_sweep
from chunkeval.paths import DEMO_DIR
from chunkeval.vocabulary import CONFIG_KEYS, RERANK_KEYS
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
    old.complete_run(first, bm25_result.per_query.select(older), summary, 0)
    wh = Warehouse(tmp_path)
    second = wh.begin_run("old", {}, "manual", {})
    wh.complete_run(second, bm25_result.per_query, bm25_result.summary, 0)
    with wh.connect() as con:
        for view in ("config_summary", "query_results", "corpus_summary", "trend"):
            rows = con.execute(f"SELECT DISTINCT run_id, reranker, candidates FROM {view} ORDER BY run_id").fetchall()
            assert rows == [(first, "none", None), (second, "none", None)], view
    trend = wh.trend("old", "mrr", {"k": 5, "reranker": "none", "candidates": None})
    assert [r["run_id"] for r in trend] == [first, second] and trend[1]["change"] == pytest.approx(0)
    assert bm25_result.summary.column_names[: len(CONFIG_KEYS)] == CONFIG_KEYS
