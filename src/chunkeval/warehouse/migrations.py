"""The catalogue's schema: its tables, the steps that bring an older warehouse up to date, the views, and
the summary tables loaded from each completed run's Parquet files (`_materialize`).

Tables `meta` (schema version, where the results folder was when the views were made), `runs`,
`baselines`, `summaries`, `corpus_summaries` and `slice_summaries` (docs/warehouse.md). Views `config_summary`,
`corpus_summary`, `slice_summary` and `trend` read the summary tables; `query_results`, `gold_references` and `run_models`
read the Parquet files of every run (for ad hoc SQL). The views show completed runs only, so a run killed
at any point leaves no rows in the reports.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from chunkeval._version import __version__
from chunkeval.errors import InputError
from chunkeval.files import write_tables
from chunkeval.stats.aggregate import summary_sql
from chunkeval.vocabulary import ADDED_KEYS, CONFIG_KEYS, config_id_sql, config_label_sql
from chunkeval.warehouse.db import Connections
from chunkeval.warehouse.layout import Layout
from chunkeval.warehouse.tables import (
    CORPUS_SUMMARY,
    DUPLICATES_SQL,
    INDEX_OF_OLDER_ROWS,
    MANIFEST_COLUMNS,
    SLICE_SUMMARY,
    SUMMARY,
    TIES_SQL,
    added_keys_sql,
    axis_columns_sql,
    context_key_sql,
    empty_results,
    expand_key_sql,
    missing_axes_sql,
    parquet,
    parquet_columns,
    production_sql,
    projection,
    quote,
    run_setting_sql,
    seed_folder,
    slice_table_sql,
    sql_type,
    summary_tables_sql,
    vector_keys_sql,
)

SCHEMA_VERSION = 14
SUMMARY_TABLES = ("summaries", "corpus_summaries", "slice_summaries")  # loaded from each completed run's files

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
    None,  # the tables' DDL is `summary_tables_sql()`
    # v7: a configuration gains its index (`exact`, `hnsw:…`, `none` for rows that read no vectors), and summaries
    # the metric ann_recall_at_k and what the index cost; older rows read index `exact` (`none` for bm25 and model
    # `none`), and NULL for the rest (`_add_columns`); and it gains reranker and candidates: older rows read as
    # reranker `none`, candidates null
    "ADDED_KEYS",  # `added_keys_sql()`, then `_add_columns`
    # v8: summaries gain the document-level metrics (doc_ndcg_at_k, …) of runs over document gold (qrels); older
    # rows read NULL (`_add_columns`)
    "SELECT 1",
    # v9: slices of the gold set (`--slice-by`): runs write by_slice.parquet (the summary per configuration and
    # slice) and slices.parquet (which queries each slice holds); the table `slice_summaries` and the view
    # `slice_summary`. Older runs have no slices (no rows)
    "SLICES",  # `slice_table_sql()`
    # v10: ties (docs/metrics.md, "Ties"): runs record their tie policy (`ties` in the settings; older runs read
    # `retriever`), the views show it, and per_query.parquet gains the raw scores of the MaxP document rankings
    # (`doc_scores`), whether each top k ties and the tie-aware metrics; older runs read NULL (the seed schema)
    "SELECT 1",
    # v11: compressed vectors (docs/vectors.md): a configuration gains `vectors` and `dims` (older rows read float32
    # and full) and summaries the bytes per vector `vector_bytes` (older rows NULL)
    "VECTOR_KEYS",  # `vector_keys_sql()`
    # v12: a configuration gains `expand` (small-to-big retrieval, chunkeval.engine.scoring.expansion): older rows, summaries
    # and retrieved lists read `none`, and their config ids stay (`vocabulary.config_id` leaves `none` out)
    "EXPAND",  # `expand_key_sql()`
    # v13: contextual chunk headers (`context`, a configuration key): the summary tables gain the column, older
    # rows read `none` (its default); results files without it read `none` in the views (`projection`)
    "CONTEXT",  # `context_key_sql()`
    # v14: production as a source beside runs (`chunkeval traces import`, docs/warehouse.md "Production"): the
    # tables of imported retrieval spans, their queries, documents and contents, and the judged results over time
    "PRODUCTION",  # `chunkeval.warehouse.production.production_sql()`
]


# the views over the summary tables: view → the table it reads and that table's schema; `trend` reads config_summary
SUMMARY_VIEWS = {
    "config_summary": ("summaries", SUMMARY),
    "corpus_summary": ("corpus_summaries", SUMMARY),
    "slice_summary": ("slice_summaries", SLICE_SUMMARY),
}
MADE_VIEWS = [*SUMMARY_VIEWS, "trend"]  # what `_summary_views_sql` makes

# the views over every run's Parquet files: view → the results file it reads
RESULTS_VIEWS = {"query_results": "per_query", "gold_references": "references", "run_models": "models"}


def results_view_sql(view_kind: str, view: str, kind: str, source: str, names: set[str]) -> str:
    """The view `view` over `source` (the results files of `kind`, with columns `names`), completed runs only."""
    return f"""
        CREATE OR REPLACE {view_kind} {view} AS
        SELECT {projection(kind, names, "q")}
        FROM {source} q JOIN runs r USING (run_id)
        WHERE r.status = 'completed'"""


class Schema(Connections, Layout):
    """Migrations, views and the summary tables, over a connection the caller holds."""

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
        if self.read_only:  # nothing can be written: the views are bound for this connection alone
            if version < upto:
                raise InputError(
                    f"the warehouse (schema {version}) needs an upgrade to {upto}, which a read-only warehouse "
                    "cannot take: open it once where it can be written",
                    self.db_path,
                )
            if con.execute(missing_axes_sql()).fetchall():
                raise InputError(
                    "the warehouse lacks configuration axes this chunkeval declares, which a read-only warehouse "
                    "cannot take: open it once where it can be written",
                    self.db_path,
                )
            self._create_views(con, temporary=True)  # the file's own views serve where it has not moved
            return
        for step in range(version, upto):
            con.execute("BEGIN TRANSACTION")
            step_sql = {
                None: summary_tables_sql,
                "ADDED_KEYS": added_keys_sql,
                "SLICES": slice_table_sql,
                "VECTOR_KEYS": vector_keys_sql,
                "EXPAND": expand_key_sql,
                "CONTEXT": context_key_sql,
                "PRODUCTION": production_sql,
            }.get(MIGRATIONS[step])
            con.execute(step_sql() if step_sql else MIGRATIONS[step])
            if step == 5:  # the summaries of every completed run so far
                self._materialize(
                    con, [r for (r,) in con.execute("SELECT run_id FROM runs WHERE status = 'completed'").fetchall()]
                )
            if step in (6, 7):
                self._add_columns(con)
            self._set_meta(con, "schema_version", str(step + 1))
            con.execute("COMMIT")
            if step == 2:
                self._backfill(con)
        missing = [key for (key,) in con.execute(missing_axes_sql()).fetchall()] if upto == SCHEMA_VERSION else []
        if missing:  # axes declared since the tables were made (`vocabulary.AXES`): their columns, in one step
            con.execute("BEGIN TRANSACTION")
            con.execute(axis_columns_sql([key for key in ADDED_KEYS if key in missing]))
            con.execute("COMMIT")
        if upto == SCHEMA_VERSION:
            self._create_views(con, rebind=version < SCHEMA_VERSION or bool(missing))

    def _add_columns(self, con) -> None:
        """The summary tables' columns that their schema gained since they were made (v7: the index; v8: the
        document-level metrics)."""
        for table, schema in (("summaries", SUMMARY), ("corpus_summaries", CORPUS_SUMMARY)):
            have = {c for (c,) in con.execute(f"SELECT column_name FROM (DESCRIBE {table})").fetchall()}
            for field in schema:
                if field.name not in have:
                    con.execute(f"ALTER TABLE {table} ADD COLUMN {field.name} {sql_type(field.type)}")
            older = INDEX_OF_OLDER_ROWS.format(r="retriever", m="model")
            con.execute(f"UPDATE {table} SET index = {older} WHERE index IS NULL")

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

    def _create_views(self, con, rebind: bool = False, temporary: bool = False) -> None:
        """The views. Those over the summary tables where the file holds others than this chunkeval makes (or
        lacks one: `_summary_views_sql`); those over every run's Parquet files only when the schema changed or the
        warehouse moved (making them reads the footer of every file). `temporary`: views of this connection alone,
        on a warehouse it cannot write."""
        view_kind = "TEMP VIEW" if temporary else "VIEW"
        statements = self._summary_views_sql(view_kind)
        made = hashlib.sha256("\n".join(statements).encode()).hexdigest()
        there = con.execute(
            "SELECT count(*) FROM duckdb_views() WHERE NOT temporary AND list_contains(?, view_name)",
            [MADE_VIEWS],
        ).fetchone()[0]
        if temporary or rebind or self._meta(con, "summary_views") != made or there < len(MADE_VIEWS):
            for sql in statements:
                con.execute(sql)
            if not temporary:
                self._set_meta(con, "summary_views", made)
        if not con.execute("SELECT current_setting('enable_external_access')").fetchall()[0][0]:
            return  # `chunkeval sql`: no file can be read here, its caller binds these views itself (`access`)
        where = self._meta(con, "results_path")
        seed = seed_folder(self.results_dir, SCHEMA_VERSION)  # a new one where the results' columns changed
        if not rebind and where == str(self.results_dir) and (seed / "models.parquet").exists():
            return
        if temporary and not (seed / "models.parquet").exists():
            return  # nothing can be written here: the file's own views serve
        if not (seed / "models.parquet").exists():
            seed.mkdir(parents=True, exist_ok=True)
            write_tables({seed / f"{name}.parquet": table for name, table in empty_results().items()})
        for view, kind in RESULTS_VIEWS.items():
            source = f"read_parquet({quote(self.results_dir, f'/*/{kind}.parquet')}, union_by_name = true)"
            con.execute(results_view_sql(view_kind, view, kind, source, set(empty_results()[kind].column_names)))
        if not temporary:
            self._set_meta(con, "results_path", str(self.results_dir))

    @staticmethod
    def _meta(con, key: str) -> str | None:
        row = con.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchall()
        return row[0][0] if row else None

    @staticmethod
    def _set_meta(con, key: str, value: str) -> None:
        con.execute("DELETE FROM meta WHERE key = ?", [key])
        con.execute("INSERT INTO meta VALUES (?, ?)", [key, value])

    @staticmethod
    def _summary_views_sql(view_kind: str) -> list[str]:
        """The statements that make the views over the summary tables: `config_summary`, `corpus_summary`,
        `slice_summary` and `trend`. A process makes them where the file holds others (another chunkeval wrote
        them, or none did): the digest of those it made is kept in `meta`, so that opening the warehouse, as every
        command does, costs no statement that changes nothing."""
        duplicates = DUPLICATES_SQL.format(t="")
        relevance = run_setting_sql("relevance")
        ties = TIES_SQL.format(t="")
        statements = [
            # the run settings read from each run's JSON once, not once per summary row (half of a trend's time)
            f"""
                CREATE OR REPLACE {view_kind} {view} AS
                SELECT *, {config_label_sql()} AS label, {config_id_sql()} AS config_id FROM (
                SELECT {projection("summary", set(schema.names), "s")}, r.duplicates, r.relevance, r.ties
                FROM {table} s JOIN (SELECT *, {duplicates} AS duplicates, {relevance} AS relevance, {ties} AS ties
                                     FROM runs WHERE status = 'completed') r USING (run_id))"""
            for view, (table, schema) in SUMMARY_VIEWS.items()
        ]
        statements.append(f"""
            CREATE OR REPLACE {view_kind} trend AS
            WITH long AS (
                UNPIVOT (SELECT experiment, run_id, started_at, duplicates, relevance, {", ".join(CONFIG_KEYS)},
                                label, config_id, COLUMNS('_mean$')
                         FROM config_summary)
                ON COLUMNS('_mean$') INTO NAME metric VALUE value)
            SELECT experiment, run_id, started_at, duplicates, relevance, {", ".join(CONFIG_KEYS)},
                   label, config_id, regexp_replace(metric, '_mean$', '') AS metric, value,
                   -- the change against the previous run scored the same way (never across run settings)
                   value - lag(value) OVER (PARTITION BY experiment, duplicates, relevance, {", ".join(CONFIG_KEYS)}, metric
                                            ORDER BY started_at, run_id) AS change
            FROM long""")
        return statements

    def _materialize(self, con, run_ids: list[str]) -> None:
        """Load the summaries of completed runs from their Parquet files into the summary tables (in the
        caller's transaction). A run without by_corpus.parquet (before v6) gets its per-corpus summary
        computed from its per-query rows by the shared SQL (`chunkeval.stats.aggregate`), without intervals."""
        if not run_ids:
            return
        have = {t for (t,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        for table in SUMMARY_TABLES:
            if table in have:  # slice_summaries from v9 on (a migration of an older warehouse loads v6's tables)
                con.execute(f"DELETE FROM {table} WHERE list_contains(?, run_id)", [run_ids])
        summaries = [self._file(r, "summary") for r in run_ids if self._file(r, "summary").is_file()]
        self._insert_by_name(con, "summaries", parquet(summaries), summaries)
        for kind, table in (("by_corpus", "corpus_summaries"), ("by_slice", "slice_summaries")):
            files = [self._file(r, kind) for r in run_ids if self._file(r, kind).is_file() and table in have]
            self._insert_by_name(con, table, parquet(files), files)
        older = [
            r for r in run_ids if not self._file(r, "by_corpus").is_file() and self._file(r, "per_query").is_file()
        ]
        for skip in (False, True):  # runs that left questions without references out of their averages, and the others
            mine = [r for r in older if bool(json.loads(self.run_settings(con, r)).get("skip_empty_gold")) == skip]
            if not mine:
                continue
            files = [self._file(r, "per_query") for r in mine]
            names = parquet_columns(con, files)
            source = (
                f"(SELECT {projection('per_query', names, 'q')} FROM {parquet(files)} q JOIN runs r USING (run_id))"
            )
            columns = [c for c in names | {"model", "retriever", "index", *ADDED_KEYS} if c != "run_id"]
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

    def _rematerialize(self) -> None:
        """Rebuild the summary tables from the Parquet files of every completed run."""
        with self.connect() as con:
            con.execute("BEGIN TRANSACTION")
            done = [r for (r,) in con.execute("SELECT run_id FROM runs WHERE status = 'completed'").fetchall()]
            for table in SUMMARY_TABLES:
                con.execute(f"DELETE FROM {table}")
            self._materialize(con, done)
            con.execute("COMMIT")
