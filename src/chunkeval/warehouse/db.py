"""Connections to the catalogue file: short-lived, waiting while another process holds it, and a
damaged file reported (one line naming it and the repair command), never used.

DuckDB lets one process write a database file at a time, and no writer in while any other process holds
it, read-only or not. So every operation opens a short-lived connection, retrying while another process
holds the lock (two runs at once both get recorded): it says once which process holds it, and after
`CHUNKEVAL_LOCK_TIMEOUT` seconds (default 120) ends with one line naming the holder and what to do
(`LockTimeout`, a fault: exit status 4). A command that only reads asks everything inside one `session()`, so that
it opens the file once.
"""

from __future__ import annotations

import logging
import os
import random
import re
import time
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pyarrow as pa

from chunkeval.errors import Fault, InputError

_LOCKED = re.compile(r"could not set lock|conflicting lock", re.I)
_HOLDER = re.compile(r"lock is held in (?P<program>.*?) \(PID (?P<pid>\d+)\)")
LOCK_TIMEOUT_ENV = "CHUNKEVAL_LOCK_TIMEOUT"
DEFAULT_LOCK_TIMEOUT = 120.0

log = logging.getLogger("chunkeval")
_DAMAGE = re.compile(
    r"corrupt|checksum|not a valid duckdb|invalid database|database file .*(truncated|too small)", re.I
)
_READ_ONLY = re.compile(r"read-only file system|permission denied|read[- ]only mode|attached in read-only", re.I)
_NO_SPACE = re.compile(r"no space left|disk full|could not write.*space", re.I)


class Damaged(Fault):
    """The catalogue file is damaged, as DuckDB reports it (a checksum, a header): what `repair` repairs. Damaged
    state is a fault (exit status 4), not bad input."""


class LockTimeout(Fault):
    """Another process held the catalogue file for longer than this one waits: not the input but the state of
    the machine, so a fault (one line, exit status 4): a gate that reads 2 as "fix your input" would be wrong."""


def lock_timeout_setting() -> float:
    """`$CHUNKEVAL_LOCK_TIMEOUT`: how many seconds to wait for another process's hold on the warehouse."""
    raw = os.environ.get(LOCK_TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_LOCK_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not (0 <= value < float("inf")):
        raise InputError(f"{LOCK_TIMEOUT_ENV} must be a number of seconds, 0 or more, got {raw!r}")
    return value


def lock_holder(exc: Exception) -> str:
    """The process DuckDB names as the holder of a lock: `process 1791 (/usr/bin/python3)`."""
    found = _HOLDER.search(str(exc))
    return f"process {found['pid']} ({found['program']})" if found else "another process"


def fault(exc: Exception, path: Path) -> Fault | None:
    """A fault of the machine named as what it is (read-only, no space), or None when it is none of those."""
    text = str(exc)
    if _NO_SPACE.search(text):
        return Fault("no space left on the device that holds the warehouse: free space and run again", path)
    if _READ_ONLY.search(text):
        return Fault("the warehouse is read-only here (a read-only volume or no write permission): "
                          "commands that read it work, this one writes", path)  # fmt: skip
    return None


class Connections:
    """The connection to `db_path` under `root` (attributes the `Warehouse` sets). The first connection of
    the object brings the file's schema up to date (`_migrate`, from `migrations.Schema`)."""

    root: Path
    db_path: Path
    lock_timeout: float
    _ready: bool
    _session: duckdb.DuckDBPyConnection | None

    read_only: bool = False  # set when the file can only be read here (a read-only volume): reads still work

    def exists(self) -> bool:
        return self.db_path.is_file()

    @contextmanager
    def connect(self, config: dict | None = None):
        """A short-lived read-write connection, waiting while another process holds the file (`config`:
        DuckDB settings for the connection, as `chunkeval sql` locks it down).

        A damaged file (a checksum that does not match, a header that is not DuckDB's) is reported as
        one line naming the file and the repair command, never used.
        """
        if self._session is not None:
            yield self._session
            return
        existed = self.exists()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise (
                fault(exc, self.root) or InputError(f"cannot create the warehouse folder ({exc.strerror})", self.root)
            ) from None
        deadline = time.monotonic() + self.lock_timeout
        said = False
        while True:
            try:
                con = duckdb.connect(str(self.db_path), read_only=self.read_only, config=config or {})
                break
            except duckdb.Error as exc:
                locked = _LOCKED.search(str(exc)) is not None
                if locked and time.monotonic() < deadline:
                    if not said:
                        log.warning(
                            "the warehouse is held by %s; waiting up to %g s for it (%s)",
                            lock_holder(exc),
                            self.lock_timeout,
                            LOCK_TIMEOUT_ENV,
                        )
                        said = True
                    time.sleep(random.uniform(0.02, 0.2))
                    continue
                if existed and not self.read_only and not locked and _READ_ONLY.search(str(exc)):
                    self.read_only = True  # a healthy file on a read-only volume: every read works
                    continue
                if not existed:
                    self._remove_stub()
                raise (self._lock_timeout(exc) if locked else self._opening_error(exc)) from None
        try:
            if not self._ready:
                self._migrate(con)
                if not self.read_only:
                    self._settle(con)
                self._ready = True
            yield con
        except duckdb.Error as exc:
            if _DAMAGE.search(str(exc)):
                raise self._damaged(exc) from None
            raise (fault(exc, self.db_path) or exc) from None
        finally:
            if not getattr(self, "abandoned", False):  # a query that would not stop is left to the process's end
                con.close()
            self.abandoned = False  # for this connection alone
            if not existed and not self._ready:
                self._remove_stub()

    def _remove_stub(self) -> None:
        """A catalogue file this connection began and could not finish (a full disk leaves a few KB that a
        later command would take for damage): removed, with its WAL."""
        for path in (self.db_path, self.db_path.with_name(self.db_path.name + ".wal")):
            try:
                path.unlink()
            except OSError:
                pass

    def _lock_timeout(self, exc: Exception) -> LockTimeout:
        return LockTimeout(
            f"{lock_holder(exc)} held the warehouse for more than {self.lock_timeout:g} s "
            f"({LOCK_TIMEOUT_ENV}): close that process's connection (a DuckDB shell or notebook) and run again; "
            "to look at the warehouse without blocking runs use `chunkeval sql` or `chunkeval warehouse snapshot`",
            self.db_path,
        )

    def _opening_error(self, exc: Exception) -> InputError:
        """Why the file did not open: damage only when DuckDB says so, else the fault, else the reason."""
        if _DAMAGE.search(str(exc)):
            return self._damaged(exc)
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return fault(exc, self.db_path) or InputError(f"cannot open the warehouse ({reason})", self.db_path)

    @contextmanager
    def session(self):
        """One connection for every question asked inside: what a command that only reads uses, so that it
        opens the file once (a writer in another process waits meanwhile, as it waits for any reader)."""
        if self._session is not None:
            yield self
            return
        with self.connect() as con:
            self._session = con
            try:
                yield self
            finally:
                self._session = None

    def _migrate(self, con) -> None:  # pragma: no cover - `migrations.Schema` gives the real one
        raise NotImplementedError

    def _settle(self, con) -> None:
        """What the first writable connection of a process does after the migrations: `runs.Lifecycle`
        records runs that could not record themselves (their manifests say how they ended)."""

    def _damaged(self, exc: Exception) -> InputError:
        reason = str(exc).splitlines()[0]
        return Damaged(
            f"the warehouse file is damaged ({reason}); run `chunkeval warehouse repair` to rebuild "
            "its catalogue from the run manifests",
            self.db_path,
        )

    def _dicts(self, sql: str, params: list | None = None) -> list[dict]:
        with self.connect() as con:
            cur = con.execute(sql, params or [])
            names = [d[0] for d in cur.description]
            return [dict(zip(names, row)) for row in cur.fetchall()]

    def table(self, sql: str, params: list | None = None) -> pa.Table:
        """Any query over the warehouse, as an Arrow table."""
        with self.connect() as con:
            return con.sql(sql, params=params or []).to_arrow_table()
