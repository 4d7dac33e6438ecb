"""HTML to text (docs/formats.md, "HTML"). Two extractors, chosen by the `html` setting, each part of the text's
identity (a change of setting or of the library's version is a new text, cached apart, and a new corpus
fingerprint):

- `full` (the default): every visible text of `<body>`, read with lxml (BSD). Nothing is judged to be boilerplate:
  navigation, headers, footers and asides stay. Blocks (`p`, `h1`…`h6`, `li`, `tr`, `div`, …) are separate lines,
  paragraph-level blocks separated by an empty line; table cells by a tab; whitespace inside a block collapses to
  one space, except inside `<pre>`.
- `main`: the main content as trafilatura (Apache-2.0) finds it (navigation, headers, footers, asides and
  comments dropped), as plain text with its tables.

`<head>`, scripts, styles, `<noscript>`, `<template>`, comments and embedded SVG or MathML are never text, in
either mode. Bytes are read as UTF-8, else in the charset the page declares (`<meta charset>`); a page that is
neither is unreadable.
"""

from __future__ import annotations

import codecs
import itertools
import re
from importlib.metadata import version

from chunkeval.engine.inputs.extract.base import Extracted, Unreadable

MODES = ("full", "main")
NOT_TEXT = frozenset({"head", "script", "style", "noscript", "template", "svg", "math", "iframe", "object", "select"})
PARAGRAPH = frozenset(
    "p h1 h2 h3 h4 h5 h6 pre blockquote table ul ol dl section article header footer nav aside main figure form "
    "hr address details fieldset".split()
)
LINE = frozenset("li tr br div dt dd caption figcaption summary option legend body".split())
CELL = frozenset({"td", "th"})
CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.IGNORECASE)
SPACE = re.compile(r"\s+")


def identity(mode: str) -> str:
    """What makes the text of an HTML file: the extractor, its library's version, and the mode."""
    if mode == "main":
        return f"html main: trafilatura {version('trafilatura')} (txt, tables kept, comments dropped)"
    return f"html full: lxml {version('lxml')} (body text, blocks on lines)"


def decode(data: bytes) -> str:
    """The page's text: UTF-8 (a byte-order mark dropped), else the charset its `<meta>` declares."""
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        declared = CHARSET.search(data[:4096])
        if declared is None:
            raise Unreadable(f"not UTF-8 (invalid byte at offset {exc.start}) and no charset declared") from None
        name = declared.group(1).decode("ascii")
        try:  # a name Python knows but that is no text encoding (`undefined`, `rot13`, `base64`) is unknown too
            known = codecs.lookup(name)._is_text_encoding and codecs.lookup(name).name != "undefined"
        except LookupError:
            known = False
        if not known:
            raise Unreadable(f"not UTF-8 and declares an unknown charset {name!r}") from None
        try:
            return data.decode(name)
        except UnicodeDecodeError as inner:
            raise Unreadable(f"not {name} text (invalid byte at offset {inner.start})") from None
        except (UnicodeError, ValueError) as inner:  # a codec's own failure
            raise Unreadable(f"not {name} text ({type(inner).__name__})") from None


def extract(data: bytes, mode: str) -> Extracted:
    text = decode(data)
    headings: list[tuple[int, int, str]] = []
    out = _main(text) if mode == "main" else _full(text, headings)
    unstripped = out.replace("\r\n", "\n").replace("\r", "\n")
    out = unstripped.strip()
    if not out:
        raise Unreadable("no text in the page" if mode == "full" else "no main content found (html: main)")
    if mode == "main":  # trafilatura's text keeps no markup: each heading is found in it, in order
        headings = _found_in(out, _heading_texts(text))
    else:
        lead = len(unstripped) - len(unstripped.lstrip())
        headings = [(max(at - lead, 0), level, name) for at, level, name in headings if name]
    return Extracted(out, (), _title(text), tuple(headings))


HEADING = re.compile(r"h([1-6])")


def _title(text: str) -> str:
    """The page's `<title>`, its whitespace collapsed ("" where it has none)."""
    title = _parse(text).find(".//title")
    return SPACE.sub(" ", title.text_content()).strip() if title is not None else ""


def _heading_texts(text: str) -> list[tuple[int, str]]:
    """(level, text) of the page's `h1`…`h6` elements, in document order."""
    out = []
    for el in _parse(text).iter("h1", "h2", "h3", "h4", "h5", "h6"):
        name = SPACE.sub(" ", el.text_content()).strip()
        if name:
            out.append((int(el.tag[1]), name))
    return out


def _found_in(out: str, headings: list[tuple[int, str]]) -> list[tuple[int, int, str]]:
    """Where each heading's words are found in `out` (any whitespace between them), each after the one before
    (a heading not found is left out)."""
    found, at = [], 0
    for level, name in headings:
        where = re.compile(r"\s+".join(map(re.escape, name.split()))).search(out, at)
        if where is not None:
            found.append((where.start(), level, name))
            at = where.end()
    return found


def _main(text: str) -> str:
    import trafilatura

    found = trafilatura.extract(
        text,
        output_format="txt",
        include_comments=False,
        include_tables=True,
        include_images=False,
        include_links=False,
        deduplicate=False,
        with_metadata=False,
    )
    return found or ""


def _parse(text: str):
    import lxml.etree
    import lxml.html

    try:
        return lxml.html.document_fromstring(text.encode("utf-8"), parser=lxml.html.HTMLParser(encoding="utf-8"))
    except (lxml.etree.ParserError, ValueError) as exc:
        raise Unreadable(f"damaged HTML ({exc})") from None


class _Writer:
    """Text pieces with the breaks between blocks: a break asked for is written before the next text."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.pending = ""  # the strongest break asked for since the last text: "", " ", "\t", "\n" or "\n\n"
        self.started = False

    def ask(self, brk: str) -> None:
        order = ("", " ", "\t", "\n", "\n\n")
        if order.index(brk) > order.index(self.pending):
            self.pending = brk

    def text(self, piece: str, pre: bool) -> None:
        if not pre:
            if piece[:1].isspace():
                self.ask(" ")
            words = SPACE.sub(" ", piece).strip()
            if not words:
                return
            trailing = piece[-1:].isspace()
            piece = words
        else:
            trailing = False
        if self.started and self.pending:
            self.parts.append(self.pending)
        self.parts.append(piece)
        self.started = True
        self.pending = " " if trailing else ""


def _full(text: str, headings: list | None = None) -> str:
    """The body's text; with `headings`, each `h1`…`h6` appended to it as (start, level, text)."""
    import lxml.etree

    root = _parse(text)
    body = root.find("body")
    if body is None:
        return ""
    out = _Writer()
    pre = 0
    opened: list[tuple[int, int]] = []  # the headings open: (level, the first of their parts)
    walker = lxml.etree.iterwalk(body, events=("start", "end"))
    for event, el in walker:
        tag = el.tag.lower() if isinstance(el.tag, str) else None
        if event == "start":
            if tag is None or tag in NOT_TEXT:
                walker.skip_subtree()
                continue
            _open(out, tag)
            if headings is not None and HEADING.fullmatch(tag):
                opened.append((int(tag[1]), len(out.parts)))
            pre += tag == "pre"
            if el.text:
                out.text(el.text, pre > 0)
            continue
        if tag is not None and tag not in NOT_TEXT:
            if opened and HEADING.fullmatch(tag):
                headings.append(_heading(out, *opened.pop()))
            _open(out, tag)
            pre -= tag == "pre"
        if el.tail and el is not body:
            out.text(el.tail, pre > 0)
    if headings:  # part indices to offsets
        offsets = [0, *itertools.accumulate(len(p) for p in out.parts)]
        headings[:] = [(offsets[part], level, name) for part, level, name in headings]
    return "".join(out.parts)


def _heading(out: _Writer, level: int, first: int) -> tuple[int, int, str]:
    """(the part its text starts at, level, text) of a heading whose parts begin at `out.parts[first]` (a break
    written before its text skipped)."""
    parts = out.parts[first:]
    skip = 1 if parts and first > 0 and parts[0] in ("\n\n", "\n", "\t", " ") else 0
    return first + skip, level, SPACE.sub(" ", "".join(parts[skip:])).strip()


def _open(out: _Writer, tag: str) -> None:
    """The break a block's start or end asks for."""
    if tag in PARAGRAPH:
        out.ask("\n\n")
    elif tag in LINE:
        out.ask("\n")
    elif tag in CELL:
        out.ask("\t")
