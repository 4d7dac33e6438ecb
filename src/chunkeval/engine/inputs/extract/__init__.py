"""A document file's text (docs/formats.md): `.md` and `.txt` files as they are (UTF-8), HTML (`html.py`) and PDF
(`pdf.py`) through their extractors. An extracted text is cached under `$CHUNKEVAL_HOME/cache/extracted/`, by the
SHA-256 of the file's bytes and the extractor's identity (its library, the library's version and its settings):
a new library version or another `html` setting extracts again, into another folder."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from chunkeval.engine.inputs.extract import html as html_extractor
from chunkeval.engine.inputs.extract import pdf
from chunkeval.engine.inputs.extract.base import Extracted, Unreadable, page_span  # noqa: F401 (re-exported)
from chunkeval.errors import InputError
from chunkeval.files import write_text
from chunkeval.limits import DOCUMENT_BYTES, json_loads, record_text, regular_file
from chunkeval.paths import cache_dir

TEXT_SUFFIXES = (".md", ".txt")
EXTRACTED_SUFFIXES = (".html", ".htm", ".pdf")
DOCUMENT_SUFFIXES = TEXT_SUFFIXES + EXTRACTED_SUFFIXES
HTML_MODES = html_extractor.MODES


def check_html_mode(mode: str, source=None) -> str:
    if mode not in HTML_MODES:
        raise InputError(f"html must be {' or '.join(HTML_MODES)}, got {mode!r}", source)
    return mode


def identity(suffix: str, html: str = "full") -> str | None:
    """The extractor of a file of this suffix, with its library's version and its settings; None for text files."""
    suffix = suffix.lower()
    if suffix == ".pdf":
        return pdf.identity()
    if suffix in (".html", ".htm"):
        return html_extractor.identity(html)
    return None


def decode_text(data: bytes) -> str:
    """A UTF-8 text file's text, newlines normalised as Python's `open()` does (offsets are `str` positions)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Unreadable(f"not UTF-8 text (invalid byte at offset {exc.start})") from None
    return text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")


def _read_bytes(path: Path) -> bytes:
    """A document file's bytes; one larger than `DOCUMENT_BYTES` is refused before it is read."""
    try:
        if regular_file(path).stat().st_size > DOCUMENT_BYTES:
            raise InputError(
                f"a document file of more than {DOCUMENT_BYTES >> 20} MiB is refused (docs/limits.md)", path
            )
        return path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read file ({exc.strerror})", path) from None


def cache_root() -> Path:
    return cache_dir().parent / "extracted"


class DocumentReader:
    """Reads document files with one `html` setting; what it extracted is cached when `save()` is called (after
    the inputs are checked, so that a run refused for bad input writes nothing)."""

    def __init__(self, html: str = "full") -> None:
        self.html = check_html_mode(html)
        self.pending: dict[Path, dict] = {}

    def read(self, path: Path) -> Extracted:
        """The file's text; `Unreadable` where it gives none, `InputError` where it cannot be opened at all."""
        path = Path(path)
        data = _read_bytes(path)
        suffix = path.suffix.lower()
        ident = identity(suffix, self.html)
        if ident is None:
            return Extracted(decode_text(data))
        where = (
            cache_root() / hashlib.sha256(ident.encode()).hexdigest()[:16] / f"{hashlib.sha256(data).hexdigest()}.json"
        )
        found = _cached(where, ident)
        if found is not None:
            return found
        if suffix == ".pdf":
            extracted = pdf.extract(data)
        else:
            extracted = html_extractor.extract(data, self.html)
        self.pending[where] = {
            "extractor": ident,
            "text": extracted.text,
            "pages": list(extracted.pages),
            "title": extracted.title,
            "headings": [list(h) for h in extracted.headings],
        }
        return extracted

    def save(self) -> None:
        """Cache what was extracted (each entry written whole, then renamed)."""
        for where, entry in self.pending.items():
            where.parent.mkdir(parents=True, exist_ok=True)
            write_text(where, json.dumps(entry, ensure_ascii=False))
        self.pending.clear()


def _cached(where: Path, ident: str) -> Extracted | None:
    """A cached text, where its file is whole and of this extractor (else it is extracted again)."""
    try:
        entry = json_loads(record_text(where))
    except (OSError, ValueError):
        return None
    if not isinstance(entry, dict) or entry.get("extractor") != ident or not isinstance(entry.get("text"), str):
        return None
    pages = entry.get("pages")
    if not isinstance(pages, list) or not all(isinstance(p, int) for p in pages):
        return None
    headings = entry.get("headings")  # entries cached before headings were kept are extracted again (same text)
    if not isinstance(headings, list) or not isinstance(entry.get("title"), str):
        return None
    if not all(isinstance(h, list) and [type(v) for v in h] == [int, int, str] for h in headings):
        return None
    return Extracted(entry["text"], tuple(pages), entry["title"], tuple(tuple(h) for h in headings))
