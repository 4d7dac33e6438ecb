"""Damaged results files: a run's Parquet file that cannot be read (truncated, overwritten) is a fault naming it
(`DamagedResults`, exit status 4), found by reading files whole (`damaged_files`); `warehouse repair` quarantines
its run. Below every reader of results files (history, results, access, maintenance)."""

from __future__ import annotations

import contextlib
from pathlib import Path

from chunkeval.errors import Fault, InputError, as_fault
from chunkeval.warehouse.tables import quote


class DamagedResults(Fault):
    """A results file of a run that cannot be read (truncated, overwritten): one line naming it, exit status 4.
    `chunkeval warehouse repair` quarantines the run."""

    def __init__(self, run_id: str, path: Path, reason: str):
        self.run_id, self.reason = run_id, reason
        super().__init__(
            f"the results of run {run_id} are damaged ({reason}); `chunkeval warehouse repair` quarantines "
            "the run, and comparisons leave it out",
            path,
        )


@contextlib.contextmanager
def reading(run_id: str, path: Path):
    """Reads of one results file of a run: an error of the file (DuckDB's, pyarrow's, an OSError that is no fault
    of the machine) becomes `DamagedResults` naming it; chunkeval's own errors pass."""
    import duckdb
    import pyarrow as pa

    try:
        yield
    except InputError:
        raise
    except (duckdb.Error, pa.ArrowException, OSError) as exc:
        if isinstance(exc, OSError) and as_fault(exc) is not None:
            raise
        raise DamagedResults(run_id, path, _reason(exc)) from None


def _reason(exc: Exception) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0].strip().rstrip(".")


def check_file(run_id: str, path: Path) -> None:
    """Read one Parquet file whole, batch by batch (its footer, every page and its checksums as DuckDB checks
    them): `DamagedResults` where it cannot be read."""
    import duckdb

    with reading(run_id, path):
        con = duckdb.connect()
        try:
            reader = con.sql(f"SELECT * FROM read_parquet({quote(path)})").to_arrow_reader(65536)
            for _ in reader:
                pass
        finally:
            con.close()


def damaged_files(results: Path, run_ids: list[str]) -> list[DamagedResults]:
    """The Parquet files of the runs' folders under `results` that cannot be read, one error each."""
    found = []
    for run_id in run_ids:
        for path in sorted((results / run_id).glob("*.parquet")):
            try:
                check_file(run_id, path)
            except DamagedResults as exc:
                found.append(exc)
    return found
