"""A sweep: every configuration of an experiment, scored at every k, from plain functions.

A configuration is (model, retriever, index, chunker, chunk_size, chunk_overlap, k). The steps are separate
so that a flow can run each as a task:
`load_inputs` → `chunk_one` (per chunking job: a setting, and for a semantic chunker a model) →
`embed_all` (one call per model) → `retrieve` (per configuration, once at the largest k) →
`chunkeval.engine.scoring`: `score_chunking` and `reference_table` → `summarize_sweep`.
Each distinct text (chunk, question or semantic piece) is embedded once per model across the grid;
a grid whose chunkers and retrievers need no vectors loads no model, and its rows carry model `none`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow as pa

from chunkeval.engine import retrievers
from chunkeval.engine.chunking import ChunkerSpec, Chunks, chunk_corpora, needs_embeddings
from chunkeval.engine.doc_metrics import retrieval_depth, score_documents, shallow_first
from chunkeval.engine.documents import DocGold, load_document_gold
from chunkeval.engine.duplicates import Copies, find_copies
from chunkeval.engine.embedders import Embedders, embed_shard, probe_models  # noqa: F401 (re-exported)
from chunkeval.engine.embedding import Embedder
from chunkeval.engine.experiment import Experiment
from chunkeval.engine.indexes import NO_INDEX, IndexSpec
from chunkeval.engine.indexes import search as index_search
from chunkeval.engine.indexes.measure import STATS as INDEX_STATS
from chunkeval.engine.indexes.measure import measure as measure_index
from chunkeval.engine.inputs import SpanGold, corpus_ids_in, load_corpora, load_span_gold
from chunkeval.engine.retrieved import retrieved_table
from chunkeval.engine.scoring import reference_table, score_chunking, summarize_sweep  # noqa: F401 (re-exported)
from chunkeval.progress import Stopwatch
from chunkeval.vocabulary import CHUNKING_KEYS, CONFIG_KEYS, NO_MODEL, NO_RERANKER, approximate_index  # noqa: F401 (re-exported)


@dataclass(frozen=True)
class Inputs:
    corpora: dict[str, str]  # corpus id → text; under document gold, document id → text
    gold: SpanGold | DocGold
    copies: Copies | None = None  # every copy of every reference, with `duplicates: credit`


@dataclass(frozen=True)
class Chunking:
    """The chunks of one setting; `model` is the model a semantic chunker embedded with (None for the others)."""

    spec: ChunkerSpec
    model: str | None
    chunks: Chunks


@dataclass(frozen=True)
class Config:
    """What one retrieval run covers: a chunking, the model of its rows, a retriever (every k at once), and
    the index its dense half searches (None for a retriever that reads no vectors: index `none`)."""

    chunking: int
    model: str
    retriever: str
    index: IndexSpec | None = None

    @property
    def index_key(self) -> str:
        return self.index.key if self.index is not None else NO_INDEX

    reranker: str = NO_RERANKER  # the first stage's top `candidates` re-scored by it (chunkeval.engine.rerank)
    candidates: int | None = None


@dataclass(frozen=True)
class Embedded:
    """Question vectors per model, and chunk vectors and truncated-chunk counts per (chunking, model)."""

    queries: dict[str, np.ndarray]
    chunks: dict[tuple[int, str], np.ndarray]
    truncated: dict[tuple[int, str], int]


@dataclass(frozen=True)
class SweepResult:
    per_query: pa.Table
    summary: pa.Table
    by_corpus: pa.Table
    references: pa.Table
    models: pa.Table
    texts_embedded: int
    model_loaded: bool
    notes: tuple[str, ...] = ()
    retrieved: pa.Table | None = None  # what every configuration retrieved (`chunkeval.engine.retrieved`)
    corpora: dict | None = None  # the texts the run read, by corpus id


def load_inputs(exp: Experiment) -> Inputs:
    if exp.doc_gold:
        docs, gold = load_document_gold(exp.beir, exp.split, exp.corpus_dir, exp.queries, exp.qrels, exp.strict)
        return Inputs(docs.texts, gold)
    corpora = load_corpora(Path(exp.corpus_dir), list(exp.corpus) or None)
    gold = load_span_gold(Path(exp.questions), corpora, corpus_ids_in(Path(exp.corpus_dir)))
    return Inputs(corpora, gold, find_copies(gold, corpora) if exp.duplicates == "credit" else None)


def chunking_jobs(exp: Experiment) -> list[tuple[ChunkerSpec, str | None]]:
    """Every chunking to make: each setting once, a semantic chunker's once per model."""
    return [
        (spec, model) for spec in exp.grid() for model in (exp.model if needs_embeddings(spec.chunker) else (None,))
    ]


def chunk_one(corpora: dict[str, str], spec: ChunkerSpec, model: str | None, embedders: Embedders) -> Chunking:
    embed = embedders.embed_function(model) if model is not None else None
    return Chunking(spec, model, chunk_corpora(corpora, spec, embed))


def plan(exp: Experiment, chunkings: list[Chunking]) -> list[Config]:
    """Every (chunking, model, retriever, index): a retriever that reads vectors runs once per model and
    index; one that does not runs once, under the model of its chunking (`none` for chunkings that embed
    nothing) and index `none`. The indexes of one chunking and model come one after the other (they share
    vectors, and settings that differ only at search time share one build)."""
    configs = []
    specs = exp.index_specs()
    for i, chunking in enumerate(chunkings):
        for retriever in exp.retriever:
            reads = retrievers.needs_embeddings(retriever)
            if chunking.model is not None:
                models = [chunking.model]
            else:
                models = list(exp.model) if reads else [NO_MODEL]
            for model in models:
                configs += (
                    [Config(i, model, retriever, spec) for spec in specs] if reads else [Config(i, model, retriever)]
                )
    return [replace(c, reranker=r, candidates=n) for c in configs for r, n in exp.rerank_grid()]


def _reranks_with_vectors(config: Config) -> bool:
    from chunkeval.engine.rerank import is_cross_encoder

    return config.reranker != NO_RERANKER and not is_cross_encoder(config.reranker)


def check_indexes_fit(
    inputs: Inputs, chunkings: list[Chunking], configs: list[Config], embedders: Embedders, own_corpus: bool
) -> None:
    """Before anything is embedded: every Chroma server answers, and every index's parameters fit the
    vectors it will hold (nlist at most their number, per corpus with `own_corpus`; pq_m dividing the
    model's width)."""
    from chunkeval.engine.indexes import reach
    from chunkeval.engine.indexes.faiss_kinds import check_fits

    for url in sorted({c.index.url for c in configs if c.index is not None and c.index.url}):
        reach(url)  # a Chroma URL that is not a server fails here, before anything is embedded
    for c in configs:
        if c.index is None or c.index.kind != "ivf":
            continue
        chunks = chunkings[c.chunking].chunks
        width = embedders[c.model].width() if c.index.get("pq_m") is not None else 0
        if not own_corpus:
            check_fits(c.index, len(chunks), width or c.index.get("pq_m") or 1)
            continue
        asked = set(inputs.gold.corpus_ids)
        counts = np.bincount(chunks.corpus.astype(np.int64), minlength=len(chunks.corpus_names))
        for name, n in zip(chunks.corpus_names, counts.tolist()):
            if name in asked:
                check_fits(c.index, n, width or c.index.get("pq_m") or 1, f"corpus {name}")


def _wanted(configs: list[Config]) -> dict[str, list[int]]:
    """model → the chunkings it embeds (those a vector-reading retriever runs on)."""
    wanted: dict[str, list[int]] = {}
    for c in configs:
        if retrievers.needs_embeddings(c.retriever) and c.chunking not in wanted.setdefault(c.model, []):
            wanted[c.model].append(c.chunking)
        if _reranks_with_vectors(c) and c.chunking not in wanted.setdefault(c.reranker, []):
            wanted[c.reranker].append(c.chunking)  # a bi-encoder reranker reads its own vectors
    return {model: indices for model, indices in wanted.items() if indices}


def embedding_shards(
    inputs: Inputs, chunkings: list[Chunking], configs: list[Config], embedders: Embedders, parts: int
) -> list[tuple[str, str, list[str]]]:
    """What `embed_all` would embed that the cache lacks, as (model, kind, texts) shards: each model's
    missing questions and chunks split into `parts` shards of about equal size, for separate processes
    (Dask workers) to embed into the shared cache (`embed_shard`), each writing its own part files."""
    shards = []
    for model, indices in _wanted(configs).items():
        chunk_texts = [t for i in indices for t in chunkings[i].chunks.texts(inputs.corpora)]
        for kind, texts in (("query", list(inputs.gold.questions)), ("document", chunk_texts)):
            missing = embedders[model].missing(texts, kind)
            n = max(1, min(parts, len(missing)))
            shards += [(model, kind, missing[i::n]) for i in range(n) if missing[i::n]]
    return shards


def embed_all(inputs: Inputs, chunkings: list[Chunking], configs: list[Config], embedders: Embedders) -> Embedded:
    """Per model, one embedding call for the questions and one for the chunks of every chunking it
    retrieves from: repeated texts are embedded once."""
    queries, chunks, truncated = {}, {}, {}
    for model, indices in _wanted(configs).items():
        embedder = embedders[model]
        queries[model] = embedder.embed(list(inputs.gold.questions), kind="query")[0]
        texts, bounds = [], [0]
        for i in indices:
            texts += chunkings[i].chunks.texts(inputs.corpora)
            bounds.append(len(texts))
        vectors, cut = embedder.embed(texts)
        for i, a, b in zip(indices, bounds, bounds[1:]):
            chunks[(i, model)] = vectors[a:b]
            truncated[(i, model)] = int(cut[a:b].sum())
    return Embedded(queries, chunks, truncated)


def retrieve(
    inputs: Inputs,
    chunking: Chunking,
    config: Config,
    embedded: Embedded,
    k: int,
    own_corpus: bool = False,
    rrf_k: int = 60,
    rows: np.ndarray | None = None,
) -> np.ndarray:
    """Top-k chunk indices per question (-1 padding), over the pooled corpora or each question's own; of the
    questions `rows` alone where given."""
    chunks = chunking.chunks
    rows = np.arange(inputs.gold.n_queries) if rows is None else rows
    vectors, groups = embedded.queries.get(config.model), groups_of(inputs, chunking, own_corpus)
    request = retrievers.RetrievalRequest(
        query_texts=[inputs.gold.questions[i] for i in rows.tolist()],
        chunk_texts=chunks.texts(inputs.corpora),
        k=k,
        query_vectors=None if vectors is None else vectors[rows],
        chunk_vectors=embedded.chunks.get((config.chunking, config.model)),
        search=_searcher(config.index),
    )
    if groups:
        groups["query_groups"] = groups["query_groups"][rows]
    return retrievers.retrieve(config.retriever, request, rrf_k=rrf_k, **groups)


def _searcher(spec: IndexSpec | None):
    if spec is None or not spec.approximate:
        return None  # the exact top-k
    return lambda queries, chunks, depth: index_search(spec, queries, chunks, depth)


def groups_of(inputs: Inputs, chunking: Chunking, own_corpus: bool) -> dict:
    """With `own_corpus`, each question's corpus and each chunk's, as numbers (else nothing)."""
    if not own_corpus:
        return {}
    chunks = chunking.chunks
    index = {name: i for i, name in enumerate(chunks.corpus_names)}
    return {
        "query_groups": np.asarray([index.get(c, -1) for c in inputs.gold.corpus_ids], dtype=np.int64),
        "chunk_groups": chunks.corpus.astype(np.int64),
    }


def first_stage(config: Config) -> Config:
    """The configuration without its reranking: what chunk and index statistics are kept by."""
    return replace(config, reranker=NO_RERANKER, candidates=None)


def chunk_stats(
    chunkings: list[Chunking], configs: list[Config], embedded: Embedded, index_stats: dict | None = None
) -> pa.Table:
    """Per first-stage configuration (without k or reranking): chunks made, chunks longer than the model's
    input, and what its index cost (`index_stats`, from `score_all`; null for rows that search no index)."""
    configs = list(dict.fromkeys(first_stage(c) for c in configs))
    specs = [chunkings[c.chunking].spec for c in configs]
    columns = {
        "model": pa.array([c.model for c in configs], pa.string()),
        "retriever": pa.array([c.retriever for c in configs], pa.string()),
        "index": pa.array([c.index_key for c in configs], pa.string()),
        "chunker": [s.chunker for s in specs],
        "chunk_size": [s.chunk_size for s in specs],
        "chunk_overlap": [s.chunk_overlap for s in specs],
        "n_chunks": [len(chunkings[c.chunking].chunks) for c in configs],
        "truncated_chunks": [embedded.truncated.get((c.chunking, c.model), 0) for c in configs],
    }
    for name in INDEX_STATS:
        kind = pa.int64() if name == "index_bytes" else pa.float64()
        columns[name] = pa.array([(index_stats or {}).get(c, {}).get(name) for c in configs], kind)
    return pa.table(columns)


def score_config(
    inputs: Inputs,
    chunkings: list[Chunking],
    config: Config,
    embedded: Embedded,
    exp: Experiment,
    scorers: dict | None = None,
    measured: dict | None = None,
    kept: list | None = None,
    clock: Stopwatch | None = None,
) -> tuple[pa.Table, dict]:
    """Retrieve once at the largest k, score at every k: one configuration's per-query table (with its
    `index` and `ann_recall_at_k`), and what its index cost (`chunkeval.engine.indexes.measure`, measured
    once per chunking, model and index in `measured`: dense, hybrid and reranked rows share it). With
    `kept`, its retrieved lists (`chunkeval.engine.retrieved`) are appended to it. With `clock`, the seconds
    of its retrieval (reranking and the index's measures included) and of its scoring are added to it."""
    clock = clock or Stopwatch()
    with clock.stage("retrieval"):
        topk, ks = _retrieve_top(inputs, chunkings, config, embedded, exp, scorers)
    with clock.stage("scoring"):
        table = _score_top(inputs, chunkings, config, embedded, exp, topk, ks, kept)
    if config.index is None:
        nothing = pa.nulls(table.num_rows, pa.float64())
        for name in ("ann_recall_at_k", "ann_found", "ann_depth"):
            table = table.append_column(name, nothing)
        return table, {}
    with clock.stage("retrieval"):  # the index's measures
        chunking = chunkings[config.chunking]
        every = tuple(sorted(set(exp.k)))
        key = (config.chunking, config.model, config.index)
        measured = {} if measured is None else measured
        if key not in measured:
            measured[key] = measure_index(
                config.index,
                embedded.queries[config.model],
                embedded.chunks[(config.chunking, config.model)],
                every,
                group_names=chunking.chunks.corpus_names,
                **groups_of(inputs, chunking, exp.own_corpus),
            )
        found = measured[key]
        rows = [every.index(k) for k in sorted(set(ks))]  # the k of this configuration, in its table's order
        table = table.append_column("ann_recall_at_k", pa.array(np.concatenate([found.recall(i) for i in rows])))
        table = table.append_column("ann_found", pa.array(found.found[rows].reshape(-1)))
        table = table.append_column("ann_depth", pa.array(found.depth[rows].reshape(-1)))
        return table, found.stats()


def _retrieve_top(
    inputs: Inputs, chunkings: list[Chunking], config: Config, embedded: Embedded, exp: Experiment, scorers: dict | None
) -> tuple[np.ndarray, tuple[int, ...]]:
    """A configuration's ranked chunks (deep enough for MaxP under document gold), and the k it is scored at."""
    chunking = chunkings[config.chunking]
    ks = exp.k
    doc = isinstance(inputs.gold, DocGold)  # document gold: retrieval deep enough for MaxP to find k documents
    if config.reranker == NO_RERANKER:
        depth = retrieval_depth(max(exp.k), len(chunking.chunks)) if doc else max(exp.k)

        def search(rows: np.ndarray | None, d: int) -> np.ndarray:
            return retrieve(inputs, chunking, config, embedded, d, exp.own_corpus, exp.rrf_k, rows)

        exact_dense = config.retriever == "dense" and not approximate_index(config.index_key)
        topk = (
            shallow_first(search, max(exp.k), depth, chunking.chunks.corpus)
            if doc and exact_dense
            else search(None, depth)
        )
    else:  # the first stage's top candidates, re-scored; scored at the k the candidates cover
        ks = tuple(k for k in exp.k if k <= config.candidates)
        first = retrieve(inputs, chunking, config, embedded, config.candidates, exp.own_corpus, exp.rrf_k)
        topk = rerank_top(inputs, chunking, config, embedded, first, config.candidates if doc else max(ks), scorers)
    return topk, ks


def _score_top(
    inputs: Inputs,
    chunkings: list[Chunking],
    config: Config,
    embedded: Embedded,
    exp: Experiment,
    topk: np.ndarray,
    ks: tuple[int, ...],
    kept: list | None,
) -> pa.Table:
    """A configuration's per-query table at every k (with its retrieved lists appended to `kept`)."""
    chunking = chunkings[config.chunking]
    doc = isinstance(inputs.gold, DocGold)
    if doc:
        keys = {"index": config.index_key, "reranker": config.reranker, "candidates": config.candidates}
        table, _ = score_documents(
            inputs.gold, chunking.spec, chunking.chunks, topk, ks, config.model, config.retriever, **keys
        )
    else:
        table = score_chunking(
            inputs.gold,
            chunking.spec,
            chunking.chunks,
            topk,
            ks,
            config.model,
            config.retriever,
            inputs.copies,
            config.reranker,
            config.candidates,
            config.index_key,
            exp.relevance,
        )
    if kept is not None and not doc:  # retrieved lists are kept for span gold (document gold: its run files)
        dense = config.retriever == "dense"  # its score is the cosine; the others give ranks only
        vectors = (embedded.queries.get(config.model), embedded.chunks.get((config.chunking, config.model)))
        kept.append(
            retrieved_table(inputs.gold, chunking.chunks, topk, table, inputs.copies, *(vectors if dense else ()))
        )
    return table


def rerank_top(
    inputs: Inputs,
    chunking: Chunking,
    config: Config,
    embedded: Embedded,
    first: np.ndarray,
    keep: int,
    scorers: dict | None = None,
) -> np.ndarray:
    """The `keep` best of the first stage's candidates by the configuration's reranker."""
    from chunkeval.engine import rerank

    if _reranks_with_vectors(config):
        vectors = embedded.chunks[(config.chunking, config.reranker)]
        scores = rerank.bi_encoder_scores(embedded.queries[config.reranker], vectors, first)
    else:
        scorers = {} if scorers is None else scorers
        if config.reranker not in scorers:
            from chunkeval.paths import home

            scorers[config.reranker] = rerank.CrossEncoderScorer(config.reranker, home() / "cache" / "rerank")
        texts = chunking.chunks.texts(inputs.corpora)
        scores = scorers[config.reranker].scores(list(inputs.gold.questions), texts, first)
    return rerank.order(first, scores, keep)


def score_all(
    inputs: Inputs,
    chunkings: list[Chunking],
    configs: list[Config],
    embedded: Embedded,
    exp: Experiment,
    kept: list | None = None,
    clock: Stopwatch | None = None,
) -> tuple[pa.Table, dict]:
    """Every configuration's per-query table, one after the other (each is a few vectorised steps), and per
    first-stage configuration what its index cost; with `kept`, what each retrieved; with `clock`, the
    seconds of retrieval and of scoring."""
    scorers: dict = {}  # CrossEncoder rerankers, loaded once for the grid
    measured: dict = {}  # index measures, once per chunking, model and index
    stats: dict = {}
    tables = []
    for c in configs:
        table, cost = score_config(inputs, chunkings, c, embedded, exp, scorers, measured, kept, clock)
        tables.append(table)
        stats.setdefault(first_stage(c), cost)
    return pa.concat_tables(tables), stats


def reference_tables(inputs: Inputs, chunkings: list[Chunking]) -> pa.Table:
    gold = inputs.gold.without_spans() if isinstance(inputs.gold, DocGold) else inputs.gold  # columns, no rows
    return pa.concat_tables([reference_table(gold, inputs.corpora, c.spec, c.chunks, c.model) for c in chunkings])


def run_sweep(exp: Experiment, embedders: Embedders | Embedder) -> SweepResult:
    """The whole sweep of an experiment in one process (the flow runs the same steps as tasks)."""
    embedders = Embedders.of(embedders).for_experiment(exp)
    changed = probe_models(exp)
    inputs = load_inputs(exp)
    chunkings = [chunk_one(inputs.corpora, spec, model, embedders) for spec, model in chunking_jobs(exp)]
    configs = plan(exp, chunkings)
    check_indexes_fit(inputs, chunkings, configs, embedders, exp.own_corpus)
    embedded = embed_all(inputs, chunkings, configs, embedders)
    kept = []
    per_query, index_stats = score_all(inputs, chunkings, configs, embedded, exp, kept)
    summary, by_corpus = summarize_sweep(
        per_query, chunk_stats(chunkings, configs, embedded, index_stats), exp.skip_empty_gold
    )
    references = reference_tables(inputs, chunkings)
    return SweepResult(
        per_query,
        summary,
        by_corpus,
        references,
        embedders.table(),
        embedders.texts_embedded,
        embedders.model_loaded,
        tuple(exp.notes() + changed),
        pa.concat_tables(kept) if kept else None,
        dict(inputs.corpora),
    )
