"""Third-party text splitters as chunkers: strings back to exact offsets.

A chunker returns `(starts, ends)`. Many splitters (LangChain's `split_text`, semchunk, Chonkie,
a function of your own) return the chunks' texts instead: `(text, chunk_size, chunk_overlap) ->
list[str]`. `as_chunker` wraps such a function so it returns offsets, and `locate_chunks` does the
work: each string is searched for FORWARD from the previous chunk's start, so a passage that occurs
more than once maps to its own occurrence and not to the first copy in the corpus. Searching from the
start of the corpus (as Chroma's evaluation does) puts 276 of the 831 fixed 200-token chunks of its
finance corpus on an earlier copy of the same passage. An occurrence that would end before the
previous chunk ends (nested inside it) is passed over while a later one exists, so a short chunk
('.') is not put on a copy inside the previous chunk, while an overlapping one may start inside it.

A string is first looked for verbatim (`str.find`) near the previous chunk, and that occurrence is
taken when only whitespace lies between the previous chunk and it. Otherwise (not there, or text
skipped to get there) the first occurrence with whitespace ignored is taken, on an index of the corpus
with whitespace taken out that maps back to the original offsets: a splitter may strip chunks, or
join pieces with other whitespace, and its chunk then maps to its own copy rather than to a later
copy that happens to match verbatim. Such a chunk's span runs from its first to its last
non-whitespace character (its exact span when the string is there verbatim). Every search is
forward-only and bounded by the distance to what it finds, so locating all the chunks of a corpus is
linear in its length. Empty and whitespace-only strings are skipped. A string found neither way is
an input error that names the chunker, the chunk and the corpus.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from chunkeval.errors import InputError

PREVIEW_CHARS = 40
# How far past the previous chunk's end (or a chunk's own length, if longer) a chunk is first looked
# for verbatim; past that only the whitespace-free search runs, which keeps every search linear.
REACH = 4096


class ChunkerOutputError(InputError):
    """A chunker's output that chunkeval cannot use. It names the corpus once the corpus is known:
    a wrapped splitter is called with the text alone, so the caller that knows the corpus's name
    re-raises with `exc.in_corpus(name)`."""

    def __init__(self, before: str, after: str = "", corpus_name: str | None = None):
        self.before = before
        self.after = after
        self.corpus_name = corpus_name
        where = "the corpus" if corpus_name is None else f"corpus {corpus_name!r}"
        super().__init__(f"{before}{where}{after}")

    def in_corpus(self, corpus_name: str) -> ChunkerOutputError:
        """The same error, naming the corpus."""
        return type(self)(self.before, self.after, corpus_name)

    def __reduce__(self):  # keep the fields through pickling (Prefect moves exceptions between processes)
        return type(self), (self.before, self.after, self.corpus_name)


def preview(chunk: str, limit: int = PREVIEW_CHARS) -> str:
    """The start of a chunk for an error message: whitespace collapsed, cut with '…', quoted."""
    flat = " ".join(chunk.split())
    return repr(flat if len(flat) <= limit else flat[:limit].rstrip() + "…")


# --------------------------------------------------------------------------- whitespace-free index


class _WhitespaceFreeIndex:
    """The corpus with every whitespace character taken out, and where each remaining character
    stood in the corpus. Built once per corpus, and only when a chunk is not found as it is."""

    def __init__(self, text: str):
        self.text = "".join(text.split())  # str.split and str.isspace agree on what whitespace is
        cp = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        space = np.zeros(sys.maxunicode + 1, dtype=bool)
        space[cp] = True  # the characters present (no sort: linear in the text)
        distinct = np.flatnonzero(space)
        space[distinct] = np.fromiter((chr(c).isspace() for c in distinct.tolist()), dtype=bool, count=len(distinct))
        self.position = np.flatnonzero(~space[cp])
        assert len(self.position) == len(self.text)

    def find(self, chunk: str, start: int, min_end: int = 0) -> tuple[int, int] | None:
        """`[start, end)` in the corpus of the first occurrence of `chunk`, whitespace ignored, that
        begins at or after corpus offset `start` and ends at or after `min_end`; the span runs from
        its first to its last non-whitespace character."""
        needle = "".join(chunk.split())
        first = max(
            int(np.searchsorted(self.position, start)),
            int(np.searchsorted(self.position, min_end - 1)) - len(needle) + 1,
        )
        k = self.text.find(needle, first)
        if k < 0:
            return None
        return int(self.position[k]), int(self.position[k + len(needle) - 1]) + 1


# --------------------------------------------------------------------------- locating


def locate_chunks(
    text: str, chunks: Iterable[str], chunker_name: str, corpus_name: str | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Offsets `(starts, ends)` in `text` of the strings a splitter returned, in their order.

    Chunk i is searched for forward from chunk i-1's start (chunk 0 from offset 0): the first
    occurrence that starts after it and does not end before chunk i-1 ends, so that a passage
    repeated in the corpus maps to its own copy, an overlapping chunk may start inside the previous
    one, and a short chunk ('.') is not put on a copy inside the previous chunk. Failing that, an
    occurrence nested in the previous chunk or starting where it starts is taken. Each search tries
    the string verbatim (`str.find`), then with whitespace ignored (see the module's docstring for
    which wins when both find a copy). Empty and whitespace-only strings
    are skipped: they have no offsets. A string found neither way raises ChunkerOutputError naming
    the chunker, the chunk's index in `chunks`, and the corpus."""
    starts: list[int] = []
    ends: list[int] = []
    index: _WhitespaceFreeIndex | None = None
    prev_start, prev_end = -1, 0

    def find(chunk: str, start: int, min_end: int) -> tuple[int, int] | None:
        nonlocal index
        lo = max(start, min_end - len(chunk))
        after = max(lo, min_end)  # where the text the previous chunk holds ends
        pos = text.find(chunk, lo, after + max(len(chunk), REACH) + len(chunk))
        if pos >= 0 and (pos <= after or text[after:pos].isspace()):
            return pos, pos + len(chunk)  # verbatim, and no text skipped to get there
        if index is None:
            index = _WhitespaceFreeIndex(text)
        span = index.find(chunk, start, min_end)
        lead = len(chunk) - len(chunk.lstrip())
        if pos >= 0 and (span is None or pos + lead <= span[0]):
            return pos, pos + len(chunk)  # no copy with other whitespace comes before the verbatim one
        if span is not None and span[0] - lead >= lo and text.startswith(chunk, span[0] - lead):
            return span[0] - lead, span[0] - lead + len(chunk)  # verbatim there: the chunk's own whitespace too
        return span

    for i, chunk in enumerate(chunks):
        if not isinstance(chunk, str):
            raise ChunkerOutputError(
                f"chunker {chunker_name!r} returned chunk {i} of type {type(chunk).__name__}, not a string, for ",
                "; a splitter returns a list of strings",
                corpus_name,
            )
        if not chunk or chunk.isspace():
            continue
        span = find(chunk, prev_start + 1, prev_end)
        if span is None and prev_start >= 0:  # nested in the previous chunk, or starting where it starts
            span = find(chunk, prev_start, 0)
        if span is None:
            raise ChunkerOutputError(
                f"chunker {chunker_name!r} returned chunk {i} ({preview(chunk)}) that is not in ",
                f" after offset {max(prev_start, 0)}",
                corpus_name,
            )
        starts.append(span[0])
        ends.append(span[1])
        prev_start, prev_end = span
    return np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)


def to_offsets(result: Any, text: str, chunker_name: str, corpus_name: str | None = None) -> tuple[Any, Any]:
    """A chunker's return value as `(starts, ends)`: a list (or any iterable) of strings is located
    in `text` with `locate_chunks`; a pair of offset sequences is passed through as it is."""
    if isinstance(result, str):
        raise ChunkerOutputError(
            f"chunker {chunker_name!r} returned a single string for ",
            "; a splitter returns a list of strings, a chunker (starts, ends)",
            corpus_name,
        )
    if isinstance(result, np.ndarray) and result.dtype.kind not in "UO":
        if result.ndim == 2 and len(result) == 2:
            return result[0], result[1]
        raise ChunkerOutputError(
            f"chunker {chunker_name!r} returned an array of shape {result.shape} for ",
            "; a chunker returns (starts, ends), a splitter a list of strings",
            corpus_name,
        )
    if not isinstance(result, Iterable):
        raise ChunkerOutputError(
            f"chunker {chunker_name!r} returned {type(result).__name__} for ",
            "; a chunker returns (starts, ends), a splitter a list of strings",
            corpus_name,
        )
    items = list(result)
    if all(isinstance(item, str) for item in items):
        return locate_chunks(text, items, chunker_name, corpus_name)
    if len(items) == 2 and not any(isinstance(item, str) for item in items):
        return items[0], items[1]
    kinds = sorted({type(item).__name__ for item in items})
    raise ChunkerOutputError(
        f"chunker {chunker_name!r} returned a sequence of {', '.join(kinds)} for ",
        "; a chunker returns (starts, ends), a splitter a list of strings",
        corpus_name,
    )


def as_chunker(fn: Callable[[str, int, int], Any], name: str) -> Callable[[str, int, int], tuple[Any, Any]]:
    """`fn` as a chunker: called as `fn(text, chunk_size, chunk_overlap, **kwargs)`, it may return
    `(starts, ends)` or a list of strings; either way the wrapper returns `(starts, ends)`. An error
    about the output says "the corpus"; the caller names it with `ChunkerOutputError.in_corpus`."""
    if getattr(fn, "chunkeval_splitter", None) is not None:
        return fn

    @functools.wraps(fn)  # keeps fn's attributes, `needs_embeddings` among them
    def chunker(text: str, chunk_size: int, chunk_overlap: int, **kwargs: Any) -> tuple[Any, Any]:
        return to_offsets(fn(text, chunk_size, chunk_overlap, **kwargs), text, name)

    chunker.chunkeval_splitter = fn  # type: ignore[attr-defined]
    return chunker


__all__ = ["ChunkerOutputError", "as_chunker", "locate_chunks", "to_offsets", "preview"]
