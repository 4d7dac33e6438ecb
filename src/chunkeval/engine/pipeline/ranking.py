"""A configuration's ranked chunks: its retriever's top k over the pooled corpora or each question's own, through
an approximate index where it names one, deep enough for MaxP under document gold, and re-scored by a reranker;
with the score of each ranked chunk. The steps of `chunkeval.engine.pipeline.sweep` between embedding and scoring."""

from __future__ import annotations

import numpy as np

from chunkeval.engine.inputs.corpus import corpus_names
from chunkeval.engine.inputs.document_gold import DocGold
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.engine.pipeline.records import Chunking, Config, Embedded, Inputs
from chunkeval.engine.retrieval import rerank, retrievers
from chunkeval.engine.retrieval import vectors as compressed
from chunkeval.engine.retrieval.indexes import IndexSpec
from chunkeval.engine.retrieval.indexes import search as index_search
from chunkeval.engine.retrieval.rerank import is_cross_encoder
from chunkeval.engine.retrieval.ties import trec_order
from chunkeval.engine.scoring.doc_metrics import retrieval_depth, shallow_first
from chunkeval.paths import home
from chunkeval.vocabulary import NO_RERANKER, TIE_POLICIES, approximate_index


def reranks_with_vectors(config: Config) -> bool:
    return config.reranker != NO_RERANKER and not is_cross_encoder(config.reranker)


def retrieve(*args, **kwargs) -> np.ndarray:
    """Top-k chunk indices per question (-1 padding), over the pooled corpora or each question's own (the
    arguments of `retrieve_scored`)."""
    return retrieve_scored(*args, **kwargs)[0]


def retrieve_scored(
    inputs: Inputs,
    chunking: Chunking,
    config: Config,
    embedded: Embedded,
    k: int,
    own_corpus: bool = False,
    rrf_k: int = 60,
    rows: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Top-k chunk indices per question (-1 padding), over the pooled corpora or each question's own, and the
    retriever's score of each (`retrievers.retrieve_scored`; None for a plug-in); of the questions `rows` alone
    where given."""
    rows = np.arange(inputs.gold.n_queries) if rows is None else rows
    vectors, groups = embedded.queries.get(config.model), groups_of(inputs, chunking, own_corpus)
    request = retrievers.RetrievalRequest(
        query_texts=[inputs.gold.questions[i] for i in rows.tolist()],
        chunk_texts=chunking.texts(inputs.corpora),  # headed by the chunking's context
        k=k,
        query_vectors=None if vectors is None else vectors[rows],
        chunk_vectors=embedded.chunks.get((config.chunking, config.model)),
        search=_searcher(config.index) or compressed.searcher(compressed.spec_of(config.vectors, config.dims)),
    )
    if groups:
        groups["query_groups"] = groups["query_groups"][rows]
    return retrievers.retrieve_scored(config.retriever, request, rrf_k=rrf_k, **groups)


def _searcher(spec: IndexSpec | None):
    if spec is None or not spec.approximate:
        return None  # the exact top-k
    return lambda queries, chunks, depth: index_search(spec, queries, chunks, depth)


def groups_of(inputs: Inputs, chunking: Chunking, own_corpus: bool) -> dict:
    """With `own_corpus`, each question's corpus and each chunk's, as numbers (else nothing)."""
    if not own_corpus:
        return {}
    chunks = chunking.chunks
    names = corpus_names(inputs.corpus_of, chunks.corpus_names)  # `chunks.corpus_names` are document ids
    index = {name: i for i, name in enumerate(dict.fromkeys(names))}
    return {
        "query_groups": np.asarray([index.get(c, -1) for c in inputs.gold.query_corpora], dtype=np.int64),
        "chunk_groups": np.asarray([index[n] for n in names], dtype=np.int64)[chunks.corpus.astype(np.int64)],
    }


def retrieve_top(
    inputs: Inputs, chunkings: list[Chunking], config: Config, embedded: Embedded, exp: Experiment, scorers: dict | None
) -> tuple[np.ndarray, np.ndarray | None, tuple[int, ...]]:
    """A configuration's ranked chunks (deep enough for MaxP under document gold), their scores, and the k it is
    scored at; exact ties ordered by the experiment's tie policy."""
    chunking = chunkings[config.chunking]
    ks = compressed.scored_ks(config.vectors, exp.k)  # within a rescoring depth
    doc = isinstance(inputs.gold, DocGold)  # document gold: retrieval deep enough for MaxP to find k documents
    if config.reranker == NO_RERANKER:
        depth = retrieval_depth(max(exp.k), len(chunking.chunks)) if doc else max(exp.k)

        def search(rows: np.ndarray | None, d: int) -> tuple[np.ndarray, np.ndarray | None]:
            return retrieve_scored(inputs, chunking, config, embedded, d, exp.own_corpus, exp.rrf_k, rows)

        exact_dense = config.retriever == "dense" and not approximate_index(config.index_key)
        exact_dense = exact_dense and not compressed.spec_of(config.vectors, config.dims).compressed
        topk, scores = (
            shallow_first(search, max(exp.k), depth, chunking.chunks.corpus)
            if doc and exact_dense
            else search(None, depth)
        )
    else:  # the first stage's top candidates, re-scored; scored at the k the candidates cover
        ks = tuple(k for k in ks if k <= config.candidates)
        first = retrieve(inputs, chunking, config, embedded, config.candidates, exp.own_corpus, exp.rrf_k)
        keep = config.candidates if doc else max(ks)
        topk, scores = rerank_top(inputs, chunking, config, embedded, first, keep, scorers)
    if exp.ties == TIE_POLICIES[0]:  # exact ties by chunk id, descending (docs/metrics.md, "Ties")
        topk, scores = trec_order(topk, scores, lambda index: chunk_ids(chunking.chunks, index))
    return topk, scores, ks


def chunk_ids(chunks, index: np.ndarray) -> list[str]:
    """The ids (`<corpus_id>:<start>-<end>`, `Chunks.ids`) of the chunks `index`."""
    names = chunks.corpus_names
    parts = (chunks.corpus[index].tolist(), chunks.start[index].tolist(), chunks.end[index].tolist())
    return [f"{names[c]}:{s}-{e}" for c, s, e in zip(*parts)]


def rerank_top(
    inputs: Inputs,
    chunking: Chunking,
    config: Config,
    embedded: Embedded,
    first: np.ndarray,
    keep: int,
    scorers: dict | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The `keep` best of the first stage's candidates by the configuration's reranker, and its scores."""
    if reranks_with_vectors(config):
        vectors = embedded.chunks[(config.chunking, config.reranker)]
        scores = rerank.bi_encoder_scores(embedded.queries[config.reranker], vectors, first)
    else:
        scorers = {} if scorers is None else scorers
        if config.reranker not in scorers:
            scorers[config.reranker] = rerank.CrossEncoderScorer(config.reranker, home() / "cache" / "rerank")
        texts = chunking.texts(inputs.corpora)
        scores = scorers[config.reranker].scores(list(inputs.gold.questions), texts, first)
    return rerank.order(first, scores, keep)


def measured_vectors(inputs, chunkings, config, embedded, exp, table, ks, measured: dict):
    """A configuration's table with what its vectors setting loses against exact float search, and its costs
    (measured once per chunking, model and setting in `measured`)."""
    spec, chunking = compressed.vector_spec(config), chunkings[config.chunking]
    every = tuple(sorted(set(exp.k)))
    chunks = embedded.chunks[(config.chunking, config.model)]
    key = (config.chunking, config.model, config.vectors, config.dims)
    if key not in measured:
        groups = groups_of(inputs, chunking, exp.own_corpus)
        found = compressed.measure(
            spec, embedded.queries[config.model], chunks, every, group_names=chunking.chunks.corpus_names, **groups
        )
        measured[key] = found
    return compressed.with_found(table, measured[key], every, ks), compressed.stats(
        spec, measured[key], chunks.shape[1]
    )
