"""The plain data a sweep's steps hand on (`chunkeval.engine.pipeline.sweep`): its inputs, each chunking, each
configuration, the vectors, the run's state that holds them all (`RunState`), and the state's result (`chunkeval.run_result.RunResult`).
Below both the sweep and `chunkeval.engine.pipeline.ranking`."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from chunkeval.engine.chunking import ChunkerSpec, Chunks
from chunkeval.engine.embedding.embedders import Embedders
from chunkeval.engine.inputs.document_gold import DocGold
from chunkeval.engine.inputs.duplicates import Copies
from chunkeval.engine.inputs.headings import with_headers
from chunkeval.engine.inputs.span_gold import SpanGold
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.engine.retrieval.indexes import NO_INDEX, IndexSpec
from chunkeval.progress import Stopwatch
from chunkeval.vocabulary import CONFIG_KEYS, NO_CONTEXT, NO_EXPAND, NO_LATE, NO_RERANKER, VECTOR_KEYS


@dataclass(frozen=True)
class Inputs:
    corpora: dict[str, str]  # document id → text (a corpus file is a corpus of one document, named like it)
    gold: SpanGold | DocGold
    copies: Copies | None = None  # every copy of every reference, with `duplicates: credit`
    corpus_of: dict[str, str] | None = None  # document id → its corpus, where documents share corpora
    skipped: tuple = ()  # the documents left out as unreadable (`chunkeval.engine.inputs.corpus.Skipped`)
    pages: dict | None = None  # document id → where each of its pages starts (PDF documents)
    slices: pa.Table | None = None  # query_id, slice_column, slice_value (`slice_by`: chunkeval.engine.inputs.slices)
    outlines: dict | None = None  # document id → its title and headings (`chunkeval.engine.inputs.headings`)


@dataclass(frozen=True)
class Chunking:
    """The chunks of one setting; `model` is the model a semantic chunker embedded with (None for the others)."""

    spec: ChunkerSpec
    model: str | None
    chunks: Chunks
    context: str = NO_CONTEXT  # the header before each chunk's text (`chunkeval.engine.inputs.headings`)
    headers: np.ndarray | None = None  # each chunk's header ("" for none); None under context `none`
    late: str = (
        NO_LATE  # how its chunks are embedded: alone, or read in their document (`chunkeval.engine.embedding.late`)
    )

    def texts(self, corpora: dict[str, str]) -> list[str]:
        """The text a retriever reads of each chunk: its header, an empty line, and the chunk's own text."""
        texts = self.chunks.texts(corpora)
        return texts if self.headers is None else with_headers(texts, self.headers)


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

    reranker: str = (
        NO_RERANKER  # the first stage's top `candidates` re-scored by it (chunkeval.engine.retrieval.rerank)
    )
    candidates: int | None = None
    vectors: str = VECTOR_KEYS[
        "vectors"
    ]  # how the dense half stores and searches vectors (chunkeval.engine.retrieval.vectors)
    dims: str = VECTOR_KEYS["dims"]
    expand: str = NO_EXPAND  # what is returned around each chunk (chunkeval.engine.scoring.expansion)

    def values(self, chunking: Chunking) -> dict:
        """Its configuration keys but k (`vocabulary.AXES`), each read where it is set: on this configuration,
        its chunker's spec (chunker, chunk_size, chunk_overlap) or its chunking (context)."""
        out = {}
        for key in CONFIG_KEYS[:-1]:
            source = next(s for s in (self, chunking.spec, chunking) if hasattr(s, key))
            out[key] = self.index_key if key == "index" else getattr(source, key)
        return out


@dataclass(frozen=True)
class Embedded:
    """Question vectors per model, and chunk vectors and truncated-chunk counts per (chunking, model)."""

    queries: dict[str, np.ndarray]
    chunks: dict[tuple[int, str], np.ndarray]
    truncated: dict[tuple[int, str], int]


@dataclass
class RunState:
    """One run's state as the steps of `chunkeval.engine.pipeline.sweep.STEPS` fill it in, in order: the experiment
    (validated) and its embedders; `load` adds the inputs, `chunk` the chunkings and configurations, `embed` the
    vectors, `score` the per-query table, `summarise` the summaries and references, `check_gold` the gold
    check. `fingerprints` are set by whoever records the run; `notes` gathers the lines a run says;
    `clock` each stage's seconds."""

    exp: Experiment
    embedders: Embedders
    fingerprints: dict | None = None
    inputs: Inputs | None = None
    chunkings: list[Chunking] = field(default_factory=list)
    configs: list[Config] = field(default_factory=list)
    embedded: Embedded | None = None
    per_query: pa.Table | None = None
    index_stats: dict = field(default_factory=dict)
    retrieved: pa.Table | None = None
    summary: pa.Table | None = None
    by_corpus: pa.Table | None = None
    by_slice: pa.Table | None = None
    references: pa.Table | None = None
    gold_check: dict | None = None
    race: dict | None = None  # a raced run's summary (`chunkeval.engine.pipeline.race.summary`)
    notes: list[str] = field(default_factory=list)
    clock: Stopwatch = field(default_factory=Stopwatch)
    backend_auto: str | None = None  # with backend auto, the line saying which backend was chosen and why
    shards: int = 0  # the workers of a cluster that embed (the flow's Dask task runner): 0 in one process
