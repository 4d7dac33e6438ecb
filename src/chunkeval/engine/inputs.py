"""Reading inputs: plain files, span gold, the other kinds of gold set, and run files (corpus folders: `corpus`).

Every reader validates as it reads and raises `InputError` naming the file, the row and what is
wrong, before anything is computed. Rows are data rows counted from 1 (a CSV header is not a row,
a JSONL file's first line is row 1).
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from chunkeval.engine.anchoring import (  # noqa: F401 (re-exported)
    ANCHOR_SIMILARITY,
    _reanchor,
    _reference,
    anchoring_counts,
    check_anchor_similarity,
    gold_summary,
    place_reference,
    question_status,
)
from chunkeval.errors import InputError
from chunkeval.limits import HEADER_BYTES, MAX_GRADE, MAX_SCORE, head, json_loads, regular_file, short
from chunkeval.vocabulary import GOLD_FORMATS

log = logging.getLogger("chunkeval")

# --------------------------------------------------------------------------- plain files


def read_text(path: Path) -> str:
    """A UTF-8 text file, newlines normalized as Python's `open()` does (offsets are `str` positions)."""
    path = regular_file(path)  # a FIFO or a device is refused before it is opened
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read file ({exc.strerror})", path) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (invalid byte at offset {exc.start})", path) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _nonempty(text: str, path: Path) -> str:
    if not text.strip():
        raise InputError("file is empty", path)
    return text


def _check_head(path: Path, check) -> None:
    """`check(first_line)` on the file's first line, read from its first bytes alone (limits.HEADER_BYTES):
    a file with a wrong header is refused before the rest of it is read."""
    raw = head(path)
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    lines = raw.lstrip(b"\r\n").split(b"\n", 1)
    if len(lines) == 1 and len(raw) >= HEADER_BYTES:
        raise InputError(f"no line ends within the first {HEADER_BYTES:,} bytes", path)
    try:
        first = lines[0].decode("utf-8").rstrip("\r")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (invalid byte at offset {exc.start})", path) from None
    if first.strip():
        check(first)


def read_csv_rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """(row number, row) pairs of a CSV file that must have the `required` columns."""

    def header(line: str) -> None:
        try:  # the first line as its bytes gave it: a CR of a CRLF file ends it, a lone CR inside breaks it
            columns = next(csv.reader([line.rstrip("\r")]), [])
        except csv.Error as exc:
            raise InputError(f"malformed CSV header ({exc})", path, 1) from None
        missing = [c for c in required if c not in columns]
        if missing:
            raise InputError(f"missing column(s) {', '.join(missing)}; found {', '.join(columns) or 'none'}", path)

    _check_head(path, header)
    text = _nonempty(read_text(path), path)
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:  # every csv.Error of the file, its header's included, is one line naming the row
        columns = reader.fieldnames or []
        missing = [c for c in required if c not in columns]
        if missing:
            raise InputError(f"missing column(s) {', '.join(missing)}; found {', '.join(columns) or 'none'}", path)
        rows = list(reader)
    except csv.Error as exc:
        raise InputError(f"malformed CSV ({exc})", path, reader.line_num) from None
    if not rows:
        raise InputError("no data rows", path)
    for number, row in enumerate(rows, start=1):
        if None in row or any(row.get(c) is None for c in required):
            raise InputError("wrong number of fields", path, number)
        yield number, row


def _jsonl_object(line: str, required: tuple[str, ...], path: Path, number: int) -> dict:
    try:
        obj = json_loads(line)
    except json.JSONDecodeError as exc:
        raise InputError(f"broken JSON ({exc.msg} at column {exc.colno})", path, number) from None
    if not isinstance(obj, dict):
        raise InputError("each line must be a JSON object", path, number)
    missing = [k for k in required if k not in obj]
    if missing:
        raise InputError(f"missing key(s) {', '.join(missing)}", path, number)
    return obj


def read_jsonl_rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict]]:
    """(row number, object) pairs of a JSON Lines file whose objects must have the `required` keys."""
    _check_head(path, lambda line: _jsonl_object(line, required, path, 1))
    text = _nonempty(read_text(path), path)
    number = 0
    for line in text.split("\n"):
        if not line.strip():
            continue
        number += 1
        yield number, _jsonl_object(line, required, path, number)


def read_table_rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict]]:
    """CSV or JSONL rows, chosen by the file's extension (.csv, else JSON Lines)."""
    path = Path(path)
    if path.suffix.lower() == ".csv":
        return read_csv_rows(path, required)
    return read_jsonl_rows(path, required)


def _json_value(value, path: Path, row: int, column: str):
    """A cell that holds JSON: JSONL gives it parsed, CSV gives its text."""
    if not isinstance(value, str):
        return value
    try:
        return json_loads(value)
    except json.JSONDecodeError as exc:
        raise InputError(f"column {column}: broken JSON ({exc.msg})", path, row) from None


def _query_id(value, path: Path, row: int, what: str = "query_id") -> str:
    """An id of a row (text or a whole number); `what` names it in the error (query_id, document _id)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        raise InputError(f"empty {what}", path, row)
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise InputError(f"{what} must be text or a number, got {short(value)}", path, row)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


# --------------------------------------------------------------------------- span gold


@dataclass(frozen=True)
class SpanGold:
    """Questions with exact reference spans: `corpus[ref_start[i]:ref_end[i]]` answers query `ref_query[i]`."""

    query_ids: list[str]
    questions: list[str]
    corpus_ids: list[str]
    ref_query: np.ndarray  # int64, index into query_ids
    ref_start: np.ndarray  # int64, str offsets
    ref_end: np.ndarray  # int64, exclusive
    source: str = ""
    reanchored: int = 0  # references placed again: found elsewhere word for word, or approximately
    corpora: tuple[str, ...] = ()  # each query's corpus, where its document is one of several in a corpus
    anchoring: tuple = ()  # per question read, retired ones too: {query_id, row, corpus_id, status, similarity,
    # reason (retired), references: [{status, start, end, similarity, was: [old start, old end], reason}]}
    no_references: int = 0  # questions without references (they score recall 0 unless skip_empty_gold)

    @property
    def n_queries(self) -> int:
        return len(self.query_ids)

    @property
    def query_corpora(self) -> list[str]:
        """Each query's corpus (what per-corpus summaries group by); `corpus_ids` names its document."""
        return list(self.corpora) if self.corpora else self.corpus_ids


def listing(names: list[str], limit: int = 10) -> str:
    """Names for a message: all of them, or the first `limit` and how many there are."""
    shown = ", ".join(names[:limit])
    return shown if len(names) <= limit else f"{shown}, … ({len(names):,} in all)"


def span_query_id(rec: dict[str, str], row: int) -> str:
    """A span gold row's query id: its `query_id`, else `<corpus_id>:<row>`."""
    return rec.get("query_id") or f"{rec['corpus_id'].strip()}:{row}"


def load_span_gold(
    questions_csv: Path,
    corpora: dict[str, str],
    known: set[str] | None = None,
    corpus_of: dict[str, str] | None = None,
    unreadable: dict[str, str] | None = None,
    similarity: float = ANCHOR_SIMILARITY,
    strict: bool = False,
) -> SpanGold:
    """Chroma's format: columns question, references (JSON list of content/start_index/end_index), corpus_id.

    `corpora` maps each document (a corpus file, or a document of a corpus of several) to its text, and the
    corpus_id column names one. Questions of documents not in `corpora` are left out (that is how `--corpus`
    narrows a run); a corpus_id that is not among the `known` ids (the folder's, where given) is an error, and
    so is one naming a document left out as unreadable (`unreadable`: document → why). `corpus_of` gives each
    document's corpus where documents share one.

    A reference whose offsets no longer hold its content is placed again (`place_reference`): re-anchored where
    the content is found word for word, else placed approximately where the document holds text at least
    `similarity` similar. A question with a reference that cannot be placed is retired from the run (an error
    with `strict`, and where every question is retired). Nothing is logged here: `anchoring` records each
    question's status, and `chunkeval.engine.sweep.load_inputs` says it once, in one line.
    """
    path = Path(questions_csv)
    query_ids, questions, documents, rq, rs, re_ = [], [], [], [], [], []
    anchoring, no_refs = [], 0
    for row, rec in read_csv_rows(path, ("question", "references", "corpus_id")):
        cid = rec["corpus_id"].strip()
        if cid not in corpora:
            if unreadable and cid in unreadable:
                raise InputError(f"corpus_id {cid!r} names an unreadable document ({unreadable[cid]})", path, row)
            if known is not None and cid not in known:
                raise InputError(
                    f"corpus_id {cid!r} names no corpus file or document (known: {listing(sorted(known))})", path, row
                )
            continue
        question = rec["question"]
        if not question.strip():
            raise InputError("empty question", path, row)
        refs = _json_value(rec["references"], path, row, "references")
        if not isinstance(refs, list):
            raise InputError("references must be a JSON list", path, row)
        qid = span_query_id(rec, row)
        text = corpora[cid]
        placed = []
        for j, ref in enumerate(refs, start=1):
            content, start, end = _reference(ref, f"reference {j} of question {question[:60]!r}", path, row)
            placed.append({**place_reference(text, content, start, end, similarity, cid), "was": [start, end]})
        status, lowest = question_status(placed)
        record = {"query_id": qid, "row": row, "corpus_id": cid, "status": status, "similarity": lowest}
        retired = [f"reference {j}: {p['reason']}" for j, p in enumerate(placed, start=1) if p["status"] == "retired"]
        if retired:
            record["reason"] = "; ".join(retired)
            if strict:
                raise InputError(
                    f"question {qid!r} retired, {record['reason']} (strict: nothing in the inputs may be set aside)",
                    path,
                    row,
                )
        anchoring.append({**record, "references": placed})
        if retired:
            continue
        qindex = len(query_ids)
        for p in placed:
            rq.append(qindex)
            rs.append(p["start"])
            re_.append(p["end"])
        no_refs += not refs
        query_ids.append(qid)
        questions.append(question)
        documents.append(cid)
    if anchoring and not query_ids:
        first = anchoring[0]
        raise InputError(
            f"every question is retired: none of the references of {len(anchoring)} question(s) could be placed "
            f"in its document (row {first['row']}: {first['reason']})",
            path,
        )
    if not query_ids:
        raise InputError(f"no question refers to the corpora {listing(list(corpora))}", path)
    if len(set(query_ids)) != len(query_ids):
        raise InputError("query_id values are not unique", path)
    return SpanGold(
        query_ids,
        questions,
        documents,
        np.asarray(rq, dtype=np.int64),
        np.asarray(rs, dtype=np.int64),
        np.asarray(re_, dtype=np.int64),
        str(path),
        sum(p["status"] in ("reanchored", "approximate") for a in anchoring for p in a["references"]),
        tuple(corpus_of.get(c, c) for c in documents) if corpus_of else (),
        tuple(anchoring),
        no_refs,
    )


# --------------------------------------------------------------------------- id / string / TREC gold


@dataclass(frozen=True)
class Qrels:
    """Graded judgments per query: query_id → {item id → grade}; grade > 0 is relevant."""

    judgments: dict[str, dict[str, float]]
    texts: dict[str, str] = field(default_factory=dict)
    source: str = ""


@dataclass(frozen=True)
class Run:
    """Ranked lists per query: query_id → [item id, best first]."""

    ranked: dict[str, list[str]]
    source: str = ""


def _grades(value, path: Path, row: int, column: str) -> dict[str, float]:
    value = _json_value(value, path, row, column)
    if isinstance(value, list):
        return {str(v): 1.0 for v in value}
    if isinstance(value, dict):
        out = {}
        for k, g in value.items():
            if isinstance(g, bool) or not isinstance(g, (int, float)) or not math.isfinite(g):
                raise InputError(f"column {column}: grade of {k!r} must be a number", path, row)
            out[str(k)] = float(g)
        return out
    raise InputError(f"column {column}: must be a JSON list of ids or an object id → grade", path, row)


def _add_query(table: dict, qid: str, value, path: Path, row: int) -> None:
    if qid in table:
        raise InputError(f"query_id {qid!r} appears twice", path, row)
    table[qid] = value


def load_chunk_gold(path: Path) -> Qrels:
    """CSV or JSONL rows `query_id, query, relevant_chunk_ids` (a JSON list, or an object id → grade)."""
    path = Path(path)
    judgments, texts = {}, {}
    for row, rec in read_table_rows(path, ("query_id", "query", "relevant_chunk_ids")):
        qid = _query_id(rec["query_id"], path, row)
        _add_query(judgments, qid, _grades(rec["relevant_chunk_ids"], path, row, "relevant_chunk_ids"), path, row)
        texts[qid] = str(rec["query"])
    return Qrels(judgments, texts, str(path))


def _ranked_list(value, path: Path, row: int, column: str) -> list[str]:
    value = _json_value(value, path, row, column)
    if not isinstance(value, list):
        raise InputError(f"column {column}: must be a JSON list in rank order", path, row)
    items = [str(v) for v in value]
    unique = list(dict.fromkeys(items))
    if len(unique) != len(items):
        log.warning("%s: row %d: %d repeated item(s) dropped (first rank kept)", path, row, len(items) - len(unique))
    return unique


def _check_run_queries(order: list[tuple[str, int]], gold: Qrels, path: Path) -> None:
    for qid, row in order:
        if qid not in gold.judgments:
            raise InputError(f"query_id {qid!r} is not in the gold set {gold.source}", path, row)


def load_chunk_run(path: Path, gold: Qrels) -> Run:
    """CSV or JSONL rows `query_id, retrieved_chunk_ids` (a JSON list in rank order)."""
    path = Path(path)
    ranked, order = {}, []
    for row, rec in read_table_rows(path, ("query_id", "retrieved_chunk_ids")):
        qid = _query_id(rec["query_id"], path, row)
        _add_query(ranked, qid, _ranked_list(rec["retrieved_chunk_ids"], path, row, "retrieved_chunk_ids"), path, row)
        order.append((qid, row))
    _check_run_queries(order, gold, path)
    return Run(ranked, str(path))


def _text_list(value, path: Path, row: int, key: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError(f"{key} must be a JSON list of texts", path, row)
    return value


def load_string_gold(path: Path) -> Qrels:
    """JSONL `{"query_id", "reference": [texts]}`: a retrieved text is relevant when it equals one exactly."""
    path = Path(path)
    judgments, texts = {}, {}
    for row, rec in read_jsonl_rows(path, ("query_id", "reference")):
        qid = _query_id(rec["query_id"], path, row)
        refs = _text_list(rec["reference"], path, row, "reference")
        _add_query(judgments, qid, {t: 1.0 for t in refs}, path, row)
        if "query" in rec:
            texts[qid] = str(rec["query"])
    return Qrels(judgments, texts, str(path))


def load_string_run(path: Path, gold: Qrels) -> Run:
    """JSONL `{"query_id", "hypothesis": [texts]}` in rank order."""
    path = Path(path)
    ranked, order = {}, []
    for row, rec in read_jsonl_rows(path, ("query_id", "hypothesis")):
        qid = _query_id(rec["query_id"], path, row)
        hyp = _text_list(rec["hypothesis"], path, row, "hypothesis")
        _add_query(ranked, qid, _ranked_list(hyp, path, row, "hypothesis"), path, row)
        order.append((qid, row))
    _check_run_queries(order, gold, path)
    return Run(ranked, str(path))


def _trec_lines(path: Path, n_fields: int, what: str) -> Iterator[tuple[int, list[str]]]:
    text = _nonempty(read_text(path), path)
    for row, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != n_fields:
            raise InputError(f"a {what} line has {n_fields} fields, found {len(parts)}", path, row)
        yield row, parts


def _finite(text: str, what: str, path: Path, row: int) -> float:
    """A number of a TREC file's column `what`: finite, a grade within ±`MAX_GRADE`, a score within ±`MAX_SCORE`;
    else one line naming the file and row."""
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"{what} {short(text)} is not a number", path, row) from None
    if not math.isfinite(value):
        raise InputError(f"{what} {short(text)} is not a finite number", path, row)
    bound = {"grade": MAX_GRADE, "score": MAX_SCORE}.get(what)
    if bound is not None and abs(value) > bound:
        raise InputError(f"{what} {short(text)} is beyond ±{bound:,g} (docs/limits.md)", path, row)
    return value


def load_trec_qrels(path: Path) -> Qrels:
    """TREC qrels: `query_id iteration doc_id grade` per line."""
    path = Path(path)
    judgments: dict[str, dict[str, float]] = {}
    for row, (qid, _, doc, grade) in _trec_lines(path, 4, "qrels"):
        judgments.setdefault(qid, {})[doc] = _finite(grade, "grade", path, row)
    return Qrels(judgments, {}, str(path))


def load_trec_run(path: Path, gold: Qrels) -> Run:
    """TREC run: `query_id Q0 doc_id rank score tag`. Ordered as trec_eval orders it: by score,
    highest first, ties by doc_id in descending string order (the rank column is ignored)."""
    path = Path(path)
    scored: dict[str, dict[str, float]] = {}
    first_row: dict[str, int] = {}
    for row, (qid, _, doc, _rank, score, _tag) in _trec_lines(path, 6, "run"):
        value = _finite(score, "score", path, row)
        docs = scored.setdefault(qid, {})
        if doc in docs:
            raise InputError(f"doc {doc!r} appears twice for query {qid!r}", path, row)
        docs[doc] = value
        first_row.setdefault(qid, row)
    ranked = {
        qid: [d for d, _ in sorted(docs.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)]
        for qid, docs in scored.items()
    }
    _check_run_queries(list(first_row.items()), gold, path)
    return Run(ranked, str(path))


def sniff_format(gold_path: Path) -> str:
    """`strings` when the gold file's first JSON object has a `reference` key, else `chunk-ids`."""
    path = Path(gold_path)
    if path.suffix.lower() != ".csv":
        first = next((line for line in head(path).decode("utf-8", "replace").split("\n") if line.strip()), "")
        try:
            obj = json_loads(first)
        except json.JSONDecodeError:
            return "chunk-ids"
        if isinstance(obj, dict) and "reference" in obj:
            return "strings"
    return "chunk-ids"


def load_gold_and_run(gold_path: Path, run_path: Path, fmt: str = "auto") -> tuple[Qrels, Run]:
    """The gold set and the run file of `chunkeval evaluate-run`, in one of the GOLD_FORMATS."""
    if fmt not in GOLD_FORMATS:
        raise InputError(f"unknown format {fmt!r}; choose one of {', '.join(GOLD_FORMATS)}")
    if fmt == "auto":
        fmt = sniff_format(gold_path)
    if fmt == "trec":
        gold = load_trec_qrels(gold_path)
        return gold, load_trec_run(run_path, gold)
    if fmt == "strings":
        gold = load_string_gold(gold_path)
        return gold, load_string_run(run_path, gold)
    gold = load_chunk_gold(gold_path)
    return gold, load_chunk_run(run_path, gold)
