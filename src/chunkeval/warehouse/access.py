"""Looking at the warehouse without holding up the runs: one read-only query (`query`, holding the file
only while it runs, on a connection DuckDB's settings keep from any other file), and a snapshot (`snapshot`): a self-contained DuckDB file, consistent at one moment,
to explore for as long as one likes. DuckDB lets no writer in while any other process holds the file, read
only or not, so a long-lived connection to `chunkeval.duckdb` itself holds every run up."""

from __future__ import annotations

import os
import queue
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from chunkeval.errors import InputError
from chunkeval.files import check_output, output_folder, replace_file
from chunkeval.warehouse.damage import damaged_files
from chunkeval.warehouse.migrations import RESULTS_VIEWS, Schema, results_view_sql
from chunkeval.warehouse.tables import empty_results

READING = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}

DEFAULT_SQL_TIMEOUT = 60.0  # seconds: half of CHUNKEVAL_LOCK_TIMEOUT's default, so a run never gives up waiting on it
MAX_SQL_TIMEOUT = 86_400.0  # a day
BATCH_ROWS = 1024  # rows of one batch streamed out of a query (two wait at most: the memory a query's rows take)
SQL_MEMORY = "1GiB"  # DuckDB's memory for one query: nothing spills to disk, so a larger query fails in one line
INTERRUPT_WAIT = 2.0  # seconds an interrupted query gets to stop before its connection is left to the process's end

# What a `chunkeval sql` connection may do, by DuckDB's own settings (docs/warehouse.md): no file but the
# catalogue's (opened read-only) is read or written, nothing spills to disk, no extension is installed or
# loaded, no Python variable is scanned, memory is capped, and no statement changes any of it.
LOCKED_DOWN = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
    "allow_unsigned_extensions": False,
    "python_enable_replacements": False,
    "temp_directory": "",
    "memory_limit": SQL_MEMORY,
    "lock_configuration": True,
}


def _first_line(exc: Exception) -> str:
    """DuckDB's message in one line, with its own hint where it gives one (`Did you mean "config_summary"?`)."""
    lines = [x.strip() for x in str(exc).strip().splitlines() if x.strip()] or [type(exc).__name__]
    hint = next((x for x in lines[1:] if x.startswith(("Did you mean", "Candidate bindings"))), None)
    return f"{lines[0]} ({hint[:160]})" if hint else lines[0]


def check_sql_timeout(seconds: float) -> float:
    if not (0 < seconds <= MAX_SQL_TIMEOUT):  # NaN fails too
        raise InputError(f"the query's time limit must be more than 0 and at most {MAX_SQL_TIMEOUT:g} s, got {seconds}")
    return seconds


class _Rows:
    """A query run in a worker thread, its rows handed over a small queue in record batches: the thread that
    waits on the queue (the main one) still gets SIGINT and SIGTERM, and the queue bounds the memory."""

    def __init__(self, con, sql: str, batch_rows: int):
        self.con, self.sql, self.batch_rows = con, sql, batch_rows
        self.items: queue.Queue = queue.Queue(maxsize=2)
        self.stop = threading.Event()
        self.timed_out = False
        self.thread = threading.Thread(target=self._run, name="chunkeval-sql", daemon=True)

    def _run(self) -> None:
        try:
            rel = self.con.sql(self.sql)
            reader = rel.to_arrow_reader(self.batch_rows) if rel is not None else None
            self._put(reader.schema if reader is not None else pa.schema([]))
            for batch in reader or ():
                if not self._put(batch):
                    return
        except BaseException as exc:  # handed to the waiting thread, raised there
            self._put(exc)
            return
        self._put(None)

    def _put(self, item) -> bool:
        while not self.stop.is_set():
            try:
                self.items.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def next(self):
        """The next item: the schema first, then batches, then None; a failure of the query raised here."""
        while True:
            try:
                item = self.items.get(timeout=0.1)
                break
            except queue.Empty:
                if not self.thread.is_alive() and self.items.empty():
                    raise duckdb.InterruptException("the query's thread ended") from None
        if isinstance(item, BaseException):
            raise item
        return item

    def time_out(self) -> None:
        """The timer's call: interrupt the query until its thread has stopped (it hands on why)."""
        self.timed_out = True
        self._interrupt()

    def end(self) -> None:
        """The waiting thread leaves: the query's thread stops handing batches over, and the query stops."""
        self.stop.set()
        self._interrupt()

    def _interrupt(self) -> None:
        deadline = time.monotonic() + INTERRUPT_WAIT
        while self.thread.is_alive() and time.monotonic() < deadline:
            self.con.interrupt()
            self.thread.join(0.05)


class Access(Schema):
    """Queries and snapshots for people (the catalogue's tables and views, by their documented names)."""

    def _damage(self, con):
        """Where a query over the views failed: the first results file of a completed run that cannot be read
        (`DamagedResults`, a fault naming it), or None."""
        done = [r for (r,) in con.execute("SELECT run_id FROM runs WHERE status = 'completed'").fetchall()]
        found = damaged_files(self.results_dir, done)
        return found[0] if found else None

    @contextmanager
    def query(self, sql: str, timeout: float = DEFAULT_SQL_TIMEOUT, batch_rows: int = BATCH_ROWS):
        """One statement that only reads (SELECT, WITH …, EXPLAIN) on a locked-down read-only connection
        (`LOCKED_DOWN`), held while the rows are read: yields (schema, batches), an iterator of record
        batches. Past `timeout` seconds the query is interrupted (an `InputError`); a SIGINT or SIGTERM of
        the waiting thread interrupts it too, and the connection is closed before the signal goes on."""
        check_sql_timeout(timeout)
        try:
            statements = duckdb.extract_statements(sql)
        except duckdb.Error as exc:
            raise InputError(f"the query does not parse: {_first_line(exc)}") from None
        if len(statements) != 1:
            raise InputError(f"give one statement, got {len(statements)}")
        if statements[0].type not in READING:  # a friendlier word than DuckDB's: the settings are the guard
            kind = statements[0].type.name
            raise InputError(f"`chunkeval sql` only reads (SELECT, WITH …, EXPLAIN): the statement is a {kind}")
        was, self.read_only = self.read_only, True  # the views are the file's own: a migration needs a writer
        try:
            with self.connect(config=LOCKED_DOWN) as con:
                self._bind_results(con, sql)
                rows = _Rows(con, sql, batch_rows)
                timer = threading.Timer(timeout, rows.time_out)
                timer.daemon = True
                rows.thread.start()
                timer.start()
                try:
                    yield self._batches(rows, timeout)
                finally:
                    timer.cancel()
                    rows.end()
                    # closing a connection whose query still runs waits for the query: after INTERRUPT_WAIT the
                    # connection is left to the process's end (a signal goes on; the process leaves)
                    self.abandoned = rows.thread.is_alive()
        finally:
            self.read_only = was

    @staticmethod
    def _batches(rows: _Rows, timeout: float):
        try:
            schema = rows.next()
        except duckdb.Error as exc:
            raise Access._failed(exc, rows, timeout) from None

        def batches():
            try:
                while (batch := rows.next()) is not None:
                    yield batch
            except duckdb.Error as exc:
                raise Access._failed(exc, rows, timeout) from None

        return schema, batches()

    @staticmethod
    def _failed(exc: Exception, rows: _Rows, timeout: float) -> InputError:
        if rows.timed_out:
            return InputError(f"the query ran past its time limit of {timeout:g} s (--timeout) and was stopped")
        return InputError(f"the query failed: {_first_line(exc)}")

    def _bind_results(self, con, sql: str) -> None:
        """The views over the runs' Parquet files, for this connection alone: DuckDB reads no file here, so
        the files of completed runs are read by Arrow (read-only, in batches) and scanned from Python. Bound
        only for the views the statement names (finding one costs a read of every run's file footer)."""
        wanted = {view: kind for view, kind in RESULTS_VIEWS.items() if view in sql.lower()}
        if not wanted:
            return
        done = [r for (r,) in con.execute("SELECT run_id FROM runs WHERE status = 'completed'").fetchall()]
        for view, kind in wanted.items():
            files = [str(f) for f in (self._file(r, kind) for r in done) if f.is_file()]
            schemas = [empty_results()[kind].schema]
            try:
                schemas += [pq.read_schema(f) for f in files]
                schema = pa.unify_schemas(schemas, promote_options="permissive")
            except (OSError, pa.ArrowException) as exc:
                damaged = damaged_files(self.results_dir, done)  # the fault naming the file (exit 4), where one is
                raise (
                    damaged[0]
                    if damaged
                    else InputError(f"a run's {kind}.parquet does not read ({_first_line(exc)})", self.results_dir)
                ) from None
            source = f"_{kind}_files"
            # here, not at the top: pyarrow.dataset imports pandas (0.2 s of every command's start-up)
            import pyarrow.dataset as ds

            try:
                con.register(source, ds.dataset(files, schema=schema, format="parquet"))
                con.execute(results_view_sql("TEMP VIEW", view, kind, source, set(schema.names)))
            except (duckdb.Error, pa.ArrowException) as exc:
                raise InputError(f"the view {view} does not bind ({_first_line(exc)})", self.results_dir) from None

    def snapshot(self, out: Path) -> dict:
        """Copy the catalogue's tables, and every view materialised as a table (the per-run results the
        views read from Parquet included), into the DuckDB file `out`, in one connection: no run is recorded
        meanwhile, so the copy is of one moment. Written beside `out` under a temporary name and renamed; `out`
        is an output as `chunkeval.files.check_output` allows (never a file of the warehouse's own folder)."""
        out = Path(out)
        if not out.parent.is_dir():
            raise InputError("the snapshot's folder does not exist", out.parent)
        if out.is_dir():
            raise InputError("the snapshot path is a folder: give a file name such as warehouse.duckdb", out)
        out = check_output(out, [self.root], what="the snapshot")  # never the warehouse's own files
        with output_folder(out.parent) as folder:  # opened once: a swap of its name meanwhile redirects nothing
            return self._snapshot(out, folder / f".{out.name}.partial-{os.getpid()}")

    def _snapshot(self, out: Path, partial: Path) -> dict:
        try:
            partial.unlink(missing_ok=True)
            partial.touch()
            partial.unlink()
        except OSError as exc:
            raise InputError(f"cannot write the snapshot here ({exc.strerror})", out) from None
        tables = []
        try:
            with self.connect() as con:
                con.execute("ATTACH '" + str(partial).replace("'", "''") + "' AS snapshot")
                try:
                    found = con.execute(
                        "SELECT table_name FROM information_schema.tables "
                        "WHERE table_catalog = current_database() AND table_schema = 'main' ORDER BY table_name"
                    ).fetchall()
                    for (name,) in found:
                        try:
                            con.execute(f'CREATE TABLE snapshot.main."{name}" AS SELECT * FROM main."{name}"')
                        except duckdb.Error:
                            damage = self._damage(con)  # the damaged results file, else DuckDB's own error
                            if damage is None:
                                raise
                            raise damage from None
                        tables.append(name)
                    runs = con.execute("SELECT count(*) FROM snapshot.main.runs").fetchone()[0]
                finally:
                    con.execute("DETACH snapshot")
            replace_file(partial, out)
        finally:
            for leftover in (partial, partial.with_name(partial.name + ".wal")):
                leftover.unlink(missing_ok=True)
        return {"path": out, "tables": tables, "runs": int(runs), "bytes": out.stat().st_size}
