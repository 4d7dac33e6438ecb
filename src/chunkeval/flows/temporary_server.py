"""A temporary Prefect server for one command, which dies with the process that started it.

Without `PREFECT_API_URL`, Prefect starts a temporary server of its own as a child process and stops it
at exit; a process killed by SIGKILL (or by the out-of-memory killer) never reaches its exit, and that
server runs on, orphaned. chunkeval starts the same server itself (uvicorn serving Prefect's app, as
Prefect does) with a parent-death signal: the kernel sends it SIGTERM when its parent dies, however the
parent dies. Where the platform has no such signal (not Linux), a watchdog thread in the server's own
process would be needed; there the server is still stopped at a normal exit, as Prefect's is.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

from chunkeval.errors import InputError

PR_SET_PDEATHSIG = 1
STARTUP_SECONDS = 90.0  # a cold start on a busy 2-core machine takes 10-20 s


def _die_with_parent() -> None:  # runs in the child, between fork and exec
    os.setpgid(0, 0)  # its own process group: a ^C in the terminal reaches chunkeval, which stops it
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(port: int | None = None) -> tuple[subprocess.Popen, str]:
    """Start the server; returns the process and its API URL once it answers `/health`."""
    import httpx
    import prefect

    port = port or _free_port()
    env = {
        **os.environ,
        "PREFECT_UI_ENABLED": "0",
        "PREFECT__SERVER_EPHEMERAL": "1",
        "PREFECT__SERVER_FINAL": "1",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",  # no telemetry from a server that lives one command
    }
    env.pop("PREFECT_API_URL", None)
    cmd = [
        sys.executable, "-m", "uvicorn", "--app-dir", str(prefect.__module_path__.parent), "--factory",
        "prefect.server.api.server:create_app", "--host", "127.0.0.1", "--port", str(port),
        "--log-level", "error", "--lifespan", "on",
    ]  # fmt: skip
    linux = sys.platform.startswith("linux")
    process = subprocess.Popen(cmd, env=env, preexec_fn=_die_with_parent if linux else None)  # noqa: PLW1509
    url = f"http://127.0.0.1:{port}/api"
    deadline = time.monotonic() + STARTUP_SECONDS
    with httpx.Client() as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise InputError(f"the temporary Prefect server exited at start (status {process.returncode})")
            with contextlib.suppress(httpx.HTTPError):
                if client.get(f"{url}/health", timeout=2).status_code == 200:
                    return process, url
            time.sleep(0.2)
    stop(process)
    raise InputError(f"the temporary Prefect server did not answer within {STARTUP_SECONDS:.0f} s")


def stop(process: subprocess.Popen) -> None:
    """Stop the server (SIGTERM, then SIGKILL after 5 s) and reap it."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def temporary_server() -> Iterator[str | None]:
    """Within the block, Prefect talks to a temporary server of chunkeval's own (its API URL is yielded);
    where `PREFECT_API_URL` is set, to that server, and None is yielded."""
    if os.environ.get("PREFECT_API_URL"):
        yield None
        return
    from prefect.settings import PREFECT_API_URL, temporary_settings

    process, url = start()
    os.environ["PREFECT_API_URL"] = url  # for processes started within (a local Dask cluster's workers)
    try:
        with temporary_settings(updates={PREFECT_API_URL: url}):
            yield url
    finally:
        _drain_prefect()  # Prefect's logs and events still queued go to the server before it stops
        os.environ.pop("PREFECT_API_URL", None)
        stop(process)


def _drain_prefect(timeout: float = 10.0) -> None:
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for worker in (APILogWorker, EventsWorker):
        with contextlib.suppress(Exception):  # a worker never started, or already stopped
            worker.drain_all(timeout=timeout, at_exit=False)
