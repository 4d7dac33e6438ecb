"""Deleting a run removes everything under the warehouse that holds its text (its folder, its HTML report,
the diffs and the experiment page that show it), and `runs prune` never takes a run whose process may still
be reporting it: a real completing process beside a real `chunkeval runs prune`."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from chunkeval.cli import main
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.engine.pipeline.sweep import run_sweep
from chunkeval.report.diff import diff_path
from chunkeval.report.html import report_path, write_report
from chunkeval.run_result import RunResult
from chunkeval.warehouse import Warehouse
from chunkeval.warehouse.tables import utc_now


@pytest.fixture(scope="module")
def result(tmp_path_factory, embedder_factory):
    exp = Experiment(name="kept", chunker=("fixed_token",), chunk_sizes=(100,), overlaps=("0",), k=(3,))
    return exp, run_sweep(exp, embedder_factory())


def record(wh: Warehouse, exp: Experiment, result, questions: str | None = None, **begin) -> str:
    """A completed run of `result`; `questions`: a prefix its question texts take, to find them by."""
    refs = result.references
    if questions:
        texts = pa.array([f"{questions} {i}" for i in range(refs.num_rows)])
        refs = refs.set_column(refs.column_names.index("question"), "question", texts)
    run_id = wh.begin_run(exp.name, {}, "manual", exp.to_dict(), **begin)
    wh.complete_run(
        run_id,
        RunResult(result.per_query, result.summary, texts_embedded=0, references=refs, retrieved=result.retrieved),
    )
    return run_id


def test_deleting_a_run_leaves_no_file_that_holds_its_text(tmp_path, monkeypatch, result):
    monkeypatch.setenv("CHUNKEVAL_HOME", str(tmp_path))
    exp, res = result
    wh = Warehouse(tmp_path / "warehouse")
    gone, stays = record(wh, exp, res, questions="Gone question"), record(wh, exp, res)
    write_report(wh, exp.name, report_path(wh.root, exp.name, gone), gone)
    write_report(wh, exp.name, report_path(wh.root, exp.name, stays), stays)
    write_report(wh, exp.name, report_path(wh.root, exp.name))  # the experiment's page shows every run
    diff = diff_path(wh.root, exp.name, gone, stays)
    diff.write_text(f"<html>{gone} {stays}</html>", encoding="utf-8")
    assert b"Gone question" in report_path(wh.root, exp.name, gone).read_bytes()
    assert main(["runs", "delete", gone]) == 0
    assert report_path(wh.root, exp.name, stays).is_file() and not diff.exists()
    assert not report_path(wh.root, exp.name).exists()  # the next trend-report writes it again
    assert not (wh.results_dir / gone).exists()
    holding = [p for p in (tmp_path / "warehouse").rglob("*") if p.is_file() and b"Gone question" in p.read_bytes()]
    assert holding == []


COMPLETING = """
import sys
import pyarrow.parquet as pq
from datetime import timedelta
from chunkeval.run_result import RunResult
from chunkeval.report.html import report_path, write_report
from chunkeval.warehouse import Warehouse
from chunkeval.warehouse.tables import utc_now

folder = sys.argv[1]
wh = Warehouse.at_home()
run_id = wh.begin_run("kept", {}, "manual", {}, started_at=utc_now() - timedelta(hours=2))  # a long run
tables = {name: pq.read_table(f"{folder}/{name}.parquet") for name in ("per_query", "summary", "references")}
wh.complete_run(run_id, RunResult(tables["per_query"], tables["summary"], references=tables["references"]))
print(run_id, flush=True)
sys.stdin.readline()  # a prune runs now, while the run's process goes on to its report
print(write_report(wh, "kept", report_path(wh.root, "kept", run_id), run_id), flush=True)
"""


def test_a_prune_beside_a_completing_run_leaves_it_to_finish(tmp_path, monkeypatch, result):
    monkeypatch.setenv("CHUNKEVAL_HOME", str(tmp_path / "home"))
    exp, res = result
    for name in ("per_query", "summary", "references"):
        pq.write_table(getattr(res, name), tmp_path / f"{name}.parquet")
    wh = Warehouse(tmp_path / "home" / "warehouse")
    old = record(wh, exp, res, started_at=utc_now() - timedelta(hours=3))
    wh._update(old, finished_at=utc_now() - timedelta(hours=3))  # finished long ago: prune takes it
    completing = subprocess.Popen(
        [sys.executable, "-c", COMPLETING, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        run_id = completing.stdout.readline().strip()
        assert run_id, completing.communicate()
        prune = subprocess.run(
            [sys.executable, "-m", "chunkeval.cli", "runs", "prune", "--experiment", "kept", "--older-than", "1h"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        out, err = completing.communicate("go\n", timeout=120)
    finally:
        completing.kill()
    assert prune.returncode == 0 and "deleted 1 run(s) of experiment kept" in prune.stdout, prune.stderr
    assert completing.returncode == 0, err
    assert Path(out.strip()).is_file() and run_id in out
    assert [r["run_id"] for r in Warehouse(tmp_path / "home" / "warehouse").runs("kept")] == [run_id]
