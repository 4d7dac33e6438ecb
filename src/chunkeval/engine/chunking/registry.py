"""The chunker registry, chunk tables and `chunk_corpora`. Chunkers return exact `[start, end)` character offsets into the corpus.

Offsets come from the tokenizer's own token byte lengths, never from searching for a chunk's text:
a token window covers a byte range, and the chunk is the smallest run of characters that holds it
(a window edge that falls inside a multi-byte character takes the whole character). So
`corpus[start:end]` is always the chunk, repeated passages included.

A chunker is a function `(text, chunk_size, chunk_overlap) -> (starts, ends)` of integer arrays.
Register your own with `@register_chunker("name")`, or name it on the command line as
`package.module:function`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from chunkeval.engine.chunking.splitters import ChunkerOutputError, as_chunker
from chunkeval.engine.chunking.tokens import count_tokens
from chunkeval.engine.settings import plugins
from chunkeval.errors import InputError

Chunker = Callable[[str, int, int], tuple[np.ndarray, np.ndarray]]

CHUNKERS: dict[str, Chunker] = {}


def register_chunker(
    name: str, needs_embeddings: bool = False, min_chunk_size: int = 1
) -> Callable[[Chunker], Chunker]:
    """Decorator: make a chunker available by `name` (in `--chunker` and experiment files).

    With `needs_embeddings=True` the chunker is called as `fn(text, chunk_size, chunk_overlap, embed=embed)`,
    `embed(list[str]) -> (n, d)` float32 L2-normalised vectors (it sets `fn.needs_embeddings = True`).
    `min_chunk_size` is checked with the rest of the settings, before any work starts."""

    def add(fn: Chunker) -> Chunker:
        if needs_embeddings:
            fn.needs_embeddings = True
        fn.min_chunk_size = min_chunk_size
        CHUNKERS[name] = fn
        return fn

    return add


def _offsets(name: str, fn) -> Chunker:
    """A loaded function as a chunker: a registered one (named by its module path) returns offsets already."""
    return fn if any(fn is registered for registered in CHUNKERS.values()) else as_chunker(fn, name)


CHUNKER = plugins.ExtensionPoint(
    "chunker",
    CHUNKERS,
    group="chunkeval.chunkers",
    modules=True,
    takes=("text", "chunk_size", "chunk_overlap"),
    keywords=lambda fn: ("embed",) if getattr(fn, "needs_embeddings", False) else (),
    adapt=_offsets,
)


def resolve_chunker(name: str) -> Chunker:
    """A registered chunker, one an installed package declares (entry point group `chunkeval.chunkers`),
    or `package.module:function` imported on demand (`chunkeval.engine.settings.plugins.resolve`). An imported
    function may also be a text splitter returning a list of strings: they are located in the text
    (`chunkeval.engine.chunking.splitters`). Whether a file may name a module is decided before this."""
    return plugins.resolve(CHUNKER, name)


def needs_embeddings(name: str) -> bool:
    """Whether the chunker embeds (it is then called with `embed=`, and takes no overlap)."""
    return bool(getattr(resolve_chunker(name), "needs_embeddings", False))


# --------------------------------------------------------------------------- tokenizer


# --------------------------------------------------------------------------- chunkers


# --------------------------------------------------------------------------- chunk tables


@dataclass(frozen=True)
class ChunkerSpec:
    """One chunking setting of a sweep."""

    chunker: str
    chunk_size: int
    chunk_overlap: int

    def validate(self) -> ChunkerSpec:
        fn = resolve_chunker(self.chunker)
        if getattr(fn, "whole_document", False):  # chunker none: one chunk per document, no size
            if (self.chunk_size, self.chunk_overlap) != (0, 0):
                raise InputError(f"chunker {self.chunker!r} takes chunk_size 0 and chunk_overlap 0")
            return self
        if self.chunk_size < 1:
            raise InputError(f"chunk_size must be at least 1, got {self.chunk_size}")
        smallest = getattr(fn, "min_chunk_size", 1)
        if self.chunk_size < smallest:
            raise InputError(f"chunker {self.chunker!r} needs chunk_size ≥ {smallest}, got {self.chunk_size}")
        if not 0 <= self.chunk_overlap < self.chunk_size:
            raise InputError(
                f"chunk_overlap must be at least 0 and below chunk_size ({self.chunk_size}), got {self.chunk_overlap}"
            )
        return self


@dataclass(frozen=True)
class Chunks:
    """The chunks of one chunking over several corpora, in corpus order then text order."""

    corpus_names: tuple[str, ...]
    corpus: np.ndarray  # int32 index into corpus_names
    start: np.ndarray  # int64
    end: np.ndarray  # int64
    n_tokens: np.ndarray  # int64, cl100k_base tokens of the chunk's text

    def __len__(self) -> int:
        return len(self.start)

    @property
    def length(self) -> np.ndarray:
        return self.end - self.start

    def ids(self) -> list[str]:
        """Stable chunk ids: `<corpus_id>:<start>-<end>`."""
        names = self.corpus_names
        return [f"{names[c]}:{s}-{e}" for c, s, e in zip(self.corpus.tolist(), self.start.tolist(), self.end.tolist())]

    def texts(self, corpora: dict[str, str]) -> list[str]:
        names = self.corpus_names
        return [corpora[names[c]][s:e] for c, s, e in zip(self.corpus.tolist(), self.start.tolist(), self.end.tolist())]


def chunk_corpora(
    corpora: dict[str, str], spec: ChunkerSpec, embed: Callable[[list[str]], np.ndarray] | None = None
) -> Chunks:
    """Chunk every corpus with one setting; offsets are checked before they are used. A chunker that
    declares `needs_embeddings` gets `embed=embed` (texts → L2-normalised float32 vectors)."""
    spec.validate()
    fn = resolve_chunker(spec.chunker)
    kwargs = {}
    if getattr(fn, "needs_embeddings", False):
        if embed is None:
            raise InputError(f"chunker {spec.chunker!r} needs an embedding function, and none was given")
        kwargs["embed"] = embed
    names = tuple(corpora)
    parts = []
    for index, name in enumerate(names):
        text = corpora[name]
        try:
            result = fn(text, spec.chunk_size, spec.chunk_overlap, **kwargs)
        except ChunkerOutputError as exc:
            raise exc.in_corpus(name) from None
        starts, ends = (np.asarray(x, dtype=np.int64) for x in result)
        if starts.shape != ends.shape or np.any(starts < 0) or np.any(ends > len(text)) or np.any(ends <= starts):
            raise InputError(f"chunker {spec.chunker!r} returned offsets outside corpus {name!r} or empty chunks")
        parts.append((np.full(len(starts), index, dtype=np.int32), starts, ends))
    corpus, start, end = (np.concatenate([p[i] for p in parts]) for i in range(3))
    chunks = Chunks(names, corpus, start, end, np.zeros(0, dtype=np.int64))
    return Chunks(names, corpus, start, end, count_tokens(chunks.texts(corpora)))
