"""Production traces read as retrievals: the query, the ranked documents with their scores, the time, the session
and the trace of every retrieval span (docs/traces.md).

Three forms are read, each vectorised in DuckDB (one SQL pipeline over the whole file, no Python loop per span):

- **OTLP JSON**, as an OpenTelemetry collector's file exporter writes it: one `ExportTraceServiceRequest` per
  line (`resourceSpans[].scopeSpans[].spans[]`, attributes as `{key, value: {stringValue | intValue | …}}`), ids
  in hex (base64, protobuf's own JSON, is read too).
- **Phoenix's trace export**: the spans data frame (`context.span_id`, `context.trace_id`, `start_time`,
  `span_kind`, `attributes.input.value`, `attributes.retrieval.documents` as a list of
  `{document.id, document.content, document.score, document.metadata}`, …) as Parquet or JSON lines.
- Spans of either convention: **OpenInference** (`openinference.span.kind` RETRIEVER, whose query is
  `input.value` and documents `retrieval.documents.{i}.document.{id,content,score,metadata}`; RERANKER, whose query
  is `reranker.query` and ranked documents `reranker.output_documents.{i}.document.*`) and the **OpenTelemetry
  GenAI** retrieval span (`gen_ai.operation.name` `retrieval`, `gen_ai.retrieval.query.text`,
  `gen_ai.retrieval.documents` as a JSON string or structured, each `{id, score, content?}`; its session
  `gen_ai.conversation.id`).

Traces are untrusted input. A file that is not what it says (a line that is not JSON, a Parquet file without the
spans' columns) is one line naming the file and line. A span that is unusable is skipped and counted by reason
(`SKIP_REASONS`), or with `strict` is one line naming the file, line and span: no query, a query or a document
field of the wrong type, a query or content over its bound (`QUERY_CHARS`, `CONTENT_CHARS`), more documents than
`DOCUMENTS_PER_SPAN`, a span id that is not one, a span id seen before in the same import. Files that keep no
retrieval span at all are one line saying why (`check_kept`); a kept span whose retriever found nothing is an empty
ranking, and holds no document (docs/exit-codes.md, "Empty is a result").
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from chunkeval.errors import InputError
from chunkeval.limits import regular_file, short

FORMATS = ("auto", "otlp-json", "phoenix")
# the largest line of OTLP JSON or Phoenix JSONL: one export request of a collector's batch (512 spans by default, about
# 1 MB). A line is parsed whole, beside the piece it is in: 100,000 spans of 512 a line peaked at 1.3 GB, of 8,500 a
# line (16 MiB) at 1.7 GB, of 17,000 (31 MiB) at 2.1 GB, on one line (185 MB) at 3.6 GB (bench/traces_import.py
# --per-line; docs/limits.md, "trace files"); a longer line is refused by its number before it is read whole
LINE_BYTES = 16 << 20
QUERY_CHARS = 20_000  # a query longer than this is skipped (no retrieval query is a book)
CONTENT_CHARS = 200_000  # a document's content longer than this skips its span
DOCUMENTS_PER_SPAN = 1_000  # a retrieval of more documents than this skips its span
FILE_BYTES = 64 << 30  # 64 GiB: the largest trace file read
SKIP_REASONS = {
    "no_query": "no query (input.value, reranker.query or gen_ai.retrieval.query.text)",
    "query_type": "the query is not text",
    "query_size": f"the query is over {QUERY_CHARS:,} characters",
    "document_type": "a document's id, content or score is of the wrong type (or a score not finite)",
    "content_size": f"a document's content or metadata is over {CONTENT_CHARS:,} characters",
    "too_many_documents": f"more than {DOCUMENTS_PER_SPAN:,} documents",
    "document_index": "a document's index is past 2^63",
    "documents_type": "the documents (gen_ai.retrieval.documents, Phoenix's list) are not a list of documents",
    "span_id": "no span id, or one that is not 8 bytes (16 hex digits, not all zero)",
    "trace_id": "a trace id that is not 16 bytes (32 hex digits, not all zero)",
    "start_time": "no start time, or one that is not a time from 1970 to 2262",
    "attribute_twice": "an attribute read (the query, a document's field, the kind) given twice",
    "duplicate_span": "a span id seen before in this import",
}
# the attributes read: every other attribute of a span is left in the file
KEYS_READ = (
    "openinference.span.kind", "input.value", "session.id", "reranker.query", "gen_ai.operation.name",
    "gen_ai.retrieval.query.text", "gen_ai.retrieval.documents", "gen_ai.conversation.id",
)  # fmt: skip
DOC_KEY = r"^(retrieval\.documents|reranker\.output_documents)\.([0-9]+)\.document\.(id|content|score|metadata)$"
SPAN_KINDS = ("RETRIEVER", "RERANKER")


@dataclass
class Traces:
    """What an import read: `spans` (one row per retrieval span kept: span_id, trace_id, session_id, time, kind,
    query, query_hash, file, line), `documents` (span_id, rank from 1, document_id, content_hash, score,
    metadata) and `contents` (content_hash, content: each distinct content once, so that a million spans that
    retrieve the same passages hold each text once), all Arrow; `skipped` counts the spans left out by reason and
    `examples` names the first few (file, line, span, reason); `read` counts every span of the files, retrieval or
    not."""

    spans: pa.Table
    documents: pa.Table
    contents: pa.Table
    read: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    examples: list[dict] = field(default_factory=list)

    @property
    def kept(self) -> int:
        return self.spans.num_rows

    def documents_with_content(self) -> pa.Table:
        """`documents` with each one's `content` beside its hash (for a few documents: it repeats the texts)."""
        return self.documents.join(self.contents, "content_hash", join_type="left outer").sort_by(
            [("span_id", "ascending"), ("rank", "ascending")]
        )


def text_hash(text: str) -> str:
    """The hash that recognises a query or a document's content again: SHA-256 of its text with runs of white space
    (space, tab, line breaks) made one space, trimmed and lower-cased, first 16 hex digits: what `_hash_sql`
    computes in DuckDB, so that a text hashed here and there is recognised."""
    folded = re.sub(r"[\t\n\f\r ]+", " ", text).strip(" ").lower()
    return hashlib.sha256(folded.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _hash_sql(column: str) -> str:
    return f"left(sha256(lower(trim(regexp_replace({column}, '[\\t\\n\\f\\r ]+', ' ', 'g')))), 16)"


def sniff(path: Path) -> str:
    """`otlp-json` or `phoenix` by a file's first bytes: Parquet's magic, or a first JSON object with
    `resourceSpans` (OTLP) or `context.span_id` (Phoenix's JSON lines)."""
    with open(path, "rb") as f:
        head = f.read(1 << 16)
    if head[:4] == b"PAR1":
        return "phoenix"
    if b'"resourceSpans"' in head:
        return "otlp-json"
    if b'"context.span_id"' in head or b'"context":' in head:
        return "phoenix"
    raise InputError("not a trace file chunkeval reads: neither OTLP JSON (resourceSpans) nor Phoenix's spans", path)


def strict_error(path, line: int, span, reason: str) -> InputError:
    """With `--strict`, the one line of the first span that would be skipped: its file, line, span and reason."""
    return InputError(
        f"line {line}: span {short(span)}: {SKIP_REASONS[reason]} (or leave out --strict to skip it)", path
    )


def _json_error(exc: Exception, path: Path) -> InputError:
    """The one line of a file DuckDB could not read: the first line that is not a JSON object, found by reading
    the file again line by line (only on this path), else DuckDB's own first line."""
    import json

    try:
        with open(path, "rb") as f:
            for number, raw in enumerate(f, start=1):
                if not raw.strip():
                    continue
                try:
                    value = json.loads(raw)
                except (ValueError, RecursionError) as bad:
                    return InputError(f"line {number}: not JSON ({short(str(bad))[:80]})", path)
                if not isinstance(value, dict):
                    return InputError(f"line {number}: not a JSON object ({short(value)})", path)
    except OSError as bad:
        return InputError(f"cannot be read ({bad.strerror})", path)
    return InputError(f"cannot be read as traces ({short(str(exc).splitlines()[0])[:160]})", path)


def _otlp_sql(con, path: Path, first: int = 0, named: Path | None = None) -> None:
    """The spans of an OTLP JSON file (or a piece of one whose lines start after line `first`, of the file `named`)
    as `meta` and `flat`."""
    con.execute(
        f"CREATE TEMP TABLE raw AS SELECT {int(first)} + row_number() OVER () AS line, json AS j FROM "
        f"read_json_objects(?, format='newline_delimited', maximum_object_size={LINE_BYTES})",
        [str(path)],
    )
    _check_otlp_shape(con, named or path)
    con.execute("""
        CREATE TEMP TABLE spans AS
        SELECT row_number() OVER () AS sid, line, span FROM (
            SELECT line, unnest(json_extract(j, '$.resourceSpans[*].scopeSpans[*].spans[*]')) AS span FROM raw)""")
    keys = ", ".join(f"'{k}'" for k in KEYS_READ)
    con.execute(f"""
        CREATE TEMP TABLE attrs AS
        SELECT sid, a.key AS key, a.value AS value FROM (
            SELECT sid, unnest(from_json(span->'attributes', '[{{"key":"VARCHAR","value":"JSON"}}]')) AS a
            FROM spans)
        WHERE a.key IN ({keys}) OR regexp_matches(a.key, '{DOC_KEY}')""")
    con.execute("""
        CREATE TEMP TABLE meta AS
        SELECT s.sid, s.line, s.span->>'spanId' AS span_raw, s.span->>'traceId' AS trace_raw,
               TRY_CAST(s.span->>'startTimeUnixNano' AS HUGEINT) AS start_ns,
               max(value) FILTER (key = 'openinference.span.kind')->>'stringValue' AS oi_kind,
               max(value) FILTER (key = 'gen_ai.operation.name')->>'stringValue' AS genai_op,
               max(value) FILTER (key = 'input.value') AS input_value,
               max(value) FILTER (key = 'reranker.query') AS reranker_query,
               max(value) FILTER (key = 'gen_ai.retrieval.query.text') AS genai_query,
               coalesce(max(value) FILTER (key = 'session.id'),
                        max(value) FILTER (key = 'gen_ai.conversation.id'))->>'stringValue' AS session_id,
               max(value) FILTER (key = 'gen_ai.retrieval.documents') AS genai_docs,
               false AS docs_bad, count(key) <> count(DISTINCT key) AS twice
        FROM spans s LEFT JOIN attrs a USING (sid)
        GROUP BY s.sid, s.line, s.span""")
    # OpenInference's flattened documents: one row per (span, index, field); values still OTLP's typed JSON
    con.execute(f"""
        CREATE TEMP TABLE flat AS
        SELECT sid, regexp_extract(key, '{DOC_KEY}', 1) AS list,
               TRY_CAST(regexp_extract(key, '{DOC_KEY}', 2) AS BIGINT) AS i,
               regexp_extract(key, '{DOC_KEY}', 3) AS field, value
        FROM attrs WHERE regexp_matches(key, '{DOC_KEY}')""")


# Phoenix's columns of documents, and the list each is in OpenInference's flattened attributes
DOCUMENT_LISTS = {
    "attributes.retrieval.documents": "retrieval.documents",
    "attributes.reranker.output_documents": "reranker.output_documents",
}


def no_list(column: str) -> str:
    """SQL: the column holds a value that is not a list (a row whose documents cannot be read)."""
    return f"""("{column}" IS NOT NULL AND json_type(to_json("{column}")) <> 'ARRAY')"""


def _check_otlp_shape(con, path: Path) -> None:
    """Every line of an OTLP JSON file is an export request: an object whose resourceSpans, scopeSpans and spans
    are lists (each may be left out, as proto3's JSON leaves out an empty one), each span an object."""
    bad = con.execute("""
        SELECT line FROM raw
        WHERE json_type(j) <> 'OBJECT'
           OR coalesce(json_type(j->'resourceSpans'), 'ARRAY') <> 'ARRAY'
           OR EXISTS (SELECT 1 FROM (SELECT unnest(json_extract(j, '$.resourceSpans[*]')) AS r)
                      WHERE json_type(r) <> 'OBJECT' OR coalesce(json_type(r->'scopeSpans'), 'ARRAY') <> 'ARRAY')
           OR EXISTS (SELECT 1 FROM (SELECT unnest(json_extract(j, '$.resourceSpans[*].scopeSpans[*]')) AS sc)
                      WHERE json_type(sc) <> 'OBJECT' OR coalesce(json_type(sc->'spans'), 'ARRAY') <> 'ARRAY')
           OR EXISTS (SELECT 1 FROM (SELECT unnest(json_extract(j, '$.resourceSpans[*].scopeSpans[*].spans[*]')) AS sp)
                      WHERE json_type(sp) <> 'OBJECT')
        ORDER BY line LIMIT 1""").fetchone()
    if bad is not None:
        raise InputError(f"line {bad[0]}: not an OTLP export request (resourceSpans, scopeSpans and spans: lists of "
                         "objects)", path)  # fmt: skip


PHOENIX_KINDS = ("span_kind", "attributes.openinference.span.kind", "attributes.gen_ai.operation.name")


def _check_phoenix_shape(have: set[str], path: Path) -> None:
    """Phoenix's spans data frame as its export writes it: a column `context.span_id`, a column that says each
    span's kind (`PHOENIX_KINDS`), and attributes flattened into `attributes.*` columns. Any other frame (nested
    `context` or `attributes`, another tool's table) is one line naming what was expected and what is missing,
    not a file whose spans are all skipped."""
    flattened = any(c.startswith("attributes.") for c in have)
    missing = [
        *(["context.span_id"] if "context.span_id" not in have else []),
        *(["span_kind (or " + ", ".join(PHOENIX_KINDS[1:]) + ")"] if not have & set(PHOENIX_KINDS) else []),
        *(["attributes.* (attributes nested in one column)"] if "attributes" in have and not flattened else []),
    ]
    if missing:
        raise InputError(
            "not Phoenix's span export (columns context.span_id, span_kind and attributes.input.value, … "
            f"flattened): no {'; no '.join(missing)}; found {short(sorted(have))}",
            path,
        )


def _phoenix_sql(con, path: Path, first: int = 0, named: Path | None = None) -> None:
    """The spans of Phoenix's export (Parquet, or JSON lines) as `meta` and `flat`: its documents are lists of
    `{document.id, document.content, document.score, document.metadata}` in `attributes.retrieval.documents` and
    `attributes.reranker.output_documents`; each value is turned into OTLP's typed JSON so one pipeline checks
    both. Errors name `named` (the file a piece of JSON lines came from)."""
    with open(path, "rb") as f:
        parquet = f.read(4) == b"PAR1"
    source = (
        "read_parquet(?)" if parquet else f"read_json(?, format='newline_delimited', maximum_object_size={LINE_BYTES})"
    )
    con.execute(f"CREATE TEMP TABLE raw AS SELECT {int(first)} + row_number() OVER () AS line, * FROM {source}",
                [str(path)])  # fmt: skip
    have = {c for (c,) in con.execute("SELECT column_name FROM (DESCRIBE raw)").fetchall()} - {"line"}
    _check_phoenix_shape(have, named or path)

    def col(name: str, default: str = "NULL") -> str:
        return f'"{name}"' if name in have else default

    def typed(name: str) -> str:  # a value as OTLP's typed JSON: strings as stringValue, numbers as doubleValue
        if name not in have:
            return "NULL::JSON"
        c = f'"{name}"'
        return (
            f"CASE WHEN {c} IS NULL THEN NULL "
            f"WHEN json_type(to_json({c})) = 'VARCHAR' THEN json_object('stringValue', {c}) "
            f"WHEN json_type(to_json({c})) IN ('DOUBLE', 'UBIGINT', 'BIGINT') THEN json_object('doubleValue', {c}) "
            f"ELSE json_object('otherValue', to_json({c})) END"
        )

    start = col("start_time")
    con.execute(f"""
        CREATE TEMP TABLE meta AS
        SELECT line AS sid, line, CAST({col("context.span_id")} AS VARCHAR) AS span_raw,
               CAST({col("context.trace_id")} AS VARCHAR) AS trace_raw,
               CAST(epoch_us(TRY_CAST({start} AS TIMESTAMPTZ)) AS HUGEINT) * 1000 AS start_ns,
               coalesce(CAST({col("attributes.openinference.span.kind")} AS VARCHAR),
                        CAST({col("span_kind")} AS VARCHAR)) AS oi_kind,
               CAST({col("attributes.gen_ai.operation.name")} AS VARCHAR) AS genai_op,
               {typed("attributes.input.value")} AS input_value,
               {typed("attributes.reranker.query")} AS reranker_query,
               {typed("attributes.gen_ai.retrieval.query.text")} AS genai_query,
               CAST(coalesce({col("attributes.session.id")}, {col("attributes.gen_ai.conversation.id")}) AS VARCHAR)
                   AS session_id,
               {typed("attributes.gen_ai.retrieval.documents")} AS genai_docs,
               {" OR ".join(no_list(n) for n in DOCUMENT_LISTS if n in have) or "false"} AS docs_bad, false AS twice
        FROM raw""")
    parts = []
    for name, list_name in DOCUMENT_LISTS.items():
        if name not in have:
            continue
        for fld in ("id", "content", "score", "metadata"):
            parts.append(f"""
                SELECT line AS sid, '{list_name}' AS list, CAST(i - 1 AS BIGINT) AS i, '{fld}' AS field,
                       CASE WHEN v IS NULL OR json_type(v) = 'NULL' THEN NULL
                            WHEN json_type(v) = 'VARCHAR' THEN json_object('stringValue', v->>'$')
                            WHEN json_type(v) IN ('DOUBLE', 'UBIGINT', 'BIGINT') THEN json_object('doubleValue', v)
                            ELSE json_object('otherValue', v) END AS value
                FROM (SELECT line, generate_subscripts(docs, 1) AS i, unnest(docs)->'document.{fld}' AS v
                      FROM (SELECT line, CAST(to_json("{name}") AS JSON[]) AS docs FROM raw
                            WHERE json_type(to_json("{name}")) = 'ARRAY'))""")
    empty = "SELECT NULL::BIGINT AS sid, NULL AS list, NULL::BIGINT AS i, NULL AS field, NULL::JSON AS value LIMIT 0"
    con.execute("CREATE TEMP TABLE flat AS " + " UNION ALL ".join(parts or [empty]))


# What each span is, checked, from `meta` and `flat` (both forms): kept spans and their documents, or a reason
_CHECK_SQL = f"""
CREATE TEMP TABLE kinds AS
SELECT m.*,
       CASE WHEN upper(oi_kind) IN ('RETRIEVER', 'RERANKER') THEN upper(oi_kind)
            WHEN lower(genai_op) = 'retrieval' THEN 'GENAI' END AS kind
FROM meta m;
CREATE TEMP TABLE retrievals AS
SELECT k.*,
       CASE kind WHEN 'RERANKER' THEN coalesce(reranker_query, input_value)
                 WHEN 'GENAI' THEN genai_query ELSE input_value END AS q,
       nullif(CASE WHEN regexp_full_match(coalesce(span_raw, ''), '[0-9a-fA-F]{{16}}') THEN lower(span_raw)
            WHEN length(coalesce(span_raw, '')) = 12 AND regexp_full_match(span_raw, '[A-Za-z0-9+/=]+')
                 AND octet_length(from_base64(span_raw)) = 8 THEN lower(hex(from_base64(span_raw))) END,
              '0000000000000000') AS span_id,
       nullif(CASE WHEN regexp_full_match(coalesce(trace_raw, ''), '[0-9a-fA-F]{{32}}') THEN lower(trace_raw)
            WHEN length(coalesce(trace_raw, '')) = 24 AND regexp_full_match(trace_raw, '[A-Za-z0-9+/=]+')
                 AND octet_length(from_base64(trace_raw)) = 16 THEN lower(hex(from_base64(trace_raw))) END,
              '00000000000000000000000000000000') AS trace_id
FROM kinds k WHERE kind IS NOT NULL;
-- GenAI's documents: a JSON string, or OTLP's structured array of key-value lists
CREATE TEMP TABLE genai_list AS
SELECT sid,
       CASE WHEN (genai_docs->>'stringValue') IS NOT NULL AND json_valid(genai_docs->>'stringValue')
                 AND json_type(CAST(genai_docs->>'stringValue' AS JSON)) = 'ARRAY'
            THEN CAST(CAST(genai_docs->>'stringValue' AS JSON) AS JSON[])
            WHEN json_type(genai_docs->'arrayValue'->'values') = 'ARRAY'
            THEN list_transform(CAST(genai_docs->'arrayValue'->'values' AS JSON[]),
                    lambda e: CAST(map_from_entries(list_transform(
                            json_extract(e, '$.kvlistValue.values[*]'),
                            lambda kv: struct_pack(k := kv->>'key', v := kv->'value'))) AS JSON))
            END AS docs,
       genai_docs IS NOT NULL AS given
FROM retrievals WHERE kind = 'GENAI';
CREATE TEMP TABLE genai_flat AS
SELECT sid, 'gen_ai' AS list, CAST(i - 1 AS BIGINT) AS i, f AS field,
       CASE WHEN v IS NULL OR json_type(v) = 'NULL' THEN NULL
            WHEN json_type(v) = 'OBJECT' AND ((v->'stringValue') IS NOT NULL OR (v->'doubleValue') IS NOT NULL
                 OR (v->'intValue') IS NOT NULL) THEN v
            WHEN json_type(v) = 'VARCHAR' THEN json_object('stringValue', v->>'$')
            WHEN json_type(v) IN ('DOUBLE', 'UBIGINT', 'BIGINT') THEN json_object('doubleValue', v)
            ELSE json_object('otherValue', v) END AS value
FROM (SELECT sid, i, unnest(['id', 'content', 'score', 'metadata']) AS f, d FROM (
        SELECT sid, generate_subscripts(docs, 1) AS i, unnest(docs) AS d FROM genai_list WHERE docs IS NOT NULL)),
     LATERAL (SELECT d->f AS v);
CREATE TEMP TABLE docs AS
SELECT sid, i,
       max(value) FILTER (field = 'id') AS id_v, max(value) FILTER (field = 'content') AS content_v,
       max(value) FILTER (field = 'score') AS score_v, max(value) FILTER (field = 'metadata') AS meta_v
FROM (SELECT f.* FROM flat f JOIN retrievals r USING (sid)
      WHERE (r.kind = 'RERANKER') = (f.list = 'reranker.output_documents')
      UNION ALL SELECT * FROM genai_flat)
GROUP BY sid, i;
CREATE TEMP TABLE docs_checked AS
SELECT sid, i, document_id, content, score, metadata,
       (id_v IS NOT NULL AND document_id IS NULL) OR (content_v IS NOT NULL AND content IS NULL)
       OR (score_v IS NOT NULL AND NOT isfinite(coalesce(score, 'nan'::DOUBLE)))
       OR (id_v IS NULL AND content_v IS NULL) AS bad_type,
       coalesce(length(content) > {CONTENT_CHARS}, false) OR coalesce(length(metadata) > {CONTENT_CHARS}, false)
           AS too_long,
       i IS NULL AS index_bad
FROM (SELECT *,  -- each value read once, as its type allows: what it cannot be read as is NULL, and bad_type
             coalesce(id_v->>'stringValue', CAST(TRY_CAST(id_v->>'intValue' AS HUGEINT) AS VARCHAR),
                      CASE WHEN TRY_CAST(id_v->>'doubleValue' AS DOUBLE)
                                = round(TRY_CAST(id_v->>'doubleValue' AS DOUBLE))
                           THEN CAST(TRY_CAST(TRY_CAST(id_v->>'doubleValue' AS DOUBLE) AS BIGINT) AS VARCHAR) END)
                 AS document_id,
             content_v->>'stringValue' AS content,
             coalesce(TRY_CAST(score_v->>'doubleValue' AS DOUBLE), TRY_CAST(score_v->>'intValue' AS DOUBLE)) AS score,
             coalesce(meta_v->>'stringValue', CAST(meta_v->'otherValue' AS VARCHAR)) AS metadata
      FROM docs);
CREATE TEMP TABLE per_span AS
SELECT sid, count(*) AS n_docs, bool_or(bad_type) AS bad_type, bool_or(too_long) AS too_long,
       bool_or(index_bad) AS index_bad
FROM docs_checked GROUP BY sid;
CREATE TEMP TABLE verdicts AS
SELECT r.*, p.n_docs,
       CASE WHEN r.span_id IS NULL THEN 'span_id'
            WHEN r.trace_raw IS NOT NULL AND r.trace_id IS NULL THEN 'trace_id'
            WHEN r.twice THEN 'attribute_twice'
            WHEN r.start_ns IS NULL OR r.start_ns < 1 OR r.start_ns > 9223372036854775807 THEN 'start_time'
            WHEN r.q IS NULL THEN 'no_query'
            WHEN (r.q->>'stringValue') IS NULL THEN 'query_type'
            WHEN regexp_full_match(r.q->>'stringValue', '[[:space:]]*') THEN 'no_query'
            WHEN length(r.q->>'stringValue') > {QUERY_CHARS} THEN 'query_size'
            WHEN (r.kind = 'GENAI' AND g.given AND g.docs IS NULL) OR r.docs_bad THEN 'documents_type'
            WHEN p.index_bad THEN 'document_index'
            WHEN coalesce(p.n_docs, 0) > {DOCUMENTS_PER_SPAN} THEN 'too_many_documents'
            WHEN p.bad_type THEN 'document_type'
            WHEN p.too_long THEN 'content_size'
            WHEN row_number() OVER (PARTITION BY r.span_id ORDER BY r.sid) > 1 THEN 'duplicate_span'
       END AS reason
FROM retrievals r LEFT JOIN per_span p USING (sid) LEFT JOIN genai_list g USING (sid);
"""

_SPANS_SQL = f"""
SELECT span_id, trace_id, session_id,
       make_timestamp(CAST(start_ns // 1000 AS BIGINT)) AS time,
       lower(kind) AS kind, q->>'stringValue' AS query, {_hash_sql("q->>'stringValue'")} AS query_hash,
       CAST(? AS VARCHAR) AS file, CAST(line AS BIGINT) AS line
FROM verdicts WHERE reason IS NULL ORDER BY sid"""
_DOCUMENTS_SQL = f"""
CREATE TEMP TABLE kept_docs AS
SELECT d.sid, d.i, v.span_id, CAST(row_number() OVER (PARTITION BY d.sid ORDER BY d.i) AS INTEGER) AS rank,
       d.document_id, d.content, CASE WHEN d.content IS NOT NULL THEN {_hash_sql("d.content")} END AS content_hash,
       d.score, d.metadata
FROM docs_checked d JOIN verdicts v USING (sid) WHERE v.reason IS NULL"""
_DOCUMENT_ROWS_SQL = "SELECT span_id, rank, document_id, content_hash, score, metadata FROM kept_docs ORDER BY sid, i"
_CONTENTS_SQL = """SELECT content_hash, any_value(content) AS content FROM kept_docs WHERE content_hash IS NOT NULL
GROUP BY content_hash"""


PIECE_BYTES = 32 << 20  # a file of JSON lines is read this much at a time: memory bounded whatever its size


def pieces(path: Path, size: int = PIECE_BYTES):
    """The lines of a file of JSON lines in pieces of about `size` bytes (whole lines; one longer line alone): each
    (the number of lines before it, its bytes)."""
    with open(path, "rb") as f:
        buf, first, count = [], 0, 0
        held = 0
        for line in iter(lambda: f.readline(LINE_BYTES + 1), b""):  # a line is never read past the bound
            if len(line) > LINE_BYTES:
                raise InputError(
                    f"line {count + 1} is over {LINE_BYTES >> 20} MiB: a line is one export request; export smaller "
                    "batches (a collector's batch processor, send_batch_max_size)",
                    path,
                )
            buf.append(line)
            held += len(line)
            count += 1
            if held >= size:
                yield first, b"".join(buf)
                buf, first, held = [], count, 0
        if buf or first == 0:
            yield first, b"".join(buf)


def _read_piece(path: Path, fmt: str, source: Path, first: int, strict: bool, examples: int):
    """One piece of a trace file through the DuckDB pipeline (`source`: the piece's own file, or the whole file):
    (read, spans, documents, contents, skipped, examples)."""
    import duckdb

    con = duckdb.connect(config={"preserve_insertion_order": True})
    try:
        try:
            (_otlp_sql if fmt == "otlp-json" else _phoenix_sql)(con, source, first, path)
        except duckdb.Error as exc:
            if fmt == "phoenix" and open(path, "rb").read(4) == b"PAR1":
                raise InputError(
                    f"cannot be read as Phoenix's Parquet ({short(str(exc).splitlines()[0])[:160]})", path
                ) from None
            raise _json_error(exc, path) from None
        read = con.execute("SELECT count(*) FROM meta").fetchone()[0]
        con.execute(_CHECK_SQL)
        bad = con.execute(
            "SELECT reason, count(*) FROM verdicts WHERE reason IS NOT NULL GROUP BY reason ORDER BY reason"
        ).fetchall()
        shown = con.execute(
            f"SELECT line, span_raw, reason FROM verdicts WHERE reason IS NOT NULL ORDER BY sid LIMIT {examples}"
        ).fetchall()
        if strict and shown:
            line, span, reason = shown[0]
            raise strict_error(path, line, span, reason)
        spans = _table(con.sql(_SPANS_SQL, params=[str(path)]).to_arrow_table())
        con.execute(_DOCUMENTS_SQL)
        documents = _table(con.sql(_DOCUMENT_ROWS_SQL).to_arrow_table())
        contents = _table(con.sql(_CONTENTS_SQL).to_arrow_table())
    finally:
        con.close()
    return read, spans, documents, contents, bad, shown


def _not_seen(spans: pa.Table, documents: pa.Table, seen: set[str]):
    """`spans` and `documents` less the spans whose id is in `seen`, and those left out (line, span id)."""
    ids = spans.column("span_id").to_pylist()
    again = [i for i, sid in enumerate(ids) if sid in seen]
    if not again:
        return spans, documents, []
    lines = spans.column("line").to_pylist()
    gone = {ids[i] for i in again}
    keep = pa.array([sid not in gone for sid in ids])
    docs = pa.array([sid not in gone for sid in documents.column("span_id").to_pylist()])
    return spans.filter(keep), documents.filter(docs), [(lines[i], ids[i]) for i in again]


def read_traces(
    path: Path, fmt: str = "auto", strict: bool = False, examples: int = 10, piece_bytes: int = PIECE_BYTES
) -> Traces:
    """The retrieval spans of one trace file (`FORMATS`), checked (module docstring). A file of JSON lines is read
    in pieces of `PIECE_BYTES` (whole lines), so memory holds one piece's parsed JSON and the spans kept, each
    distinct content once. With `strict`, the first span that would be skipped is one line naming the file, its
    line and the span."""
    path = regular_file(Path(path))
    try:
        return _read_traces(path, fmt, strict, examples, piece_bytes)
    except OSError as exc:
        if exc.filename is not None and Path(exc.filename) != path:  # a fault of the scratch folder, not the input
            raise
        raise InputError(f"cannot be read ({exc.strerror or exc})", path) from None


def _read_traces(path: Path, fmt: str, strict: bool, examples: int, piece_bytes: int) -> Traces:
    import tempfile

    if path.stat().st_size > FILE_BYTES:
        raise InputError(f"a trace file is at most {FILE_BYTES >> 30} GiB", path)
    if fmt not in FORMATS:
        raise InputError(f"unknown trace format {fmt!r}; choose one of {', '.join(FORMATS)}")
    fmt = sniff(path) if fmt == "auto" else fmt
    with open(path, "rb") as f:
        parquet = f.read(4) == b"PAR1"
    read, spans, documents, contents, skipped, shown, seen = 0, [], [], {}, {}, [], set()
    with tempfile.TemporaryDirectory(prefix="chunkeval-traces-") as scratch:
        parts = [(0, None)] if parquet else pieces(path, piece_bytes)
        for first, data in parts:
            source = path
            if data is not None:
                source = Path(scratch) / "piece.jsonl"
                source.write_bytes(data)
            n, sp, docs, cont, bad, ex = _read_piece(path, fmt, source, first, strict, examples - len(shown))
            sp, docs, again = _not_seen(sp, docs, seen)  # a span id of an earlier piece is a duplicate too
            if again:
                if strict:
                    line, span = again[0]
                    raise strict_error(path, line, span, "duplicate_span")
                bad = [*bad, ("duplicate_span", len(again))]
                ex = [*ex, *((line, span, "duplicate_span") for line, span in again)]
            read += n
            spans.append(sp)
            documents.append(docs)
            for h, c in zip(cont.column("content_hash").to_pylist(), cont.column("content").to_pylist()):
                contents.setdefault(h, c)
            for reason, count in bad:
                skipped[reason] = skipped.get(reason, 0) + int(count)
            shown += ex[: max(0, examples - len(shown))]
            seen.update(sp.column("span_id").to_pylist())
    return Traces(
        spans=pa.concat_tables(spans),
        documents=pa.concat_tables(documents),
        contents=pa.table(
            {
                "content_hash": pa.array(list(contents), pa.string()),
                "content": pa.array(list(contents.values()), pa.string()),
            }
        ),  # fmt: skip
        read=int(read),
        skipped=skipped,
        examples=[{"file": str(path), "line": int(line), "span_id": str(span), "reason": r} for line, span, r in shown],
    )


def _table(result) -> pa.Table:
    return result.read_all() if hasattr(result, "read_all") else result


def combine(parts: list[Traces], strict: bool = False) -> Traces:
    """The traces of several files as one import: a span id seen in an earlier file is a duplicate too (skipped and
    counted, its contents not kept; with `strict`, one line naming its file and line)."""
    if not parts:
        raise InputError("no trace file to import")
    spans = pa.concat_tables([p.spans for p in parts])
    documents = pa.concat_tables([p.documents for p in parts])
    contents = pa.concat_tables([p.contents for p in parts])
    skipped: dict[str, int] = {}
    for p in parts:
        for r, n in p.skipped.items():
            skipped[r] = skipped.get(r, 0) + n
    ids = spans.column("span_id").to_pylist()
    seen: set[str] = set()
    keep = []
    for sid in ids:
        keep.append(sid not in seen)
        seen.add(sid)
    examples = [e for p in parts for e in p.examples]
    if not all(keep):
        again = [i for i, k in enumerate(keep) if not k]
        files, lines = spans.column("file").to_pylist(), spans.column("line").to_pylist()
        if strict:
            i = again[0]
            raise strict_error(files[i], lines[i], ids[i], "duplicate_span")
        skipped["duplicate_span"] = skipped.get("duplicate_span", 0) + len(again)
        examples += [{"file": files[i], "line": int(lines[i]), "span_id": ids[i], "reason": "duplicate_span"}
                     for i in again]  # fmt: skip
        spans = spans.filter(pa.array(keep))
        first = {}
        for i, (sid, f) in enumerate(zip(ids, keep)):
            if f:
                first[sid] = i
        # documents of a dropped duplicate: those after the first file that held the span id
        documents = _documents_of_kept(parts, seen_first=first)
    contents = _contents_of(contents, documents)
    return Traces(spans, documents, contents, sum(p.read for p in parts), skipped, examples[:10])


def _contents_of(contents: pa.Table, documents: pa.Table) -> pa.Table:
    """Each content of `contents` once (its first row), and only those a row of `documents` holds: none where no
    document kept carries content (a retriever that found nothing, documents by id alone), which is a result too."""
    wanted = pc.is_in(contents.column("content_hash"), value_set=documents.column("content_hash").combine_chunks())
    held = contents.filter(pc.fill_null(wanted, False))
    hashes = held.column("content_hash").to_numpy(zero_copy_only=False).astype(object)
    _, first = np.unique(hashes, return_index=True)
    return held.take(pa.array(np.sort(first), pa.int64()))  # typed: an empty list of rows takes no row


RETRIEVAL_SPANS = "openinference.span.kind RETRIEVER or RERANKER, or gen_ai.operation.name retrieval"


def check_kept(traces: Traces, files: list[Path]) -> Traces:
    """`traces` where the import keeps a retrieval span, else the one line that says why it keeps none (no span
    in the files, none a retrieval span, every retrieval span skipped: by reason, with the first one's line): a
    file that holds nothing to import is bad input, said before anything is written (docs/exit-codes.md). A kept
    span whose retriever found nothing is kept: an empty ranking is a result."""
    if traces.kept:
        return traces
    where = files[0] if len(files) == 1 else None
    source = "" if where is not None else f" in {len(files)} trace files"
    if not traces.read:
        raise InputError(f"nothing to import: no span{source}", where)
    said = f"nothing to import: {traces.read:,} span(s) read{source}"
    if not traces.skipped:
        raise InputError(f"{said}, none a retrieval span ({RETRIEVAL_SPANS})", where)
    skipped = sum(traces.skipped.values())
    why = "; ".join(f"{n:,} {SKIP_REASONS[r]}" for r, n in sorted(traces.skipped.items()))
    first = traces.examples[0] if traces.examples else None
    at = f"{Path(first['file']).name}: " if first and where is None else ""
    example = f"; e.g. {at}line {first['line']}" if first else ""
    raise InputError(f"{said}, {skipped:,} retrieval span(s) skipped ({why}{example}), none kept", where)


def _documents_of_kept(parts: list[Traces], seen_first: dict[str, int]) -> pa.Table:
    out, offset = [], 0
    for p in parts:
        ids = p.spans.column("span_id").to_pylist()
        mine = {sid for n, sid in enumerate(ids) if seen_first.get(sid) == offset + n}
        offset += len(ids)
        docs = p.documents
        if docs.num_rows:
            mask = pa.array([s in mine for s in docs.column("span_id").to_pylist()])
            docs = docs.filter(mask)
        out.append(docs)
    return pa.concat_tables(out)
