"""A temporary Prefect server where no `PREFECT_API_URL` names one: kept for the next commands, or one per command.

`chunkeval run` begins it before it reads its inputs (`begin`) and waits for it only when the flow starts
(`temporary_server(starting)`), so that its start overlaps the command's own work.

**Kept** (the default): the server a command starts stays for the commands after it, `CHUNKEVAL_SERVER_KEEP`
seconds (default 600) after the last of them ended, then exits by itself. Importing Prefect's app and opening its
database takes 3 to 6 s on a 2-core machine; a warm run that finds the server running pays a request instead.
The server is one per `PREFECT_HOME` (it serves that home's database), found through `$PREFECT_HOME/chunkeval-server/`:
`server.json` (its process, URL, Python, Prefect version and Prefect settings: a server of another interpreter,
version or settings is not reused), `server.log` (its output), `users/<pid>` (each command that uses it; the server
counts its idle time from the last of them gone, so a long run is never left without its server, and a command
killed by SIGKILL only ends its use), and `lock` (one command at a time finds or starts it, and the server decides
to exit holding it, so no command is handed a server on its way out). A record that is damaged, names a dead
process or a server that stopped answering is replaced by a new server.

**One per command** (`CHUNKEVAL_SERVER_KEEP=0`): the server dies with the process that started it.

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
import hashlib
import json
import math
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
from chunkeval.files import pid_alive

PR_SET_PDEATHSIG = 1
STARTUP_SECONDS = 90.0  # a cold start on a busy 2-core machine takes 10-20 s
MIN_FREE_BYTES = 16 << 20  # room the server's SQLite database and its temporary files need, in each folder
TO_A_SERVER = "or PREFECT_API_URL to a running Prefect server"
KEEP_ENV = "CHUNKEVAL_SERVER_KEEP"
KEEP_SECONDS = 600.0  # a working session's next command finds the server; an idle machine has none 10 minutes later


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
    """Before the temporary server starts (and before Prefect is imported, which makes its home): how long it is
    kept (`keep_seconds`) and the folders it writes are usable, else one line naming the setting or the folder and
    what to set, never the server's tracebacks. An unusable folder (missing, not a folder, not writable) is an
    `InputError`; a full one, a `Fault`."""
    keep_seconds()
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


def keep_seconds() -> float:
    """`$CHUNKEVAL_SERVER_KEEP`: seconds a temporary server stays after its last command (0: it stops with it)."""
    raw = os.environ.get(KEEP_ENV, "").strip()
    if not raw:
        return KEEP_SECONDS
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise InputError(
            f"{KEEP_ENV} is {raw!r}: the seconds a temporary Prefect server stays for the next command, a number of "
            "0 or more (0 stops it with its command)"
        )
    return value


class Starting:
    """A server started or found and not yet waited for (`begin`): `ready()` waits until it answers `/health` and
    returns its API URL; a server that exits or does not answer is stopped and said in one line. `end()` stops a
    server of one command, or ends this command's use of a kept one (`kept`: its folder); either may run twice."""

    def __init__(self, process: subprocess.Popen | None, url: str, kept: Path | None = None, pid: int | None = None):
        self.process, self.url, self.kept = process, url, kept
        self.pid = pid if pid is not None else process.pid
        self.log_from = _log_size(kept)
        self.served = False

    def _exited(self) -> bool:
        if self.process is not None:
            return self.process.poll() is not None
        return not _alive(self.pid)

    def ready(self) -> str:
        import httpx

        deadline = time.monotonic() + STARTUP_SECONDS
        with httpx.Client() as client:
            while time.monotonic() < deadline:
                if self._exited():
                    if self.process is not None and hasattr(self.process, "reader"):
                        self.process.reader.join(timeout=5)
                    self.end()
                    raise _failure(self.process, self._output())
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(f"{self.url}/health", timeout=2).status_code == 200:
                        self.served = True
                        return self.url
                time.sleep(0.1)
        self.end(stop_kept=True)
        raise InputError(f"the temporary Prefect server did not answer within {STARTUP_SECONDS:.0f} s")

    def _output(self) -> list[str]:
        if self.kept is None:
            return list(getattr(self.process, "output", ()))
        return _log_lines(self.kept, self.log_from)

    def end(self, stop_kept: bool = False) -> None:
        if self.kept is None:
            if self.process is not None:
                stop(self.process, served=self.served)
            return
        with contextlib.suppress(OSError):
            (self.kept / "users" / str(os.getpid())).unlink(missing_ok=True)
        if stop_kept:
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGTERM)
        if self.served and not getattr(self, "said", False):
            self.said = True
            _say_errors(self._output())


def begin(port: int | None = None) -> Starting:
    """Find the kept server, or start one and return at once: it imports Prefect's app and opens its database (3 to
    7 s on a 2-core machine) while the command reads its inputs and imports Prefect's client (`chunkeval run`: about
    2 s that a warm run no longer waits for). Prefect is located without being imported (its package folder)."""
    keep = keep_seconds()
    if keep == 0:
        return _begin_child(port)
    return _begin_kept(keep, port)


def _server_env() -> dict[str, str]:
    env = {
        **os.environ,
        "PREFECT_UI_ENABLED": "0",
        "PREFECT__SERVER_EPHEMERAL": "1",
        "PREFECT__SERVER_FINAL": "1",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",  # no telemetry from a temporary server
    }
    env.pop("PREFECT_API_URL", None)
    return env


def _prefect_dir() -> Path:
    import importlib.util

    return Path(importlib.util.find_spec("prefect").origin).parent


def _begin_child(port: int | None) -> Starting:
    port = port or _free_port()
    cmd = [
        sys.executable, "-m", "uvicorn", "--app-dir", str(_prefect_dir().parent), "--factory",
        "prefect.server.api.server:create_app", "--host", "127.0.0.1", "--port", str(port),
        "--log-level", "error", "--lifespan", "on",
    ]  # fmt: skip
    linux = sys.platform.startswith("linux")
    process = subprocess.Popen(  # noqa: PLW1509
        cmd,
        env=_server_env(),
        preexec_fn=_die_with_parent if linux else None,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    _keep_output(process)
    return Starting(process, f"http://127.0.0.1:{port}/api")


# --------------------------------------------------------------------------- the kept server


def kept_folder() -> Path:
    """Where the kept server of this `PREFECT_HOME` is recorded (`server.json`, `server.log`, `users/`, `lock`)."""
    return prefect_home() / "chunkeval-server"


def _fingerprint() -> dict:
    """What a server must share with a command that reuses it: the interpreter, Prefect's version (read from its
    package's metadata, not imported) and the Prefect settings of the environment (its database among them)."""
    from importlib.metadata import version

    settings = sorted((k, v) for k, v in os.environ.items() if k.startswith("PREFECT_") and k != "PREFECT_API_URL")
    digest = hashlib.sha256(json.dumps(settings).encode()).hexdigest()[:16]
    return {"python": sys.executable, "prefect": version("prefect"), "settings": digest}


def _alive(pid: int) -> bool:
    if not pid_alive(pid):
        return False
    try:  # a zombie (a server this process started, exited and not yet reaped) is not alive
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return True


def _ours(pid: int) -> bool:
    """Whether `pid` is a kept server (its command line), not a process that took a dead server's number."""
    try:
        return b"chunkeval.flows.temporary_server" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return not sys.platform.startswith("linux") and _alive(pid)


def _answers(url: str, timeout: float = 1.0) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout) as response:
            return response.status == 200
    except (OSError, ValueError):
        return False


def _recorded(folder: Path, fingerprint: dict) -> dict | None:
    """The kept server of `server.json` where it can serve this command: readable, of this interpreter, Prefect and
    settings, its process alive and chunkeval's, and answering (or still starting). A server that stopped answering
    past its start is ended; anything else unusable is ignored (a new server replaces the record)."""
    try:
        state = json.loads((folder / "server.json").read_text(encoding="utf-8"))
        pid, url, started = int(state["pid"]), str(state["url"]), float(state["started"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if any(state.get(k) != v for k, v in fingerprint.items()) or not (_alive(pid) and _ours(pid)):
        return None
    if _answers(url) or time.time() - started < STARTUP_SECONDS:
        return state
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGTERM)
    return None


def _begin_kept(keep: float, port: int | None) -> Starting:
    import fcntl

    folder = kept_folder()
    (folder / "users").mkdir(parents=True, exist_ok=True)
    fingerprint = _fingerprint()
    with open(folder / "lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = _recorded(folder, fingerprint)
        process = None
        if state is None:
            port = port or _free_port()
            cmd = [sys.executable, "-m", "chunkeval.flows.temporary_server", "--port", str(port), "--keep", str(keep)]
            with open(folder / "server.log", "ab") as log:
                process = subprocess.Popen(  # its own session: a ^C at the terminal is the command's alone
                    cmd, env=_server_env(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True, close_fds=True,
                )  # fmt: skip
            state = {"pid": process.pid, "url": f"http://127.0.0.1:{port}/api", "started": time.time(), **fingerprint}
            _write_json(folder / "server.json", state)
        (folder / "users" / str(os.getpid())).write_text(str(state["pid"]), encoding="utf-8")
    return Starting(process, state["url"], kept=folder, pid=int(state["pid"]))


def _write_json(path: Path, value: dict) -> None:
    part = path.with_name(f".{path.name}.{os.getpid()}")
    part.write_text(json.dumps(value), encoding="utf-8")
    os.replace(part, path)


def _log_size(folder: Path | None) -> int:
    try:
        return (folder / "server.log").stat().st_size if folder else 0
    except OSError:
        return 0


def _log_lines(folder: Path, start: int, most: int = 200) -> list[str]:
    """The kept server's output since `start` (bytes into its log), its last `most` lines."""
    try:
        with open(folder / "server.log", "rb") as log:
            log.seek(start)
            text = log.read(1 << 20).decode("utf-8", "replace")
    except OSError:
        return []
    return text.splitlines()[-most:]


def stop_kept(home: Path | None = None, seconds: float = 10.0) -> bool:
    """Stop the kept server of `home` (default `PREFECT_HOME`), where one runs; True if one was stopped. For tests
    and benches that must leave no server behind; a user's kept server ends by itself."""
    folder = (home / "chunkeval-server") if home else kept_folder()
    try:
        pid = int(json.loads((folder / "server.json").read_text(encoding="utf-8"))["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if not (_alive(pid) and _ours(pid)):
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + seconds
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)
    return True


def _users(folder: Path) -> int:
    """The commands that use the server now (their `users/<pid>` files whose process lives); the rest removed."""
    alive = 0
    for entry in (folder / "users").iterdir() if (folder / "users").is_dir() else ():
        try:
            pid = int(entry.name)
        except ValueError:
            pid = None
        if pid is not None and _alive(pid):
            alive += 1
        else:
            with contextlib.suppress(OSError):
                entry.unlink()
    return alive


def serve_kept(port: int, keep: float) -> None:
    """The kept server's process: Prefect's app (the factory uvicorn is given for one command's server) on
    127.0.0.1, watched once a second: it exits `keep` seconds after its last request with no command using it,
    deciding under the folder's lock and removing its record first, so that a command finds it serving or not at
    all."""
    import fcntl

    import uvicorn
    from prefect.server.api.server import create_app

    folder = kept_folder()
    app = create_app()
    last = [time.monotonic()]

    async def touched(scope, receive, send):
        last[0] = time.monotonic()
        try:
            await app(scope, receive, send)
        finally:
            last[0] = time.monotonic()

    server = uvicorn.Server(
        uvicorn.Config(touched, host="127.0.0.1", port=port, log_level="error", lifespan="on", access_log=False)
    )

    def watch() -> None:
        while not server.should_exit:
            time.sleep(1.0)
            if _users(folder):
                last[0] = time.monotonic()
            elif time.monotonic() - last[0] > keep:
                with open(folder / "lock", "a+") as lock:
                    fcntl.flock(lock, fcntl.LOCK_EX)
                    if _users(folder) == 0:
                        with contextlib.suppress(OSError, ValueError, KeyError):
                            if json.loads((folder / "server.json").read_text(encoding="utf-8"))["pid"] == os.getpid():
                                (folder / "server.json").unlink()
                        server.should_exit = True

    threading.Thread(target=watch, name="idle", daemon=True).start()
    server.run()


def _keep_output(process: subprocess.Popen, lines: int = 200) -> None:
    """The server's output (its tracebacks included) is read by a thread into `process.output`, its last
    `lines` lines, instead of reaching the terminal: what went wrong is told in one line."""
    process.output = collections.deque(maxlen=lines)

    def read() -> None:
        for line in iter(process.stdout.readline, b""):
            process.output.append(line.decode("utf-8", "replace").rstrip())

    process.reader = threading.Thread(target=read, name="prefect-server-output", daemon=True)
    process.reader.start()


def _failure(process: subprocess.Popen | None, output: list[str]) -> InputError:
    """One line for a server that exited at start, from what it said: a full disk is a Fault naming the folders."""
    said = "\n".join(output)
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
    last = next((line for line in reversed(output) if line.strip()), "no output")
    status = f" (status {process.returncode})" if process is not None else ""
    return InputError(f"the temporary Prefect server exited at start{status}: {last[-200:]}")


def stop(process: subprocess.Popen, served: bool = False) -> None:
    """Stop a command's server (SIGTERM, then SIGKILL after 5 s) and reap it; a server that logged errors meanwhile
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
    if served:  # not a server stopped before it served (bad input, ^C)
        _say_errors(getattr(process, "output", ()))


def _say_errors(output) -> None:
    errors = [line for line in output if "Error:" in line or "ERROR" in line]
    if errors:
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
        url = begun.ready()
        from prefect.settings import PREFECT_API_URL, temporary_settings
    except BaseException:
        begun.end()
        raise
    os.environ["PREFECT_API_URL"] = url  # for processes started within (a local Dask cluster's workers)
    try:
        with temporary_settings(updates={PREFECT_API_URL: url}):
            yield url
    finally:
        _drain_prefect()  # Prefect's logs and events still queued go to the server before it stops
        os.environ.pop("PREFECT_API_URL", None)
        begun.end()


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


if __name__ == "__main__":  # the kept server's process (`_begin_kept`)
    import argparse

    parser = argparse.ArgumentParser(description="chunkeval's kept temporary Prefect server")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--keep", type=float, required=True)
    arguments = parser.parse_args()
    serve_kept(arguments.port, arguments.keep)
