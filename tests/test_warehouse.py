"""The DuckDB warehouse, with real DuckDB files and real sweep results."""

from __future__ import annotations

import multiprocessing as mp
import shutil
from datetime import UTC, datetime, timedelta

import duckdb
import pyarrow as pa
import pytest

from chunkeval.engine.embedding import Embedder
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.engine.pipeline.sweep import run_sweep
from chunkeval.paths import DEMO_DIR
from chunkeval.run_result import RunResult
from chunkeval.warehouse import SCHEMA_VERSION, Warehouse

FPS = {"corpus": "c1", "gold": "g1", "model": "m1"}


@pytest.fixture(scope="module")
def demo_result(tmp_path_factory):
    exp = Experiment.from_yaml(DEMO_DIR / "experiment.yaml").with_overrides(
        chunker=("fixed_token",),
        chunk_sizes=(100,),
        overlaps=("0",),
        k=(1, 3, 5),
        model=("all-MiniLM-L6-v2",),
        retriever=("dense",),
    )
    return run_sweep(exp, Embedder(cache_dir=tmp_path_factory.mktemp("cache")))


def test_run_lifecycle_and_views(tmp_path, demo_result):
    wh = Warehouse(tmp_path)
    done = wh.begin_run("demo", FPS, "manual", {"k": [1]})
    wh.complete_run(done, RunResult(demo_result.per_query, demo_result.summary, texts_embedded=123))
    running = wh.begin_run("demo", FPS, "schedule", {})
    failed = wh.begin_run("demo", FPS, "event", {})
    wh.fail_run(failed, "boom")
    skipped = wh.record_skipped("demo", FPS, "schedule", {})
    runs = {r["run_id"]: r for r in wh.runs("demo")}
    assert {r: runs[r]["status"] for r in (done, running, failed, skipped)} == {
        done: "completed",
        running: "running",
        failed: "failed",
        skipped: "skipped",
    }
    assert runs[done]["texts_embedded"] == 123 and runs[failed]["error"] == "boom"
    assert [r["run_id"] for r in wh.runs("demo")][0] == skipped  # newest first
    with duckdb.connect(str(wh.db_path)) as con:
        per_run = dict(con.execute("SELECT run_id, count(*) FROM query_results GROUP BY run_id").fetchall())
        assert per_run == {done: demo_result.per_query.num_rows}
        assert con.execute("SELECT count(*) FROM config_summary").fetchone()[0] == demo_result.summary.num_rows
        value = con.execute(
            "SELECT value FROM trend WHERE run_id = ? AND metric = 'span_recall' AND k = 5", [done]
        ).fetchone()[0]
    expected = [r for r in demo_result.summary.to_pylist() if r["k"] == 5][0]["span_recall_mean"]
    assert value == pytest.approx(expected)
    assert wh.last_completed("demo")["run_id"] == done
    assert wh.summary(done).num_rows == demo_result.summary.num_rows


def test_trend_change_and_regressions(tmp_path, demo_result):
    import pyarrow.compute as pc

    from chunkeval.stats.summaries import summarize

    wh = Warehouse(tmp_path)
    first = wh.begin_run("demo", FPS, "manual", {})
    wh.complete_run(first, RunResult(demo_result.per_query, demo_result.summary, texts_embedded=1))
    # a real fall: every query loses a fifth of its span recall
    per_query = demo_result.per_query
    worse_q = per_query.set_column(
        per_query.column_names.index("span_recall"), "span_recall", pc.multiply(per_query["span_recall"], 0.8)
    )
    worse = summarize(
        worse_q.drop_columns(["has_gold"]), ["model", "retriever", "chunker", "chunk_size", "chunk_overlap", "k"]
    )
    second = wh.begin_run("demo", FPS, "schedule", {})
    wh.complete_run(second, RunResult(worse_q, worse, texts_embedded=0))
    rows = wh.trend("demo", "span_recall", {"k": 5})
    assert [r["run_id"] for r in rows] == [first, second]
    fall = rows[1]["change"]
    assert rows[0]["change"] is None and fall == pytest.approx(-0.2 * rows[0]["value"])
    first_summary = [r for r in demo_result.summary.to_pylist() if r["k"] == 5][0]
    assert (rows[0]["ci_low"], rows[0]["ci_high"]) == (
        first_summary["span_recall_ci_low"],
        first_summary["span_recall_ci_high"],
    )
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
        con.execute(
            "INSERT INTO runs (run_id, experiment, status, trigger, started_at, texts_embedded) "
            "VALUES ('old-run', 'demo', 'completed', 'manual', now()::TIMESTAMP, 5)"
        )
        assert old.schema_version(con) == 1
    wh = Warehouse(tmp_path)
    assert wh.run("old-run")["texts_embedded"] == 5
    with wh.connect() as con:
        assert wh.schema_version(con) == SCHEMA_VERSION
    new = wh.begin_run("demo", FPS, "manual", {})
    wh.complete_run(new, RunResult(demo_result.per_query, demo_result.summary, texts_embedded=0))
    assert [r["run_id"] for r in wh.runs("demo", "completed")] == [new, "old-run"]


def test_an_axis_a_warehouse_lacks_is_added_when_it_opens(tmp_path, demo_result):
    """A warehouse made before an axis was declared (here: one whose summary tables lack `context`) gains the
    column when it next opens, its older rows reading the axis's value from before it existed; no schema version
    of its own, as a new axis is one entry of `vocabulary.AXES`."""
    wh = Warehouse(tmp_path)
    run = wh.begin_run("demo", FPS, "manual", {})
    wh.complete_run(run, RunResult(demo_result.per_query, demo_result.summary, texts_embedded=0))
    with duckdb.connect(str(wh.db_path)) as con:
        con.execute("DROP VIEW IF EXISTS summary")
        for table in ("summaries", "corpus_summaries", "slice_summaries"):
            con.execute(f"ALTER TABLE {table} DROP COLUMN context")
    again = Warehouse(tmp_path)
    with again.connect() as con:
        assert con.execute("SELECT DISTINCT context FROM summaries").fetchall() == [("none",)]
        for table in ("corpus_summaries", "slice_summaries"):
            assert "context" in {c for (c,) in con.execute(f"SELECT column_name FROM (DESCRIBE {table})").fetchall()}
    assert {r["context"] for r in again.summary(run).to_pylist()} == {"none"}
    # the views unite the runs' files with a seed of every column, named by the columns: an older chunkeval's seed
    # (one name for a schema version, without the axis) is not the one read, and a missing seed is made again
    seeds = sorted(again.results_dir.glob("_schema*"))
    assert len(seeds) == 1 and (seeds[0] / "per_query.parquet").is_file()
    shutil.rmtree(seeds[0])
    with Warehouse(tmp_path).connect() as con:
        assert con.execute("SELECT DISTINCT late FROM query_results").fetchall() == [("none",)]
    assert [p.name for p in again.results_dir.glob("_schema*")] == [seeds[0].name]


def _record(args):
    root, per_query, summary, n = args
    wh = Warehouse(root)
    ids = []
    for _ in range(n):
        run_id = wh.begin_run("demo", FPS, "schedule", {})
        wh.complete_run(run_id, RunResult(per_query, summary, texts_embedded=0))
        ids.append(run_id)
    return ids


def test_two_processes_writing_at_once_are_both_recorded(tmp_path, demo_result):
    ctx = mp.get_context("spawn")
    with ctx.Pool(2) as pool:
        results = pool.map(_record, [(tmp_path, demo_result.per_query, demo_result.summary, 5)] * 2)
    ids = [i for r in results for i in r]
    completed = Warehouse(tmp_path).runs("demo", "completed")
    assert sorted(r["run_id"] for r in completed) == sorted(ids) and len(ids) == 10


def _close(a: pa.Table, b: pa.Table, keys: list[str], tol: float = 1e-12) -> None:
    """Every numeric column both tables share agrees within tol, rows matched by keys."""
    rows_b = {tuple(r[k] for k in keys): r for r in b.to_pylist()}
    assert a.num_rows == b.num_rows and a.num_rows > 0
    for r in a.to_pylist():
        other = rows_b[tuple(r[k] for k in keys)]
        for c in set(a.column_names) & set(b.column_names):
            if isinstance(r[c], float):
                assert r[c] == pytest.approx(other[c], abs=tol, nan_ok=True), c
            elif c not in ("experiment", "started_at", "trigger"):
                assert r[c] == other[c], c


def test_the_summary_tables_hold_the_sweeps_numbers_and_are_rebuilt_from_the_files(tmp_path, demo_result):
    keys = ["model", "retriever", "chunker", "chunk_size", "chunk_overlap", "k"]
    wh = Warehouse(tmp_path)
    run_id = wh.begin_run("demo", FPS, "manual", {})
    wh.complete_run(
        run_id, RunResult(demo_result.per_query, demo_result.summary, texts_embedded=0, by_corpus=demo_result.by_corpus)
    )
    _close(wh.summary(run_id), demo_result.summary, keys)
    corpus = wh.table("SELECT * FROM corpus_summary WHERE run_id = ?", [run_id])
    _close(corpus, demo_result.by_corpus, keys + ["corpus_id"])
    # a run of an older chunkeval has no by_corpus.parquet: its per-corpus means come from its per-query
    # rows through the same SQL (without intervals), here after the tables are rebuilt by repair
    (wh.results_dir / run_id / "by_corpus.parquet").unlink()
    with wh.connect() as con:
        con.execute("DELETE FROM summaries")
        con.execute("DELETE FROM corpus_summaries")
    assert wh.summary(run_id).num_rows == 0
    assert wh.repair()["damaged"] is False
    _close(wh.summary(run_id), demo_result.summary, keys)
    rebuilt = wh.table("SELECT * FROM corpus_summary WHERE run_id = ?", [run_id])
    _close(
        rebuilt.drop_columns([c for c in rebuilt.column_names if c.endswith(("_ci_low", "_ci_high"))]),
        demo_result.by_corpus.drop_columns(
            [c for c in demo_result.by_corpus.column_names if c.endswith(("_ci_low", "_ci_high"))]
        ),
        keys + ["corpus_id"],
    )
    assert (
        rebuilt["span_recall_ci_low"].null_count == rebuilt.num_rows
    )  # intervals are never recomputed behind one's back


def test_a_rollup_averages_every_query_row_of_the_period(tmp_path, demo_result, monkeypatch, capsys):
    import numpy as np
    import pyarrow.compute as pc

    from chunkeval.cli import main

    monkeypatch.setenv("CHUNKEVAL_HOME", str(tmp_path))
    wh = Warehouse.at_home()
    now = datetime.now(UTC).replace(tzinfo=None)
    per_query = demo_result.per_query
    for days, scale in ((30, 0.5), (3, 0.9), (1, 1.0)):  # the first night is outside the week
        scaled = per_query.set_column(
            per_query.column_names.index("span_recall"), "span_recall", pc.multiply(per_query["span_recall"], scale)
        )
        run_id = wh.begin_run("demo", FPS, "schedule", {}, started_at=now - timedelta(days=days))
        wh.complete_run(run_id, RunResult(scaled, demo_result.summary, texts_embedded=0))
    rollup, runs = wh.rollup("demo", timedelta(days=7))
    assert len(runs) == 2
    row = [r for r in rollup.to_pylist() if r["k"] == 5][0]
    recall = np.asarray([r["span_recall"] for r in per_query.to_pylist() if r["k"] == 5])
    assert row["n_runs"] == 2 and row["n_queries"] == 2 * len(recall)
    assert row["span_recall_mean"] == pytest.approx(np.mean(np.r_[0.9 * recall, recall]), abs=1e-12)
    assert row["span_recall_std"] == pytest.approx(np.std(np.r_[0.9 * recall, recall], ddof=1), abs=1e-12)
    k5 = [r for r in per_query.to_pylist() if r["k"] == 5]
    assert row["span_precision_micro"] == pytest.approx(
        sum(r["covered"] for r in k5) / sum(r["retrieved_chars"] for r in k5), abs=1e-12
    )
    assert main(["report", "--experiment", "demo", "--since", "7d"]) == 0
    out = capsys.readouterr().out
    assert "2 completed run(s) started within 7d" in out and "n_runs" in out
    assert main(["report", "--experiment", "demo", "--since", "12h"]) == 2
    assert "no completed run since" in capsys.readouterr().err


def test_runs_are_deleted_and_pruned_with_their_files_but_never_the_baseline(
    tmp_path, demo_result, monkeypatch, capsys
):
    from chunkeval.cli import main

    monkeypatch.setenv("CHUNKEVAL_HOME", str(tmp_path))
    wh = Warehouse.at_home()
    now = datetime.now(UTC).replace(tzinfo=None)
    ids = []
    for days in (200, 120, 60, 2, 1):
        run_id = wh.begin_run("demo", FPS, "schedule", {}, started_at=now - timedelta(days=days))
        wh.complete_run(run_id, RunResult(demo_result.per_query, demo_result.summary, texts_embedded=0))
        ids.append(run_id)
    wh.pin_baseline("demo", ids[1])
    assert main(["runs", "delete", ids[1]]) == 2
    assert "pinned baseline" in capsys.readouterr().err and (wh.results_dir / ids[1]).is_dir()
    assert main(["runs", "delete", ids[0], "nosuch"]) == 2  # all are checked first: nothing goes
    assert (wh.results_dir / ids[0]).is_dir()
    assert main(["runs", "delete", ids[0]]) == 0
    assert not (wh.results_dir / ids[0]).exists() and ids[0] not in {r["run_id"] for r in wh.runs()}
    assert wh.table("SELECT count(*) AS n FROM config_summary WHERE run_id = ?", [ids[0]])["n"][0].as_py() == 0
    assert main(["runs", "prune", "--experiment", "demo", "--older-than", "90d"]) == 0
    out = capsys.readouterr().out
    assert "deleted 0 run(s)" in out and f"kept run {ids[1]}" in out  # 120 days old, but the pinned baseline
    assert main(["runs", "prune", "--experiment", "demo", "--older-than", "30d"]) == 0
    assert [r["run_id"] for r in wh.runs("demo")] == [ids[4], ids[3], ids[1]]
    assert main(["runs", "prune", "--experiment", "demo", "--keep-last", "1"]) == 0
    assert [r["run_id"] for r in wh.runs("demo")] == [ids[4], ids[1]]
    # a repair never brings a deleted run back, even from a rebuilt catalogue
    wh.db_path.unlink()
    assert wh.repair()["runs"] == 2 and {r["run_id"] for r in wh.runs()} == {ids[4], ids[1]}
    assert wh.baseline("demo") == ids[1]


def test_trend_json_is_the_trend_rows_and_marks_changed_gold_and_model(tmp_path, demo_result):
    """`trend --json` is encoded by DuckDB (`trend_json`), the terminal's rows by Python (`trend`): the same rows,
    values and marks, whatever the filter, metrics and window; the gold and model marks from one SQL definition."""
    import io
    import json

    from chunkeval.cli.output import iso

    wh = Warehouse(tmp_path)
    ids = []
    for gold, model in (("g1", "m1"), ("g2", "m1"), ("g2", "m2"), ("", "m2"), ("g3", "m2")):
        run_id = wh.begin_run("demo", {"corpus": "c1", "gold": gold, "model": model}, "manual", {})
        wh.complete_run(run_id, RunResult(demo_result.per_query, demo_result.summary, texts_embedded=1))
        ids.append(run_id)
    # a missing fingerprint differs from nothing: neither run 4 (none) nor run 5 (g3 after none) is marked
    assert wh.input_changes("demo") == {ids[1]: "gold set changed", ids[2]: "model changed"}
    for metrics, config, last in (
        (["span_recall"], {"k": 5}, None),
        (["span_recall", "mrr"], None, None),
        (["mrr", "recall_at_k"], {"chunk_size": 100}, 2),
        (["span_recall"], {"k": 99}, None),
    ):
        rows = [{**r, "started_at": iso(r["started_at"])} for m in metrics for r in wh.trend("demo", m, config, last)]
        out = io.BytesIO()
        assert wh.trend_json(out, "demo", metrics, config, last) == len(rows)
        assert json.loads(out.getvalue()) == rows
        assert len(rows) == (
            0 if config == {"k": 99} else len({r["config_id"] for r in rows}) * (last or 5) * len(metrics)
        )
    marked = {r["run_id"]: (r["gold_changed"], r["model_changed"]) for r in wh.trend("demo", "mrr")}
    assert marked == {
        ids[0]: (False, False),
        ids[1]: (True, False),
        ids[2]: (False, True),
        ids[3]: (False, False),
        ids[4]: (False, False),
    }


def test_trend_of_the_newest_runs_keeps_each_change_against_the_run_before_it(tmp_path, demo_result):
    """`--last N` reads the newest N runs and, per configuration, the newest older row (not a window over the whole
    history): each change is still against the previous run that scored the configuration, even where that run is
    older than the window or the configuration skipped runs; the rows equal the whole trend's."""
    import pyarrow.compute as pc

    wh = Warehouse(tmp_path)

    def only(k: int) -> RunResult:
        keep = lambda t: t.filter(pc.equal(t["k"], k))  # noqa: E731
        return RunResult(keep(demo_result.per_query), keep(demo_result.summary), texts_embedded=0)

    results = [RunResult(demo_result.per_query, demo_result.summary, texts_embedded=1), only(1), only(1), only(3)]
    results.append(RunResult(demo_result.per_query, demo_result.summary, texts_embedded=1))
    for result in results:
        wh.complete_run(wh.begin_run("demo", FPS, "manual", {}), result)
    full = wh.trend("demo", "span_recall")
    for last in (1, 2, 3, 5, 9):
        shown = wh.trend("demo", "span_recall", last=last)
        ids = {r["run_id"] for r in shown}
        assert shown == [r for r in full if r["run_id"] in ids] and len(ids) == min(last, 5)
    k5 = wh.trend("demo", "span_recall", {"k": 5}, last=1)
    assert len(k5) == 1 and k5[0]["change"] == 0.0  # against the first run, four runs back
