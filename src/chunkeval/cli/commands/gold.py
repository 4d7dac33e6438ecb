"""`chunkeval gold check`: what in a gold set makes its numbers unfair; `chunkeval gold update`: the gold set
corrected for its changed corpus, written to a new file with a review file (docs/gold.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

from chunkeval.cli.options import (
    add_anchor_similarity,
    add_corpus_filter,
    add_html,
    add_json,
    add_strict,
    check_at_least_one,
)
from chunkeval.cli.output import print_json
from chunkeval.cli.session import WarehouseAccess

WAREHOUSE_SESSION = False  # reads a gold set and its corpora; never opens the warehouse


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "gold",
        help="`gold check`: what in a gold set makes its numbers unfair; `gold update`: correct it for a changed corpus",
    )
    gsub = p.add_subparsers(dest="gold_command", metavar="command", required=True)
    g = gsub.add_parser(
        "check",
        help="ambiguous, overlapping, empty and long references, and repeated questions",
        description="Check a span gold set: references whose text occurs more than once in their corpus "
        "(ambiguous), references overlapping another of the same question, empty references, "
        "references longer than --chunk-size tokens, questions asked twice, and the corpus folder's "
        "documents that could not be read. Offsets of HTML and PDF documents are into their extracted text "
        "(`chunkeval extract`).",
    )
    g.add_argument(
        "--corpus-dir", required=True, help="corpus folder: .md, .txt, .html, .pdf and .jsonl files and subfolders"
    )
    add_html(g)
    add_strict(g)
    add_anchor_similarity(g)
    g.add_argument("--questions", required=True, help="span gold set (CSV with question, references, corpus_id)")
    add_corpus_filter(g, "only these corpora")
    g.add_argument("--chunk-size", type=int, help="report references longer than this many cl100k tokens")
    g.add_argument("--limit", type=int, default=20, help="rows shown per finding (default 20; --json lists all)")
    add_json(g, "print an object with one list per finding")
    g.set_defaults(func=check)
    u = gsub.add_parser(
        "update",
        help="write the gold set corrected for its changed corpus to a new file, with a review file",
        description="Place every reference of a span gold set in the corpus as it is now (exactly, re-anchored where "
        "its text moved, or approximately where it was edited; docs/gold.md) and write the corrected gold set to "
        "--out: new offsets, the new content of approximate matches, an explicit query_id on every question (the id "
        "it had), and retired questions left out. A review file lists each change with an accept column (CSV) and "
        "shows it as a page (HTML). The input is never overwritten.",
    )
    u.add_argument(
        "--corpus-dir", required=True, help="corpus folder: .md, .txt, .html, .pdf and .jsonl files and subfolders"
    )
    u.add_argument("--questions", required=True, help="span gold set (CSV with question, references, corpus_id)")
    u.add_argument("--out", required=True, help="the corrected gold set: a new CSV file, never the input")
    u.add_argument("--review", help="the review CSV (default: OUT with .review.csv); its HTML view is beside it, .html")
    add_html(u)
    add_anchor_similarity(u)
    add_corpus_filter(u, "only these corpora (the others' questions are kept as they are)")
    u.set_defaults(func=update)
    return p


def _review_paths(out: Path, review: str | None) -> tuple[Path, Path]:
    csv_path = Path(review) if review else out.with_name(f"{out.stem}.review.csv")
    return csv_path, csv_path.with_suffix(".html")


def update(args: argparse.Namespace, warehouse: WarehouseAccess) -> int:
    from chunkeval.engine.experiment import Experiment, split_flags
    from chunkeval.engine.gold_update import REVIEW_COLUMNS, corrected, csv_text
    from chunkeval.engine.inputs import ANCHOR_SIMILARITY, anchoring_counts, check_anchor_similarity, gold_summary
    from chunkeval.engine.sweep import load_inputs
    from chunkeval.errors import InputError
    from chunkeval.files import check_output, check_writable_dir, write_texts
    from chunkeval.report.gold_review import review_html

    source, out = Path(args.questions), Path(args.out)
    review_csv, review_page = _review_paths(out, args.review)
    names = {"--out": out, "the review CSV": review_csv, "the review page": review_page}
    for what, path in names.items():
        if path.resolve() == source.resolve() or (path.exists() and source.exists() and path.samefile(source)):
            raise InputError(f"{what} {path} is the gold set it corrects: write it to a new file (--out)")
        if path.is_dir():
            raise InputError(f"{what} {path} is a folder: give a file name (--out, --review)")
    if len({p.resolve() for p in names.values()}) < len(names):
        raise InputError(f"--review {review_csv} is the same file as --out or its HTML view")
    for path in {p.parent for p in names.values()}:
        check_writable_dir(path, "the folder of --out and the review files")
    # the one rule of outputs (docs/limits.md): a regular file or none, never in chunkeval's folders or an input
    out, review_csv, review_page = (check_output(p, (source, args.corpus_dir), what=w) for w, p in names.items())
    exp = Experiment(
        corpus_dir=args.corpus_dir,
        questions=args.questions,
        corpus=tuple(split_flags(args.corpus)),
        html=args.html or "full",
        anchor_similarity=ANCHOR_SIMILARITY
        if args.anchor_similarity is None
        else check_anchor_similarity(args.anchor_similarity),
    )
    inputs = load_inputs(exp)  # says the summary line, once
    columns, rows, review = corrected(source, inputs.gold, inputs.corpora)
    counts = anchoring_counts(inputs.gold.anchoring)
    lines = gold_summary(inputs.gold)
    summary = lines[0] if lines else f"gold set {source.name}: every reference exact"
    for path in names.values():
        path.parent.mkdir(parents=True, exist_ok=True)
    write_texts(
        {
            out: csv_text(columns, rows),
            review_csv: csv_text(REVIEW_COLUMNS, review),
            review_page: review_html(review, str(source), str(out), summary),
        }
    )
    print(
        f"wrote {len(rows)} question(s) to {out}: {counts['reanchored']} re-anchored, {counts['approximate']} placed "
        f"approximately, {counts['retired']} retired and left out; every question has its query_id"
    )
    print(f"review: {review_csv} ({len(review)} change(s), an accept column) and {review_page}")
    return 0


def check(args: argparse.Namespace, warehouse: WarehouseAccess) -> int:
    from chunkeval.engine.experiment import Experiment, split_flags
    from chunkeval.engine.gold_check import check_gold
    from chunkeval.engine.sweep import load_inputs
    from chunkeval.report.terminal import format_rows

    check_at_least_one(args.chunk_size, "--chunk-size")
    from chunkeval.engine.inputs import ANCHOR_SIMILARITY, check_anchor_similarity

    exp = Experiment(
        corpus_dir=args.corpus_dir,
        questions=args.questions,
        corpus=tuple(split_flags(args.corpus)),
        html=args.html or "full",
        strict=bool(args.strict),
        anchor_similarity=ANCHOR_SIMILARITY
        if args.anchor_similarity is None
        else check_anchor_similarity(args.anchor_similarity),
    )
    inputs = load_inputs(exp)
    report = check_gold(inputs.gold, inputs.corpora, args.chunk_size, inputs.skipped)
    if args.json:
        print_json(report.to_dict())
        return 0
    print(f"{inputs.gold.n_queries} question(s), {len(inputs.gold.ref_start)} reference(s) in {args.questions}")
    for title, items, header, row in _sections(report, args.chunk_size):
        print(f"\n{len(items)} {title}")
        if items:
            print(format_rows(header, [row(r) for r in items[: args.limit]]))
            if len(items) > args.limit:
                print(f"… and {len(items) - args.limit} more (--json lists them all)")
    return 0


def _sections(report, chunk_size: int | None) -> list[tuple]:
    """(title, findings, header, row of a finding) per kind of finding; long references with a chunk size."""
    where = lambda r: f"{r['corpus_id']} [{r['start']}, {r['end']})"  # noqa: E731
    sections = [
        (
            "ambiguous reference(s): the text occurs more than once in its corpus",
            report.ambiguous_references,
            ["query", "reference", "occurrences"],
            lambda r: [r["query_id"], where(r), str(len(r["occurrences"]))],
        ),
        (
            "overlapping reference(s) of one question",
            report.overlapping_references,
            ["query", "reference", "overlaps"],
            lambda r: [r["query_id"], where(r), f"[{r['overlaps']['start']}, {r['overlaps']['end']})"],
        ),
        ("empty reference(s)", report.empty_references, ["query", "reference"], lambda r: [r["query_id"], where(r)]),
    ]
    if chunk_size is not None:
        sections.append(
            (
                f"reference(s) longer than {chunk_size} tokens",
                report.long_references,
                ["query", "reference", "tokens"],
                lambda r: [r["query_id"], where(r), str(r["tokens"])],
            )
        )
    sections.append(
        (
            "repeated question(s)",
            report.repeated_questions,
            ["queries", "corpus", "question"],
            lambda r: [", ".join(r["query_ids"]), r["corpus_id"], r["question"][:70]],
        )
    )
    sections.append(
        (
            "unreadable document(s), left out",
            report.skipped_documents,
            ["document", "file", "why"],
            lambda r: [r["document"], r["file"], r["reason"]],
        )
    )
    return sections
