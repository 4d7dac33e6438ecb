"""The results warehouse: a DuckDB catalogue of runs, the summaries of their results, and views.

Layout under `$CHUNKEVAL_HOME/warehouse/` (schema: docs/warehouse.md):
- `results/<run_id>/`: the run's Parquet files (`per_query`, `summary`, `by_corpus`, `references`,
  `models`) and its `manifest.json`, written under temporary names and renamed before the run's row
  turns `completed`. They are the source of truth.
- `chunkeval.duckdb`: tables `meta` (schema version), `runs` (one row per run), `baselines`, and
  `summaries` and `corpus_summaries`: the summary rows of every completed run, loaded from its
  Parquet files in the transaction that marks it completed (and rebuilt from them by `repair`), so
  that questions over years of runs never open thousands of files. Views `config_summary`,
  `corpus_summary` and `trend` read those tables; `query_results`, `gold_references` and `run_models`
  read the Parquet files of every run (for ad hoc SQL); the library reads one run's files directly.
  The views show completed runs only, so a run killed at any point leaves no rows in the reports.

DuckDB lets one process write a database file at a time, so every operation opens a short-lived
connection, retrying while another process holds the lock: two runs at once both get recorded.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import socket
import time
import uuid
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from chunkeval._version import __version__
from chunkeval.analysis import regression as P
from chunkeval.analysis.regression import DEFAULT_THRESHOLD, REGRESSION_METRICS  # noqa: F401 (re-exported)
from chunkeval.errors import InputError
from chunkeval.faults import checkpoint
from chunkeval.files import pid_alive, write_tables, write_text
from chunkeval.stats.aggregate import (
    METRICS,  # the metric names; the engine (chunkeval.engine.metrics) is imported where it scores
    summary_sql,
)
from chunkeval.vocabulary import CONFIG_KEYS

SCHEMA_VERSION = 6
STATUSES = ("running", "completed", "failed", "skipped")
TRIGGERS = ("manual", "schedule", "event")

# Each step moves the schema up by one version; an older warehouse is brought up to date on open.
MIGRATIONS = [
    """
    CREATE TABLE IF NOT EXISTS meta (key VARCHAR, value VARCHAR);
    CREATE TABLE runs (
        run_id VARCHAR NOT NULL,
        flow_run_id VARCHAR,
        experiment VARCHAR NOT NULL,
        status VARCHAR NOT NULL,
        trigger VARCHAR NOT NULL,
        started_at TIMESTAMP NOT NULL,
        finished_at TIMESTAMP,
        corpus_fingerprint VARCHAR,
        gold_fingerprint VARCHAR,
        model_fingerprint VARCHAR,
        chunkeval_version VARCHAR,
        texts_embedded BIGINT,
        settings VARCHAR
    );
    """,
    """
    ALTER TABLE runs ADD COLUMN pid INTEGER;
    ALTER TABLE runs ADD COLUMN host VARCHAR;
    ALTER TABLE runs ADD COLUMN error VARCHAR;
    CREATE TABLE baselines (experiment VARCHAR NOT NULL, run_id VARCHAR NOT NULL, pinned_at TIMESTAMP NOT NULL);
    """,
    # v3: every run keeps a manifest (its catalogue row) beside its results, and every pin a file, so that
    # `chunkeval warehouse repair` can rebuild a damaged catalogue; `_backfill` writes them for older runs.
    "SELECT 1",
    # v4: a configuration is (model, retriever, chunker, chunk_size, chunk_overlap, k); results of older
    # runs read as retriever `dense` with the model their settings recorded; per-run models.parquet.
    "SELECT 1",
    # v5: summaries carry <metric>_ci_low and <metric>_ci_high (95 % bootstrap intervals of the macro
    # means); summaries written before have none (NULL), and they are never recomputed.
    "SELECT 1",
    # v6: the summaries of completed runs live in tables (`_materialize` loads them from the Parquet files);
    # runs write by_corpus.parquet, and older runs' per-corpus summaries are computed from their per-query rows.
    None,  # the tables' DDL is `_summary_tables_sql()`
]

RUN_COLUMNS = (
    "run_id",
    "flow_run_id",
    "experiment",
    "status",
    "trigger",
    "started_at",
    "finished_at",
    "corpus_fingerprint",
    "gold_fingerprint",
    "model_fingerprint",
    "chunkeval_version",
    "texts_embedded",
    "settings",
    "error",
)
MANIFEST_COLUMNS = RUN_COLUMNS + ("pid", "host")
# the `duplicates` setting of a run (chunkeval.engine.duplicates); runs recorded before it existed were positional
DUPLICATES_SQL = "coalesce(json_extract_string({t}settings, '$.duplicates'), 'positional')"


_LOCKED = re.compile(r"could not set lock|conflicting lock", re.I)
_DAMAGE = re.compile(
    r"corrupt|checksum|not a valid duckdb|invalid database|database file .*(truncated|too small)", re.I
)


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _quote(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


_KEYS = {
    "run_id": pa.string(),
    "model": pa.string(),
    "retriever": pa.string(),
    "chunker": pa.string(),
    "chunk_size": pa.int64(),
    "chunk_overlap": pa.int64(),
    "k": pa.int64(),
}
_AVERAGES = {
    **_KEYS,
    "n_queries": pa.int64(),
    **{f"{m}_{s}": pa.float64() for m in METRICS for s in ("mean", "std", "micro", "ci_low", "ci_high")},
    "retrieved_tokens_mean": pa.float64(),
}
_SUMMARY = pa.schema({**_AVERAGES, "n_chunks": pa.int64(), "truncated_chunks": pa.int64()})
_CORPUS_SUMMARY = pa.schema({**_AVERAGES, "corpus_id": pa.string()})
RESULT_FILES = ("per_query", "summary", "by_corpus", "references", "models")


def _empty_results() -> dict[str, pa.Table]:
    """Zero-row tables with the key columns, so the views bind before any run has finished."""
    per_query = pa.schema(
        {**_KEYS, "query_id": pa.string(), "corpus_id": pa.string(), **{m: pa.float64() for m in METRICS}}
    )
    references = pa.schema(
        {
            "run_id": pa.string(),
            "model": pa.string(),
            "chunker": pa.string(),
            "chunk_size": pa.int64(),
            "chunk_overlap": pa.int64(),
            "query_id": pa.string(),
            "corpus_id": pa.string(),
            "question": pa.string(),
            "ref_start": pa.int64(),
            "ref_end": pa.int64(),
            "ref_tokens": pa.int64(),
            "straddles": pa.bool_(),
        }
    )
    models = pa.schema(
        {
            "run_id": pa.string(),
            "model": pa.string(),
            "model_fingerprint": pa.string(),
            "texts_embedded": pa.int64(),
            "embed_seconds": pa.float64(),
            "texts_per_second": pa.float64(),
        }
    )
    return {
        name: schema.empty_table()
        for name, schema in (
            ("per_query", per_query),
            ("summary", _SUMMARY),
            ("by_corpus", _CORPUS_SUMMARY),
            ("references", references),
            ("models", models),
        )
    }


def _ddl(table: str, schema: pa.Schema) -> str:
    types = {pa.string(): "VARCHAR", pa.int64(): "BIGINT", pa.float64(): "DOUBLE"}
    return f"CREATE TABLE IF NOT EXISTS {table} ({', '.join(f'{f.name} {types[f.type]}' for f in schema)});"


def _summary_tables_sql() -> str:
    return _ddl("summaries", _SUMMARY) + _ddl("corpus_summaries", _CORPUS_SUMMARY)


# results of runs before v4 have no model or retriever column: they were dense, with the model of their settings
def _projection(kind: str, names: set[str], alias: str) -> str:
    """The columns a view (or a direct read) shows of a results file of `kind` with columns `names`,
    joined to the catalogue row `r`."""
    model = (
        f"coalesce({alias}.model, json_extract_string(r.settings, '$.model'))"
        if "model" in names
        else "json_extract_string(r.settings, '$.model')"
    )
    retriever = f"coalesce({alias}.retriever, 'dense')" if "retriever" in names else "'dense'"
    drop = ", ".join(c for c in ("run_id", "model", "retriever") if c in names)
    rest = f"{alias}.* EXCLUDE ({drop})" if drop else f"{alias}.*"
    if kind in ("per_query", "summary", "by_corpus"):
        return f"r.experiment, r.started_at, r.trigger, {model} AS model, {retriever} AS retriever, {rest}, r.run_id"
    if kind == "references":
        ref_model = f"coalesce({alias}.model, 'none')" if "model" in names else "'none'"
        rest = f"{alias}.* EXCLUDE ({', '.join(c for c in ('run_id', 'model') if c in names)})"
        return f"r.experiment, {ref_model} AS model, {rest}, r.run_id"
    return f"r.experiment, r.started_at, {alias}.* EXCLUDE (run_id), r.run_id"


def _parquet(paths: list[Path]) -> str:
    return f"read_parquet([{', '.join(_quote(p) for p in paths)}], union_by_name = true)"


class Warehouse:
    def __init__(self, root: Path, lock_timeout: float = 120.0):
        self.root = Path(root)
        self.db_path = self.root / "chunkeval.duckdb"
        self.results = self.root / "results"
        self.lock_timeout = lock_timeout
        self._ready = False
        self._session = None

    @classmethod
    def at_home(cls, must_exist: bool = False) -> Warehouse:
        """The warehouse under `$CHUNKEVAL_HOME/warehouse` (with `must_exist`, an error where no run was
        ever recorded: what only reads never creates it)."""
        from chunkeval.paths import home

        wh = cls(home() / "warehouse")
        if must_exist and not wh.exists():
            raise InputError(
                "no warehouse here yet: no run has been recorded (`chunkeval run` records one)", wh.db_path
            )
        return wh

    # ------------------------------------------------------------------ connections and schema

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

    def _damaged(self, exc: Exception) -> InputError:
        reason = str(exc).splitlines()[0]
        return InputError(
            f"the warehouse file is damaged ({reason}); run `chunkeval warehouse repair` to rebuild "
            "its catalogue from the run manifests",
            self.db_path,
        )

    def schema_version(self, con) -> int:
        if not con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'meta'").fetchone()[0]:
            return 0
        row = (con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall() or [None])[0]
        return int(row[0]) if row else 0

    def _migrate(self, con, upto: int = SCHEMA_VERSION) -> None:
        version = self.schema_version(con)
        if version > SCHEMA_VERSION:
            raise InputError(
                f"warehouse schema version {version} is newer than this chunkeval ({__version__}) understands",
                self.db_path,
            )
        for step in range(version, upto):
            con.execute("BEGIN TRANSACTION")
            con.execute(MIGRATIONS[step] or _summary_tables_sql())
            if step == 5:  # the summaries of every completed run so far
                self._materialize(
                    con, [r for (r,) in con.execute("SELECT run_id FROM runs WHERE status = 'completed'").fetchall()]
                )
            con.execute("DELETE FROM meta WHERE key = 'schema_version'")
            con.execute("INSERT INTO meta VALUES ('schema_version', ?)", [str(step + 1)])
            con.execute("COMMIT")
            if step == 2:
                self._backfill(con)
        if upto == SCHEMA_VERSION:
            self._create_views(con, rebind=version < SCHEMA_VERSION)

    def _backfill(self, con) -> None:
        """Manifests for runs and pin files for baselines recorded before v3."""
        cur = con.execute(f"SELECT {', '.join(MANIFEST_COLUMNS)} FROM runs")
        for values in cur.fetchall():
            row = dict(zip(MANIFEST_COLUMNS, values))
            if self.read_manifest(row["run_id"]) is None:
                self._write_manifest(row)
        for experiment, run_id, pinned_at in con.execute(
            "SELECT experiment, run_id, pinned_at FROM baselines"
        ).fetchall():
            self._write_pin({"experiment": experiment, "run_id": run_id, "pinned_at": pinned_at})

    def _create_views(self, con, rebind: bool = False) -> None:
        """The views. Those over the summary tables are cheap and made by every process; those over every
        run's Parquet files only when the schema changed or the warehouse moved (making them reads the
        footer of every file)."""
        duplicates = DUPLICATES_SQL.format(t="r.")
        for view, table in (("config_summary", "summaries"), ("corpus_summary", "corpus_summaries")):
            con.execute(f"""
                CREATE OR REPLACE VIEW {view} AS
                SELECT {_projection("summary", set(_SUMMARY.names), "s")}, {duplicates} AS duplicates
                FROM {table} s JOIN runs r USING (run_id)
                WHERE r.status = 'completed'""")
        con.execute(f"""
            CREATE OR REPLACE VIEW trend AS
            WITH long AS (
                UNPIVOT (SELECT experiment, run_id, started_at, duplicates, {", ".join(CONFIG_KEYS)}, COLUMNS('_mean$')
                         FROM config_summary)
                ON COLUMNS('_mean$') INTO NAME metric VALUE value)
            SELECT experiment, run_id, started_at, duplicates, {", ".join(CONFIG_KEYS)},
                   regexp_replace(metric, '_mean$', '') AS metric, value,
                   -- the change against the previous run scored the same way (never across duplicates settings)
                   value - lag(value) OVER (PARTITION BY experiment, duplicates, {", ".join(CONFIG_KEYS)}, metric
                                            ORDER BY started_at, run_id) AS change
            FROM long""")
        where = (con.execute("SELECT value FROM meta WHERE key = 'results_path'").fetchall() or [None])[0]
        if not rebind and where and where[0] == str(self.results):
            return
        seed = self.results / f"_schema{SCHEMA_VERSION}"
        if not (seed / "models.parquet").exists():
            seed.mkdir(parents=True, exist_ok=True)
            write_tables({seed / f"{name}.parquet": table for name, table in _empty_results().items()})
        for view, kind in (("query_results", "per_query"), ("gold_references", "references"), ("run_models", "models")):
            names = set(_empty_results()[kind].column_names)
            con.execute(f"""
                CREATE OR REPLACE VIEW {view} AS
                SELECT {_projection(kind, names, "q")}
                FROM read_parquet({_quote(self.results / "*" / f"{kind}.parquet")}, union_by_name = true) q JOIN runs r USING (run_id)
                WHERE r.status = 'completed'""")
        con.execute("DELETE FROM meta WHERE key = 'results_path'")
        con.execute("INSERT INTO meta VALUES ('results_path', ?)", [str(self.results)])

    def _materialize(self, con, run_ids: list[str]) -> None:
        """Load the summaries of completed runs from their Parquet files into the summary tables (in the
        caller's transaction). A run without by_corpus.parquet (before v6) gets its per-corpus summary
        computed from its per-query rows by the shared SQL (`chunkeval.stats.aggregate`), without intervals."""
        if not run_ids:
            return
        for table in ("summaries", "corpus_summaries"):
            con.execute(f"DELETE FROM {table} WHERE list_contains(?, run_id)", [run_ids])
        summaries = [self._file(r, "summary") for r in run_ids if self._file(r, "summary").is_file()]
        self._insert_by_name(con, "summaries", _parquet(summaries), summaries)
        by_corpus = [self._file(r, "by_corpus") for r in run_ids if self._file(r, "by_corpus").is_file()]
        self._insert_by_name(con, "corpus_summaries", _parquet(by_corpus), by_corpus)
        older = [
            r for r in run_ids if not self._file(r, "by_corpus").is_file() and self._file(r, "per_query").is_file()
        ]
        for skip in (False, True):  # runs that left questions without references out of their averages, and the others
            mine = [r for r in older if bool(json.loads(self.run_settings(con, r)).get("skip_empty_gold")) == skip]
            if not mine:
                continue
            files = [self._file(r, "per_query") for r in mine]
            names = {
                c
                for (c,) in con.execute(
                    f"SELECT column_name FROM (DESCRIBE SELECT * FROM {_parquet(files)})"
                ).fetchall()
            }
            source = (
                f"(SELECT {_projection('per_query', names, 'q')} FROM {_parquet(files)} q JOIN runs r USING (run_id))"
            )
            columns = [c for c in names | {"model", "retriever"} if c != "run_id"]
            select = summary_sql(source, ["run_id", *CONFIG_KEYS, "corpus_id"], columns, skip_empty_gold=skip)
            con.execute(f"INSERT INTO corpus_summaries BY NAME {select}")

    @staticmethod
    def run_settings(con, run_id: str) -> str:
        row = (con.execute("SELECT settings FROM runs WHERE run_id = ?", [run_id]).fetchall() or [None])[0]
        return (row[0] if row else None) or "{}"

    def _insert_by_name(self, con, table: str, source: str, files: list[Path]) -> None:
        if not files:
            return
        have = {c for (c,) in con.execute(f"SELECT column_name FROM (DESCRIBE {table})").fetchall()}
        names = [
            c
            for (c,) in con.execute(f"SELECT column_name FROM (DESCRIBE SELECT * FROM {source})").fetchall()
            if c in have
        ]
        con.execute(f"INSERT INTO {table} BY NAME SELECT {', '.join(names)} FROM {source}")

    def _file(self, run_id: str, kind: str) -> Path:
        return self.results / run_id / f"{kind}.parquet"

    # ------------------------------------------------------------------ the run lifecycle

    def manifest_path(self, run_id: str) -> Path:
        return self.results / run_id / "manifest.json"

    def _write_manifest(self, row: dict) -> None:
        """The run's catalogue row as a small JSON file beside its results: what `repair` rebuilds from."""
        doc = {c: (row[c].isoformat() if isinstance(row.get(c), datetime) else row.get(c)) for c in MANIFEST_COLUMNS}
        folder = self.results / row["run_id"]
        folder.mkdir(parents=True, exist_ok=True)
        write_text(folder / "manifest.json", json.dumps(doc, indent=1, sort_keys=True))

    def read_manifest(self, run_id: str) -> dict | None:
        """A run's manifest, or None where it is missing or unreadable."""
        try:
            doc = json.loads(self.manifest_path(run_id).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(doc, dict) or doc.get("run_id") != run_id or doc.get("status") not in STATUSES:
            return None
        for c in ("started_at", "finished_at"):
            doc[c] = datetime.fromisoformat(doc[c]) if doc.get(c) else None
        return {c: doc.get(c) for c in MANIFEST_COLUMNS}

    def _update(self, run_id: str, **changes) -> None:
        """Change a run's manifest, then its catalogue row: the manifest always knows at least as much."""
        row = self.read_manifest(run_id) or self.run(run_id, with_process=True)
        row.update(changes)
        self._write_manifest(row)
        if changes.get("status") == "completed":
            checkpoint("catalogue")
        with self.connect() as con:
            con.execute("BEGIN TRANSACTION")
            if changes.get("status") == "completed":  # its summaries become visible with its status
                self._materialize(con, [run_id])
            assignments = ", ".join(f"{c} = ?" for c in changes)
            con.execute(f"UPDATE runs SET {assignments} WHERE run_id = ?", [*changes.values(), run_id])
            con.execute("COMMIT")

    def begin_run(
        self,
        experiment: str,
        fingerprints: dict,
        trigger: str,
        settings: dict,
        flow_run_id: str | None = None,
        status: str = "running",
        started_at: datetime | None = None,
    ) -> str:
        """A new run's catalogue row and manifest. `started_at` (UTC, naive) is for importing history;
        by default it is now."""
        if trigger not in TRIGGERS:
            raise InputError(f"trigger must be one of {', '.join(TRIGGERS)}, got {trigger!r}")
        now = started_at or _now()
        row = {
            "run_id": now.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8],
            "flow_run_id": flow_run_id,
            "experiment": experiment,
            "status": status,
            "trigger": trigger,
            "started_at": now,
            "finished_at": now if status == "skipped" else None,
            "corpus_fingerprint": fingerprints.get("corpus"),
            "gold_fingerprint": fingerprints.get("gold"),
            "model_fingerprint": fingerprints.get("model"),
            "chunkeval_version": __version__,
            "texts_embedded": 0,
            "settings": json.dumps(settings, sort_keys=True),
            "error": None,
            "pid": os.getpid(),
            "host": socket.gethostname(),
        }
        self._write_manifest(row)
        self._insert(row)
        return row["run_id"]

    def _insert(self, row: dict, con=None) -> None:
        sql = f"INSERT INTO runs ({', '.join(MANIFEST_COLUMNS)}) VALUES ({', '.join('?' for _ in MANIFEST_COLUMNS)})"
        if con is not None:
            con.execute(sql, [row[c] for c in MANIFEST_COLUMNS])
            return
        with self.connect() as con:
            con.execute(sql, [row[c] for c in MANIFEST_COLUMNS])

    def record_skipped(
        self, experiment: str, fingerprints: dict, trigger: str, settings: dict, flow_run_id: str | None = None
    ) -> str:
        return self.begin_run(experiment, fingerprints, trigger, settings, flow_run_id, status="skipped")

    def complete_run(
        self,
        run_id: str,
        per_query: pa.Table,
        summary: pa.Table,
        texts_embedded: int,
        references: pa.Table | None = None,
        models: pa.Table | None = None,
        gold_check: dict | None = None,
        by_corpus: pa.Table | None = None,
    ) -> None:
        """Write the run's files (each whole or not at all), its manifest, then mark it completed.
        `gold_check` is `chunkeval.engine.gold_check.check_gold`'s findings on the run's inputs; without
        `by_corpus` (the sweep's per-corpus summary) it is computed from `per_query`."""
        folder = self.results / run_id
        folder.mkdir(parents=True, exist_ok=True)
        if gold_check is not None:
            write_text(folder / "gold_check.json", json.dumps(gold_check, indent=1))
        run_col = lambda t: t.append_column("run_id", pa.array([run_id] * t.num_rows, pa.string()))  # noqa: E731
        tables = {folder / "per_query.parquet": run_col(per_query), folder / "summary.parquet": run_col(summary)}
        if references is not None:
            tables[folder / "references.parquet"] = run_col(references)
        if models is not None:
            tables[folder / "models.parquet"] = run_col(models)
        if by_corpus is None:
            skip = bool(json.loads(self.run(run_id)["settings"] or "{}").get("skip_empty_gold"))
            from chunkeval.stats.summaries import summarize

            by_corpus = summarize(
                per_query if skip or "has_gold" not in per_query.column_names else per_query.drop_columns(["has_gold"]),
                [k for k in CONFIG_KEYS if k in per_query.column_names] + ["corpus_id"],
            )
        tables[folder / "by_corpus.parquet"] = run_col(by_corpus)
        write_tables(tables, point="results")
        self._update(run_id, status="completed", finished_at=_now(), texts_embedded=int(texts_embedded))

    def fail_run(self, run_id: str, error: str) -> None:
        if self.run(run_id)["status"] == "running":
            self._update(run_id, status="failed", finished_at=_now(), error=error[:2000])

    def reap(self) -> int:
        """Settle runs of this host whose process has died (kill -9, power loss): a run whose manifest
        says completed (it died between its manifest and its catalogue row) is completed, the rest failed."""
        host = socket.gethostname()
        with self.connect() as con:
            rows = con.execute("SELECT run_id, pid FROM runs WHERE status = 'running' AND host = ?", [host]).fetchall()
        dead = [run_id for run_id, pid in rows if pid is None or not pid_alive(pid)]
        for run_id in dead:
            manifest = self.read_manifest(run_id)
            if manifest and manifest["status"] == "completed" and self._has_results(run_id):
                self._update(run_id, **{c: manifest[c] for c in ("status", "finished_at", "texts_embedded")})
            else:
                self._update(run_id, status="failed", finished_at=_now(), error="process ended before the run finished")
        return len(dead)

    def _has_results(self, run_id: str) -> bool:
        return all((self.results / run_id / f"{name}.parquet").is_file() for name in ("per_query", "summary"))

    # ------------------------------------------------------------------ repair

    def healthy(self) -> tuple[bool, str]:
        """(True, '') when the catalogue file opens and every table reads; else (False, why)."""
        if not self.exists():
            return False, "missing"
        try:
            with self.connect() as con:
                for table in ("runs", "baselines", "meta"):
                    con.execute(f"SELECT * FROM {table}").fetchall()
        except InputError as exc:
            return False, exc.message
        return True, ""

    def repair(self) -> dict:
        """Rebuild the catalogue from the run manifests and the pin files.

        A damaged (or missing) catalogue file is moved aside to `chunkeval.duckdb.damaged-<time>` and
        a new one is built: every run with a manifest comes back, completed runs with their results,
        and every pinned baseline. A healthy catalogue is kept; runs in it without a manifest (recorded
        by an older chunkeval) get one, so that a later repair can rebuild them too. Either way the
        summary tables are rebuilt from the runs' Parquet files.
        """
        ok, why = self.healthy()
        manifests = sorted(self.results.glob("*/manifest.json")) if self.results.is_dir() else []
        if ok:
            written = 0
            for row in self.runs(with_process=True):
                if self.read_manifest(row["run_id"]) is None:
                    self._write_manifest(row)
                    written += 1
            for pin in self._dicts("SELECT experiment, run_id, pinned_at FROM baselines"):
                self._write_pin(pin)
            self._rematerialize()
            return {
                "damaged": False,
                "moved_to": None,
                "runs": len(self.runs()),
                "manifests_written": written,
                "reason": "",
            }
        moved = None
        if self.exists():
            moved = self.db_path.with_name(f"{self.db_path.name}.damaged-{_now().strftime('%Y%m%dT%H%M%S')}")
            os.replace(self.db_path, moved)
            wal = self.db_path.with_name(self.db_path.name + ".wal")
            if wal.exists():
                os.replace(wal, moved.with_name(moved.name + ".wal"))
        self._ready = False
        rows = [m for m in (self.read_manifest(p.parent.name) for p in manifests) if m is not None]
        pins = (
            [p for p in (self._read_pin(f) for f in sorted(self.pins.glob("*.json"))) if p]
            if self.pins.is_dir()
            else []
        )
        with self.connect() as con:
            con.execute("BEGIN TRANSACTION")
            for row in rows:
                if row["status"] == "completed" and not self._has_results(row["run_id"]):
                    row.update(status="failed", error="results missing when the catalogue was rebuilt")
                self._insert(row, con)
            known = {r["run_id"] for r in rows if r["status"] == "completed"}
            for pin in pins:
                if pin["run_id"] in known:
                    con.execute(
                        "INSERT INTO baselines VALUES (?, ?, ?)", [pin["experiment"], pin["run_id"], pin["pinned_at"]]
                    )
            self._materialize(con, sorted(known))
            con.execute("COMMIT")
        return {
            "damaged": True,
            "moved_to": str(moved) if moved else None,
            "runs": len(rows),
            "pins": len(pins),
            "reason": why,
        }

    def _rematerialize(self) -> None:
        """Rebuild the summary tables from the Parquet files of every completed run."""
        with self.connect() as con:
            con.execute("BEGIN TRANSACTION")
            done = [r for (r,) in con.execute("SELECT run_id FROM runs WHERE status = 'completed'").fetchall()]
            for table in ("summaries", "corpus_summaries"):
                con.execute(f"DELETE FROM {table}")
            self._materialize(con, done)
            con.execute("COMMIT")

    @property
    def pins(self) -> Path:
        return self.root / "baselines"

    def _write_pin(self, pin: dict) -> None:
        self.pins.mkdir(parents=True, exist_ok=True)
        doc = {**pin, "pinned_at": pin["pinned_at"].isoformat()}
        write_text(self.pins / f"{pin['experiment']}.json", json.dumps(doc, sort_keys=True))

    @staticmethod
    def _read_pin(path: Path) -> dict | None:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            return {
                "experiment": str(doc["experiment"]),
                "run_id": str(doc["run_id"]),
                "pinned_at": datetime.fromisoformat(doc["pinned_at"]),
            }
        except (OSError, ValueError, KeyError, TypeError):
            return None

    # ------------------------------------------------------------------ questions

    def _dicts(self, sql: str, params: list | None = None) -> list[dict]:
        with self.connect() as con:
            cur = con.execute(sql, params or [])
            names = [d[0] for d in cur.description]
            return [dict(zip(names, row)) for row in cur.fetchall()]

    def runs(
        self,
        experiment: str | None = None,
        status: str | None = None,
        limit: int | None = None,
        with_process: bool = False,
    ) -> list[dict]:
        """Runs, newest first."""
        where, params = [], []
        if experiment:
            where.append("experiment = ?")
            params.append(experiment)
        if status:
            where.append("status = ?")
            params.append(status)
        sql = f"SELECT {', '.join(MANIFEST_COLUMNS if with_process else RUN_COLUMNS)} FROM runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY started_at DESC, run_id DESC"
        if limit:
            sql += f" LIMIT {int(limit)}"
        return self._dicts(sql, params)

    def run(self, run_id: str, with_process: bool = False) -> dict:
        columns = MANIFEST_COLUMNS if with_process else RUN_COLUMNS
        rows = self._dicts(f"SELECT {', '.join(columns)} FROM runs WHERE run_id = ?", [run_id])
        if not rows:
            raise InputError(f"no run {run_id!r} in the warehouse {self.db_path}")
        return rows[0]

    def last_completed(self, experiment: str) -> dict | None:
        rows = self.runs(experiment, "completed", limit=1)
        return rows[0] if rows else None

    def summary(self, run_id: str) -> pa.Table:
        with self.connect() as con:
            return con.sql(
                f"SELECT * FROM config_summary WHERE run_id = ? ORDER BY {', '.join(CONFIG_KEYS)}", params=[run_id]
            ).to_arrow_table()

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
            path = self.results / f"_schema{SCHEMA_VERSION}" / f"{kind}.parquet"
            if not path.is_file():
                return _empty_results()[kind]
        import pyarrow.parquet as pq

        names = set(pq.read_schema(path).names)
        with self.connect() as con:
            return con.sql(
                f"SELECT {_projection(kind, names, 'q')} FROM read_parquet({_quote(path)}) q JOIN runs r USING (run_id) "
                f"WHERE r.status = 'completed' AND r.run_id = ? {order}",
                params=[run_id],
            ).to_arrow_table()

    def run_columns(self, run_id: str, kind: str, columns: list[str]) -> dict[str, np.ndarray]:
        """Some columns of one results file of a completed run, as numpy (NULL read as NaN): what a
        check over long history reads without building Arrow tables (whose conversions import pandas)."""
        import pyarrow.parquet as pq

        path = self._file(run_id, kind)
        if not path.is_file() or not set(columns) <= set(pq.read_schema(path).names):
            table = self.run_file(run_id, kind)  # its errors, or an older run's file read through the views' projection
            return {c: table[c].to_numpy(zero_copy_only=False) for c in columns}
        with self.connect() as con:
            found = con.execute(f"SELECT {', '.join(columns)} FROM read_parquet({_quote(path)})").fetchnumpy()
        return {
            c: v.filled(np.nan) if isinstance(v, np.ma.MaskedArray) and v.dtype.kind == "f" else np.asarray(v)
            for c, v in found.items()
        }

    def _question_texts(self, run_id: str) -> list[tuple[str, str]]:
        """(query_id, question) of a run's gold set."""
        path = self._file(run_id, "references")
        if not path.is_file():
            return []
        with self.connect() as con:
            return con.execute(f"SELECT DISTINCT query_id, question FROM read_parquet({_quote(path)})").fetchall()

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
        path = self.results / run_id / "gold_check.json"
        try:
            found = json.loads(path.read_text(encoding="utf-8"))
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

    def models(self, run_id: str) -> pa.Table:
        """The models of a run: fingerprint, texts embedded, throughput (empty for runs before v4)."""
        return self.run_file(run_id, "models", "ORDER BY model")

    def table(self, sql: str, params: list | None = None) -> pa.Table:
        """Any query over the warehouse, as an Arrow table."""
        with self.connect() as con:
            return con.sql(sql, params=params or []).to_arrow_table()

    def trend(
        self,
        experiment: str,
        metric: str,
        config: dict | None = None,
        last: int | None = None,
        configs: list[dict] | None = None,
    ) -> list[dict]:
        """The metric (macro mean, with its 95 % bootstrap interval where the run recorded one) per
        completed run and configuration, oldest first, with the change against the previous run scored
        the same way (the `trend` view's numbers, read from `config_summary` for one metric)."""
        if metric not in METRICS:
            raise InputError(f"unknown metric {metric!r}; choose one of {', '.join(METRICS)}")
        where, params = self._summary_filter(experiment, config, configs)
        keys = ", ".join(CONFIG_KEYS)
        sql = (
            f"SELECT run_id, started_at, duplicates, {keys}, '{metric}' AS metric, {metric}_mean AS value, "
            f"{metric}_ci_low AS ci_low, {metric}_ci_high AS ci_high, {metric}_mean - lag({metric}_mean) OVER "
            f"(PARTITION BY duplicates, {keys} ORDER BY started_at, run_id) AS change "
            f"FROM config_summary WHERE {where}"
        )
        if last:  # the newest `last` runs (their changes still against the run before each)
            sql, params = self._newest_runs(sql, params, experiment, last)
        return self._dicts(sql + f" ORDER BY started_at, run_id, {keys}", params)

    def history(self, experiment: str, metrics: list[str], configs: list[dict], last: int) -> list[dict]:
        """Several metrics at once (mean and 95 % interval each) of the given configurations over the
        newest `last` completed runs, oldest first: what the report's trend charts draw, in one query."""
        where, params = self._summary_filter(experiment, None, configs)
        columns = ", ".join(f"{m}_{part}" for m in metrics for part in ("mean", "ci_low", "ci_high"))
        sql, params = self._newest_runs(
            f"SELECT run_id, started_at, {', '.join(CONFIG_KEYS)}, {columns} FROM config_summary WHERE {where}",
            params,
            experiment,
            last,
        )
        return self._dicts(sql + f" ORDER BY started_at, run_id, {', '.join(CONFIG_KEYS)}", params)

    @staticmethod
    def _summary_filter(experiment: str, config: dict | None, configs: list[dict] | None) -> tuple[str, list]:
        """The WHERE clause on `config_summary` for an experiment, a partial configuration and any of a
        list of full configurations."""
        where, params = ["experiment = ?"], [experiment]
        for key, value in (config or {}).items():
            if key not in CONFIG_KEYS:
                raise InputError(f"config keys are {', '.join(CONFIG_KEYS)}; got {key!r}")
            where.append(f"{key} = ?")
            params.append(value)
        if configs:  # any of these configurations (each a full key)
            where.append(
                "(" + " OR ".join("(" + " AND ".join(f"{k} = ?" for k in CONFIG_KEYS) + ")" for _ in configs) + ")"
            )
            params += [c[k] for c in configs for k in CONFIG_KEYS]
        return " AND ".join(where), params

    @staticmethod
    def _newest_runs(sql: str, params: list, experiment: str, last: int) -> tuple[str, list]:
        """`sql`'s rows of the newest `last` completed runs of the experiment only."""
        return (
            f"SELECT * FROM ({sql}) WHERE run_id IN (SELECT run_id FROM runs WHERE experiment = ? AND "
            f"status = 'completed' ORDER BY started_at DESC, run_id DESC LIMIT {int(last)})",
            [*params, experiment],
        )

    def rollup(self, experiment: str, since: timedelta) -> tuple[pa.Table, list[str]]:
        """The averages of a period: per configuration (and `duplicates` setting), macro = mean over
        every query row of the experiment's completed runs started within `since`, micro = sums over
        them, with `n_runs`; the same SQL as every summary (`chunkeval.stats.aggregate`). Also the run ids."""
        start = _now() - since
        runs = [r for r in self.runs(experiment, "completed") if r["started_at"] >= start]
        if not runs:
            raise InputError(f"experiment {experiment!r} has no completed run since {start:%Y-%m-%d %H:%M} UTC")
        files = [self._file(r["run_id"], "per_query") for r in runs]
        missing = [f for f in files if not f.is_file()]
        if missing:
            raise InputError("results missing; `chunkeval warehouse repair` marks such runs failed", missing[0])
        skip = bool(json.loads(runs[0]["settings"] or "{}").get("skip_empty_gold"))
        with self.connect() as con:
            names = {
                c
                for (c,) in con.execute(
                    f"SELECT column_name FROM (DESCRIBE SELECT * FROM {_parquet(files)})"
                ).fetchall()
            }
            source = (
                f"(SELECT {_projection('per_query', names, 'q')}, {DUPLICATES_SQL.format(t='r.')} AS duplicates "
                f"FROM {_parquet(files)} q JOIN runs r USING (run_id))"
            )
            columns = [c for c in names | {"model", "retriever", "duplicates"} if c != "run_id"]
            sql = summary_sql(
                source, ["duplicates", *CONFIG_KEYS], columns, skip, extra=("count(DISTINCT run_id) AS n_runs",)
            )
            return con.sql(sql).to_arrow_table(), [r["run_id"] for r in runs]

    def delete_runs(self, run_ids: list[str]) -> list[str]:
        """Remove runs with their files. All are checked first: an unknown or running run, or the pinned
        baseline of its experiment, is an error and nothing is removed. Each run's manifest is marked
        deleted first (so that `repair` never brings it back), then its catalogue and summary rows go in
        one transaction, then its folder."""
        runs = [self.run(r) for r in dict.fromkeys(run_ids)]
        pinned = {row["run_id"]: row["experiment"] for row in self._dicts("SELECT experiment, run_id FROM baselines")}
        for run in runs:
            if run["run_id"] in pinned:
                raise InputError(
                    f"run {run['run_id']} is the pinned baseline of experiment {pinned[run['run_id']]!r}: "
                    "pin another run first (`chunkeval baseline`); nothing was deleted"
                )
            if run["status"] == "running":
                raise InputError(f"run {run['run_id']} is still running; nothing was deleted")
        ids = [r["run_id"] for r in runs]
        for run_id in ids:
            if self.manifest_path(run_id).parent.is_dir():
                write_text(self.manifest_path(run_id), json.dumps({"run_id": run_id, "status": "deleted"}))
        with self.connect() as con:
            con.execute("BEGIN TRANSACTION")
            for table in ("runs", "summaries", "corpus_summaries"):
                con.execute(f"DELETE FROM {table} WHERE list_contains(?, run_id)", [ids])
            con.execute("COMMIT")
        for run_id in ids:
            self._remove_folder(run_id)
        return ids

    def _remove_folder(self, run_id: str) -> None:
        import shutil

        folder = self.results / run_id
        if folder.is_dir():
            aside = folder.with_name(f".deleting-{run_id}")
            os.replace(folder, aside)
            shutil.rmtree(aside, ignore_errors=True)

    def prune(
        self, experiment: str, keep_last: int | None = None, older_than: timedelta | None = None
    ) -> tuple[list[str], str | None]:
        """Delete the experiment's runs beyond the newest `keep_last`, or started more than `older_than`
        ago (running runs are left alone). The pinned baseline is kept whatever its age: (deleted, kept)."""
        if (keep_last is None) == (older_than is None):
            raise InputError("prune takes one of keep_last or older_than")
        if keep_last is not None and keep_last < 1:
            raise InputError(f"keep_last must be at least 1, got {keep_last}")
        self.check_experiment(experiment)
        runs = [r for r in self.runs(experiment) if r["status"] != "running"]
        if keep_last is not None:
            doomed = [r["run_id"] for r in runs[keep_last:]]
        else:
            cutoff = _now() - older_than
            doomed = [r["run_id"] for r in runs if r["started_at"] < cutoff]
        pinned = self.baseline(experiment)
        kept = pinned if pinned in doomed else None
        doomed = [r for r in doomed if r != pinned]
        if doomed:
            self.delete_runs(doomed)
        self._sweep_deleted()
        return doomed, kept

    def _sweep_deleted(self) -> None:
        """Remove the folders a crash left behind after their runs had left the catalogue."""
        import shutil

        if not self.results.is_dir():
            return
        known = {r["run_id"] for r in self._dicts("SELECT run_id FROM runs")}
        for folder in self.results.iterdir():
            if not folder.is_dir() or folder.name in known:
                continue
            if folder.name.startswith(".deleting-"):
                shutil.rmtree(folder, ignore_errors=True)
                continue
            try:
                if json.loads((folder / "manifest.json").read_text(encoding="utf-8")).get("status") == "deleted":
                    self._remove_folder(folder.name)
            except (OSError, ValueError):
                pass

    def pin_baseline(self, experiment: str, run_id: str) -> None:
        run = self.run(run_id)
        if run["status"] != "completed" or run["experiment"] != experiment:
            raise InputError(f"run {run_id!r} is not a completed run of experiment {experiment!r}")
        pin = {"experiment": experiment, "run_id": run_id, "pinned_at": _now()}
        self._write_pin(pin)
        with self.connect() as con:
            con.execute("DELETE FROM baselines WHERE experiment = ?", [experiment])
            con.execute("INSERT INTO baselines VALUES (?, ?, ?)", [experiment, run_id, pin["pinned_at"]])

    def baseline(self, experiment: str) -> str | None:
        rows = self._dicts("SELECT run_id FROM baselines WHERE experiment = ?", [experiment])
        return rows[0]["run_id"] if rows else None

    def check_experiment(self, name: str) -> None:
        """An error naming the known experiments unless `name` has a recorded run."""
        if not self.runs(name, limit=1):
            known = sorted({r["experiment"] for r in self.runs()})
            raise InputError(f"no experiment named {name!r} has been recorded; known: {', '.join(known) or 'none'}")

    def compare(
        self,
        metric: str,
        run_ids: list[str] | tuple = (),
        experiment: str | None = None,
        config: dict | None = None,
        all_pairs: bool = False,
        alpha: float = 0.05,
    ) -> list[dict]:
        """`chunkeval compare` over recorded runs: one run's configurations against its best (or every
        pair), or the configurations two runs of one experiment share, queries paired by query_id.
        Without a run, the experiment's last completed run. The rules: `chunkeval.analysis.regression`."""
        P.check_request(metric, alpha)
        if experiment:
            self.check_experiment(experiment)
        runs = [self.run(r) for r in run_ids]
        if not runs:
            if not experiment:
                raise InputError("compare takes one or two run ids, or an experiment for its last completed run")
            last = self.last_completed(experiment)
            if last is None:
                raise InputError(f"experiment {experiment!r} has no completed run")
            runs = [last]
        P.check_runs(runs, experiment)
        if len(runs) == 2:
            self.check_comparable(runs[0]["run_id"], runs[1]["run_id"])
        ids = [r["run_id"] for r in runs]
        return P.compare_runs((self.query_results(r) for r in ids), ids, metric, config or {}, all_pairs, alpha)

    def duplicates(self, run_id: str) -> str:
        """The `duplicates` setting a run was scored with (`positional` for runs recorded before it existed)."""
        return self._dicts(f"SELECT {DUPLICATES_SQL.format(t='')} AS d FROM runs WHERE run_id = ?", [run_id])[0]["d"]

    def check_comparable(self, run_a: str, run_b: str) -> None:
        """Runs scored with different `duplicates` settings are never compared."""
        P.check_same_scoring(run_a, self.duplicates(run_a), run_b, self.duplicates(run_b))

    def reference_run(self, experiment: str, run_id: str) -> str | None:
        """What a run of the experiment is checked against: the pinned baseline, else the previous
        completed run scored with the same `duplicates` setting."""
        pinned = self.baseline(experiment)
        if pinned is not None:
            return pinned
        rows = self._dicts(
            f"SELECT run_id FROM runs WHERE experiment = ? AND status = 'completed' AND run_id <> ? "
            f"AND {DUPLICATES_SQL.format(t='')} = ? AND started_at <= (SELECT started_at FROM runs WHERE run_id = ?) "
            "ORDER BY started_at DESC, run_id DESC LIMIT 1",
            [experiment, run_id, self.duplicates(run_id), run_id],
        )
        return rows[0]["run_id"] if rows else None

    def regressions(
        self, experiment: str, metrics: list[str], threshold: float, baseline: str | None = None, alpha: float = 0.05
    ) -> list[dict]:
        """Configurations whose metric fell for real in the newest completed run, against the pinned (or
        given) baseline run, else the previous completed run: a paired mean fall larger than `threshold`
        that is significant at `alpha` after Holm (`chunkeval.analysis.comparisons.regressions`)."""
        newest = self.last_completed(experiment)
        if newest is None:
            return []
        newest = newest["run_id"]
        reference = baseline or self.reference_run(experiment, newest)
        if reference is None or reference == newest:
            return []
        self.check_comparable(newest, reference)
        questions = dict(self._question_texts(reference) + self._question_texts(newest))
        columns = [*CONFIG_KEYS, "query_id", *metrics]
        after, before = (
            self.run_columns(newest, "per_query", columns),
            self.run_columns(reference, "per_query", columns),
        )
        return P.regressions_between(newest, reference, after, before, metrics, threshold, alpha, questions)
