"""What an extractor returns: a document's text and, for a PDF, where each page starts in it; or `Unreadable`."""

from __future__ import annotations

import bisect
from dataclasses import dataclass


class Unreadable(Exception):
    """A document that gives no text: a PDF without a text layer, a damaged file, text that is not UTF-8. The
    message says why; the run leaves the document out with a warning (an error under `strict`)."""


@dataclass(frozen=True)
class Extracted:
    """A document's text, and for a PDF the offset where each page's text starts (page `i + 1` is
    `text[pages[i]:pages[i + 1]]`, the separator between pages included in the earlier page; a page without text
    starts where the next one does)."""

    text: str
    pages: tuple[int, ...] = ()
    title: str = ""  # an HTML page's <title>, a PDF's metadata title ("" where it has none)
    headings: tuple[tuple[int, int, str], ...] = ()  # (start, level, text): HTML h1…h6, a PDF's outline entries
    encoding: str = ""  # a text file not in UTF-8: the encoding it was read in (`decode_text`); "" for UTF-8

    def pages_of(self, start: int, end: int) -> tuple[int, int] | None:
        """The first and last page (from 1) that `[start, end)` holds characters of; None without pages."""
        return page_span(self.pages, start, end)


def page_span(pages, start: int, end: int) -> tuple[int, int] | None:
    """The first and last page (from 1) of `[start, end)`, for page start offsets `pages`; None without pages.
    A page without text (it starts where the next does) is never the first or last of a span."""
    if not len(pages):
        return None
    first = bisect.bisect_right(pages, start)
    last = bisect.bisect_right(pages, max(start, end - 1))
    return first, last
