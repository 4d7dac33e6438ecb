"""A corpus folder's documents (docs/formats.md, "Corpora, documents and chunks").

- a top-level `.md`, `.txt`, `.html`/`.htm` or `.pdf` file is a corpus of one document, both named by its stem;
- a top-level subfolder is a corpus (named by it) of the document files under it at any depth, each named by its
  path relative to the folder without suffix (`notes/keeper`);
- a top-level `.jsonl` file is a corpus (named by its stem) of its lines: `_id` (or `id`), optional `title`,
  `text`, and any other fields, kept as the document's metadata. A document's text is `title + " " + text`,
  stripped.

HTML and PDF files become text through `chunkeval.engine.inputs.extract` (a text file in UTF-16, UTF-32 or
Windows-1252 is read in it, and said: `Documents.encodings`). A document that gives no text (an empty file, a PDF
without a text layer, a damaged file, bytes that are no text) is left out and recorded (`Skipped`), or is an error
under `strict`. The folder's fingerprint covers every document file's bytes and the extractor of each HTML and PDF
file.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from chunkeval.engine.inputs.extract import DOCUMENT_SUFFIXES, DocumentReader, Unreadable, identity
from chunkeval.engine.inputs.headings import Outline, file_outline
from chunkeval.engine.inputs.readers import jsonl_object, query_id_value
from chunkeval.engine.inputs.span_gold import listing
from chunkeval.errors import InputError
from chunkeval.files import hash_file
from chunkeval.limits import DOCUMENT_BYTES
from chunkeval.vocabulary import close_names, folded

log = logging.getLogger("chunkeval")


@dataclass(frozen=True)
class Skipped:
    """A document left out: it gave no text."""

    document: str
    corpus: str
    path: str
    reason: str
    row: int | None = None  # its line, in a JSONL corpus

    def where(self) -> str:
        return self.path + (f": row {self.row}" if self.row is not None else "")

    def to_dict(self) -> dict:
        return {"document": self.document, "corpus": self.corpus, "file": self.where(), "reason": self.reason}


@dataclass(frozen=True)
class Documents:
    """Document id → text (what is chunked) and → its corpus; the page starts of PDF documents, the metadata of
    JSONL documents, the file each document came from, the documents left out, and the ids of documents of
    corpora a filter left out (`--corpus`)."""

    texts: dict[str, str]
    corpus_of: dict[str, str]
    pages: dict[str, tuple[int, ...]] = field(default_factory=dict)
    meta: dict[str, dict] = field(default_factory=dict)
    source: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, Skipped] = field(default_factory=dict)  # by document id
    other: set[str] = field(default_factory=set)
    outlines: dict = field(default_factory=dict)  # document id → title and headings (`context_headers.Outline`)
    encodings: dict[str, str] = field(default_factory=dict)  # document id → the encoding a text file was read in,
    # where it was not UTF-8 (`extract.decode_text`)

    def skipped_reasons(self) -> dict[str, str]:
        """Document id → `file: reason` of every document left out."""
        return {doc: f"{s.where()}: {s.reason}" for doc, s in self.skipped.items()}

    def known(self) -> set[str]:
        """Every document id the folder names: read, left out, or of a corpus not asked for."""
        return set(self.texts) | set(self.skipped) | self.other

    def one_per_corpus(self) -> bool:
        """Whether each document is a corpus of its own (a folder of top-level files: chunkeval before documents)."""
        return all(doc == corpus for doc, corpus in self.corpus_of.items())

    def warn(self) -> None:
        """One warning line per cause: a document left out, and a text file read in another encoding than UTF-8,
        each named in a line of its own; documents of one cause (16 empty files) in one line, their files folded
        with a count."""
        causes: dict[str, list[Skipped]] = {}
        for s in self.skipped.values():
            causes.setdefault(s.reason, []).append(s)
        for reason, docs in causes.items():
            if len(docs) == 1:
                log.warning("%s: document %r is unreadable and left out: %s", docs[0].where(), docs[0].document, reason)
            else:
                log.warning("%d documents are unreadable and left out: %s: %s", len(docs), reason,
                            folded([s.where() for s in docs], 80))  # fmt: skip
        encodings: dict[str, list[str]] = {}
        for doc, encoding in self.encodings.items():
            encodings.setdefault(encoding, []).append(doc)
        for encoding, docs in encodings.items():
            said = f"document {docs[0]!r}" if len(docs) == 1 else f"{len(docs)} documents"
            where = self.source[docs[0]] if len(docs) == 1 else folded([self.source[d] for d in docs], 80)
            log.warning(
                "%s: %s %s not UTF-8: read as %s (%s text, and the gold set's offsets, are as before; save %s as UTF-8 "
                "to silence this)",
                where,
                said,
                "is" if len(docs) == 1 else "are",
                encoding,
                "its" if len(docs) == 1 else "their",
                "it" if len(docs) == 1 else "them",
            )


def corpus_names(corpus_of: dict[str, str] | None, documents) -> list[str]:
    """The corpus of each document (each its own where `corpus_of` is None: a folder of top-level files)."""
    return list(documents) if not corpus_of else [corpus_of.get(d, d) for d in documents]


def skipped_notes(skipped) -> list[str]:
    """The note a sweep prints about the documents it left out as unreadable (none when it read them all)."""
    if not skipped:
        return []
    names = ", ".join(s.document for s in list(skipped)[:5]) + (", …" if len(skipped) > 5 else "")
    return [f"{len(skipped)} unreadable document(s) left out of the run: {names} (the warnings above say why)"]


def document_files(folder: Path) -> list[tuple[Path, str, str]]:
    """(file, corpus, document id) of a corpus folder's files, in name order (the module's docstring); a JSONL
    file's document id is empty here: its lines name them."""
    out = []
    for path in sorted(folder.iterdir()):
        suffix = path.suffix.lower()
        if path.is_dir():
            for inner in sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in DOCUMENT_SUFFIXES):
                out.append((inner, path.name, inner.relative_to(folder).with_suffix("").as_posix()))
        elif path.is_file() and suffix in DOCUMENT_SUFFIXES:
            out.append((path, path.stem, path.stem))
        elif path.is_file() and suffix == ".jsonl":
            out.append((path, path.stem, ""))
    return out


def wanted_files(folder: Path, corpora: tuple[str, ...] = ()) -> list[tuple[Path, str, str]]:
    """`document_files` of the corpora asked for, in the order asked (all of them, in name order, by default)."""
    folder = Path(folder)
    if not folder.is_dir():
        try:  # a hint only: a parent that cannot be listed, or a huge one, gives none
            beside = [p.name for _, p in zip(range(1000), folder.parent.iterdir()) if p.is_dir()]
        except OSError:
            beside = []
        hint = close_names(folder.name, beside)  # `corpra` beside `corpora`
        raise InputError("corpus folder not found" + (f"; {hint}" if hint else ""), folder)
    files = document_files(folder)
    if not files:
        raise InputError("no documents (*.md, *.txt, *.html, *.htm, *.pdf, *.jsonl, or folders of them)", folder)
    if not corpora:
        return files
    names = list(dict.fromkeys(c for _, c, _ in files))
    wanted = list(dict.fromkeys(corpora))
    unknown = [c for c in wanted if c not in names]
    if unknown:
        hint = close_names(unknown[0], names)  # `lighthouse` for `lighthouses`
        raise InputError(f"no corpus named {', '.join(unknown)}; {hint or f'available: {listing(names)}'}", folder)
    return [f for c in wanted for f in files if f[1] == c]


def _unreadable(into: Documents, strict: bool, doc: str, corpus: str, path: Path, reason: str, row=None) -> None:
    _check_new(into, doc, path, row)
    if strict:
        raise InputError(f"document {doc!r} is unreadable: {reason} (strict: every document must be read)", path, row)
    into.skipped[doc] = Skipped(doc, corpus, str(path), reason, row)


def add_document(
    into: Documents, doc: str, text: str, corpus: str, path: Path | str, row: int | None, strict: bool = False
) -> bool:
    """Add a document (an id seen twice is an error naming both corpora; an empty text is left out as unreadable,
    an error under `strict`); whether it was added."""
    if doc in into.texts or doc in into.skipped:
        _check_new(into, doc, path, row)
    if not text.strip():
        _unreadable(into, strict, doc, corpus, Path(path), "file is empty" if row is None else "no text", row)
        return False
    into.texts[doc] = text
    into.corpus_of[doc] = corpus
    into.source[doc] = path if isinstance(path, str) else str(path)
    return True


def _check_new(into: Documents, doc: str, path: Path, row: int | None) -> None:
    """A document id is unique in a run: a second one is an error naming the corpus of the first."""
    if doc in into.texts or doc in into.skipped:
        first = into.corpus_of[doc] if doc in into.texts else into.skipped[doc].corpus
        raise InputError(f"document id {doc!r} appears twice (also in corpus {first!r})", path, row)


JSONL_FIELDS = ("_id", "id", "title", "text")


def read_jsonl_documents(path: Path, corpus: str, into: Documents, strict: bool = False) -> None:
    """The documents of a JSONL corpus file added to `into`. A line that is not UTF-8 is an unreadable document
    (named by its id where the rest of the line still gives one); a line without an id or a text is an error."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read file ({exc.strerror})", path) from None
    if not raw.strip():
        raise InputError("file is empty", path)
    try:  # the whole file at once where it is all UTF-8 (the common case), else line by line
        lines: list = raw.decode("utf-8").removeprefix("\ufeff").split("\n")
    except UnicodeDecodeError:
        lines = raw.removeprefix(b"\xef\xbb\xbf").split(b"\n")
    row, name = 0, str(path)  # one string for every document's source
    for line in lines:
        if not line.strip():
            continue
        row += 1
        if isinstance(line, bytes):
            try:
                line = line.decode("utf-8")
            except UnicodeDecodeError as exc:
                obj = jsonl_object(line.decode("utf-8", "replace"), (), path, row)
                why = f"not UTF-8 text (invalid byte at offset {exc.start})"
                _unreadable(into, strict, _document_id(obj, path, row), corpus, path, why, row)
                continue
        if len(line) > DOCUMENT_BYTES:
            raise InputError(
                f"a document of more than {DOCUMENT_BYTES >> 20} MiB is refused (docs/limits.md)", path, row
            )
        obj = jsonl_object(line, (), path, row)
        doc = _document_id(obj, path, row)
        if "text" not in obj:
            raise InputError("missing key(s) text", path, row)
        body, title = obj["text"], obj.get("title") or ""
        if not isinstance(body, str) or not isinstance(title, str):
            raise InputError("title and text must be strings", path, row)
        known = 2 + ("title" in obj) + ("_id" in obj and "id" in obj)  # an id, text, and title where given
        if add_document(into, doc, (title + " " + body).strip(), corpus, name, row, strict):
            into.outlines[doc] = Outline(title.strip() or doc)
            if len(obj) > known:
                into.meta[doc] = {k: v for k, v in obj.items() if k not in JSONL_FIELDS}


def _document_id(obj: dict, path: Path, row: int) -> str:
    key = "_id" if "_id" in obj else "id" if "id" in obj else None
    if key is None:
        raise InputError("missing key(s) _id (or id)", path, row)
    return query_id_value(obj[key], path, row, f"document {key}")


def read_file_document(
    into: Documents, reader: DocumentReader, path: Path, corpus: str, doc: str, strict: bool = False
) -> None:
    """One document file read into `into` (left out, or an error under `strict`, where it gives no text)."""
    try:
        extracted = reader.read(path)
    except Unreadable as exc:
        _unreadable(into, strict, doc, corpus, path, str(exc))
        return
    if not add_document(into, doc, extracted.text, corpus, path, None, strict):
        return
    if extracted.encoding:
        into.encodings[doc] = extracted.encoding
    if extracted.pages:
        into.pages[doc] = extracted.pages
    into.outlines[doc] = file_outline(path, extracted)


def read_documents(
    files: list[tuple[Path, str, str]], strict: bool = False, reader: DocumentReader | None = None
) -> Documents:
    """The documents of (file, corpus, document id) entries (`document_files`; an empty id for a JSONL file)."""
    reader = reader or DocumentReader()
    docs = Documents({}, {})
    for path, corpus, doc in files:
        if doc:
            read_file_document(docs, reader, path, corpus, doc, strict)
        else:
            read_jsonl_documents(path, corpus, docs, strict)
    return docs


def load_documents(
    folder: Path,
    html: str = "full",
    strict: bool = False,
    corpora: tuple[str, ...] = (),
    reader: DocumentReader | None = None,
) -> Documents:
    """Every document of the corpora asked for (all by default) of a corpus folder. The ids of the JSONL
    corpora not asked for are read too (`Documents.other`), so that gold naming them is told from gold naming
    nothing. `reader` (made with `html` where not given) holds what it extracted until its `save()`."""
    folder = Path(folder)
    files = wanted_files(folder, corpora)
    docs = read_documents(files, strict, reader or DocumentReader(html))
    if corpora:
        asked = {f[0] for f in files}
        for path, corpus, doc in document_files(folder):
            if path not in asked:
                docs.other.update([doc] if doc else read_documents([(path, corpus, doc)]).known())
    if not docs.texts:
        first = next(iter(docs.skipped.values()), None)
        detail = f": {first.where()}: {first.reason}" if first else ""
        raise InputError(f"no readable document in the folder{detail}", folder)
    return docs


def load_corpora(folder: Path, corpora: list[str] | None = None) -> dict[str, str]:
    """Document id → text of a corpus folder's documents (of the corpora asked for; all by default)."""
    return load_documents(Path(folder), corpora=tuple(corpora or ())).texts


def folder_fingerprint(folder: Path, html: str = "full", corpora: tuple[str, ...] = ()) -> str:
    """SHA-256 over the documents' files of the corpora asked for: each file's bytes by its document id (a JSONL
    file by its name), with the extractor of each HTML and PDF file. A folder of top-level `.md`/`.txt` files
    has the fingerprint it had before documents existed."""
    entries = {}
    for path, _, doc in wanted_files(Path(folder), corpora):
        digest = hash_file(path).hexdigest()
        extractor = identity(path.suffix, html)
        entries[doc or path.name] = digest if extractor is None else f"{digest} {extractor}"
    return hashlib.sha256(json.dumps(entries, sort_keys=True).encode()).hexdigest()


def file_hashes(paths: list[Path], html: str = "full") -> list[str]:
    """Each file's SHA-256, with its extractor for HTML and PDF files (what document gold's fingerprint hashes)."""
    out = []
    for path in paths:
        digest, extractor = hash_file(path).hexdigest(), identity(path.suffix, html)
        out.append(digest if extractor is None else f"{digest} {extractor}")
    return out
