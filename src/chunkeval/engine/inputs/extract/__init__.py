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


# byte order marks, longest first (UTF-32's little-endian mark begins with UTF-16's)
_BOMS = (
    (b"\xff\xfe\x00\x00", "utf-32-le"), (b"\x00\x00\xfe\xff", "utf-32-be"), (b"\xef\xbb\xbf", "utf-8"),
    (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"),
)  # fmt: skip
LEGACY = "cp1252"  # what a text file that is not UTF-8 is read as: Windows-1252, a superset of Latin-1's letters
# characters no text document holds: what a binary file (or another legacy encoding) read as Windows-1252 shows
_NOT_TEXT = frozenset(chr(c) for c in range(32) if chr(c) not in "\t\n\r\f\v")


def decode_text(data: bytes) -> tuple[str, str]:
    """A text file's text, newlines normalised as Python's `open()` does (offsets are `str` positions), and the
    encoding it was read in where that was not UTF-8 ("" for UTF-8, with or without a byte order mark).

    A document's encoding changes between nights (an editor saves it as UTF-16, a tool as Windows-1252) while its
    words stay: the text is the same and the gold set's offsets still hold. So a byte order mark names the
    encoding (UTF-8, UTF-16, UTF-32); without one, UTF-8; where the bytes are not UTF-8, Windows-1252 (Latin-1's
    letters and the typographic quotes), when that gives text without control characters. Else `Unreadable`."""
    for bom, name in _BOMS:
        if data.startswith(bom):
            try:
                text = data[len(bom) :].decode(name)
            except UnicodeDecodeError as exc:
                raise Unreadable(f"not {name.upper()} text after its byte order mark (offset {exc.start})") from None
            return _newlines(text), "" if name == "utf-8" else name.upper()
    try:
        return _newlines(data.decode("utf-8")), ""
    except UnicodeDecodeError as exc:
        first = exc.start
    try:
        text = data.decode(LEGACY)
    except UnicodeDecodeError:
        text = ""
    if not text or _NOT_TEXT.intersection(text):
        raise Unreadable(f"not UTF-8 text (invalid byte at offset {first})") from None
    return _newlines(text), "Windows-1252"


def _newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


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
            text, encoding = decode_text(data)
            return Extracted(text, encoding=encoding)
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
