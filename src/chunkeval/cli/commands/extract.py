"""`chunkeval extract`: the text of a corpus's documents as chunkeval chunks it, one file per document."""

from __future__ import annotations

import argparse
from pathlib import Path

from chunkeval.cli.commands import summary
from chunkeval.cli.options import add_corpus_filter, add_html, add_strict
from chunkeval.cli.session import WarehouseAccess
from chunkeval.engine.inputs.corpus import load_documents, read_documents
from chunkeval.engine.inputs.extract import DOCUMENT_SUFFIXES, DocumentReader, check_html_mode
from chunkeval.engine.inputs.extract.export import check_out, export
from chunkeval.errors import InputError
from chunkeval.vocabulary import split_flags

WAREHOUSE_SESSION = False  # reads a corpus folder; never opens the warehouse


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "extract",
        help=summary("extract"),
        description="Read a corpus folder (or one document file, or a JSONL corpus) as a run reads it and write each "
        "document's text to DIR/<document id>.txt, with DIR/documents.jsonl listing every document (its corpus, "
        "source file, extractor, length, PDF page starts, JSONL metadata) and every unreadable document left out. "
        "Span offsets of HTML and PDF documents are into this text (docs/formats.md).",
    )
    p.add_argument(
        "source", metavar="CORPUS", help="a corpus folder, or one document file (.md .txt .html .pdf .jsonl)"
    )
    p.add_argument("--out", required=True, metavar="DIR", help="a new (or empty) folder for the texts")
    add_html(p)
    add_strict(p)
    add_corpus_filter(p, "only these corpora of the folder")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace, warehouse: WarehouseAccess) -> int:
    html = check_html_mode(args.html or "full")
    source = Path(args.source)
    out = check_out(Path(args.out), source)
    reader = DocumentReader(html)
    if source.is_dir():
        docs = load_documents(source, html, bool(args.strict), tuple(split_flags(args.corpus, "--corpus")), reader)
    elif source.is_file():
        suffix = source.suffix.lower()
        if suffix not in DOCUMENT_SUFFIXES + (".jsonl",):
            raise InputError(f"not a document file ({', '.join(DOCUMENT_SUFFIXES)}, .jsonl) or a corpus folder", source)
        if args.corpus:
            raise InputError("--corpus picks corpora of a folder; CORPUS is one file", source)
        docs = read_documents(
            [(source, source.stem, "" if suffix == ".jsonl" else source.stem)], bool(args.strict), reader
        )
        if not docs.texts:
            raise InputError("no readable document", source)
    else:
        raise InputError("corpus folder or file not found", source)
    rows = export(docs, out, html)
    reader.save()
    docs.warn()  # one line per document left out, before the summary
    written = [r for r in rows if r["file"] is not None]
    pages = sum(len(r.get("pages", ())) for r in written)
    corpora = len({r["corpus"] for r in written})
    print(
        f"{len(written)} document(s) of {corpora} corpus(es) written to {out}"
        + (f" ({pages} PDF page(s); page starts in documents.jsonl)" if pages else "")
        + (f"; {len(docs.skipped)} unreadable document(s) left out" if docs.skipped else "")
    )
    return 0
