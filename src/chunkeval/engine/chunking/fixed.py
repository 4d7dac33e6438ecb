"""The built-in chunkers, each text → chunk `[start, end)` character offsets: fixed windows of tokens or of
characters with an overlap, the whole document as one chunk (`none`), and recursive splitting on separators
within a token budget (as LangChain's RecursiveCharacterTextSplitter, measured in cl100k tokens)."""

from __future__ import annotations

import re
from collections import deque

import numpy as np

from chunkeval.engine.chunking.registry import register_chunker
from chunkeval.engine.chunking.tokens import count_tokens, token_offsets


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


@register_chunker("none", min_chunk_size=0)
def whole_document(text: str, chunk_size: int, chunk_overlap: int) -> tuple[np.ndarray, np.ndarray]:
    """The whole document as one chunk (the baseline every chunking is compared to): its settings are
    chunk_size 0 and chunk_overlap 0, and the model's truncation applies to it as to any chunk."""
    return np.zeros(1, dtype=np.int64), np.full(1, len(text), dtype=np.int64)


whole_document.whole_document = True


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
                rest = separators[i + 1 :]
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
