"""Runs of one experiment never overlap, and triggers that come while one runs make one follow-up run (issue 40):
real `chunkeval run` processes against the session's Prefect server, the running run held by this test."""

from __future__ import annotations

import subprocess

import pytest

from chunkeval.paths import DEMO_DIR
from chunkeval.warehouse import Warehouse
from prefect_server import BIN, wait_for

pytestmark = pytest.mark.slow


def test_a_trigger_while_one_runs_waits_and_the_next_is_coalesced(prefect_server, tmp_path):
    home = tmp_path / "home"
    env = {**prefect_server, "CHUNKEVAL_HOME": str(home)}
    args = [str(BIN / "chunkeval"), "run", "--experiment", "turns", "--corpus-dir", str(DEMO_DIR / "corpora"),
            "--questions", str(DEMO_DIR / "questions.csv"), "--chunk-sizes", "100", "--retriever", "bm25", "--k", "3"]  # fmt: skip
    wh = Warehouse(home / "warehouse")
    running = wh.turn("turns")  # a run of `turns` is running (this test holds its turn)
    assert running.enter()
    running.mark("run 20261127T000000-abcdef12")
    follower = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: (home / "warehouse" / "turns").is_dir() and _waiting(wh), 60, "the follow-up waiting")
        third = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
        assert third.returncode == 0, third.stdout + third.stderr
        assert "run 20261127T000000-abcdef12, pid" in third.stdout and "recorded as coalesced" in third.stdout
        assert follower.poll() is None  # still waiting its turn
    finally:
        running.leave()
    out, err = follower.communicate(timeout=300)
    assert follower.returncode == 0, out + err
    assert "is running; this run follows it when it ends" in err
    statuses = sorted(r["status"] for r in wh.runs("turns"))
    assert statuses == ["coalesced", "completed"]
    (coalesced,) = wh.runs("turns", "coalesced")
    assert "coalesced into that follow-up" in coalesced["error"] and coalesced["trigger"] == "manual"
    runs = subprocess.run([str(BIN / "chunkeval"), "runs"], env=env, capture_output=True, text=True)
    assert "└ another run of turns was running" in runs.stdout  # the record shows why it ran nothing


def _waiting(wh: Warehouse) -> bool:
    """Whether a run of `turns` waits for its turn (it holds the `.wait` lock)."""
    probe = wh.turn("turns")
    try:
        return not probe._try("wait", block=False)
    finally:
        probe._release("wait")
