"""A run ended by a signal: SIGTERM ends it as an interrupt does (recorded failed, exit 143, one line), and
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

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")

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


def run_killed_at(tmp_path: Path, point: str) -> tuple[subprocess.CompletedProcess, str, dict]:
    tag = f"CHUNKEVAL_SIGNAL_TEST={uuid.uuid4().hex}"
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}  # chunkeval starts its own server
    env.update(
        CHUNKEVAL_HOME=str(tmp_path / "home"),
        PREFECT_HOME=str(tmp_path / "prefect"),
        CHUNKEVAL_KILL_AT=point,
        CHUNKEVAL_SIGNAL_TEST=tag.split("=")[1],
    )
    cmd = [sys.executable, "-m", "chunkeval.cli", "run", "--experiment", "signals", *GRID]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    return done, tag, env


def wait_gone(tag: str, seconds: float = 15.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while (left := processes_with(tag)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def test_sigkill_leaves_no_temporary_server_behind(tmp_path):
    done, tag, _ = run_killed_at(tmp_path, "started")
    assert done.returncode == -9  # killed at `started`: the server was up and the run row written
    assert wait_gone(tag) == []


def test_sigterm_ends_a_run_as_failed_in_one_line(tmp_path):
    done, tag, env = run_killed_at(tmp_path, "started:TERM")
    assert done.returncode == 143, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "chunkeval: terminated"
    assert "Traceback" not in done.stderr
    assert wait_gone(tag) == []
    env.pop("CHUNKEVAL_KILL_AT")
    runs = subprocess.run(
        [sys.executable, "-m", "chunkeval.cli", "runs", "--json"], env=env, capture_output=True, text=True, check=True
    )
    assert [(r["experiment"], r["status"]) for r in json.loads(runs.stdout)] == [("signals", "failed")]
