"""One run's results, read from its own files (never the other runs'): its summary, its per-query rows,
references and models (with the columns the views show), and the gold-set check recorded with it."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pyarrow as pa

from chunkeval.errors import InputError
from chunkeval.files import write_text
from chunkeval.limits import json_loads, record_text
from chunkeval.stats.columns import numbers
from chunkeval.vocabulary import CONFIG_KEYS, NO_EXPAND, slice_name
from chunkeval.warehouse.damage import DamagedResults, damaged_files, reading
from chunkeval.warehouse.history import History
from chunkeval.warehouse.migrations import SCHEMA_VERSION
from chunkeval.warehouse.tables import empty_results, projection, quote, seed_folder


class RunFiles(History):
    """Reading a completed run's results files."""

    def damaged_files(self, run_ids: list[str] | None = None) -> list[DamagedResults]:
        """The results files of the runs (by default every completed run) that cannot be read, one error each."""
        if run_ids is None:
            run_ids = [r["run_id"] for r in self.runs(status="completed")]
        return damaged_files(self.results_dir, run_ids)

    def summary(self, run_id: str) -> pa.Table:
        with self.connect() as con:
            return con.sql(
                f"SELECT * FROM config_summary WHERE run_id = ? ORDER BY {', '.join(CONFIG_KEYS)}", params=[run_id]
            ).to_arrow_table()

    def slice_summary(self, run_id: str) -> pa.Table:
        """A run's summary per configuration and slice of the gold set (no rows for a run without slices)."""
        with self.connect() as con:
            return con.sql(
                f"SELECT * FROM slice_summary WHERE run_id = ? ORDER BY slice_column, slice_value, {', '.join(CONFIG_KEYS)}",
                params=[run_id],
            ).to_arrow_table()

    def query_slices(self, run_id: str) -> dict[str, set[str]]:
        """Which queries each slice (`column=value`) of a run's gold set holds ({} for a run without slices)."""
        path = self._file(run_id, "slices")
        if not path.is_file():
            return {}
        out: dict[str, set[str]] = {}
        with self.connect() as con, reading(run_id, path):
            found = con.execute(f"SELECT query_id, slice_column, slice_value FROM read_parquet({quote(path)})")
            for query_id, column, value in found.fetchall():
                out.setdefault(slice_name(column, value), set()).add(query_id)
        return out

    def run_file(self, run_id: str, kind: str, order: str = "") -> pa.Table:
        """One results file of a completed run, with the columns the views show (read directly: a run's
        questions never open the other runs' files). Empty for a file older runs did not write."""
        path = self._file(run_id, kind)
        if not path.is_file():
            if kind in ("per_query", "summary") and self.run(run_id)["status"] == "completed":
                raise InputError(
                    f"the results of run {run_id} are missing; `chunkeval warehouse repair` marks such runs failed",
                    path,
                )
            path = seed_folder(self.results_dir, SCHEMA_VERSION) / f"{kind}.parquet"
            if not path.is_file():
                return empty_results()[kind]
        import pyarrow.parquet as pq

        with reading(run_id, path):
            names = set(pq.read_schema(path).names)
        with self.connect() as con, reading(run_id, path):
            return con.sql(
                f"SELECT {projection(kind, names, 'q')} FROM read_parquet({quote(path)}) q JOIN runs r USING (run_id) "
                f"WHERE r.status = 'completed' AND r.run_id = ? {order}",
                params=[run_id],
            ).to_arrow_table()

    def run_columns(self, run_id: str, kind: str, columns: list[str]) -> dict[str, np.ndarray]:
        """Some columns of one results file of a completed run, as numpy (NULL read as NaN): what a
        check over long history reads without building Arrow tables (whose conversions import pandas)."""
        import pyarrow.parquet as pq

        path = self._file(run_id, kind)
        with reading(run_id, path):
            older = not path.is_file() or not set(columns) <= set(pq.read_schema(path).names)
        if older:
            table = self.run_file(run_id, kind)  # its errors, or an older run's file read through the views' projection
            missing = np.full(table.num_rows, np.nan)  # a metric the run did not measure (before it existed)
            return {c: _numpy(table[c]) if c in table.column_names else missing for c in columns}
        with self.connect() as con, reading(run_id, path):
            found = con.execute(f"SELECT {', '.join(columns)} FROM read_parquet({quote(path)})").fetchnumpy()
        return {c: _unmasked(v) for c, v in found.items()}

    def _question_texts(self, run_id: str) -> list[tuple[str, str]]:
        """(query_id, question) of a run's gold set (of its qrels under document gold: no span references)."""
        paths = [p for p in (self._file(run_id, "references"), self._file(run_id, "qrels")) if p.is_file()]
        if not paths:
            return []
        with self.connect() as con, reading(run_id, paths[0].parent):
            return con.execute(
                " UNION ".join(f"SELECT DISTINCT query_id, question FROM read_parquet({quote(p)})" for p in paths)
            ).fetchall()

    def qrels(self, run_id: str) -> pa.Table | None:
        """Under document gold, the run's qrels (`query_id, question, doc_id, grade`); None for a run of
        span gold (or recorded before runs over documents kept them)."""
        path = self._file(run_id, "qrels")
        if not path.is_file():
            return None
        with self.connect() as con, reading(run_id, path):
            return con.sql(
                f"SELECT * FROM read_parquet({quote(path)}) ORDER BY query_id, grade DESC, doc_id"
            ).to_arrow_table()

    def query_results(self, run_id: str) -> pa.Table:
        return self.run_file(run_id, "per_query", f"ORDER BY {', '.join(CONFIG_KEYS)}, query_id")

    def references(self, run_id: str) -> pa.Table:
        """The run's references per chunking: length in tokens, whether they straddle a chunk boundary."""
        return self.run_file(
            run_id, "references", "ORDER BY model, chunker, chunk_size, chunk_overlap, query_id, ref_start"
        )

    def gold_check(self, run_id: str) -> dict | None:
        """The gold-set check recorded with a run (None for runs recorded without one). A damaged file is
        moved aside to `gold_check.json.corrupt` with one warning line, and reads as not recorded."""
        path = self.results_dir / run_id / "gold_check.json"
        try:
            found = json_loads(record_text(path))
            if isinstance(found, dict) and all(isinstance(v, list) for v in found.values()):
                return found
            problem = "not an object of lists"
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            problem = str(exc)
        path.replace(path.with_name(path.name + ".corrupt"))
        logging.getLogger("chunkeval").warning("%s: damaged (%s); moved aside to %s.corrupt", path, problem, path.name)
        return None

    def record_alarms(self, run_id: str, alarms: dict) -> None:
        """What a run told (its verdict, the baseline it was against, the events it emitted: `alarms.json` in its
        folder), so that the weekly flow never announces a second time the regression its run announced."""
        write_text(self.results_dir / run_id / "alarms.json", json.dumps(alarms, sort_keys=True) + "\n")

    def alarms(self, run_id: str) -> dict | None:
        """What a run told (`record_alarms`); None where it recorded nothing or the file does not hold."""
        try:
            found = json_loads(record_text(self.results_dir / run_id / "alarms.json", 1 << 20))
        except (OSError, ValueError):
            return None
        return found if isinstance(found, dict) else None

    def retrieved_file(self, run_id: str) -> Path:
        """The retrieved lists' file of a completed run; one line naming the run where it has none."""
        run = self.run(run_id)
        if run["status"] != "completed":
            raise InputError(f"run {run_id} is {run['status']}: only completed runs have results")
        path = self._file(run_id, "retrieved")
        if not path.is_file():
            raise InputError(
                f"run {run_id} was recorded before chunkeval kept retrieved lists (or without them): "
                "there is nothing to show; runs recorded from now on keep them"
            )
        return path

    def retrieved(self, run_id: str, query_ids: list[str] | None = None) -> pa.Table:
        """A completed run's retrieved lists (of `query_ids` only, when given)."""
        path = self.retrieved_file(run_id)
        where = "" if query_ids is None else "WHERE list_contains(?::VARCHAR[], query_id)"
        with self.connect() as con, reading(run_id, path):
            table = con.sql(
                f'SELECT * EXCLUDE (length), start + length AS "end" FROM read_parquet({quote(path)}) {where}',
                params=[] if query_ids is None else [query_ids],
            ).to_arrow_table()
        if "expand" not in table.column_names:  # lists kept before small-to-big retrieval: the chunks themselves
            table = table.append_column("expand", pa.array([NO_EXPAND] * table.num_rows, pa.string()))
        return table

    def models(self, run_id: str) -> pa.Table:
        """The models of a run: fingerprint, texts embedded, throughput (empty for runs before v4)."""
        return self.run_file(run_id, "models", "ORDER BY model")


def _unmasked(values) -> np.ndarray:
    """A column of DuckDB's fetchnumpy: NULL as NaN in a float column, as None in any other (a null key such
    as `candidates` of a row that was not reranked must equal None, as the configuration says it)."""
    if not isinstance(values, np.ma.MaskedArray):
        return np.asarray(values)
    if values.dtype.kind == "f":
        return values.filled(np.nan)
    if not np.ma.getmaskarray(values).any():
        return np.asarray(values.data)
    out = np.asarray(values.data).astype(object)
    out[np.ma.getmaskarray(values)] = None
    return out


def _numpy(column) -> np.ndarray:
    """An Arrow column as numpy, with the same reading of NULL as `_unmasked`."""
    import pyarrow as pa

    if column.null_count and not pa.types.is_floating(column.type):
        return np.asarray(column.to_pylist(), dtype=object)
    return numbers(column)
