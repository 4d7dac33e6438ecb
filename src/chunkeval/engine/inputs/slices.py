"""Slices of the gold set (`--slice-by type,tags`, experiment key `slice_by`): which queries belong to which
slice. Definitions: docs/formats.md ("Slices of the gold set").

A slice is a column of the gold set and one of its values (`type=numbers`). The columns are read from the
file the questions come from: extra columns of a span gold CSV, and for document gold the fields of the
queries JSONL file or of its `metadata` object (BEIR's place for them). A value that is a list (a JSON list in
the CSV column `tags`, a JSON array in a queries file) puts its query in the slice of each item; an empty or
missing value in none of the column's slices. The membership is one table `query_id, slice_column,
slice_value`, one row per query and slice.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from chunkeval.engine.inputs.document_gold import beir_paths
from chunkeval.engine.inputs.readers import query_id_value, read_csv_rows, read_jsonl_rows
from chunkeval.engine.inputs.span_gold import span_query_id
from chunkeval.errors import InputError
from chunkeval.vocabulary import SLICE_KEYS

TAGS = "tags"  # the CSV column whose cells are JSON lists
SPAN_COLUMNS = ("question", "references", "query_id")  # a span gold file's own columns: no slices
DOC_FIELDS = ("_id", "text", "metadata")  # a queries file's own fields


def check_slice_columns(columns: tuple[str, ...], source: str | None = None) -> tuple[str, ...]:
    """Slice column names: non-empty, without `=` or `,` (a slice is written `column=value`), each once."""
    for column in columns:
        if not column.strip() or "=" in column or "," in column:
            raise InputError(f"slice_by takes column names without '=' or ',', got {column!r}", source)
    twice = sorted({c for c in columns if columns.count(c) > 1})
    if twice:
        raise InputError(f"slice_by names {', '.join(map(repr, twice))} twice", source)
    return columns


def _values(value, column: str, path: Path, row: int) -> list[str]:
    """The slices a cell puts its query in: a list's items, a scalar as text, none for empty or null."""
    items = value if isinstance(value, list) else [value]
    out = []
    for item in items:
        if isinstance(item, (dict, list)):
            raise InputError(
                f"slice column {column}: a value or a list of values, got {json.dumps(item)[:60]}", path, row
            )
        text = item if isinstance(item, str) else "" if item is None else json.dumps(item)
        if text.strip():
            out.append(text.strip())
    return list(dict.fromkeys(out))


def _tags(cell: str, column: str, path: Path, row: int):
    """A CSV cell of the column `tags`: a JSON list (an empty cell is no tag)."""
    if not cell.strip():
        return []
    try:
        value = json.loads(cell)
    except json.JSONDecodeError as exc:
        raise InputError(f"column {column}: broken JSON ({exc.msg}); it takes a JSON list", path, row) from None
    if not isinstance(value, list):
        raise InputError(f"column {column}: a JSON list of tags, got {cell.strip()[:60]!r}", path, row)
    return value


def _span_rows(path: Path, columns: tuple[str, ...], wanted: set[str]):
    for row, rec in read_csv_rows(path, ("question", "references", "corpus_id")):
        if row == 1:
            extra = [c for c in rec if c not in SPAN_COLUMNS]
            for column in columns:
                if column not in extra:
                    what = "is the gold set's own column" if column in SPAN_COLUMNS else "is not a column of the file"
                    raise InputError(
                        f"unknown slice column {column!r}: it {what}; slice by one of {', '.join(extra)}", path
                    )
        qid = span_query_id(rec, row)
        if qid in wanted:
            yield qid, {c: (_tags(rec[c], c, path, row) if c == TAGS else rec[c]) for c in columns}, row


def _doc_rows(path: Path, columns: tuple[str, ...], wanted: set[str]):
    own = [c for c in columns if c in DOC_FIELDS]
    if own:
        raise InputError(f"unknown slice column {own[0]!r}: it is the queries file's own field", path)
    seen: set[str] = set()
    rows = []
    for row, obj in read_jsonl_rows(path, ("_id",)):
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        fields = {**meta, **{k: v for k, v in obj.items() if k not in DOC_FIELDS}}
        seen.update(fields)
        qid = query_id_value(obj["_id"], path, row)
        if qid in wanted:
            rows.append((qid, {c: fields.get(c) for c in columns}, row))
    unknown = [c for c in columns if c not in seen]
    if unknown:
        raise InputError(
            f"unknown slice column {unknown[0]!r}: no query has it as a field or under metadata "
            f"(fields: {', '.join(sorted(seen)) or 'none'})",
            path,
        )
    return rows


def queries_file(exp) -> Path:
    """The file an experiment's questions come from: the span gold CSV, or the queries JSONL of its document gold."""
    if not exp.doc_gold:
        return Path(exp.questions)
    if exp.beir:
        return beir_paths(Path(exp.beir), exp.split)[1]
    return Path(exp.queries)


def load_slices(exp, query_ids: list[str]) -> pa.Table | None:
    """`query_id, slice_column, slice_value` of the queries of a run (`query_ids`), for the experiment's
    `slice_by` columns; None when it names none."""
    if not exp.slice_by:
        return None
    path = queries_file(exp)
    wanted = set(query_ids)
    read = _doc_rows if exp.doc_gold else _span_rows
    out: dict[str, list[str]] = {"query_id": [], SLICE_KEYS[0]: [], SLICE_KEYS[1]: []}
    for qid, cells, row in read(path, tuple(exp.slice_by), wanted):
        for column in exp.slice_by:
            for value in _values(cells[column], column, path, row):
                out["query_id"].append(qid)
                out[SLICE_KEYS[0]].append(column)
                out[SLICE_KEYS[1]].append(value)
    return pa.table({k: pa.array(v, pa.string()) for k, v in out.items()})
