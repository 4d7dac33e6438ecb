"""Document-level gold: documents as the unit between corpus and chunk, queries, and qrels (docs/formats.md).

- A BEIR folder (`--beir DIR --split test`): `corpus.jsonl` (`_id`, `title`, `text`), `queries.jsonl` (`_id`,
  `text`) and `qrels/<split>.tsv` (`query-id`, `corpus-id`, `score`, a header row). It is one corpus, named
  by the folder.
- A corpus folder with `--queries` and `--qrels`: its documents (`chunkeval.engine.inputs.corpus`: files of any
  document format, subfolders, JSONL files). Qrels are BEIR's TSV (with its header) or TREC qrels
  (`qid 0 docid grade`).

A document's text is BEIR's `title + " " + text`, stripped; chunk offsets are into that text. Qrels rows
with a grade ≤ 0 are kept (they are judged, not relevant); queries without qrels are left out (as trec_eval
does); a qrels row naming an unknown query or document, or a document left out as unreadable, is left out and
counted, with one warning per kind.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from chunkeval.engine.inputs.anchoring import gold_summary
from chunkeval.engine.inputs.corpus import (
    Documents,
    document_files,
    file_hashes,
    load_documents,
    read_jsonl_documents,
)
from chunkeval.engine.inputs.readers import nonempty, query_id_value, read_jsonl_rows, read_text
from chunkeval.engine.inputs.run_files import Qrels, RankedLists, _finite, load_chunk_run
from chunkeval.engine.inputs.span_gold import SpanGold
from chunkeval.errors import InputError
from chunkeval.limits import short

log = logging.getLogger("chunkeval")

BEIR_FILES = ("corpus.jsonl", "queries.jsonl")
DOC_DEPTH = 1000  # how deep in a chunk ranking MaxP looks for k distinct documents


@dataclass(frozen=True)
class DocGold:
    """Queries judged against documents: `qrels[query_id][doc_id]` is a grade (> 0 relevant)."""

    query_ids: list[str]
    questions: list[str]
    corpus_ids: list[str]  # each query's corpus: that of its first judged document
    qrels: dict[str, dict[str, float]]
    source: str = ""
    dropped: int = 0  # qrels rows naming an unknown query or document
    unreadable: int = 0  # qrels rows naming a document that was left out, unreadable
    left_out: tuple = ()  # each of those rows: {"row", "query_id", "doc_id", "reason"} (the run's gold check)
    anchoring: tuple = ()  # per judged query: {query_id, row, corpus_id, status (exact or retired), similarity,
    # reason}: retired where every document its qrels judge is gone (as span gold's, `inputs.load_span_gold`)

    @property
    def query_corpora(self) -> list[str]:
        return self.corpus_ids

    @property
    def n_queries(self) -> int:
        return len(self.query_ids)

    def without_spans(self) -> SpanGold:
        """The queries as a span gold set of no references: what the checks and tables of references read."""
        none = np.zeros(0, np.int64)
        return SpanGold(self.query_ids, self.questions, self.corpus_ids, none, none, none, self.source)


def load_queries(path: Path) -> dict[str, str]:
    """Query id → text of a queries JSONL file (`_id`, `text`)."""
    path = Path(path)
    out: dict[str, str] = {}
    for row, obj in read_jsonl_rows(path, ("_id", "text")):
        qid = query_id_value(obj["_id"], path, row)
        if qid in out:
            raise InputError(f"query id {qid!r} appears twice", path, row)
        text = obj["text"]
        if isinstance(text, (int, float)) and not isinstance(text, bool) and math.isfinite(text):
            text = str(text)  # a query that is a number (`"text": 1984`) is that number's text
        if not isinstance(text, str):
            raise InputError(f"query text must be text, got {short(text)}", path, row)
        if not text.strip():
            raise InputError("empty query text", path, row)
        out[qid] = text
    return out


def read_qrels(path: Path) -> list[tuple[int, str, str, float]]:
    """(row, query id, doc id, grade) of BEIR's TSV qrels (header `query-id corpus-id score`) or TREC qrels."""
    path = Path(path)
    lines = nonempty(read_text(path), path).split("\n")
    first = lines[0].split("\t") if lines else []
    beir = [c.strip() for c in first] == ["query-id", "corpus-id", "score"]
    rows = []
    for row, line in enumerate(lines[1:] if beir else lines, start=1):
        if not line.strip():
            continue
        parts = line.split("\t") if beir else line.split()
        if beir and len(parts) != 3:
            raise InputError(f"a qrels line has 3 tab-separated fields, found {len(parts)}", path, row)
        if not beir and len(parts) != 4:
            raise InputError(
                f"qrels must be BEIR's TSV (header query-id, corpus-id, score) or TREC's `qid 0 docid grade`; "
                f"found {len(parts)} fields",
                path,
                row,
            )
        qid, doc, grade = (parts[0], parts[1], parts[2]) if beir else (parts[0], parts[2], parts[3])
        rows.append((row, qid.strip(), doc.strip(), _finite(grade.strip(), "grade", path, row)))
    if not rows:
        raise InputError("no qrels rows", path)
    return rows


def load_doc_gold(queries_path: Path, qrels_path: Path, docs: Documents, strict: bool = False) -> DocGold:
    """The judged queries, in the queries file's order; queries without qrels are left out."""
    queries = load_queries(queries_path)
    qrels: dict[str, dict[str, float]] = {}
    dropped = unreadable = 0
    left_out = []
    for row, qid, doc, grade in read_qrels(qrels_path):
        if qid in queries and doc in docs.skipped:
            unreadable += 1
            left_out.append({"row": row, "query_id": qid, "doc_id": doc, "reason": "unreadable document"})
            continue
        if qid not in queries or doc not in docs.texts:
            what = f"query {qid!r}" if qid not in queries else f"document {doc!r}"
            if strict:
                raise InputError(f"names an unknown {what}", qrels_path, row)
            dropped += 1
            left_out.append({"row": row, "query_id": qid, "doc_id": doc, "reason": f"unknown {what.split()[0]}"})
            continue
        judged = qrels.setdefault(qid, {})
        if doc in judged:
            raise InputError(f"query {qid!r} judges document {doc!r} twice", qrels_path, row)
        judged[doc] = grade
    qids = [q for q in queries if q in qrels]
    anchoring = _query_statuses(queries, qrels, left_out, docs)
    retired = [a for a in anchoring if a["status"] == "retired"]
    if retired and strict:  # an unknown document is an error above already: these name unreadable ones
        raise InputError(
            f"query {retired[0]['query_id']!r} retired: {retired[0]['reason']} "
            "(strict: nothing in the inputs may be set aside)",
            qrels_path,
            retired[0]["row"],
        )
    if not qids:
        if retired:
            raise InputError(
                f"every question is retired: every document the qrels of {len(retired)} query(ies) judge is gone "
                f"(row {retired[0]['row']}: {retired[0]['reason']})",
                qrels_path,
            )
        raise InputError("no query of the queries file has qrels", qrels_path)
    return DocGold(
        qids,
        [queries[q] for q in qids],
        [docs.corpus_of[next(iter(qrels[q]))] for q in qids],
        {q: qrels[q] for q in qids},
        str(qrels_path),
        dropped,
        unreadable,
        tuple(left_out),
        tuple(anchoring),
    )


def _query_statuses(queries: dict, qrels: dict, left_out: list[dict], docs: Documents) -> list[dict]:
    """Each judged query's status: `exact` where some document it judges is read, else `retired` (every one
    is unknown or unreadable: gone from the corpus), with the reason."""
    gone: dict[str, list[dict]] = {}
    for r in left_out:
        if r["query_id"] in queries and r["query_id"] not in qrels:
            gone.setdefault(r["query_id"], []).append(r)
    out = []
    for qid in queries:
        if qid in qrels:
            corpus = docs.corpus_of[next(iter(qrels[qid]))]
            out.append({"query_id": qid, "row": None, "corpus_id": corpus, "status": "exact", "similarity": 100.0})
        elif qid in gone:
            rows = gone[qid]
            why = ", ".join(f"{r['doc_id']!r} ({r['reason']})" for r in rows[:3]) + (" …" if len(rows) > 3 else "")
            reason = f"every document it judges is gone: {why}"
            out.append(
                {
                    "query_id": qid,
                    "row": rows[0]["row"],
                    "corpus_id": "",
                    "status": "retired",
                    "similarity": 0.0,
                    "reason": reason,
                }
            )
    return out


def warn_left_out(docs: Documents, gold, remedy: bool = True) -> None:
    """One warning line per document left out as unreadable, then the gold set's summary (`gold_summary`: how
    its questions met the corpus, what was retired or left out) in one line and a few examples. Said here, by
    the one caller that reads the inputs for the run, never by the readers: a check before the run reads
    them too, and would say it all a second time."""
    docs.warn()
    lines = gold_summary(gold, remedy=remedy)
    if lines:
        log.warning("\n".join(lines))


def beir_paths(folder: Path, split: str) -> tuple[Path, Path, Path]:
    """corpus.jsonl, queries.jsonl and qrels/<split>.tsv of a BEIR folder, each checked to exist."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError("BEIR folder not found", folder)
    paths = (folder / "corpus.jsonl", folder / "queries.jsonl", folder / "qrels" / f"{split}.tsv")
    for path in paths:
        if not path.is_file():
            raise InputError(f"a BEIR folder holds {path.relative_to(folder)}; it is missing", folder)
    return paths


def load_beir(folder: Path, split: str = "test", strict: bool = False) -> tuple[Documents, DocGold]:
    corpus, queries, qrels = beir_paths(folder, split)
    docs = Documents({}, {})
    read_jsonl_documents(corpus, Path(folder).resolve().name, docs, strict)
    if not docs.texts:
        raise InputError("no documents", corpus)
    return docs, load_doc_gold(queries, qrels, docs, strict)


def load_document_gold(
    beir: str, split: str, corpus_dir: str, queries: str, qrels: str, strict: bool = False, reader=None
) -> tuple[Documents, DocGold]:
    """The documents and the gold set of an experiment's document gold: a BEIR folder, or a corpus folder
    with a queries file and qrels (its files read by `reader`, a `chunkeval.engine.inputs.extract.DocumentReader`)."""
    if beir:
        return load_beir(Path(beir), split, strict)
    docs = load_documents(Path(corpus_dir), strict=strict, reader=reader)
    return docs, load_doc_gold(Path(queries), Path(qrels), docs, strict)


def _hash(paths: list[Path], html: str = "full") -> str:
    return hashlib.sha256(json.dumps(file_hashes(paths, html)).encode()).hexdigest()


def doc_gold_fingerprints(
    beir: str, split: str, corpus_dir: str, queries: str, qrels: str, html: str = "full"
) -> dict[str, str]:
    """SHA-256 of the documents' files, with the extractor of each HTML and PDF file (`corpus`), and of the
    queries and qrels files (`gold`)."""
    if beir:
        corpus, queries_path, qrels_path = beir_paths(Path(beir), split)
        return {"corpus": _hash([corpus]), "gold": _hash([queries_path, qrels_path])}
    folder = Path(corpus_dir)
    if not folder.is_dir():
        raise InputError("corpus folder not found", folder)
    files = [path for path, _, _ in document_files(folder)]
    for path in (Path(queries), Path(qrels)):
        if not path.is_file():
            raise InputError("file not found", path)
    return {"corpus": _hash(files, html), "gold": _hash([Path(queries), Path(qrels)])}


# --------------------------------------------------------------------------- evaluate-run: chunk runs, document qrels


def chunk_document(chunk_id: str) -> str | None:
    """The document of a chunk id `<doc_id>:<start>-<end>`, read from the right (a document id may hold `:`)."""
    head, sep, span = chunk_id.rpartition(":")
    start, dash, end = span.partition("-")
    return head if sep and head and dash and start.isdigit() and end.isdigit() else None


def load_doc_qrels_and_chunk_run(gold_path: Path, run_path: Path, k: int) -> tuple[Qrels, RankedLists]:
    """Document qrels (BEIR's TSV or TREC) and a run of chunk ids (`query_id, retrieved_chunk_ids`), the run's
    chunks turned into MaxP document lists: each document at the rank of its best chunk, the first k distinct
    documents of the first `DOC_DEPTH` chunks."""
    judgments: dict[str, dict[str, float]] = {}
    for row, qid, doc, grade in read_qrels(Path(gold_path)):
        judged = judgments.setdefault(qid, {})
        if doc in judged:
            raise InputError(f"query {qid!r} judges document {doc!r} twice", gold_path, row)
        judged[doc] = grade
    gold = Qrels(judgments, {}, str(gold_path))
    chunks = load_chunk_run(Path(run_path), gold)
    ranked = {}
    for qid, items in chunks.ranked.items():
        docs: dict[str, None] = {}
        for item in items[:DOC_DEPTH]:
            doc = chunk_document(item)
            if doc is None:
                raise InputError(f"query {qid!r}: {item!r} is not a chunk id <doc_id>:<start>-<end>", run_path)
            docs.setdefault(doc)
            if len(docs) == k:
                break
        ranked[qid] = list(docs)
    return gold, RankedLists(ranked, chunks.source)
