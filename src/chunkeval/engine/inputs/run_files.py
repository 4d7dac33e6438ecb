"""Chunk-level gold and run files for `evaluate-run`: id, string and TREC formats (docs/formats.md).

One ranked list per question and a gold set of relevant ids or strings, read and checked row by row.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from chunkeval.engine.inputs.readers import (
    json_value,
    nonempty,
    query_id_value,
    read_jsonl_rows,
    read_table_rows,
    read_text,
)
from chunkeval.errors import InputError
from chunkeval.limits import MAX_GRADE, MAX_SCORE, head, json_loads, short
from chunkeval.vocabulary import GOLD_FORMATS

log = logging.getLogger("chunkeval")

# --------------------------------------------------------------------------- id / string / TREC gold


@dataclass(frozen=True)
class Qrels:
    """Graded judgments per query: query_id → {item id → grade}; grade > 0 is relevant."""

    judgments: dict[str, dict[str, float]]
    texts: dict[str, str] = field(default_factory=dict)
    source: str = ""


@dataclass(frozen=True)
class RankedLists:
    """Ranked lists per query: query_id → [item id, best first]."""

    ranked: dict[str, list[str]]
    source: str = ""


def _grades(value, path: Path, row: int, column: str) -> dict[str, float]:
    value = json_value(value, path, row, column)
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
        qid = query_id_value(rec["query_id"], path, row)
        _add_query(judgments, qid, _grades(rec["relevant_chunk_ids"], path, row, "relevant_chunk_ids"), path, row)
        texts[qid] = str(rec["query"])
    return Qrels(judgments, texts, str(path))


def _ranked_list(value, path: Path, row: int, column: str) -> list[str]:
    value = json_value(value, path, row, column)
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


def load_chunk_run(path: Path, gold: Qrels) -> RankedLists:
    """CSV or JSONL rows `query_id, retrieved_chunk_ids` (a JSON list in rank order)."""
    path = Path(path)
    ranked, order = {}, []
    for row, rec in read_table_rows(path, ("query_id", "retrieved_chunk_ids")):
        qid = query_id_value(rec["query_id"], path, row)
        _add_query(ranked, qid, _ranked_list(rec["retrieved_chunk_ids"], path, row, "retrieved_chunk_ids"), path, row)
        order.append((qid, row))
    _check_run_queries(order, gold, path)
    return RankedLists(ranked, str(path))


def _text_list(value, path: Path, row: int, key: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError(f"{key} must be a JSON list of texts", path, row)
    return value


def load_string_gold(path: Path) -> Qrels:
    """JSONL `{"query_id", "reference": [texts]}`: a retrieved text is relevant when it equals one exactly."""
    path = Path(path)
    judgments, texts = {}, {}
    for row, rec in read_jsonl_rows(path, ("query_id", "reference")):
        qid = query_id_value(rec["query_id"], path, row)
        refs = _text_list(rec["reference"], path, row, "reference")
        _add_query(judgments, qid, {t: 1.0 for t in refs}, path, row)
        if "query" in rec:
            texts[qid] = str(rec["query"])
    return Qrels(judgments, texts, str(path))


def load_string_run(path: Path, gold: Qrels) -> RankedLists:
    """JSONL `{"query_id", "hypothesis": [texts]}` in rank order."""
    path = Path(path)
    ranked, order = {}, []
    for row, rec in read_jsonl_rows(path, ("query_id", "hypothesis")):
        qid = query_id_value(rec["query_id"], path, row)
        hyp = _text_list(rec["hypothesis"], path, row, "hypothesis")
        _add_query(ranked, qid, _ranked_list(hyp, path, row, "hypothesis"), path, row)
        order.append((qid, row))
    _check_run_queries(order, gold, path)
    return RankedLists(ranked, str(path))


def _trec_lines(path: Path, n_fields: int, what: str) -> Iterator[tuple[int, list[str]]]:
    text = nonempty(read_text(path), path)
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


def load_trec_run(path: Path, gold: Qrels) -> RankedLists:
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
    return RankedLists(ranked, str(path))


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


def load_gold_and_run(gold_path: Path, run_path: Path, fmt: str = "auto") -> tuple[Qrels, RankedLists]:
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
