"""Connections to the catalogue file: short-lived, waiting while another process holds it, and a
damaged file reported (one line naming it and the repair command), never used.

DuckDB lets one process write a database file at a time, so every operation opens a short-lived
connection, retrying while another process holds the lock: two runs at once both get recorded. A command
that only reads asks everything inside one `session()`, so that it opens the file once.
"""

from __future__ import annotations

import random
import re
import time
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pyarrow as pa

from chunkeval.errors import InputError

_LOCKED = re.compile(r"could not set lock|conflicting lock", re.I)
_DAMAGE = re.compile(
    r"corrupt|checksum|not a valid duckdb|invalid database|database file .*(truncated|too small)", re.I
)


class Connections:
    """The connection to `db_path` under `root` (attributes the `Warehouse` sets). The first connection of
    the object brings the file's schema up to date (`_migrate`, from `migrations.Schema`)."""

    root: Path
    db_path: Path
    lock_timeout: float
    _ready: bool
    _session: duckdb.DuckDBPyConnection | None

    def exists(self) -> bool:
        return self.db_path.is_file()

    @contextmanager
    def connect(self):
        """A short-lived read-write connection, waiting while another process holds the file.

        A damaged file (a checksum that does not match, a header that is not DuckDB's) is reported as
        one line naming the file and the repair command, never used.
        """
        if self._session is not None:
            yield self._session
            return
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"cannot create the warehouse folder ({exc.strerror})", self.root) from None
        deadline = time.monotonic() + self.lock_timeout
        while True:
            try:
                con = duckdb.connect(str(self.db_path))
                break
            except duckdb.Error as exc:
                locked = _LOCKED.search(str(exc)) is not None
                if locked and time.monotonic() < deadline:
                    time.sleep(random.uniform(0.02, 0.2))
                    continue
                raise exc if locked else self._damaged(exc) from None
        try:
            if not self._ready:
                self._migrate(con)
                self._ready = True
            yield con
        except duckdb.Error as exc:
            if _DAMAGE.search(str(exc)):
                raise self._damaged(exc) from None
            raise
        finally:
            con.close()

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

    def _damaged(self, exc: Exception) -> InputError:
        reason = str(exc).splitlines()[0]
        return InputError(
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
