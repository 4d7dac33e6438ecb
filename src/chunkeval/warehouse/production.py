"""Production as a source beside runs (docs/warehouse.md, "Production"): the retrievals that traces recorded
(`chunkeval traces import`), and what judging them said over time (`chunkeval traces compare`, the `production`
deployment).

Tables (schema step v14, `tables.production_sql`):

| table | one row per |
| --- | --- |
| `production_imports` | import: when, which files, spans read, kept, skipped by reason, already imported, placements |
| `production_spans` | retrieval span kept: span_id (unique over every import), trace, session, time, kind, query hash |
| `production_queries` | distinct query text (by `query_hash`: white space collapsed, lower-cased) and when first seen |
| `production_documents` | (span, rank): document id, content hash, score, metadata, and where it is placed in the corpus |
| `production_contents` | distinct document content (by `content_hash`) |
| `production_results` | judged quality of production (and the offline configurations beside it) on a sample, per metric |

A span id already in the warehouse is counted (`already_imported`) and not imported again: importing the same
folder twice changes nothing.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from pathlib import Path

import pyarrow as pa

from chunkeval.warehouse.migrations import Schema
from chunkeval.warehouse.tables import quote, utc_now

PRODUCTION_TABLES = (
    "production_imports", "production_spans", "production_queries", "production_documents", "production_contents",
    "production_results",
)  # fmt: skip


class Production(Schema):
    """Production's retrievals and its judged results, beside the runs."""

    def import_production(self, spans: pa.Table, documents: pa.Table, record: dict, contents: pa.Table) -> dict:
        """Record one import in one transaction: its spans not already in the warehouse (by span id), their
        queries and document contents (`contents`: content_hash, content) once each (by hash), and the import's row (`record`: files, read, skipped,
        corpus, placements, unplaced). The import's row as written, with `import_id`, `spans_kept` and
        `already_imported`."""
        import_id = record.get("import_id") or f"{utc_now():%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
        with self.connect() as con:
            con.execute("BEGIN TRANSACTION")
            con.register("new_spans", spans)
            con.register("new_documents", documents)
            con.register("new_contents", contents)
            con.execute("""
                CREATE TEMP TABLE fresh AS SELECT * FROM new_spans
                WHERE span_id NOT IN (SELECT span_id FROM production_spans)""")
            kept = con.execute("SELECT count(*) FROM fresh").fetchone()[0]
            con.execute(
                "INSERT INTO production_spans SELECT span_id, ?, trace_id, session_id, time, kind, query_hash, file, "
                "line FROM fresh",
                [import_id],
            )
            con.execute("""
                INSERT INTO production_queries
                SELECT query_hash, arg_min(query, time), min(time) FROM fresh
                WHERE query_hash NOT IN (SELECT query_hash FROM production_queries) GROUP BY query_hash""")
            con.execute("""
                CREATE TEMP TABLE fresh_docs AS SELECT d.* FROM new_documents d SEMI JOIN fresh f USING (span_id)""")
            con.execute("""
                INSERT INTO production_contents
                SELECT content_hash, any_value(content) FROM new_contents
                WHERE content_hash IN (SELECT content_hash FROM fresh_docs)
                  AND content_hash NOT IN (SELECT content_hash FROM production_contents)
                GROUP BY content_hash""")
            con.execute("""
                INSERT INTO production_documents
                SELECT span_id, rank, document_id, content_hash, score, metadata, placement, corpus_id, start, "end",
                       similarity FROM fresh_docs""")
            row = {
                "import_id": import_id,
                "imported_at": utc_now(),
                "files": json.dumps(record.get("files", [])),
                "spans_read": record.get("spans_read", 0),
                "spans_kept": int(kept),
                "spans_skipped": json.dumps(record.get("spans_skipped", {})),
                "already_imported": int(spans.num_rows - kept),
                "corpus": record.get("corpus"),
                "placements": json.dumps(record.get("placements", {})),
                "unplaced": json.dumps(record.get("unplaced", [])),
            }
            con.execute(
                f"INSERT INTO production_imports ({', '.join(row)}) VALUES ({', '.join('?' for _ in row)})",
                list(row.values()),
            )
            con.execute("DROP TABLE fresh")
            con.execute("DROP TABLE fresh_docs")
            con.execute("COMMIT")
            con.unregister("new_spans")
            con.unregister("new_documents")
            con.unregister("new_contents")
        return row

    def recover_production(self, damaged: str | None) -> dict:
        """Production's tables copied from a damaged catalogue that `warehouse repair` moved aside, as far as it
        can be read: all of them in one transaction, or none (a span without its documents would mislead).
        `{"rows": {table: n}, "problem": None}`, or no rows and the first line of what could not be read."""
        import duckdb

        if damaged is None:
            return {"rows": {}, "problem": "no catalogue file was left to read"}
        rows: dict[str, int] = {}
        with self.connect() as con:
            try:
                con.execute(f"ATTACH {quote(Path(damaged))} AS damaged (READ_ONLY)")
            except duckdb.Error as exc:
                return {"rows": {}, "problem": str(exc).splitlines()[0][:160]}
            try:
                con.execute("BEGIN TRANSACTION")
                for table in PRODUCTION_TABLES:
                    con.execute(f"INSERT INTO main.{table} BY NAME SELECT * FROM damaged.{table}")
                    rows[table] = con.execute(f"SELECT count(*) FROM main.{table}").fetchone()[0]
                con.execute("COMMIT")
                return {"rows": rows, "problem": None}
            except duckdb.Error as exc:
                con.execute("ROLLBACK")
                return {"rows": {}, "problem": str(exc).splitlines()[0][:160]}
            finally:
                con.execute("DETACH damaged")

    def production_imports(self) -> list[dict]:
        with self.connect() as con:
            cur = con.execute("SELECT * FROM production_imports ORDER BY imported_at, import_id")
            names = [d[0] for d in cur.description]
            return [dict(zip(names, r)) for r in cur.fetchall()]

    def production_spans(self, since: datetime | None = None, until: datetime | None = None) -> pa.Table:
        """The spans of [since, until) (all where not given), with their query text, oldest first."""
        where, params = _window(since, until)
        with self.connect() as con:
            return con.sql(
                "SELECT s.span_id, s.trace_id, s.session_id, s.time, s.kind, s.query_hash, q.query "
                f"FROM production_spans s JOIN production_queries q USING (query_hash) {where} "
                "ORDER BY s.time, s.span_id",
                params=params,
            ).to_arrow_table()

    def production_documents(self, span_ids: list[str]) -> list[dict]:
        """The ranked documents of `span_ids`, with their content and placement, by span then rank."""
        with self.connect() as con:
            cur = con.execute(
                """SELECT d.span_id, d.rank, d.document_id, d.content_hash, c.content, d.score, d.placement,
                          d.corpus_id, d.start, d."end", d.similarity
                   FROM production_documents d LEFT JOIN production_contents c USING (content_hash)
                   WHERE list_contains(?, d.span_id) ORDER BY d.span_id, d.rank""",
                [list(span_ids)],
            )
            names = [d[0] for d in cur.description]
            return [dict(zip(names, r)) for r in cur.fetchall()]

    def record_production(self, experiment: str, rows: list[dict], window: tuple, details: dict) -> str:
        """Record one judged comparison: one row per (source, label, metric) of `rows` (source `production` or
        `offline`), under one result id."""
        result_id = f"{utc_now():%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
        now = utc_now()
        with self.connect() as con:
            con.execute("BEGIN TRANSACTION")
            for r in rows:
                con.execute(
                    "INSERT INTO production_results VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [result_id, experiment, now, window[0], window[1], r["source"], r.get("label"), r["metric"],
                     r.get("value"), r.get("ci_low"), r.get("ci_high"), r.get("n_queries"), r.get("judged_by"),
                     json.dumps(details if r["source"] == "production" else {})],
                )  # fmt: skip
            con.execute("COMMIT")
        return result_id

    def production_results(self, experiment: str, metric: str | None = None, source: str | None = None) -> list[dict]:
        """Recorded judged results of an experiment's production, oldest first."""
        sql, params = "SELECT * FROM production_results WHERE experiment = ?", [experiment]
        if metric:
            sql, params = sql + " AND metric = ?", [*params, metric]
        if source:
            sql, params = sql + " AND source = ?", [*params, source]
        with self.connect() as con:
            cur = con.execute(sql + " ORDER BY recorded_at, result_id, source, label", params)
            names = [d[0] for d in cur.description]
            return [dict(zip(names, r)) for r in cur.fetchall()]

    def production_trend(self, experiment: str, metric: str, last: int = 30) -> list[dict]:
        """Production beside the runs: per recorded judged result of `experiment` (the last `last`, oldest
        first), production's mean of `metric` and the best offline configuration's, with when, how many queries
        and who judged (`trend` and the report show it)."""
        sql = """
            SELECT result_id, any_value(recorded_at) AS recorded_at, any_value(window_start) AS window_start,
                   any_value(window_end) AS window_end,
                   max(value) FILTER (source = 'production') AS production,
                   max(n_queries) FILTER (source = 'production') AS n_queries,
                   max(value) FILTER (source = 'offline') AS best_offline,
                   arg_max(label, value) FILTER (source = 'offline') AS best_label, any_value(judged_by) AS judged_by
            FROM production_results WHERE experiment = ? AND metric = ?
            GROUP BY result_id ORDER BY recorded_at DESC, result_id DESC LIMIT ?"""
        with self.connect() as con:
            cur = con.execute(sql, [experiment, metric, last])
            names = [d[0] for d in cur.description]
            return [dict(zip(names, r)) for r in cur.fetchall()][::-1]


def _window(since, until) -> tuple[str, list]:
    parts, params = [], []
    if since is not None:
        parts, params = [*parts, "s.time >= ?"], [*params, since]
    if until is not None:
        parts, params = [*parts, "s.time < ?"], [*params, until]
    return ("WHERE " + " AND ".join(parts)) if parts else "", params
