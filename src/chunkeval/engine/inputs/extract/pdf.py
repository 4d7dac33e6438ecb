"""PDF to text with pypdf (BSD) (docs/formats.md, "PDF"): each page's text as pypdf's plain extraction gives it,
stripped, pages joined by an empty line, and the offset where each page starts kept, so that a chunk can say which
pages it spans. A PDF whose pages hold no text (a scan without a text layer), an encrypted one that does not open
with an empty password, or a damaged one is unreadable."""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from importlib.metadata import version

from chunkeval.engine.inputs.extract.base import Extracted, Unreadable

PAGE_BREAK = "\n\n"


def identity() -> str:
    return f"pdf: pypdf {version('pypdf')} (plain text per page, pages joined by an empty line)"


@contextlib.contextmanager
def _quiet():
    """pypdf reports what it repairs in a damaged file through logging and warnings: the run says once that a
    document is unreadable, and nothing else."""
    logger = logging.getLogger("pypdf")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def extract(data: bytes) -> Extracted:
    import pypdf

    if not data.lstrip()[:5] == b"%PDF-":
        raise Unreadable("not a PDF (no %PDF- header)")
    with _quiet():
        try:
            reader = pypdf.PdfReader(io.BytesIO(data))
            if reader.is_encrypted and not reader.decrypt(""):
                raise Unreadable("encrypted PDF (it does not open without a password)")
            texts = [page.extract_text() or "" for page in reader.pages]
            title, entries = _title(reader), _outline(reader)
        except Unreadable:
            raise
        except Exception as exc:  # pypdf meets a damaged file with many kinds of error
            raise Unreadable(f"damaged PDF ({type(exc).__name__}: {str(exc)[:80]})") from None
    texts = [t.replace("\r\n", "\n").replace("\r", "\n").strip() for t in texts]
    if not any(texts):
        raise Unreadable(f"no text layer ({len(texts)} page(s) without text: a scan needs OCR first)")
    parts: list[str] = []
    starts: list[int | None] = []
    at = 0
    for text in texts:
        if not text:
            starts.append(None)  # a page without text starts where the next page with text does
            continue
        if parts:
            parts.append(PAGE_BREAK)  # the break belongs to the page before it
            at += len(PAGE_BREAK)
        starts.append(at)
        parts.append(text)
        at += len(text)
    pages, following = [], at
    for start in reversed(starts):
        following = following if start is None else start
        pages.append(following)
    pages = tuple(reversed(pages))
    text = "".join(parts)
    return Extracted(text, pages, title, tuple(_placed(text, pages, entries)))


def _title(reader) -> str:
    """The PDF's metadata title ("" where it has none, or it cannot be read)."""
    try:
        title = (reader.metadata or {}).get("/Title")
    except Exception:  # a damaged information dictionary: the file name titles it
        return ""
    return " ".join(str(title).split()) if title else ""


def _outline(reader) -> list[tuple[int, int, str]]:
    """(page index, level, title) of the PDF's outline entries (bookmarks), in order; none where it has no outline
    or it cannot be read."""
    out: list[tuple[int, int, str]] = []

    def walk(items, level: int) -> None:
        for item in items:
            if isinstance(item, list):
                walk(item, level + 1)
                continue
            page = reader.get_destination_page_number(item)
            name = " ".join(str(getattr(item, "title", "") or "").split())
            if page is not None and page >= 0 and name:
                out.append((page, level, name))

    try:
        walk(reader.outline, 1)
    except Exception:  # a damaged outline: the document has no headings
        return []
    return out


def _placed(text: str, pages: tuple[int, ...], entries: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """(start, level, title) of outline entries: where the title's words are found on its page, else where the page
    starts."""
    import re

    placed = []
    for page, level, name in entries:
        if page >= len(pages):
            continue
        start, end = pages[page], pages[page + 1] if page + 1 < len(pages) else len(text)
        found = re.compile(r"\s+".join(map(re.escape, name.split()))).search(text, start, end)
        placed.append((found.start() if found else start, level, name))
    return placed
