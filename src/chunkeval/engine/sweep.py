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

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from chunkeval.engine import retrievers
from chunkeval.engine.chunking import ChunkerSpec, Chunks, chunk_corpora, needs_embeddings
from chunkeval.engine.doc_metrics import retrieval_depth, score_documents
from chunkeval.engine.documents import DocGold, load_document_gold
from chunkeval.engine.duplicates import Copies, find_copies
from chunkeval.engine.embedding import Embedder
from chunkeval.engine.experiment import Experiment
from chunkeval.engine.indexes import NO_INDEX, IndexSpec
from chunkeval.engine.indexes import search as index_search
from chunkeval.engine.indexes.measure import STATS as INDEX_STATS
from chunkeval.engine.indexes.measure import measure as measure_index
from chunkeval.engine.inputs import SpanGold, corpus_ids_in, load_corpora, load_span_gold
from chunkeval.engine.scoring import reference_table, score_chunking, summarize_sweep  # noqa: F401 (re-exported)
from chunkeval.vocabulary import CHUNKING_KEYS, CONFIG_KEYS, NO_MODEL  # noqa: F401 (re-exported)


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


class Embedders:
    """One `Embedder` per model, made when first asked for: a grid that needs no vectors makes none.
    Every model runs on one backend in one precision (`for_experiment` picks the experiment's)."""

    def __init__(
        self,
        cache_dir: Path | None = None,
        batch_size: int | None = 32,
        given: tuple[Embedder, ...] = (),
        device: str | None = None,
        backend: str = "torch",
        quantize: str = "none",
        precision: str = "fp32",
    ):
        self.cache_dir = cache_dir
        self.batch_size = batch_size
        self.device = device
        self.backend, self.quantize, self.precision = backend, quantize, precision
        self._by_model = {e.model: e for e in given if e.runs() == (backend, quantize, precision)}

    @classmethod
    def of(cls, embedders: Embedders | Embedder) -> Embedders:
        if isinstance(embedders, Embedders):
            return embedders
        return cls(
            embedders.cache_dir,
            embedders.batch_size,
            (embedders,),
            embedders.device,
            embedders.backend,
            embedders.quantize,
            embedders.precision,
        )

    def for_experiment(self, exp: Experiment) -> Embedders:
        """These embedders where they run the experiment's backend and precision, else new ones that do
        (same cache and device)."""
        if (self.backend, self.quantize, self.precision) == (exp.backend, exp.quantize, exp.precision):
            return self
        return Embedders(
            self.cache_dir,
            self.batch_size,
            tuple(self._by_model.values()),
            self.device,
            exp.backend,
            exp.quantize,
            exp.precision,
        )

    def __getitem__(self, model: str) -> Embedder:
        if model not in self._by_model:
            self._by_model[model] = Embedder(
                model, self.cache_dir, self.batch_size, self.device, self.backend, self.quantize, self.precision
            )
        return self._by_model[model]

    def count(self, model: str, counters: tuple[int, int, float]) -> None:
        """Add what another process embedded for `model` (a Dask worker's shard or chunking) to its counters."""
        embedder = self[model]
        embedder.texts_embedded += counters[0]
        embedder.texts_shared += counters[1]
        embedder.embed_seconds += counters[2]

    def counters(self) -> dict[str, tuple[int, int, float]]:
        return {model: e.counters() for model, e in self._by_model.items()}

    def embed_function(self, model: str):
        """`texts -> vectors` of one model, through its cache: what a semantic chunker is given."""
        return lambda texts: self[model].embed(list(texts))[0]

    @property
    def texts_embedded(self) -> int:
        return sum(e.texts_embedded for e in self._by_model.values())

    @property
    def model_loaded(self) -> bool:
        return any(e.model_loaded for e in self._by_model.values())

    def table(self) -> pa.Table:
        """Per model used: its fingerprint, texts embedded, of those the texts whose model input (after
        truncation) equalled an earlier text's and so shared its vector, seconds spent and throughput."""
        used = list(self._by_model.values())
        return pa.table(
            {
                "model": pa.array([e.model for e in used], pa.string()),
                "model_fingerprint": pa.array([e.fingerprint for e in used], pa.string()),
                "backend": pa.array([e.backend for e in used], pa.string()),
                "quantize": pa.array([e.quantize for e in used], pa.string()),
                "precision": pa.array([e.precision for e in used], pa.string()),
                "texts_embedded": pa.array([e.texts_embedded for e in used], pa.int64()),
                "texts_shared": pa.array([e.texts_shared for e in used], pa.int64()),
                "embed_seconds": pa.array([e.embed_seconds for e in used], pa.float64()),
                "texts_per_second": pa.array([e.texts_per_second for e in used], pa.float64()),
            }
        )


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
    return configs


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


def embed_shard(
    model: str,
    kind: str,
    texts: list[str],
    cache_dir: Path,
    batch_size: int | None,
    device: str | None,
    backend: str,
    quantize: str,
    precision: str = "fp32",
) -> dict:
    """Embed one shard into the cache at `cache_dir` (this process loads the model) and return its
    counters for `Embedders.count`."""
    embedder = Embedder(model, cache_dir, batch_size, device, backend, quantize, precision)
    embedder.embed(texts, kind)
    return {"model": model, "counters": embedder.counters()}


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
) -> np.ndarray:
    """Top-k chunk indices per question (-1 padding), over the pooled corpora or each question's own."""
    chunks = chunking.chunks
    key = (config.chunking, config.model)
    request = retrievers.RetrievalRequest(
        query_texts=list(inputs.gold.questions),
        chunk_texts=chunks.texts(inputs.corpora),
        k=k,
        query_vectors=embedded.queries.get(config.model),
        chunk_vectors=embedded.chunks.get(key),
        search=_searcher(config.index),
    )
    return retrievers.retrieve(config.retriever, request, rrf_k=rrf_k, **groups_of(inputs, chunking, own_corpus))


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


def chunk_stats(
    chunkings: list[Chunking], configs: list[Config], embedded: Embedded, index_stats: pa.Table | None = None
) -> pa.Table:
    """Per configuration (without k): chunks made, chunks longer than the model's input, and what its index
    cost (`index_stats`, from `score_all`; null for rows that search no index)."""
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
    stats = index_stats.to_pylist() if index_stats is not None else [{}] * len(configs)
    for name in INDEX_STATS:
        kind = pa.int64() if name == "index_bytes" else pa.float64()
        columns[name] = pa.array([row.get(name) for row in stats], kind)
    return pa.table(columns)


def score_config(
    inputs: Inputs, chunkings: list[Chunking], config: Config, embedded: Embedded, exp: Experiment
) -> tuple[pa.Table, dict]:
    """Retrieve once at the largest k, score at every k: one configuration's per-query table (with its
    `index` and `ann_recall_at_k`), and what its index cost (`chunkeval.engine.indexes.measure`)."""
    chunking = chunkings[config.chunking]
    if isinstance(inputs.gold, DocGold):  # deep enough for MaxP to find k documents
        depth = retrieval_depth(max(exp.k), len(chunking.chunks))
        topk = retrieve(inputs, chunking, config, embedded, depth, exp.own_corpus, exp.rrf_k)
        table, _ = score_documents(
            inputs.gold, chunking.spec, chunking.chunks, topk, exp.k, config.model, config.retriever
        )
    else:
        topk = retrieve(inputs, chunking, config, embedded, max(exp.k), exp.own_corpus, exp.rrf_k)
        table = score_chunking(
            inputs.gold, chunking.spec, chunking.chunks, topk, exp.k, config.model, config.retriever, inputs.copies,
            exp.relevance,
        )  # fmt: skip
    ks = sorted(set(exp.k))
    table = table.add_column(2, "index", pa.array([config.index_key] * table.num_rows, pa.string()))
    if config.index is None:
        nothing = pa.nulls(table.num_rows, pa.float64())
        for name in ("ann_recall_at_k", "ann_found", "ann_depth"):
            table = table.append_column(name, nothing)
        return table, {}
    groups = groups_of(inputs, chunking, exp.own_corpus)
    found = measure_index(
        config.index,
        embedded.queries[config.model],
        embedded.chunks[(config.chunking, config.model)],
        tuple(ks),
        group_names=chunking.chunks.corpus_names,
        **groups,
    )
    table = table.append_column("ann_recall_at_k", pa.array(np.concatenate([found.recall(i) for i in range(len(ks))])))
    table = table.append_column("ann_found", pa.array(found.found.reshape(-1)))
    table = table.append_column("ann_depth", pa.array(found.depth.reshape(-1)))
    return table, found.stats()


def score_all(
    inputs: Inputs, chunkings: list[Chunking], configs: list[Config], embedded: Embedded, exp: Experiment
) -> tuple[pa.Table, pa.Table]:
    """Every configuration's per-query table, one after the other (each is a few vectorised steps), and
    per configuration what its index cost (one row per configuration, in `configs`' order)."""
    scored = [score_config(inputs, chunkings, c, embedded, exp) for c in configs]
    stats = pa.Table.from_pylist([s for _, s in scored], schema=_stats_schema())
    return pa.concat_tables([t for t, _ in scored]), stats


def _stats_schema() -> pa.Schema:
    return pa.schema({name: pa.int64() if name == "index_bytes" else pa.float64() for name in INDEX_STATS})


def reference_tables(inputs: Inputs, chunkings: list[Chunking]) -> pa.Table:
    gold = inputs.gold.without_spans() if isinstance(inputs.gold, DocGold) else inputs.gold  # columns, no rows
    return pa.concat_tables([reference_table(gold, inputs.corpora, c.spec, c.chunks, c.model) for c in chunkings])


def run_sweep(exp: Experiment, embedders: Embedders | Embedder) -> SweepResult:
    """The whole sweep of an experiment in one process (the flow runs the same steps as tasks)."""
    embedders = Embedders.of(embedders).for_experiment(exp)
    inputs = load_inputs(exp)
    chunkings = [chunk_one(inputs.corpora, spec, model, embedders) for spec, model in chunking_jobs(exp)]
    configs = plan(exp, chunkings)
    check_indexes_fit(inputs, chunkings, configs, embedders, exp.own_corpus)
    embedded = embed_all(inputs, chunkings, configs, embedders)
    per_query, index_stats = score_all(inputs, chunkings, configs, embedded, exp)
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
        tuple(exp.notes()),
    )
