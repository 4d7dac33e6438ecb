"""Looking at the warehouse without stopping the night: a process that holds chunkeval.duckdb (a DuckDB
session, a notebook) is named while chunkeval waits and when it gives up; a run that cannot record itself
is recorded by the next command; `chunkeval sql` and `chunkeval warehouse snapshot`. A real DuckDB holder
in another process, real runs of the demo."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time

import duckdb
import pytest

from chunkeval.cli import main
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.engine.pipeline.sweep import run_sweep
from chunkeval.report.html import build_report
from chunkeval.run_result import RunResult
from chunkeval.warehouse import LockTimeout, Warehouse

HOLD = (
    "import duckdb, sys; c = duckdb.connect(sys.argv[1], read_only=True); print('held', flush=True); sys.stdin.read()"
)


class Holder:
    """Another process with the warehouse open read-only, as a DuckDB session left open would have it."""

    def __init__(self, db_path):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLD, str(db_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout.readline().strip() == "held"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def sweep_result(embedder_factory):
    exp = Experiment(name="held", chunker=("fixed_token",), chunk_sizes=(100,), overlaps=("0",), k=(3,))
    return exp, run_sweep(exp, embedder_factory())


@pytest.fixture()
def home(tmp_path, monkeypatch, sweep_result):
    """A home whose warehouse holds one completed run of experiment `held`."""
    monkeypatch.setenv("CHUNKEVAL_HOME", str(tmp_path))
    monkeypatch.setenv("CHUNKEVAL_LOCK_TIMEOUT", "1")
    exp, result = sweep_result
    wh = Warehouse(tmp_path / "warehouse")
    run_id = wh.begin_run("held", {}, "manual", exp.to_dict())
    wh.complete_run(run_id, RunResult(result.per_query, result.summary, texts_embedded=0, references=result.references))
    return tmp_path


def test_a_command_says_who_holds_the_warehouse_and_gives_up_in_one_line(home, capsys):
    with Holder(home / "warehouse" / "chunkeval.duckdb") as holder:
        began = time.monotonic()
        code = main(["runs"])
        waited = time.monotonic() - began
        pid = holder.proc.pid
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 4 and 1 <= waited < 60  # gives up after CHUNKEVAL_LOCK_TIMEOUT (1 s), however loaded the machine
    assert len(err) == 2, err
    assert err[0].startswith("chunkeval: WARNING: the warehouse is held by process") and f"{pid}" in err[0]
    assert err[1].startswith("chunkeval: error:") and f"process {pid}" in err[1] and "CHUNKEVAL_LOCK_TIMEOUT" in err[1]
    assert "close that process's connection" in err[1] and "chunkeval sql" in err[1]


def test_a_run_that_cannot_record_itself_keeps_its_results_and_the_next_command_records_it(home, sweep_result, capsys):
    exp, result = sweep_result
    wh = Warehouse(home / "warehouse")
    run_id = wh.begin_run("held", {}, "manual", exp.to_dict())
    with Holder(wh.db_path):
        with pytest.raises(LockTimeout, match=f"run {run_id} is complete and its results are kept"):
            wh.complete_run(
                run_id, RunResult(result.per_query, result.summary, texts_embedded=7, references=result.references)
            )
        wh.fail_run(run_id, "LockTimeout")  # what the flow does next: the manifest says completed, nothing changes
    assert wh.read_manifest(run_id)["status"] == "completed"
    assert (wh.results_dir / run_id / "per_query.parquet").is_file()
    assert main(["runs", "--experiment", "held", "--json"]) == 0
    runs = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)}
    assert runs[run_id]["status"] == "completed" and runs[run_id]["texts_embedded"] == 7
    assert Warehouse(home / "warehouse").summary(run_id).num_rows == result.summary.num_rows


def test_a_run_that_fails_while_the_warehouse_is_held_is_recorded_failed_later(home, sweep_result):
    exp, _ = sweep_result
    wh = Warehouse(home / "warehouse")
    run_id = wh.begin_run("held", {}, "manual", exp.to_dict())
    with Holder(wh.db_path):
        wh.fail_run(run_id, "RuntimeError: out of memory")  # never raises over the run's own error
    assert Warehouse(home / "warehouse").run(run_id)["status"] == "failed"


def test_sql_reads_beside_a_reader_and_lets_go_at_once(home, capsys):
    db = home / "warehouse" / "chunkeval.duckdb"
    with Holder(db):  # readers share the file: a notebook open read-only does not stop `chunkeval sql`
        assert main(["sql", "SELECT experiment, status FROM runs", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == [{"experiment": "held", "status": "completed"}]
    assert main(["sql", "SELECT k, round(span_recall_mean, 3) AS recall FROM config_summary", "--csv"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "k,recall" and out[1].startswith("3,")
    assert main(["sql", "SELECT chunker, count(*) AS n FROM query_results GROUP BY chunker"]) == 0
    out = capsys.readouterr().out
    assert "fixed_token" in out and "(1 row(s))" in out
    # the query's connection is closed: another process writes at once
    subprocess.run(
        [sys.executable, "-c", f"import duckdb; duckdb.connect({str(db)!r}).execute('CHECKPOINT')"], check=True
    )


def test_a_snapshot_is_self_contained(home, tmp_path_factory, capsys):
    out = tmp_path_factory.mktemp("snap") / "night.duckdb"
    assert main(["warehouse", "snapshot", str(out)]) == 0
    said = capsys.readouterr().out
    assert f"snapshot of 1 run(s) written to {out}" in " ".join(said.split())  # one sentence, folded
    assert all(len(line) <= 120 or str(out) in line for line in said.splitlines()), said
    wh = Warehouse(home / "warehouse")
    expected = wh.table("SELECT count(*) AS n FROM query_results")["n"][0].as_py()
    shutil.rmtree(home / "warehouse")  # nothing of the warehouse is needed to read it
    con = duckdb.connect(str(out), read_only=True)
    assert con.execute("SELECT count(*) FROM query_results").fetchone()[0] == expected > 0
    kinds = dict(con.execute("SELECT table_name, table_type FROM information_schema.tables").fetchall())
    assert {"runs", "config_summary", "trend", "query_results", "gold_references"} <= kinds.keys()
    assert set(kinds.values()) == {"BASE TABLE"}
    assert not list(out.parent.glob(".*partial*"))


def test_a_report_of_a_run_without_span_references_says_what_it_lacks(tmp_path, sweep_result):
    exp, result = sweep_result
    wh = Warehouse(tmp_path / "warehouse")
    run_id = wh.begin_run("api", {}, "manual", exp.to_dict())
    wh.complete_run(
        run_id, RunResult(result.per_query, result.summary, texts_embedded=0)
    )  # as the Python API may record it
    html = build_report(wh, "api")
    assert "recorded without span references" in html
    assert "recorded without its reference table (through the Python API)" in html  # the failure analysis too
    assert "was recorded before chunkeval kept retrieved lists" in html  # the drill-down says what it lacks
