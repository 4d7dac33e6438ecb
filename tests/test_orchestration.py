"""End to end against a real `prefect server start` on 127.0.0.1 (the session's): serve against a server whose
scheduler does not run, two runs at once, and a run killed with SIGKILL. (The served deployments run from the demo's
first run, in tests/test_first_run.py.)"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from chunkeval.paths import DEMO_DIR
from chunkeval.paths import DEPLOYMENTS_FILE as DEPLOYMENTS
from chunkeval.warehouse import Warehouse
from prefect_server import BIN, wait_for

pytestmark = pytest.mark.slow  # real Prefect servers and processes

ROOT = Path(__file__).resolve().parents[1]


def client_env(server: dict, home: Path) -> dict:
    return {**server, "CHUNKEVAL_HOME": str(home)}


def experiment_file(folder: Path, name: str, corpus_dir: Path, questions: Path, **grid) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "corpus_dir": str(corpus_dir), "questions": str(questions), **grid}))
    return path


def served(env: dict, log_path: Path, *args: str) -> subprocess.Popen:
    """`chunkeval serve` (with `args`) in its own process group, its output to `log_path`."""
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            [str(BIN / "chunkeval"), "serve", *args],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop(proc: subprocess.Popen) -> int | None:
    """Stop a process group started by `served`; its exit status where it had ended already (None otherwise)."""
    ended = proc.poll()
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:  # the group is gone: nothing to stop
        pass
    proc.wait(30)
    return ended


def test_serve_says_so_when_the_scheduler_creates_nothing(tmp_path):
    """A server whose scheduler does not run (here switched off; under SQLAlchemy 2.1 it failed every loop):
    serve says, in one line naming the likely cause, that no run was scheduled, instead of polling silently."""
    from prefect_server import prefect_server as start_prefect_server

    with start_prefect_server(tmp_path / "prefect", PREFECT_SERVER_SERVICES_SCHEDULER_ENABLED="false") as server:
        env = {
            **client_env(server, tmp_path / "home"),
            "PREFECT_SERVER_SERVICES_SCHEDULER_RECENT_DEPLOYMENTS_LOOP_SECONDS": "2",
        }
        serve = served(env, tmp_path / "serve.log", "--prefect-file", str(DEPLOYMENTS))
        said = lambda: (tmp_path / "serve.log").read_text(errors="replace")  # noqa: E731
        try:
            wait_for(lambda: "WARNING" in said(), 120, "serve's warning", serve)
        finally:
            stop(serve)
    (line,) = [x for x in said().splitlines() if "WARNING" in x]
    assert "evaluate/nightly, watch/poll, trend-report/weekly" in line and "within 4 s" in line, line
    assert "SQLAlchemy" in line and "next run at" not in said()


def test_four_runs_of_two_experiments_at_once_all_end_well(prefect_server, tmp_path, shared_home):
    """Two `chunkeval run` of each of two experiments at once: the experiments run side by side, each recorded;
    the two runs of one experiment take turns, and the second, whose inputs the first just read, is recorded
    `coalesced` into it instead of computing the same numbers again (issue 40)."""
    env = client_env(prefect_server, shared_home)
    files = [
        experiment_file(
            tmp_path,
            f"twin{i}",
            DEMO_DIR / "corpora",
            DEMO_DIR / "questions.csv",
            chunker=["fixed_token"],
            chunk_sizes=[80 + i],
            overlaps=[0],
            k=[3],
        )
        for i in range(2)
    ]
    procs = [
        subprocess.Popen(
            [str(BIN / "chunkeval"), "run", str(f)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        for f in files * 2
    ]
    outputs = [p.communicate(timeout=500)[0].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], outputs
    wh = Warehouse(shared_home / "warehouse")
    for i in range(2):
        assert sorted(r["status"] for r in wh.runs(f"twin{i}")) == ["coalesced", "completed"], outputs
        (run,) = wh.runs(f"twin{i}", "completed")
        assert wh.summary(run["run_id"]).num_rows == 1


KILL_POINTS = ["started", "embedding", "results", "catalogue", "report"]


def test_a_run_killed_at_five_moments_never_shows_partial_results(prefect_server, tmp_path):
    """SIGKILL at each named point (chunkeval.faults): the views never show part of a run, and the next
    run completes and reuses the cache. Only the `embedding` point needs a model; the others run bm25
    over fixed chunks, which never loads one (each process is then a few seconds shorter)."""
    home = tmp_path / "home"
    env = client_env(prefect_server, home)
    wh = Warehouse(home / "warehouse")
    for n, point in enumerate(KILL_POINTS):
        exp = experiment_file(
            tmp_path,
            f"kill{n}",
            DEMO_DIR / "corpora",
            DEMO_DIR / "questions.csv",
            chunker=["fixed_token"],
            chunk_sizes=[40 + n],
            overlaps=[0],
            k=[1, 3],
            retriever=["dense" if point == "embedding" else "bm25"],
        )
        killed = subprocess.run(
            [str(BIN / "chunkeval"), "run", str(exp)],
            env={**env, "CHUNKEVAL_KILL_AT": point},
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert killed.returncode == -signal.SIGKILL, (point, killed.stdout + killed.stderr)
        (run,) = wh.runs(f"kill{n}")
        with wh.connect() as con:
            shown = con.execute("SELECT count(*) FROM query_results WHERE run_id = ?", [run["run_id"]]).fetchone()[0]
            summaries = con.execute("SELECT count(*) FROM config_summary WHERE run_id = ?", [run["run_id"]]).fetchone()[
                0
            ]
        if point == "report":  # recorded whole before its page was written: all of it is shown
            assert run["status"] == "completed" and summaries == 2 and shown == 2 * 28, point
        else:
            assert run["status"] == "running" and shown == 0 and summaries == 0, point
        parts = sum(pq.read_metadata(p).num_rows for p in (home / "cache" / "embeddings").glob("*/part-*.parquet"))
        done = subprocess.run(
            [str(BIN / "chunkeval"), "run", str(exp)], env=env, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, (point, done.stdout + done.stderr)
        runs = {r["run_id"]: r for r in wh.runs(f"kill{n}")}
        (new,) = [r for r in runs.values() if r["run_id"] != run["run_id"]]
        assert new["status"] == "completed"
        assert set(new) >= {"run_id", "experiment", "status", "trigger", "started_at", "finished_at",
                            "corpus_fingerprint", "model_fingerprint", "texts_embedded"}  # fmt: skip
        after = sum(pq.read_metadata(p).num_rows for p in (home / "cache" / "embeddings").glob("*/part-*.parquet"))
        assert new["texts_embedded"] == after - parts, point  # only what the killed run had not embedded
        if point == "embedding":  # killed with a part on disk: that part is reused, the rest embedded
            assert parts > 0 and new["texts_embedded"] > 0, point
        else:  # bm25 over fixed chunks: no model, nothing embedded
            assert new["texts_embedded"] == 0 and after == parts, point
        # the killed run is settled: failed, or completed where its results and manifest were whole
        expected = "completed" if point in ("catalogue", "report") else "failed"
        assert runs[run["run_id"]]["status"] == expected, point
        with wh.connect() as con:
            assert con.execute(
                "SELECT count(DISTINCT run_id) FROM config_summary WHERE experiment = ?", [f"kill{n}"]
            ).fetchone()[0] == (2 if expected == "completed" else 1)
