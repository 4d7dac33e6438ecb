"""Faults are named as what they are: a healthy warehouse on a read-only volume serves every read and says
that it is read-only to a write (repair moves nothing); a full disk says so and leaves nothing that a
later command takes for damage. Real mounts (a read-only bind mount, a small tmpfs): skipped where this
process may not mount."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from chunkeval.cli import main
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.engine.pipeline.sweep import run_sweep
from chunkeval.errors import InputError
from chunkeval.run_result import RunResult
from chunkeval.warehouse import Warehouse


def mount(*args: str) -> bool:
    return subprocess.run(["mount", *args], capture_output=True).returncode == 0


@pytest.fixture()
def read_only_home(tmp_path, embedder_factory, monkeypatch):
    """A home whose warehouse holds a completed run, then made read-only in place by a bind mount."""
    home = tmp_path / "home"
    exp = Experiment(
        name="ro", chunker=("fixed_token",), chunk_sizes=(100, 200), overlaps=("0",), k=(3,), retriever=("bm25",)
    )
    result = run_sweep(exp, embedder_factory())
    wh = Warehouse(home / "warehouse")
    run_id = wh.begin_run("ro", {}, "manual", exp.to_dict())
    wh.complete_run(
        run_id,
        RunResult(result.per_query, result.summary, texts_embedded=result.texts_embedded, references=result.references),
    )
    if not (mount("--bind", str(home), str(home)) and mount("-o", "remount,bind,ro", str(home))):
        subprocess.run(["umount", str(home)], capture_output=True)
        pytest.skip("this process may not mount (a read-only bind mount needs root)")
    monkeypatch.setenv("CHUNKEVAL_HOME", str(home))
    yield home, run_id
    subprocess.run(["umount", str(home)], check=True)


def test_a_read_only_warehouse_serves_reads_and_names_writes(read_only_home, capsys):
    home, run_id = read_only_home
    db = home / "warehouse" / "chunkeval.duckdb"
    before = db.read_bytes()
    assert main(["runs", "--json"]) == 0
    assert [r["run_id"] for r in json.loads(capsys.readouterr().out)] == [run_id]
    assert main(["trend", "--experiment", "ro", "--metric", "recall_at_k"]) == 0
    assert main(["compare", "--experiment", "ro", "--metric", "recall_at_k"]) == 0
    capsys.readouterr()
    for argv in (["baseline", "--experiment", "ro", "--run", run_id], ["warehouse", "repair"]):
        assert main(argv) == 4  # a fault of the machine, not bad input (docs/exit-codes.md)
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "read-only" in err[0] and "damaged" not in err[0], err
    assert db.read_bytes() == before and sorted(p.name for p in db.parent.iterdir() if "damaged" in p.name) == []


@pytest.fixture()
def small_disk(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    if not mount("-t", "tmpfs", "-o", "size=16m", "tmpfs", str(disk)):
        pytest.skip("this process may not mount a tmpfs (needs root)")
    yield disk
    subprocess.run(["umount", str(disk)], check=True)


def test_a_full_disk_says_so_and_leaves_no_stub(small_disk):
    filler = small_disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:  # fill the disk to the last block
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError:
        pass
    finally:
        os.close(fd)
    wh = Warehouse(small_disk / "warehouse")
    with pytest.raises(InputError) as err:
        wh.begin_run("full", {}, "manual", {})
    assert "no space left" in str(err.value) and "damaged" not in str(err.value)
    assert not wh.db_path.exists() and not wh.db_path.with_name("chunkeval.duckdb.wal").exists()
    filler.unlink()  # space freed: the next command works, nothing is taken for damage
    run_id = Warehouse(small_disk / "warehouse").begin_run("full", {}, "manual", {})
    assert Warehouse(small_disk / "warehouse").run(run_id)["status"] == "running"


def test_damage_is_only_what_duckdb_reports(tmp_path):
    """A file that is not DuckDB's is damaged; repair moves it aside (and only then)."""
    wh = Warehouse(tmp_path / "warehouse")
    wh.root.mkdir(parents=True)
    wh.db_path.write_bytes(b"not a database" * 1000)
    ok, why = wh.healthy()
    assert not ok and why
    assert Warehouse(tmp_path / "warehouse").repair()["damaged"] is True
    assert [p.name.startswith("chunkeval.duckdb.damaged-") for p in wh.root.iterdir() if "damaged" in p.name] == [True]


def test_a_bracket_in_the_home_is_a_folder_name_not_a_pattern(tmp_path, embedder_factory):
    """DuckDB reads '[x]' in a path as a glob class: every path chunkeval gives it is escaped."""
    exp = Experiment(
        name="br", chunker=("fixed_token",), chunk_sizes=(100,), overlaps=("0",), k=(1,), retriever=("bm25",)
    )
    result = run_sweep(exp, embedder_factory())
    wh = Warehouse(tmp_path / "home[x]" / "warehouse")
    run_id = wh.begin_run("br", {}, "manual", exp.to_dict())
    wh.complete_run(
        run_id,
        RunResult(result.per_query, result.summary, texts_embedded=result.texts_embedded, references=result.references),
    )
    fresh = Warehouse(tmp_path / "home[x]" / "warehouse")  # a new process's view of it
    assert fresh.table("SELECT count(*) AS n FROM query_results").to_pylist() == [{"n": result.per_query.num_rows}]
    assert fresh.run_file(run_id, "per_query").num_rows == result.per_query.num_rows


def test_a_run_deleted_while_its_report_is_written_ends_in_one_line(tmp_path, monkeypatch, prefect_api, capsys):
    """`runs delete` in another process while `run` writes its report: one line, exit 4 (a fault; 2 is bad input)."""
    import chunkeval.flows.evaluate as flow

    monkeypatch.setenv("CHUNKEVAL_HOME", str(tmp_path / "home"))
    write_report = flow.write_report

    def deleted_meanwhile(wh, experiment, path, run_id=None, *args, **kwargs):
        Warehouse.at_home().delete_runs([run_id])  # what `chunkeval runs delete` does, at this moment
        return write_report(wh, experiment, path, run_id, *args, **kwargs)

    monkeypatch.setattr(flow, "write_report", deleted_meanwhile)
    grid = ["--retriever", "bm25", "--chunker", "fixed_token", "--chunk-sizes", "100", "--k", "1"]
    assert main(["run", "--experiment", "gone", *grid]) == 4
    last = capsys.readouterr().err.strip().splitlines()[-1]  # (Prefect logs the failed task above it, as it logs)
    assert last.startswith("chunkeval: error: run ") and "was deleted while its report was being written" in last
    assert Warehouse.at_home().runs() == []
