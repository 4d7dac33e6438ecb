"""Span gold: questions with the exact character spans that answer them (docs/formats.md).

Read and checked row by row (`chunkeval.engine.inputs.readers`); each reference is placed in the corpus
as it is now (`chunkeval.engine.inputs.anchoring`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from chunkeval.engine.inputs.anchoring import (
    ANCHOR_SIMILARITY,
    Relocator,
    _reference,
    place_reference,
    question_status,
)
from chunkeval.engine.inputs.readers import json_value, read_csv_rows
from chunkeval.errors import InputError
from chunkeval.limits import short
from chunkeval.vocabulary import close_names

log = logging.getLogger("chunkeval")

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
    corpus_id column names one. Questions of documents of the `known` ids (the folder's, where given) that are
    not in `corpora` are left out (that is how `--corpus` narrows a run). `corpus_of` gives each document's corpus
    where documents share one.

    A reference whose offsets no longer hold its content is placed again (`place_reference`): re-anchored where
    the content is found word for word, else placed approximately where the document holds text at least
    `similarity` similar. A question whose document is gone (a corpus_id among no `known` ids: deleted, renamed,
    split, merged; or left out as unreadable, `unreadable`: document → why) moves to the one other document that
    holds all its references word for word (`Relocator`; re-anchored, `moved_from` recorded). A question with a
    reference that cannot be placed is retired from the run (an error with `strict`, and where every question is
    retired). Nothing is logged here: `anchoring` records each question's status, and
    `chunkeval.engine.pipeline.sweep.load_inputs` says it once, in one line.
    """
    path = Path(questions_csv)
    query_ids, questions, documents, rq, rs, re_ = [], [], [], [], [], []
    anchoring, no_refs, seen = [], 0, {}
    relocator = Relocator(corpora)
    for row, rec in read_csv_rows(path, ("question", "references", "corpus_id")):
        cid = rec["corpus_id"].strip()
        qid = span_query_id(rec, row)
        if qid in seen:
            raise InputError(f"query_id {short(qid)} appears twice (rows {seen[qid]} and {row})", path, row)
        seen[qid] = row
        gone = None  # why the question's document is not there to place its references in
        if cid not in corpora:
            if unreadable and cid in unreadable:
                gone = f"corpus_id {cid!r} names an unreadable document ({unreadable[cid]})"
            elif known is not None and cid not in known:
                hint = close_names(cid, known)  # `lighthouse` for `lighthouses`: a typo, not a rename
                gone = f"corpus_id {cid!r} names no corpus file or document ({hint or 'deleted or renamed?'})"
            else:  # a document of a corpus the run leaves out (`--corpus`)
                continue
        question = rec["question"]
        if not question.strip():
            raise InputError("empty question", path, row)
        refs = json_value(rec["references"], path, row, "references")
        if not isinstance(refs, list):
            raise InputError("references must be a JSON list", path, row)
        checked = [
            _reference(ref, f"reference {j} of question {question[:60]!r}", path, row)
            for j, ref in enumerate(refs, start=1)
        ]
        record = {"query_id": qid, "row": row, "corpus_id": cid}
        if gone is not None:  # its references may have gone with their text into another document
            moved_to, why_not = relocator.relocate([content for content, _, _ in checked])
            if moved_to is None:
                reason = f"{gone}; {why_not}" if checked else gone
                placed = [
                    {"status": "retired", "start": start, "end": end, "similarity": 0.0, "reason": reason,
                     "was": [start, end]}
                    for _, start, end in checked
                ] or [{"status": "retired", "start": 0, "end": 0, "similarity": 0.0, "reason": reason, "was": [0, 0]}]  # fmt: skip
            else:
                if strict:  # a corpus_id that names no document is an error in the gold file, moved or not
                    raise InputError(
                        f"question {qid!r}: {gone}; its references are in document {moved_to!r} (strict: nothing "
                        "in the inputs may be set aside or moved)",
                        path,
                        row,
                    )
                record.update(corpus_id=moved_to, moved_from=cid, moved_why=gone)
                cid = moved_to
        if gone is None or "moved_from" in record:
            text = corpora[cid]
            placed = [
                {**place_reference(text, content, start, end, similarity, cid), "was": [start, end]}
                for content, start, end in checked
            ]
            if "moved_from" in record:  # its document changed: never `exact`, and said why
                for p in placed:
                    p.update(status="reanchored", reason=f"moved from document {record['moved_from']!r}: {gone}")
        status, lowest = question_status(placed)
        record.update(status=status, similarity=lowest)
        retired = [f"reference {j}: {p['reason']}" for j, p in enumerate(placed, start=1) if p["status"] == "retired"]
        if retired:
            record["reason"] = "; ".join(retired) if gone is None else placed[0]["reason"]
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
