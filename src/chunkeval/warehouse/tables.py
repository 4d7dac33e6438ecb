"""What the warehouse's rows and files look like: the catalogue's run columns, the Arrow schemas of the
results files and summary tables, and the SQL that projects a results file as the views show it.
Plain names and functions: no connection, no file is opened here."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa

from chunkeval.vocabulary import (
    ADDED_KEYS,
    AXES,
    METRICS,
    RERANK_KEYS,
    RUN_SETTINGS,
    SLICE_KEYS,
    TIE_AWARE,
    TIES_BEFORE,
    VECTOR_KEYS,
)

# quarantined: results unreadable (repair); coalesced: a trigger that arrived while a run ran and another waited to
# follow it (`warehouse.turns`): it ran nothing, its reason says into which
STATUSES = ("running", "completed", "failed", "interrupted", "skipped", "coalesced", "quarantined")
# what started a run: `manual` (a command, the API, or a deployment run by hand), `schedule` (the scheduler),
# `change` (a change event's automation); runs recorded before 2026-11-28 read `event` for `change`
TRIGGERS = ("manual", "schedule", "change", "event")

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


def run_setting_sql(name: str, t: str = "") -> str:
    """SQL of a run's value of the run setting `name` (`chunkeval.vocabulary.RUN_SETTINGS`), with the
    value of runs recorded before the setting existed; `t` prefixes the settings column (`r.`)."""
    return f"coalesce(json_extract_string({t}settings, '$.{name}'), '{RUN_SETTINGS[name]}')"


# a raced run (`chunkeval run --race`): its dropped configurations were scored on the questions before their drop,
# which the race chose, so the regression gate compares runs scored on every question
RACED_SQL = "coalesce(json_extract_string({t}settings, '$.race'), 'false') = 'true'"


def raced(settings: str | None) -> bool:
    """`RACED_SQL` of one run's settings (its catalogue row's JSON), in Python."""
    return bool(json.loads(settings or "{}").get("race"))


def run_settings_sql(t: str = "") -> str:
    """SQL of every run setting of a run as one value: runs are comparable when theirs are equal."""
    return "concat_ws(chr(31), " + ", ".join(run_setting_sql(n, t) for n in RUN_SETTINGS) + ")"


# a run's `duplicates` setting (how repeated passages were scored), as the views show it
DUPLICATES_SQL = run_setting_sql("duplicates", "{t}")
# a run's tie policy (`chunkeval.vocabulary.TIE_POLICIES`), `retriever` for runs recorded before it existed
TIES_SQL = f"coalesce(json_extract_string({{t}}settings, '$.ties'), '{TIES_BEFORE}')"
# v10: per-query columns of ties (docs/metrics.md, "Ties"): the raw scores of the MaxP document ranking, whether
# the top k tie, the tie-aware rank metrics; null for older runs
TIE_COLUMNS = {
    "doc_scores": pa.string(),
    **{f"{level}tied_at_k": pa.bool_() for level in ("", "doc_")},
    **{f"{level}{m}_tie_aware": pa.float64() for level in ("", "doc_") for m in TIE_AWARE},
}

# the configuration's columns, one per axis (`vocabulary.AXES`), after the run they belong to
_KEYS = {"run_id": pa.string(), **{a.key: pa.int64() if a.number else pa.string() for a in AXES}}
_AVERAGES = {
    **_KEYS,
    "n_queries": pa.int64(),
    **{f"{m}_{s}": pa.float64() for m in METRICS for s in ("mean", "std", "micro", "ci_low", "ci_high")},
    "retrieved_tokens_mean": pa.float64(),
}
INDEX_STATS = {
    "index_build_seconds": pa.float64(),
    "index_bytes": pa.int64(),
    "latency_p50_ms": pa.float64(),
    "latency_p95_ms": pa.float64(),
    "batch_ms_per_query": pa.float64(),
    "vector_bytes": pa.int64(),  # v11: bytes per vector of a `vectors` setting (chunkeval.engine.retrieval.vectors)
}
SUMMARY = pa.schema({**_AVERAGES, "n_chunks": pa.int64(), "truncated_chunks": pa.int64(), **INDEX_STATS})
CORPUS_SUMMARY = pa.schema({**_AVERAGES, "corpus_id": pa.string()})
# v9: per configuration and slice of the gold set (`--slice-by`); `too_small`: fewer queries than a test needs
SLICE_SUMMARY = pa.schema({**_AVERAGES, **{k: pa.string() for k in SLICE_KEYS}, "too_small": pa.bool_()})
# what each run's `slices.parquet` holds: which queries each slice holds
QUERY_SLICES = pa.schema({"query_id": pa.string(), **{k: pa.string() for k in SLICE_KEYS}, "run_id": pa.string()})
RESULT_FILES = ("per_query", "summary", "by_corpus", "references", "models", "by_slice", "slices")


def utc_now() -> datetime:
    """Now in UTC, naive: how the catalogue's timestamps are kept."""
    return datetime.now(UTC).replace(tzinfo=None)


def empty_results() -> dict[str, pa.Table]:
    """Zero-row tables with the key columns, so the views bind before any run has finished."""
    per_query = pa.schema(
        {
            **_KEYS,
            "query_id": pa.string(),
            "corpus_id": pa.string(),
            **{m: pa.float64() for m in METRICS},
            **TIE_COLUMNS,
        }
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
            "tokens": pa.int64(),  # sent to a served model (null for local models and older runs)
            "cost": pa.float64(),  # of those tokens, at the served model's price
            "generation": pa.int64(),  # a served model's cache generation: moved on when it changed behind its name
        }
    )
    return {
        name: pa.Table.from_batches([], schema=schema)  # not schema.empty_table(), which imports pandas
        for name, schema in (
            ("per_query", per_query),
            ("summary", SUMMARY),
            ("by_corpus", CORPUS_SUMMARY),
            ("references", references),
            ("models", models),
        )
    }


_TYPES = {pa.string(): "VARCHAR", pa.int64(): "BIGINT", pa.float64(): "DOUBLE", pa.bool_(): "BOOLEAN"}


def _column_sql(field: pa.Field) -> str:
    """A column's type, and the default of a key that older summaries lack (ADDED_KEYS)."""
    default = ADDED_KEYS.get(field.name)
    return f"{_TYPES[field.type]}{f' DEFAULT {sql_literal(default)}' if default is not None else ''}"


def _ddl(table: str, schema: pa.Schema) -> str:
    return f"CREATE TABLE IF NOT EXISTS {table} ({', '.join(f'{f.name} {_column_sql(f)}' for f in schema)});"


def added_keys_sql() -> str:
    """The configuration keys added after the summary tables were made (v7: reranker, candidates)."""
    return axis_columns_sql(RERANK_KEYS, ("summaries", "corpus_summaries"))


SUMMARY_TABLES = ("summaries", "corpus_summaries", "slice_summaries")


def axis_columns_sql(keys, tables=SUMMARY_TABLES) -> str:
    """The columns of configuration axes `keys` added to the summary tables, older rows reading each axis's
    value from before it existed (`vocabulary.AXES`): the migration of every axis added after the tables were made
    (v11 `vectors` and `dims`, v12 `expand`, v13 `context`, and any axis since: `missing_axes`)."""
    return "".join(
        f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {key} {_column_sql(SUMMARY.field(key))};"
        + (
            f"UPDATE {table} SET {key} = {sql_literal(ADDED_KEYS[key])} WHERE {key} IS NULL;"
            if ADDED_KEYS[key] is not None
            else ""
        )
        for table in tables
        for key in keys
    )


def missing_axes_sql() -> str:
    """The query for the axes of `vocabulary.AXES` that a summary table lacks (a warehouse made before they were
    declared): `axis_columns_sql` adds them when the warehouse opens, with no schema version of their own."""
    tables = ", ".join(map(sql_literal, SUMMARY_TABLES))
    keys = ", ".join(map(sql_literal, ADDED_KEYS))
    return (
        f"SELECT DISTINCT k.key FROM (SELECT unnest([{keys}]) AS key) k, (SELECT unnest([{tables}]) AS t) s "
        "WHERE EXISTS (SELECT 1 FROM information_schema.tables WHERE table_name = s.t) "
        "AND NOT EXISTS (SELECT 1 FROM information_schema.columns c WHERE c.table_name = s.t AND c.column_name = k.key)"
    )


def vector_keys_sql() -> str:
    """v11: the summary tables gain the keys `vectors` and `dims` (older rows read float32 and full) and the
    statistic `vector_bytes` (older rows read NULL)."""
    return axis_columns_sql(VECTOR_KEYS) + "ALTER TABLE summaries ADD COLUMN IF NOT EXISTS vector_bytes BIGINT;"


def expand_key_sql() -> str:
    """v12: the configuration key `expand` (small-to-big retrieval); older rows read `none`."""
    return axis_columns_sql(["expand"])


def context_key_sql() -> str:
    """v13: the configuration key `context` (contextual chunk headers); older rows read `none`."""
    return axis_columns_sql(["context"])


def seed_folder(results_dir: Path, version: int) -> Path:
    """The folder of empty results files whose columns every view over the runs' files unites with (read with
    `union_by_name`): named by the schema version and the columns themselves, so that an axis declared since the
    seed was written (`vocabulary.AXES`, no schema version of its own) gets a seed that holds its column."""
    columns = "|".join(f"{kind}:{','.join(t.column_names)}" for kind, t in sorted(empty_results().items()))
    return results_dir / f"_schema{version}-{hashlib.md5(columns.encode()).hexdigest()[:8]}"


def sql_literal(value) -> str:
    return "NULL" if value is None else "'" + str(value).replace("'", "''") + "'"


def sql_type(kind: pa.DataType) -> str:
    return _TYPES[kind]


def summary_tables_sql() -> str:
    return _ddl("summaries", SUMMARY) + _ddl("corpus_summaries", CORPUS_SUMMARY)


def slice_table_sql() -> str:
    """v9: the per-slice summaries of completed runs."""
    return _ddl("slice_summaries", SLICE_SUMMARY)


def production_sql() -> str:
    """v14: production's tables."""
    return """
    CREATE TABLE IF NOT EXISTS production_imports (
        import_id VARCHAR NOT NULL, imported_at TIMESTAMP NOT NULL, files VARCHAR, spans_read BIGINT,
        spans_kept BIGINT, spans_skipped VARCHAR, already_imported BIGINT, corpus VARCHAR, placements VARCHAR,
        unplaced VARCHAR);
    CREATE TABLE IF NOT EXISTS production_spans (
        span_id VARCHAR NOT NULL, import_id VARCHAR NOT NULL, trace_id VARCHAR, session_id VARCHAR,
        time TIMESTAMP, kind VARCHAR, query_hash VARCHAR NOT NULL, file VARCHAR, line BIGINT);
    CREATE TABLE IF NOT EXISTS production_queries (query_hash VARCHAR NOT NULL, query VARCHAR NOT NULL, first_seen TIMESTAMP);
    CREATE TABLE IF NOT EXISTS production_documents (
        span_id VARCHAR NOT NULL, rank INTEGER NOT NULL, document_id VARCHAR, content_hash VARCHAR, score DOUBLE,
        metadata VARCHAR, placement VARCHAR, corpus_id VARCHAR, start BIGINT, "end" BIGINT, similarity DOUBLE);
    CREATE TABLE IF NOT EXISTS production_contents (content_hash VARCHAR NOT NULL, content VARCHAR NOT NULL);
    CREATE TABLE IF NOT EXISTS production_results (
        result_id VARCHAR NOT NULL, experiment VARCHAR NOT NULL, recorded_at TIMESTAMP NOT NULL,
        window_start TIMESTAMP, window_end TIMESTAMP, source VARCHAR NOT NULL, label VARCHAR, metric VARCHAR NOT NULL,
        value DOUBLE, ci_low DOUBLE, ci_high DOUBLE, n_queries BIGINT, judged_by VARCHAR, details VARCHAR);
    """


_GLOB = re.compile(r"([\[*?])")


def quote(path: Path, pattern: str = "") -> str:
    """A path as a DuckDB string literal that DuckDB never reads as a glob pattern (`[`, `*` and `?` of
    the path are escaped: a `[` in $CHUNKEVAL_HOME once broke every view); `pattern`, a glob of chunkeval's
    own, is appended after it."""
    literal = _GLOB.sub(r"[\1]", str(path)) + pattern
    return "'" + literal.replace("'", "''") + "'"


def parquet(paths: list[Path]) -> str:
    return f"read_parquet([{', '.join(quote(p) for p in paths)}], union_by_name = true)"


# results of runs before v4 have no model or retriever column: they were dense, with the model of their settings;
# results of runs before v7 have no index: their dense half was exact, and rows that read no vectors read `none`
INDEX_OF_OLDER_ROWS = "CASE WHEN {r} = 'bm25' OR {m} = 'none' THEN 'none' ELSE 'exact' END"


def projection(kind: str, names: set[str], alias: str) -> str:
    """The columns a view (or a direct read) shows of a results file of `kind` with columns `names`,
    joined to the catalogue row `r`."""
    model = (
        f"coalesce({alias}.model, json_extract_string(r.settings, '$.model'))"
        if "model" in names
        else "json_extract_string(r.settings, '$.model')"
    )
    retriever = f"coalesce({alias}.retriever, 'dense')" if "retriever" in names else "'dense'"
    older = INDEX_OF_OLDER_ROWS.format(r=retriever, m=model)
    index = f"coalesce({alias}.index, {older})" if "index" in names else older
    # keys added later read as their value for older runs (reranker `none`, candidates null, expand and context `none`)
    later = ", ".join(
        f"CAST({f'coalesce({alias}.{key}, {sql_literal(value)})' if key in names else sql_literal(value)} "
        f"AS {_TYPES[_KEYS[key]]}) AS {key}"
        for key, value in ADDED_KEYS.items()
    )
    drop = ", ".join(c for c in ("run_id", "model", "retriever", "index", *ADDED_KEYS) if c in names)
    rest = f"{alias}.* EXCLUDE ({drop})" if drop else f"{alias}.*"
    if kind in ("per_query", "summary", "by_corpus", "by_slice"):
        return (
            f"r.experiment, r.started_at, r.trigger, {model} AS model, {retriever} AS retriever, {index} AS index, "
            f"{later}, {rest}, r.run_id"
        )
    if kind == "references":
        ref_model = f"coalesce({alias}.model, 'none')" if "model" in names else "'none'"
        rest = f"{alias}.* EXCLUDE ({', '.join(c for c in ('run_id', 'model') if c in names)})"
        return f"r.experiment, {ref_model} AS model, {rest}, r.run_id"
    return f"r.experiment, r.started_at, {alias}.* EXCLUDE (run_id), r.run_id"


def parquet_columns(con, files: list[Path]) -> set[str]:
    """The column names of a set of Parquet files read together (by name)."""
    return {c for (c,) in con.execute(f"SELECT column_name FROM (DESCRIBE SELECT * FROM {parquet(files)})").fetchall()}
