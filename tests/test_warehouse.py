"""The DuckDB warehouse, with real DuckDB files and real sweep results."""

from __future__ import annotations

import multiprocessing as mp

import duckdb
import pytest

from chunkeval.embedding import Embedder
from chunkeval.experiment import DEMO_DIR, Experiment
from chunkeval.sweep import run_sweep
from chunkeval.warehouse import SCHEMA_VERSION, Warehouse

FPS = {"corpus": "c1", "gold": "g1", "model": "m1"}


@pytest.fixture(scope="module")
def demo_result(tmp_path_factory):
    exp = Experiment.from_yaml(DEMO_DIR / "experiment.yaml").with_overrides(
        chunker=("fixed_token",), chunk_sizes=(100,), overlaps=("0",), k=(1, 3, 5), model=("all-MiniLM-L6-v2",), retriever=("dense",))
    return run_sweep(exp, Embedder(cache_dir=tmp_path_factory.mktemp("cache")))


def test_run_lifecycle_and_views(tmp_path, demo_result):
    wh = Warehouse(tmp_path)
    done = wh.begin_run("demo", FPS, "manual", {"k": [1]})
    wh.complete_run(done, demo_result.per_query, demo_result.summary, 123)
    running = wh.begin_run("demo", FPS, "schedule", {})
    failed = wh.begin_run("demo", FPS, "event", {})
    wh.fail_run(failed, "boom")
    skipped = wh.record_skipped("demo", FPS, "schedule", {})
    runs = {r["run_id"]: r for r in wh.runs("demo")}
    assert {r: runs[r]["status"] for r in (done, running, failed, skipped)} == {
        done: "completed", running: "running", failed: "failed", skipped: "skipped"}
    assert runs[done]["texts_embedded"] == 123 and runs[failed]["error"] == "boom"
    assert [r["run_id"] for r in wh.runs("demo")][0] == skipped  # newest first
    with duckdb.connect(str(wh.db_path)) as con:
        per_run = dict(con.execute("SELECT run_id, count(*) FROM query_results GROUP BY run_id").fetchall())
        assert per_run == {done: demo_result.per_query.num_rows}
        assert con.execute("SELECT count(*) FROM config_summary").fetchone()[0] == demo_result.summary.num_rows
        value = con.execute("SELECT value FROM trend WHERE run_id = ? AND metric = 'span_recall' AND k = 5", [done]).fetchone()[0]
    expected = [r for r in demo_result.summary.to_pylist() if r["k"] == 5][0]["span_recall_mean"]
    assert value == pytest.approx(expected)
    assert wh.last_completed("demo")["run_id"] == done
    assert wh.summary(done).num_rows == demo_result.summary.num_rows


def test_trend_change_and_regressions(tmp_path, demo_result):
    import pyarrow.compute as pc

    from chunkeval.metrics import summarize

    wh = Warehouse(tmp_path)
    first = wh.begin_run("demo", FPS, "manual", {})
    wh.complete_run(first, demo_result.per_query, demo_result.summary, 1)
    # a real fall: every query loses a fifth of its span recall
    per_query = demo_result.per_query
    worse_q = per_query.set_column(per_query.column_names.index("span_recall"), "span_recall",
                                   pc.multiply(per_query["span_recall"], 0.8))
    worse = summarize(worse_q.drop_columns(["has_gold"]), ["model", "retriever", "chunker", "chunk_size", "chunk_overlap", "k"])
    second = wh.begin_run("demo", FPS, "schedule", {})
    wh.complete_run(second, worse_q, worse, 0)
    rows = wh.trend("demo", "span_recall", {"k": 5})
    assert [r["run_id"] for r in rows] == [first, second]
    fall = rows[1]["change"]
    assert rows[0]["change"] is None and fall == pytest.approx(-0.2 * rows[0]["value"])
    first_summary = [r for r in demo_result.summary.to_pylist() if r["k"] == 5][0]
    assert (rows[0]["ci_low"], rows[0]["ci_high"]) == (first_summary["span_recall_ci_low"], first_summary["span_recall_ci_high"])
    assert rows[0]["duplicates"] == "positional"
    assert wh.trend("demo", "span_recall", {"k": 5}, last=1)[0]["run_id"] == second
    falls = wh.regressions("demo", ["span_recall", "mrr"], 0.05)
    assert {f["k"] for f in falls} == {1, 3, 5} and all(f["metric"] == "span_recall" for f in falls)
    assert all(f["p_adjusted"] < 0.05 and f["n_queries"] == 28 and f["worst"] for f in falls)
    assert wh.regressions("demo", ["span_recall"], 0.5) == []  # real, but smaller than the minimum effect
    wh.pin_baseline("demo", second)
    assert wh.baseline("demo") == second and wh.regressions("demo", ["span_recall"], 0.05) == []


def test_an_older_warehouse_is_migrated(tmp_path, demo_result):
    old = Warehouse(tmp_path)
    with duckdb.connect(str(old.db_path)) as con:
        old._migrate(con, upto=1)  # a warehouse as schema version 1 left it
        con.execute("INSERT INTO runs (run_id, experiment, status, trigger, started_at, texts_embedded) "
                    "VALUES ('old-run', 'demo', 'completed', 'manual', now()::TIMESTAMP, 5)")
        assert old.schema_version(con) == 1
    wh = Warehouse(tmp_path)
    assert wh.run("old-run")["texts_embedded"] == 5
    with wh.connect() as con:
        assert wh.schema_version(con) == SCHEMA_VERSION
    new = wh.begin_run("demo", FPS, "manual", {})
    wh.complete_run(new, demo_result.per_query, demo_result.summary, 0)
    assert [r["run_id"] for r in wh.runs("demo", "completed")] == [new, "old-run"]


def _record(args):
    root, per_query, summary, n = args
    wh = Warehouse(root)
    ids = []
    for _ in range(n):
        run_id = wh.begin_run("demo", FPS, "schedule", {})
        wh.complete_run(run_id, per_query, summary, 0)
        ids.append(run_id)
    return ids


def test_two_processes_writing_at_once_are_both_recorded(tmp_path, demo_result):
    ctx = mp.get_context("spawn")
    with ctx.Pool(2) as pool:
        results = pool.map(_record, [(tmp_path, demo_result.per_query, demo_result.summary, 5)] * 2)
    ids = [i for r in results for i in r]
    completed = Warehouse(tmp_path).runs("demo", "completed")
    assert sorted(r["run_id"] for r in completed) == sorted(ids) and len(ids) == 10
