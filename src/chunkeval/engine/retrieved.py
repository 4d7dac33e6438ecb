"""What a configuration retrieved for every question, kept: one row per question and rank of the top k
(the largest k of the run; a smaller k reads its first ranks), with the chunk's corpus and `[start, end)`,
the retriever's score (the cosine for dense; null for retrievers that give ranks only) and whether the
chunk is relevant (overlaps a reference of the question, as the metrics judge it) with its grade.

A chunk's id is `<corpus_id>:<start>-<end>` (`Chunks.ids`): it is not stored, since the three columns give it.
Where the run read PDF documents, `first_page` and `last_page` say which pages (from 1) a chunk spans (null for a
chunk of a document without pages)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from chunkeval.engine import metrics as M
from chunkeval.engine.chunking import Chunks
from chunkeval.engine.duplicates import Copies
from chunkeval.engine.extract import page_span
from chunkeval.engine.inputs import SpanGold
from chunkeval.vocabulary import CHUNKING_KEYS

SCHEMA_COLUMNS = ("query_id", "rank", "corpus_id", "start", "end", "score", "relevant", "grade")


def retrieved_table(
    gold: SpanGold,
    chunks: Chunks,
    topk: np.ndarray,
    per_query: pa.Table,
    copies: Copies | None = None,
    query_vectors: np.ndarray | None = None,
    chunk_vectors: np.ndarray | None = None,
    pages: dict[str, tuple[int, ...]] | None = None,
) -> pa.Table:
    """The retrieved lists of one configuration (`topk`: chunk indices per question, -1 padding), keyed by
    the configuration keys without k, whose values are those of its per-query rows. With vectors (a dense
    retriever), the score is the cosine of the question and the chunk. `pages`: where each page of a PDF document
    starts (document id → offsets), for the pages each chunk spans."""
    n_q, depth = topk.shape
    query = np.repeat(np.arange(n_q), depth)
    rank = np.tile(np.arange(1, depth + 1, dtype=np.int16), n_q)
    chunk = topk.reshape(-1)
    keep = chunk >= 0
    query, rank, chunk = query[keep], rank[keep], chunk[keep]
    judged = gold if copies is None else copies.gold_set(gold)  # under credit, every copy is relevant
    relevance = M.chunk_relevance(judged, M.reference_chars(judged, chunks.corpus_names), chunks)
    relevant = np.isin(query.astype(np.int64) * len(chunks) + chunk, relevance.keys)
    score = None
    if query_vectors is not None and chunk_vectors is not None:
        score = np.einsum("ij,ij->i", query_vectors[query], chunk_vectors[chunk]).astype(np.float32)
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
            "grade": pa.array(relevant.astype(np.float32)),  # span gold: a relevant chunk has grade 1
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
