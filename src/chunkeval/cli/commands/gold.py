"""`chunkeval gold check`: what in a gold set makes its numbers unfair."""

from __future__ import annotations

import argparse

from chunkeval.cli.options import add_corpus_filter, add_html, add_json, add_strict, check_at_least_one
from chunkeval.cli.output import print_json
from chunkeval.cli.session import WarehouseAccess

WAREHOUSE_SESSION = False  # reads a gold set and its corpora; never opens the warehouse


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("gold", help="`gold check`: what in a gold set makes its numbers unfair")
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
    g.add_argument("--questions", required=True, help="span gold set (CSV with question, references, corpus_id)")
    add_corpus_filter(g, "only these corpora")
    g.add_argument("--chunk-size", type=int, help="report references longer than this many cl100k tokens")
    g.add_argument("--limit", type=int, default=20, help="rows shown per finding (default 20; --json lists all)")
    add_json(g, "print an object with one list per finding")
    g.set_defaults(func=check)
    return p


def check(args: argparse.Namespace, warehouse: WarehouseAccess) -> int:
    from chunkeval.engine.experiment import Experiment, split_flags
    from chunkeval.engine.gold_check import check_gold
    from chunkeval.engine.sweep import load_inputs
    from chunkeval.report.terminal import format_rows

    check_at_least_one(args.chunk_size, "--chunk-size")
    exp = Experiment(
        corpus_dir=args.corpus_dir,
        questions=args.questions,
        corpus=tuple(split_flags(args.corpus)),
        html=args.html or "full",
        strict=bool(args.strict),
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
