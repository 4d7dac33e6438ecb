"""Looking at the warehouse without holding up the runs: one read-only query (`read_query`, holding the file
only while it runs), and a snapshot (`snapshot`): a self-contained DuckDB file, consistent at one moment,
to explore for as long as one likes. DuckDB lets no writer in while any other process holds the file, read
only or not, so a long-lived connection to `chunkeval.duckdb` itself holds every run up."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import pyarrow as pa

from chunkeval.errors import InputError
from chunkeval.files import check_output, replace_file
from chunkeval.warehouse.damage import damaged_files
from chunkeval.warehouse.migrations import Schema

READING = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


class Access(Schema):
    """Queries and snapshots for people (the catalogue's tables and views, by their documented names)."""

    def _damage(self, con):
        """Where a query over the views failed: the first results file of a completed run that cannot be read
        (`DamagedResults`, a fault naming it), or None."""
        done = [r for (r,) in con.execute("SELECT run_id FROM runs WHERE status = 'completed'").fetchall()]
        found = damaged_files(self.results, done)
        return found[0] if found else None

    def read_query(self, sql: str) -> pa.Table:
        """The rows of one statement that only reads (SELECT, WITH …, EXPLAIN), on a read-only connection
        held while it runs."""
        try:
            statements = duckdb.extract_statements(sql)
        except duckdb.Error as exc:
            raise InputError(f"the query does not parse: {_first_line(exc)}") from None
        if len(statements) != 1:
            raise InputError(f"give one statement, got {len(statements)}")
        if statements[0].type not in READING:
            kind = statements[0].type.name
            raise InputError(f"`chunkeval sql` only reads (SELECT, WITH …, EXPLAIN): the statement is a {kind}")
        was, self.read_only = self.read_only, True  # the views are the file's own: a migration needs a writer
        try:
            with self.connect() as con:
                try:
                    return con.sql(sql).to_arrow_table()
                except duckdb.Error as exc:
                    raise self._damage(con) or InputError(f"the query failed: {_first_line(exc)}") from None
        finally:
            self.read_only = was

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
        partial = out.with_name(f".{out.name}.partial-{os.getpid()}")
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
