"""The temporary Prefect server a run keeps for the next commands (chunkeval.flows.temporary_server, issue 54):
found and used by the next run, its flow runs on it as on any Prefect server, replaced where its record is damaged
or names a process that is not a kept server, and gone by itself `CHUNKEVAL_SERVER_KEEP` seconds after the last
command that used it. Real runs of the small demo, a real server; the suite's other runs keep none (conftest)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from chunkeval.flows.temporary_server import stop_kept

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="processes are found through /proc"),
    pytest.mark.slow,  # real runs and a real Prefect server
]

GRID = ["--retriever", "bm25", "--chunker", "fixed_token", "--chunk-sizes", "100", "--k", "1"]
KEEP = 8  # seconds: long enough for the next run of the test to find it, short enough to watch it go


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def test_a_kept_server_serves_the_next_runs_is_replaced_when_unusable_and_ends_by_itself(tmp_path):
    prefect = tmp_path / "prefect"
    folder = prefect / "chunkeval-server"
    folder.mkdir(parents=True)
    (folder / "server.json").write_text("{not json", encoding="utf-8")  # a damaged record: a new server replaces it
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(CHUNKEVAL_HOME=str(tmp_path / "home"), PREFECT_HOME=str(prefect), CHUNKEVAL_SERVER_KEEP=str(KEEP))

    def run() -> dict:
        done = subprocess.run(
            [sys.executable, "-m", "chunkeval.cli", "run", "--experiment", "kept", *GRID],
            env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert "Traceback" not in done.stderr and "warning" not in done.stderr, done.stderr
        return json.loads((folder / "server.json").read_text(encoding="utf-8"))

    try:
        first = run()
        assert alive(first["pid"]) and first["pid"] != os.getpid()
        second = run()
        assert second == first  # found and used, not started again
        assert list((folder / "users").iterdir()) == []  # each run's use ended with it
        # the runs are Prefect flow runs on that server, as on any Prefect server
        flow_runs = httpx.post(f"{first['url']}/flow_runs/filter", json={}, timeout=10).json()
        assert sorted(r["state"]["type"] for r in flow_runs) == ["COMPLETED", "COMPLETED"]

        # gone by itself: KEEP seconds after its last command, its record removed first
        deadline = time.monotonic() + KEEP + 30
        while alive(first["pid"]) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not alive(first["pid"]) and not (folder / "server.json").exists()

        # a record naming a live process that is not a kept server (its number reused), of the runs' very
        # interpreter, Prefect and settings: never handed out, replaced
        said = subprocess.run(
            [sys.executable, "-c", "import json; from chunkeval.flows.temporary_server import _fingerprint as f; "
             "print(json.dumps(f()))"],
            env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        record = {"pid": os.getpid(), "url": "http://127.0.0.1:9/api", "started": time.time() - 600}
        (folder / "server.json").write_text(json.dumps({**record, **json.loads(said.stdout)}))
        third = run()
        assert third["pid"] not in (os.getpid(), first["pid"]) and alive(third["pid"])
    finally:
        stop_kept(prefect)
    assert not (folder / "server.json").exists() or not alive(json.loads((folder / "server.json").read_text())["pid"])
