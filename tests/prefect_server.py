"""One real `prefect server start` on 127.0.0.1 for the whole test session (the `prefect_server`
fixture of conftest.py), and the waiting helpers of the tests that drive processes."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(check, timeout: float, what: str, proc: subprocess.Popen | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{what}: process ended with {proc.returncode}")
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@contextlib.contextmanager
def prefect_server(prefect_home: Path, **settings: str) -> Iterator[dict]:
    """A real Prefect server (its own PREFECT_HOME and database, and any further PREFECT_ `settings`); yields the
    environment its clients need."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(
        PREFECT_HOME=str(prefect_home),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_UI_ENABLED="false",
        PREFECT_SERVER_API_HOST="127.0.0.1",
        HF_HUB_OFFLINE="1",
        **settings,
    )
    url = f"http://127.0.0.1:{port}/api"

    def healthy():
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    prefect_home.mkdir(parents=True, exist_ok=True)
    with open(prefect_home / "server.log", "wb") as log:
        proc = subprocess.Popen(
            [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            wait_for(healthy, 180, "the Prefect server", proc)
            yield {**env, "PREFECT_API_URL": url}
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(30)
