"""What a configuration retrieved for every question, kept: one row per question and rank of the top k
(the largest k of the run; a smaller k reads its first ranks), with the chunk's corpus and `[start, end)`,
the score that ranked it (the retriever's: the cosine for dense, the BM25 score for bm25, the fused score
for hybrid; the reranker's for a reranked configuration; null for a plug-in, which gives ranks only) and
whether the chunk is relevant with its grade: under span gold, whether it overlaps a reference of the
question, as the metrics judge it (grade 1); under document gold, its document's grade in the qrels
(relevant above 0), as the chunk-level metrics judge it.

A chunk's id is `<corpus_id>:<start>-<end>` (`Chunks.ids`): it is not stored, since the three columns give it.
Where the run read PDF documents, `first_page` and `last_page` say which pages (from 1) a chunk spans (null for a
chunk of a document without pages). Under document gold the corpus id is the document's id, and
`qrels_table` keeps the qrels (with each question's text) beside the lists, since a run over documents has
no span references."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from chunkeval.engine.chunking import Chunks
from chunkeval.engine.inputs.document_gold import DocGold
from chunkeval.engine.inputs.duplicates import Copies
from chunkeval.engine.inputs.extract import page_span
from chunkeval.engine.inputs.span_gold import SpanGold
from chunkeval.engine.scoring import metrics as M
from chunkeval.engine.scoring.doc_metrics import Grades
from chunkeval.vocabulary import CHUNKING_KEYS

SCHEMA_COLUMNS = ("query_id", "rank", "corpus_id", "start", "end", "score", "relevant", "grade")


def retrieved_table(
    gold: SpanGold | DocGold,
    chunks: Chunks,
    topk: np.ndarray,
    per_query: pa.Table,
    copies: Copies | None = None,
    scores: np.ndarray | None = None,
    pages: dict[str, tuple[int, ...]] | None = None,
) -> pa.Table:
    """The retrieved lists of one configuration (`topk`: chunk indices per question, -1 padding; `scores`:
    the score of each, same shape, or None where the retriever gives ranks only), keyed by the
    configuration keys without k, whose values are those of its per-query rows. `pages`: where each page of
    a PDF document starts (document id → offsets), for the pages each chunk spans."""
    n_q, depth = topk.shape
    query = np.repeat(np.arange(n_q), depth)
    rank = np.tile(np.arange(1, depth + 1, dtype=np.int16), n_q)
    chunk = topk.reshape(-1)
    keep = chunk >= 0
    query, rank, chunk = query[keep], rank[keep], chunk[keep]
    if isinstance(gold, DocGold):  # a chunk is judged by its document's grade
        docs = np.where(topk >= 0, chunks.corpus[np.maximum(topk, 0)].astype(np.int64), -1)
        grade = Grades(gold, chunks.corpus_names).of(docs).reshape(-1)[keep].astype(np.float32)
        relevant = grade > 0
    else:
        judged = gold if copies is None else copies.gold_set(gold)  # under credit, every copy is relevant
        relevance = M.chunk_relevance(judged, M.reference_chars(judged, chunks.corpus_names), chunks)
        relevant = np.isin(query.astype(np.int64) * len(chunks) + chunk, relevance.keys)
        grade = relevant.astype(np.float32)  # span gold: a relevant chunk has grade 1
    score = None if scores is None else np.asarray(scores, dtype=np.float32).reshape(-1)[keep]
    n = len(chunk)
    names = pa.array(chunks.corpus_names, pa.string())
    columns = {
        key: pa.array([per_query[key][0].as_py()] * n, per_query.schema.field(key).type) for key in CHUNKING_KEYS
    }
    columns.update(
        {
            "query_id": pa.array(np.asarray(gold.query_ids, dtype=object)[query], pa.string()),
            "rank": pa.array(rank),
            "corpus_id": pa.DictionaryArray.from_arrays(pa.array(chunks.corpus[chunk].astype(np.int32)), names),
            "start": pa.array(chunks.start[chunk].astype(np.int64)),
            "end": pa.array(chunks.end[chunk].astype(np.int64)),
            "score": pa.array(score, pa.float32()) if score is not None else pa.nulls(n, pa.float32()),
            "relevant": pa.array(relevant),
            "grade": pa.array(grade),
        }
    )
    if pages:
        names = chunks.corpus_names
        spans = [
            page_span(pages[names[d]], s, e) if names[d] in pages else None
            for d, s, e in zip(chunks.corpus[chunk].tolist(), chunks.start[chunk].tolist(), chunks.end[chunk].tolist())
        ]
        columns["first_page"] = pa.array([p and p[0] for p in spans], pa.int32())
        columns["last_page"] = pa.array([p and p[1] for p in spans], pa.int32())
    return pa.table(columns)


def qrels_table(gold: DocGold) -> pa.Table:
    """The qrels of a run over document gold, one row per judged document of each question (grade ≤ 0
    included: judged, not relevant), with the question's text: what `chunkeval inspect` lists as a
    question's references under document gold."""
    rows = [
        (qid, text, doc, grade)
        for qid, text in zip(gold.query_ids, gold.questions)
        for doc, grade in gold.qrels[qid].items()
    ]
    query_id, question, doc_id, grade = zip(*rows) if rows else ((), (), (), ())
    return pa.table(
        {
            "query_id": pa.array(query_id, pa.string()),
            "question": pa.array(question, pa.string()),
            "doc_id": pa.array(doc_id, pa.string()),
            "grade": pa.array(grade, pa.float64()),
        }
    )


def kept_qrels(gold: SpanGold | DocGold) -> pa.Table | None:
    """Under document gold, the qrels a run keeps beside its retrieved lists (None under span gold)."""
    return qrels_table(gold) if isinstance(gold, DocGold) else None
