"""`chunkeval extract`: the text chunkeval chunks, one file per document, so that span gold can be written against
it (docs/formats.md, "Writing span gold for HTML and PDF documents").

A document `notes/keeper` is written as `notes/keeper.txt`; a document id that is not a safe relative path (a JSONL
id holding `..`, a backslash, an empty segment, …) is written percent-encoded at the top (`a%2F..%2Fb.txt`).
`documents.jsonl` lists every document: its id, corpus, the file written, the file it came from, its extractor,
its length in characters, where its pages start (PDF) and its metadata (JSONL); and every document left out, with
why. The folder is written whole under a temporary name, then renamed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path
from urllib.parse import quote

from chunkeval.engine.inputs.corpus import Documents
from chunkeval.engine.inputs.extract import identity
from chunkeval.errors import InputError, as_fault
from chunkeval.files import check_output, output_folder

SEGMENT_CHARS = 200  # a longer path segment is written encoded, and shortened


def document_path(doc: str) -> str:
    """Where a document's text is written, relative to the output folder."""
    segments = doc.split("/")
    safe = all(
        s not in ("", ".", "..") and len(s) <= SEGMENT_CHARS and not any(c in s for c in "\\\0:") for s in segments
    )
    if safe and not doc.startswith("/"):
        return doc + ".txt"
    encoded = quote(doc, safe="")
    if len(encoded) > SEGMENT_CHARS:
        encoded = encoded[: SEGMENT_CHARS - 17] + "-" + hashlib.sha256(doc.encode()).hexdigest()[:16]
    return encoded + ".txt"


def check_out(out: Path, source: Path | None = None) -> Path:
    """The output folder: new, or empty, outside chunkeval's own folders and outside the corpus `source`
    (checked before anything is read; `chunkeval.files.check_output`). The path to write, resolved."""
    return check_output(out, [source], folder="new", what="--out")


def manifest_rows(docs: Documents, html: str) -> list[dict]:
    """A row per document written, then one per document left out."""
    rows, written = [], {}
    for doc, text in docs.texts.items():
        name = document_path(doc)
        if name in written:
            raise InputError(f"documents {written[name]!r} and {doc!r} would be written to one file {name}")
        written[name] = doc
        source = docs.source.get(doc, "")
        row = {"id": doc, "corpus": docs.corpus_of[doc], "file": name, "source": source}
        row["extractor"] = identity(Path(source).suffix, html) if source and not source.endswith(".jsonl") else None
        row["characters"] = len(text)
        if doc in docs.pages:
            row["pages"] = list(docs.pages[doc])
        if doc in docs.meta:
            row["metadata"] = docs.meta[doc]
        rows.append(row)
    for s in docs.skipped.values():
        rows.append({"id": s.document, "corpus": s.corpus, "file": None, "source": s.where(), "unreadable": s.reason})
    return rows


def export(docs: Documents, out: Path, html: str) -> list[dict]:
    """Write every document's text and `documents.jsonl` into `out` (whole, or nothing); the manifest's rows."""
    out = Path(out)
    rows = manifest_rows(docs, html)
    with output_folder(out.parent) as folder:  # opened once: a swap of its name meanwhile redirects nothing
        tmp = folder / f".{out.name}.{uuid.uuid4().hex}.tmp"
        final = folder / out.name
        try:
            for row in rows:
                if row["file"] is None:
                    continue
                path = tmp / row["file"]
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(docs.texts[row["id"]], encoding="utf-8", newline="\n")
            tmp.mkdir(exist_ok=True)
            lines = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
            (tmp / "documents.jsonl").write_text(lines, encoding="utf-8")
            if final.is_symlink() or (final.exists() and not final.is_dir()):
                raise InputError("--out is no longer an empty folder (changed since it was checked)", out)
            if final.exists():
                final.rmdir()  # empty, as checked
            os.replace(tmp, final)
        except OSError as exc:
            raise (as_fault(exc) or exc) from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return rows
