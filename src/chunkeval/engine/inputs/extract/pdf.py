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
    return Extracted("".join(parts), tuple(reversed(pages)))
