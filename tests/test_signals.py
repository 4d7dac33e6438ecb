"""A run ended by a signal: SIGTERM ends it as an interrupt does (recorded interrupted, with the signal's name, exit
143, one line and none of Prefect's crash lines), and
the temporary Prefect server it started dies with it, after SIGKILL too (a parent-death signal)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's"),
    pytest.mark.slow,  # real runs killed by signals
]

GRID = ["--retriever", "bm25", "--chunker", "fixed_token", "--chunk-sizes", "100", "--k", "1"]


def processes_with(tag: str) -> list[int]:
    """Live processes whose environment holds `tag` (the command's children inherit it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if tag.encode() in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def start_killed_at(tmp_path: Path, point: str) -> tuple[subprocess.Popen, str, dict]:
    """`chunkeval run` of a bm25 grid in its own home, started, to be killed at `point`."""
    tag = uuid.uuid4().hex
    tmp_path.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}  # chunkeval starts its own server
    env.update(
        CHUNKEVAL_HOME=str(tmp_path / "home"),
        PREFECT_HOME=str(tmp_path / "prefect"),
        CHUNKEVAL_KILL_AT=point,
        CHUNKEVAL_SIGNAL_TEST=tag,
    )
    cmd = [sys.executable, "-m", "chunkeval.cli", "run", "--experiment", "signals", *GRID]
    process = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return process, f"CHUNKEVAL_SIGNAL_TEST={tag}", env


def wait_gone(tag: str, seconds: float = 15.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while (left := processes_with(tag)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def test_sigkill_and_sigterm_end_runs_and_their_temporary_servers(tmp_path):
    """Both runs at once (each starts a Prefect server: the slow part): SIGKILL at `started` (the server is
    up and the run row written) leaves no server behind; SIGTERM there ends the run as interrupted (issue 52: it was
    `failed … TerminationSignal`, with Prefect's `Crash detected!` lines), in one line, exit 143, no server left."""
    killed, killed_tag, _ = start_killed_at(tmp_path / "kill", "started")
    termed, termed_tag, env = start_killed_at(tmp_path / "term", "started:TERM")
    _, killed_err = killed.communicate(timeout=300)
    _, termed_err = termed.communicate(timeout=300)
    assert killed.returncode == -9, killed_err
    assert wait_gone(killed_tag) == []
    assert termed.returncode == 143, termed_err
    assert termed_err.strip().splitlines()[-1] == "chunkeval: terminated"
    assert "Traceback" not in termed_err and "Crash detected" not in termed_err and "Crashed" not in termed_err
    assert wait_gone(termed_tag) == []
    env.pop("CHUNKEVAL_KILL_AT")
    runs = subprocess.run(
        [sys.executable, "-m", "chunkeval.cli", "runs", "--json"], env=env, capture_output=True, text=True, check=True
    )
    found = json.loads(runs.stdout)
    assert [(r["experiment"], r["status"], r["error"]) for r in found] == [
        ("signals", "interrupted", "interrupted by SIGTERM")
    ]


@pytest.mark.parametrize("how", ["report:TERM", "after report…"], ids=["at-report", "sent-during-report"])
def test_sigterm_once_the_run_is_recorded_is_one_line_and_the_run_stays_whole(tmp_path, how):
    """SIGTERM while the recorded run's report is written (issue 55), from the process itself at the `report` point
    and from outside once `report…` is said: exit 143, `chunkeval: terminated`, none of Prefect's crash lines nor
    `TerminationSignal` on stderr; the run, whose results are all stored, stays `completed`, and no row names
    Prefect's exception."""
    import signal

    process, tag, env = start_killed_at(tmp_path, how if ":" in how else "none")
    if ":" not in how:
        said = []
        for line in process.stderr:
            said.append(line)
            if line.startswith("report"):
                process.send_signal(signal.SIGTERM)
                break
        _, rest = process.communicate(timeout=300)
        err = "".join(said) + rest
    else:
        _, err = process.communicate(timeout=300)
    assert process.returncode == 143, err
    assert err.strip().splitlines()[-1] == "chunkeval: terminated", err
    for noise in ("Crash detected", "Crashed", "TerminationSignal", "Traceback", "termination signal"):
        assert noise not in err, err
    assert wait_gone(tag) == []
    env.pop("CHUNKEVAL_KILL_AT")
    runs = subprocess.run(
        [sys.executable, "-m", "chunkeval.cli", "runs", "--json"], env=env, capture_output=True, text=True, check=True
    )
    (run,) = json.loads(runs.stdout)
    assert run["status"] in ("completed", "interrupted") and "TerminationSignal" not in str(run["error"]), run
    if run["status"] == "interrupted":
        assert run["error"] == "interrupted by SIGTERM", run
