"""Contextual chunk headers (`context: none | title | headings`; docs/metrics.md, "Contextual chunk headers").

The text a retriever reads of a chunk (what is embedded, indexed by bm25 and re-scored by a reranker) is the
chunk preceded by a header and an empty line: its document's title (`title`), or the path of headings above the
chunk's start, the title first (`headings`: `Title > Section > Subsection`). A chunk's offsets, and so every span
metric and `retrieved_tokens`, stay those of the chunk itself: the header is an indexing aid, not sent to the reader.

- A document's title: a Markdown file's first `#` heading, else its file name (without suffix); a `.txt` file's
  name; an HTML page's `<title>`; a PDF's metadata title; else the file name. A JSONL or BEIR document's `title`
  field (its text already begins with it).
- Headings: Markdown `#` lines outside fenced code; HTML `h1`…`h6`; PDF outline entries. A chunk above every
  heading, or of a document without them, gets the title.
- A chunk whose text already begins with its header gets none (the first chunk of a JSONL or BEIR document, whose
  text begins with its title; an HTML page whose first heading repeats its `<title>`).

Pure functions over plain data: an `Outline` per document, chunk offsets as numpy arrays.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from chunkeval.vocabulary import NO_CONTEXT

SEPARATOR = " > "  # between the headings of a path
GAP = "\n\n"  # between a header and its chunk
ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


@dataclass(frozen=True)
class Outline:
    """A document's title and its headings: where each starts in its text (ascending), its level (1 for `h1`)
    and its text."""

    title: str
    starts: tuple[int, ...] = ()
    levels: tuple[int, ...] = ()
    names: tuple[str, ...] = ()


def markdown_headings(text: str) -> list[tuple[int, int, str]]:
    """(start, level, text) of a Markdown text's ATX headings (`#` … `######` lines), none inside fenced code."""
    out, at, fence = [], 0, ""
    for line in text.split("\n"):
        opened = FENCE.match(line)
        if fence:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = ""
        elif opened:
            fence = opened.group(1)
        else:
            found = ATX.match(line)
            if found and (found.group(2) or "").strip():
                out.append((at, len(found.group(1)), found.group(2).strip()))
        at += len(line) + 1
    return out


def outline_of(headings, title: str) -> Outline:
    """An `Outline` of (start, level, text) headings."""
    ordered = sorted(headings, key=lambda h: h[0])
    return Outline(title, tuple(h[0] for h in ordered), tuple(h[1] for h in ordered), tuple(str(h[2]) for h in ordered))


def markdown_outline(text: str, name: str) -> Outline:
    """A Markdown document's outline: its title is its first level-1 heading, else `name` (its file name)."""
    headings = markdown_headings(text)
    title = next((h[2] for h in headings if h[1] == 1), name)
    return outline_of(headings, title)


def file_outline(path, extracted) -> Outline:
    """A document file's outline: Markdown's from its text, a text file's its name, an HTML page's and a PDF's
    what extraction kept (`chunkeval.engine.inputs.extract.Extracted`: title and headings); a title-less one its name."""
    name = Path(path).stem
    suffix = Path(path).suffix.lower()
    if suffix == ".md":
        return markdown_outline(extracted.text, name)
    if suffix == ".txt":
        return Outline(name)
    return outline_of(extracted.headings, extracted.title or name)


def heading_paths(outline: Outline) -> list[str]:
    """Each heading's path: the title, then the headings above it and itself (a heading of the same text as the
    title, its first, is not repeated), joined by `SEPARATOR`."""
    paths, stack = [], []
    for level, name in zip(outline.levels, outline.names):
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, name))
        names = [n for _, n in stack]
        if names[0] == outline.title:
            names = names[1:]
        paths.append(SEPARATOR.join([outline.title, *names]))
    return paths


def chunk_headers(
    documents: tuple[str, ...], corpus: np.ndarray, start: np.ndarray, outlines: dict, context: str
) -> np.ndarray:
    """The header of each chunk (object array of str, "" for none) of chunks given by their document
    (`corpus`, an index into `documents`) and start offset. A document without an outline is titled by its id's
    last part. Each chunk finds the last heading at or before its start in one `np.searchsorted` over every
    document's headings (keyed by document, then offset)."""
    corpus, start = np.asarray(corpus, np.int64), np.asarray(start, np.int64)
    if context == NO_CONTEXT or not len(corpus):
        return np.full(len(corpus), "", dtype=object)
    found = [outlines.get(doc) or Outline(doc.rsplit("/", 1)[-1]) for doc in documents]
    titles = np.array([o.title for o in found], dtype=object)
    if context == "title":
        return titles[corpus]
    doc_of = np.repeat(np.arange(len(found), dtype=np.int64), [len(o.starts) for o in found])
    starts = np.array([s for o in found for s in o.starts], dtype=np.int64)
    paths = np.array([p for o in found for p in heading_paths(o)], dtype=object)
    if not len(starts):
        return titles[corpus]
    stride = int(max(starts.max(), start.max())) + 1
    keys = doc_of * stride + starts  # ascending: documents in order, each one's headings by offset
    at = np.searchsorted(keys, corpus * stride + start, side="right") - 1
    inside = (at >= 0) & (doc_of[np.maximum(at, 0)] == corpus)
    return np.where(inside, paths[np.maximum(at, 0)], titles[corpus])


def with_headers(texts: list[str], headers) -> list[str]:
    """Each chunk's text preceded by its header and an empty line; a chunk without a header, or one whose text
    already begins with it, as it is."""
    return [t if not h or t.startswith(h) else f"{h}{GAP}{t}" for t, h in zip(texts, headers)]
