"""A temporary Prefect server for one command, which dies with the process that started it.

`chunkeval run` begins it before it reads its inputs (`begin`) and waits for it only when the flow starts
(`temporary_server(starting)`), so that its start overlaps the command's own work.

Without `PREFECT_API_URL`, Prefect starts a temporary server of its own as a child process and stops it
at exit; a process killed by SIGKILL (or by the out-of-memory killer) never reaches its exit, and that
server runs on, orphaned. chunkeval starts the same server itself (uvicorn serving Prefect's app, as
Prefect does) with a parent-death signal: the kernel sends it SIGTERM when its parent dies, however the
parent dies. Where the platform has no such signal (not Linux), a watchdog thread in the server's own
process would be needed; there the server is still stopped at a normal exit, as Prefect's is.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from chunkeval.errors import Fault, InputError

PR_SET_PDEATHSIG = 1
STARTUP_SECONDS = 90.0  # a cold start on a busy 2-core machine takes 10-20 s
MIN_FREE_BYTES = 16 << 20  # room the server's SQLite database and its temporary files need, in each folder
TO_A_SERVER = "or PREFECT_API_URL to a running Prefect server"


def prefect_home() -> Path:
    """Where the temporary server keeps its SQLite database: `$PREFECT_HOME`, by default `~/.prefect`."""
    return Path(os.environ.get("PREFECT_HOME") or "~/.prefect").expanduser()


def sqlite_temp_folder() -> tuple[Path, str | None]:
    """The folder SQLite puts its temporary files in (as SQLite picks it on Unix), and the variable that set it."""
    for name in ("SQLITE_TMPDIR", "TMPDIR"):
        if os.environ.get(name):
            return Path(os.environ[name]), name
    return next((Path(p) for p in ("/var/tmp", "/usr/tmp", "/tmp") if os.path.isdir(p)), Path(".")), None


def _room(folder: Path, variable: str) -> None:
    """A Fault where the folder's file system is (nearly) full: Prefect's SQLite would fail with tracebacks."""
    free = os.statvfs(folder).f_bavail * os.statvfs(folder).f_frsize
    if free < MIN_FREE_BYTES:
        raise Fault(
            f"the temporary Prefect server cannot write its database: {folder} has {free / 1e6:.1f} MB free "
            f"(it needs {MIN_FREE_BYTES >> 20} MB); free space, or set {variable} to a folder with room, {TO_A_SERVER}"
        )


def check_folders() -> None:
    """Before the temporary server starts (and before Prefect is imported, which makes its home): the folders
    it writes are usable, else one line naming the folder and what to set, never the server's tracebacks.
    An unusable folder (missing, not a folder, not writable) is an `InputError`; a full one, a `Fault`."""
    home = prefect_home()
    where = home if home.exists() else home.parent  # Prefect makes its home, not the folders above it
    made = f"cannot be made: {where} " if where != home else ""
    if not where.is_dir():
        problem = made + ("is not a folder" if where.exists() else "does not exist")
    elif not os.access(where, os.W_OK | os.X_OK):
        problem = made + "is not writable"
    else:
        problem = None
    if problem:
        why = (
            ""
            if os.environ.get("PREFECT_HOME")
            else f" (by default ~/.prefect, and HOME is {os.environ.get('HOME', 'unset')})"
        )
        raise InputError(
            f"the temporary Prefect server keeps its database in {home}{why}, which {problem}: set PREFECT_HOME to "
            f"a writable folder, {TO_A_SERVER}"
        )
    _room(where, "PREFECT_HOME")
    temp, variable = sqlite_temp_folder()
    if variable and not (temp.is_dir() and os.access(temp, os.W_OK | os.X_OK)):
        raise InputError(f"{variable} is {temp}, which is not a writable folder: set {variable} to one, {TO_A_SERVER}")
    _room(temp, variable or "TMPDIR")


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
    return begin(port).ready()


class Starting:
    """A server started and not yet waited for (`begin`): `ready()` waits until it answers `/health` and returns
    (its process, its API URL); a server that exits or does not answer is stopped and said in one line."""

    def __init__(self, process: subprocess.Popen, url: str):
        self.process, self.url = process, url

    def ready(self) -> tuple[subprocess.Popen, str]:
        import httpx

        deadline = time.monotonic() + STARTUP_SECONDS
        with httpx.Client() as client:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    self.process.reader.join(timeout=5)
                    raise _failure(self.process)
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(f"{self.url}/health", timeout=2).status_code == 200:
                        self.process.served = True
                        return self.process, self.url
                time.sleep(0.2)
        stop(self.process)
        raise InputError(f"the temporary Prefect server did not answer within {STARTUP_SECONDS:.0f} s")


def begin(port: int | None = None) -> Starting:
    """Start the server and return at once: it imports Prefect's app and opens its database (5 to 7 s on a 2-core
    machine) while the command reads its inputs and imports Prefect's client (`chunkeval run`: about 2 s that a
    warm run no longer waits for). Prefect is located without being imported (its package folder)."""
    import importlib.util

    port = port or _free_port()
    env = {
        **os.environ,
        "PREFECT_UI_ENABLED": "0",
        "PREFECT__SERVER_EPHEMERAL": "1",
        "PREFECT__SERVER_FINAL": "1",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",  # no telemetry from a server that lives one command
    }
    env.pop("PREFECT_API_URL", None)
    prefect_dir = Path(importlib.util.find_spec("prefect").origin).parent
    cmd = [
        sys.executable, "-m", "uvicorn", "--app-dir", str(prefect_dir.parent), "--factory",
        "prefect.server.api.server:create_app", "--host", "127.0.0.1", "--port", str(port),
        "--log-level", "error", "--lifespan", "on",
    ]  # fmt: skip
    linux = sys.platform.startswith("linux")
    process = subprocess.Popen(  # noqa: PLW1509
        cmd,
        env=env,
        preexec_fn=_die_with_parent if linux else None,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    _keep_output(process)
    return Starting(process, f"http://127.0.0.1:{port}/api")


def _keep_output(process: subprocess.Popen, lines: int = 200) -> None:
    """The server's output (its tracebacks included) is read by a thread into `process.output`, its last
    `lines` lines, instead of reaching the terminal: what went wrong is told in one line."""
    process.output = collections.deque(maxlen=lines)

    def read() -> None:
        for line in iter(process.stdout.readline, b""):
            process.output.append(line.decode("utf-8", "replace").rstrip())

    process.reader = threading.Thread(target=read, name="prefect-server-output", daemon=True)
    process.reader.start()


def _failure(process: subprocess.Popen) -> InputError:
    """One line for a server that exited at start, from what it said: a full disk is a Fault naming the folders."""
    said = "\n".join(process.output)
    temp, variable = sqlite_temp_folder()
    if "disk is full" in said or "No space left" in said:
        return Fault(
            f"the temporary Prefect server cannot write its database: the disk of {prefect_home()} or of {temp} is "
            f"full; free space, or set PREFECT_HOME and {variable or 'TMPDIR'} to folders with room, {TO_A_SERVER}"
        )
    if "unable to open database file" in said or "readonly database" in said:
        return InputError(
            f"the temporary Prefect server cannot open its database in {prefect_home()}: set PREFECT_HOME to a "
            f"writable folder, {TO_A_SERVER}"
        )
    last = next((line for line in reversed(process.output) if line.strip()), "no output")
    return InputError(f"the temporary Prefect server exited at start (status {process.returncode}): {last[-200:]}")


def stop(process: subprocess.Popen) -> None:
    """Stop the server (SIGTERM, then SIGKILL after 5 s) and reap it; a server that logged errors meanwhile
    (a disk filled during the run) says so in one line."""
    if getattr(process, "stopped", False):  # stopped already (the flow's block, then the command's end)
        return
    process.stopped = True
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    output = getattr(process, "output", ())
    errors = [line for line in output if "Error:" in line or "ERROR" in line]
    if errors and getattr(process, "served", False):  # not a server stopped before it served (bad input, ^C)
        print(
            f"chunkeval: warning: the temporary Prefect server logged {len(errors)} error(s) (the run's results are "
            f"in the warehouse regardless); the last: {errors[-1].strip()[-200:]}",
            file=sys.stderr,
        )


@contextlib.contextmanager
def temporary_server(starting: Starting | None = None) -> Iterator[str | None]:
    """Within the block, Prefect talks to a temporary server of chunkeval's own (its API URL is yielded), the one
    `starting` began (`begin`) or one started now; where `PREFECT_API_URL` is set, to that server, and None is
    yielded. The server is stopped when the block ends, however it ends."""
    if os.environ.get("PREFECT_API_URL"):
        yield None
        return
    if starting is None:
        check_folders()
    begun = starting or begin()
    try:
        process, url = begun.ready()
        from prefect.settings import PREFECT_API_URL, temporary_settings
    except BaseException:
        stop(begun.process)
        raise
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


API_SECONDS = 10.0  # how long a configured Prefect server may take to answer its /health before it is a fault


def api_url() -> str | None:
    """The configured Prefect server's API URL (`PREFECT_API_URL`), its credentials left out; None where unset."""
    from urllib.parse import urlsplit, urlunsplit

    url = os.environ.get("PREFECT_API_URL")
    if not url:
        return None
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = host + (f":{parts.port}" if _port(parts) else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _port(parts) -> int | None:
    try:
        return parts.port
    except ValueError:  # a port out of range: not one to show
        return None


def unreachable(url: str, reason: str) -> Fault:
    """A configured Prefect server that does not answer: the machine's fault (its server down, a wrong host or
    port), one line naming the URL, exit 4, not a bug report."""
    return Fault(
        f"the Prefect server at {url} (PREFECT_API_URL) does not answer ({reason}): start it (prefect server "
        "start), or point PREFECT_API_URL at one that runs"
    )


def check_api() -> None:
    """Where `PREFECT_API_URL` is set, its server answers (any HTTP status: one that wants a key answers too),
    before anything is run on it; else `unreachable`. Without it, nothing: a temporary server is started."""
    import urllib.error
    import urllib.request

    url = api_url()
    if url is None:
        return
    try:
        with urllib.request.urlopen(os.environ["PREFECT_API_URL"].rstrip("/") + "/health", timeout=API_SECONDS):
            pass
    except urllib.error.HTTPError:
        return  # it answered
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise unreachable(url, str(getattr(exc, "reason", exc)).splitlines()[0][:200] or type(exc).__name__) from None


def as_unreachable(exc: BaseException) -> Fault | None:
    """An exception (or one it was raised from) that says the configured Prefect server did not answer: a
    connection to its API URL that failed (httpx's transport errors; Prefect's `Failed to reach API`), as
    `unreachable`; else None. What the server said (an HTTP error) is not this, nor a failure to reach any
    other server."""
    url = api_url()
    if url is None:
        return None
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if _reaches_api(exc):
            return unreachable(url, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}")
        exc = exc.__cause__ or exc.__context__
    return None


def _reaches_api(exc: BaseException) -> bool:
    """Whether `exc` is a failure to connect to the Prefect API (`PREFECT_API_URL`'s host and port)."""
    from urllib.parse import urlsplit

    if isinstance(exc, RuntimeError) and str(exc).startswith("Failed to reach API at"):
        return True
    httpx = sys.modules.get("httpx")
    if httpx is None or not isinstance(exc, httpx.TransportError):
        return False
    try:
        target = urlsplit(str(exc.request.url))
    except RuntimeError:  # raised without its request
        return False
    return _where(target) == _where(urlsplit(os.environ["PREFECT_API_URL"]))


def _where(parts) -> tuple:
    """A URL's host and port (the scheme's default where none is given)."""
    return (parts.hostname, _port(parts) or {"http": 80, "https": 443}.get(parts.scheme))
