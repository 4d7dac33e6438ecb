"""`chunkeval gold check`: what in a gold set makes its numbers unfair; `chunkeval gold update`: the gold set
corrected for its changed corpus, written to a new file with a review file (docs/gold.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

from chunkeval import paths, progress
from chunkeval.cli.commands import gold_judge, summary
from chunkeval.cli.options import (
    add_anchor_similarity,
    add_corpus_filter,
    add_html,
    add_json,
    add_strict,
    check_at_least_one,
    number_in,
)
from chunkeval.cli.output import print_json
from chunkeval.cli.session import WarehouseAccess
from chunkeval.engine.embedding import Embedder
from chunkeval.engine.gold import generate as gg
from chunkeval.engine.gold.answers import ANSWER_CHARS
from chunkeval.engine.gold.chat import Chat
from chunkeval.engine.gold.check import check_gold
from chunkeval.engine.gold.generate import accepted
from chunkeval.engine.gold.update import QRELS_REVIEW_COLUMNS, REVIEW_COLUMNS, corrected, corrected_qrels, csv_text
from chunkeval.engine.inputs.anchoring import (
    ANCHOR_SIMILARITY,
    anchoring_counts,
    check_anchor_similarity,
    gold_summary,
)
from chunkeval.engine.inputs.corpus import load_documents
from chunkeval.engine.inputs.provenance import accepted_provenance
from chunkeval.engine.inputs.readers import read_csv_rows
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.engine.pipeline.sweep import load_inputs
from chunkeval.errors import InputError
from chunkeval.files import check_output, check_writable_dir, write_texts
from chunkeval.report.gold_review import generated_html, qrels_review_html, review_html
from chunkeval.report.terminal import format_rows
from chunkeval.stats.power import questions_for_fall
from chunkeval.vocabulary import DEFAULT_MODEL, split_flags

WAREHOUSE_SESSION = False  # reads a gold set and its corpora; `gold judge` opens the warehouse to read a run


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "gold",
        help=summary("gold"),
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
        "it had), and retired questions left out. Document gold (--qrels with --queries, or --beir) is written without "
        "its rows that name a document or query that is gone. A review file lists each change with an accept column "
        "(CSV) and shows it as a page (HTML). The input is never overwritten.",
    )
    u.add_argument("--corpus-dir", help="corpus folder: .md, .txt, .html, .pdf and .jsonl files and subfolders")
    u.add_argument("--questions", help="span gold set (CSV with question, references, corpus_id)")
    u.add_argument("--qrels", help="document gold instead: qrels (BEIR's TSV or TREC's) of --queries over --corpus-dir")
    u.add_argument("--queries", help="document gold: the queries (JSONL: _id, text) that --qrels judges")
    u.add_argument("--beir", metavar="DIR", help="document gold instead: a BEIR folder (its qrels/<--split>.tsv)")
    u.add_argument("--split", default="test", help="the qrels of --beir: qrels/<split>.tsv (default test)")
    u.add_argument("--out", required=True, help="the corrected gold set: a new file (CSV, or qrels), never the input")
    u.add_argument("--review", help="the review CSV (default: OUT with .review.csv); its HTML view is beside it, .html")
    add_html(u)
    add_anchor_similarity(u)
    add_corpus_filter(u, "only these corpora (the others' questions are kept as they are)")
    u.set_defaults(func=update)
    _add_generate(gsub)
    gold_judge.add_parser(gsub)
    a = gsub.add_parser(
        "accept",
        help="the questions a review file accepts, as a new gold set",
        description="Keep the questions of a gold set (`gold generate --out`) whose row in its review CSV says "
        "accept yes, and write them to --out. Every query_id of the review must be a question of the gold set.",
    )
    a.add_argument("--questions", required=True, help="the gold set the review file is of (with query_id)")
    a.add_argument("--review", required=True, help="its review CSV, the accept column filled in")
    a.add_argument("--out", required=True, help="the accepted gold set: a new CSV file")
    a.set_defaults(func=accept)
    return p


def _add_generate(gsub) -> None:
    g = gsub.add_parser(
        "generate",
        help="a gold set from your documents: questions and exact excerpts asked of a chat model, checked",
        description="Sample passages of the corpus in proportion to their length (seeded), ask a chat model "
        "behind an OpenAI-compatible /chat/completions endpoint for questions with the exact excerpts that answer "
        "them, and keep those whose excerpts are placed in the document, are similar enough to the question and "
        "are not near-duplicates of a question kept before. Writes the gold set (--out, with query_id and type), "
        "its provenance (.provenance.json), a review CSV with an accept column and its HTML view (docs/gold.md).",
    )
    g.add_argument("--corpus-dir", required=True, help="corpus folder: .md, .txt, .html, .pdf and .jsonl files")
    g.add_argument("--out", required=True, help="the generated gold set: a new CSV file")
    g.add_argument("--endpoint", required=True, help="an endpoint of endpoints.yaml, or a base URL (docs/served.md)")
    g.add_argument("--chat-model", required=True, help="the model name the endpoint knows")
    g.add_argument("--questions", type=int, default=None, help="questions to ask for in all (default 20)")
    g.add_argument(
        "--for-fall",
        type=float,
        metavar="X",
        help="ask for as many questions as the gate needs to see a fall of X (0 to 1) with power 0.8 over --checks "
        "checks (`questions_for_fall`, docs/statistics.md), instead of --questions; says whether those kept reach it",
    )
    g.add_argument(
        "--checks",
        type=int,
        default=1,
        help="with --for-fall: the checks the gate will make (configurations × watched metrics; default 1)",
    )
    g.add_argument("--budget", type=int, metavar="R", help="the most requests to make: refused before any where more")
    g.add_argument("--per-passage", type=int, default=2, help="questions asked of one passage (default 2)")
    g.add_argument(
        "--types",
        default=",".join(gg.QUESTION_TYPES),
        help=f"question types, comma-separated: {', '.join(gg.QUESTION_TYPES)}",
    )
    g.add_argument("--seed", type=int, default=0, help="seed of the sampling (and sent to the model); default 0")
    g.add_argument("--passage-chars", type=int, default=gg.PASSAGE_CHARS, help="longest passage, in characters")
    g.add_argument(
        "--dedup-similarity",
        type=float,
        default=gg.DEDUP_SIMILARITY,
        help=f"drop a question this cosine-similar to one kept before (default {gg.DEDUP_SIMILARITY}, all-MiniLM-L6-v2)",
    )
    g.add_argument(
        "--excerpt-similarity",
        type=float,
        default=gg.EXCERPT_SIMILARITY,
        help=f"drop a question whose excerpts are less similar to it (default {gg.EXCERPT_SIMILARITY})",
    )
    g.add_argument("--timeout", type=float, default=120.0, help="seconds per request, its whole answer included")
    g.add_argument("--max-retries", type=int, default=6, help="tries again after 429, 5xx or a dropped connection")
    g.add_argument("--yes", action="store_true", help=f"go ahead over {gg.ASK_YES_TOKENS:,} estimated tokens")
    add_anchor_similarity(g)
    add_html(g)
    g.set_defaults(func=generate)


def generate(args: argparse.Namespace, warehouse: WarehouseAccess) -> int:
    import datetime
    import json

    target = None
    if args.for_fall is not None:
        if args.questions is not None:
            raise InputError("give --questions N or --for-fall X, not both")
        number_in(args.for_fall, 0.001, 0.999, "--for-fall")
        number_in(args.checks, 1, 1_000_000, "--checks")
        target = questions_for_fall(args.for_fall, 0.0, args.checks)
        args.questions = target
    elif args.checks != 1:
        raise InputError("--checks goes with --for-fall X")
    args.questions = 20 if args.questions is None else args.questions
    number_in(args.questions, 1, gg.MAX_QUESTIONS, "--questions")
    if args.budget is not None:
        number_in(args.budget, 1, gg.MAX_QUESTIONS, "--budget")
    number_in(args.per_passage, 1, gg.MAX_PER_PASSAGE, "--per-passage")
    number_in(args.passage_chars, 100, gg.MAX_PASSAGE_CHARS, "--passage-chars")
    number_in(args.dedup_similarity, -1, 1, "--dedup-similarity")
    number_in(args.excerpt_similarity, -1, 1, "--excerpt-similarity")
    number_in(args.timeout, 0.001, 86400, "--timeout")
    number_in(args.max_retries, 0, 100, "--max-retries")
    types = gg.check_types(args.types.split(","))
    similarity = (
        ANCHOR_SIMILARITY if args.anchor_similarity is None else check_anchor_similarity(args.anchor_similarity)
    )
    out = Path(args.out)
    names = {
        "--out": out,
        "the provenance record": out.with_name(f"{out.stem}.provenance.json"),
        "the review CSV": out.with_name(f"{out.stem}.review.csv"),
        "the review page": out.with_name(f"{out.stem}.review.html"),
    }
    paths_out = {w: check_output(p, (args.corpus_dir,), what=w) for w, p in names.items()}
    chat = Chat(
        args.endpoint,
        args.chat_model,
        cache_dir=paths.home() / "cache" / "chat",
        seed=args.seed,
        timeout=args.timeout,
        max_retries=args.max_retries,
    )
    chat.client()  # the endpoint and its key, checked before any work
    docs = load_documents(Path(args.corpus_dir), html=args.html or "full")
    texts = {d: t for d, t in docs.texts.items() if t.strip()}
    pool = gg.passages(texts, args.passage_chars)
    if not pool:
        raise InputError("the corpus holds no text to ask questions about", args.corpus_dir)
    requests = gg.plan(pool, args.questions, args.per_passage, types, args.seed)
    if args.budget is not None and len(requests) > args.budget:
        raise InputError(
            f"{args.questions:,} questions take {len(requests):,} request(s) of {args.per_passage} question(s), more "
            f"than --budget {args.budget:,}: raise the budget or --per-passage, or ask for fewer"
        )
    tokens = gg.estimate(requests, texts)
    if target is not None:
        print(f"--for-fall {args.for_fall:g} over {args.checks} check(s): {target:,} questions (docs/statistics.md)")
    print(f"{len(requests)} request(s) to {args.chat_model} at {chat.url}: about {tokens:,} tokens sent and received")
    if tokens > gg.ASK_YES_TOKENS and not args.yes:
        raise InputError(f"about {tokens:,} tokens is more than {gg.ASK_YES_TOKENS:,}: pass --yes to go ahead")
    try:
        with progress.show_progress():  # a bar on a terminal; off one a line at least every 10 s
            proposals, unusable, beyond = gg.run_requests(requests, texts, chat)
    finally:
        chat.close()
    if not proposals:
        raise InputError(
            f"{chat.url} answered nothing usable: {len(unusable)} answer(s), none a JSON list of questions "
            f"({unusable[0]['reason'] if unusable else 'no answer'})"
        )
    embedder = Embedder(DEFAULT_MODEL, cache_dir=paths.cache_dir())
    with progress.show_progress():  # the questions and excerpts embedded to check them
        outcome = gg.validate(
            proposals, texts, embedder.embed, similarity, args.excerpt_similarity, args.dedup_similarity
        )
    outcome.unusable, outcome.beyond_asked = unusable, beyond
    if not outcome.kept:  # an empty gold set is no gold set: nothing is written
        c = outcome.counts()
        reasons = ", ".join(f"{n} {why}" for why, n in c["rejected_by_reason"].items() if n)
        raise InputError(
            f"no question kept: all {c['proposed']} proposed by {chat.url} were rejected ({reasons}); "
            f"{c['unusable_answers']} unusable answer(s)"
        )
    rows = gg.gold_rows(outcome.kept)
    review = gg.review_rows(rows, outcome.kept)
    provenance = {
        "generated_by": "chunkeval gold generate",
        "judged_by": "model",
        "model": args.chat_model,
        "endpoint": chat.url,
        "prompt_version": gg.PROMPT_VERSION,
        "seed": args.seed,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "corpus_dir": str(Path(args.corpus_dir).resolve()),
        "settings": {
            "questions": args.questions,
            "for_fall": args.for_fall,
            "checks": args.checks if args.for_fall is not None else None,
            "per_passage": args.per_passage,
            "types": list(types),
            "passage_chars": args.passage_chars,
            "anchor_similarity": similarity,
            "excerpt_similarity": args.excerpt_similarity,
            "dedup_similarity": args.dedup_similarity,
            "embedding_model": DEFAULT_MODEL,
        },
        "requests": {"made": chat.requests, "from_cache": chat.cached, "unusable": len(unusable)},
        "bounds": {
            "questions_per_answer": args.per_passage,
            "excerpts_per_question": gg.EXCERPTS_PER_QUESTION,
            "question_chars": gg.QUESTION_CHARS,
            "answer_chars": ANSWER_CHARS,
            "align_seconds": gg.ALIGN_SECONDS,
        },
        "tokens": {"sent": chat.sent_tokens, "received": chat.received_tokens},
        "counts": outcome.counts(),
        "rejected": [{k: v for k, v in r.items() if k != "excerpts"} for r in outcome.rejected],
        "unusable_answers": unusable,
    }
    write_texts(
        {
            paths_out["--out"]: csv_text(gg.GOLD_COLUMNS, rows),
            paths_out["the provenance record"]: json.dumps(provenance, indent=2, ensure_ascii=False) + "\n",
            paths_out["the review CSV"]: csv_text(gg.REVIEW_COLUMNS, review),
            paths_out["the review page"]: generated_html(review, outcome.kept, texts, str(out)),
        }
    )
    c = outcome.counts()
    reasons = ", ".join(f"{n} {why}" for why, n in c["rejected_by_reason"].items() if n) or "none"
    print(
        f"wrote {c['kept']} question(s) to {out} ({c['flagged']} flagged for review); rejected {c['rejected']}: "
        f"{reasons}; {c['unusable_answers']} unusable answer(s)"
    )
    print(
        f"tokens: {chat.sent_tokens:,} sent, {chat.received_tokens:,} received in {chat.requests} request(s) "
        f"({chat.cached} answered from the cache)"
    )
    print(f"review: {paths_out['the review CSV']} (an accept column) and {paths_out['the review page']}")
    if target is not None:
        short = target - c["kept"]
        print(
            f"for a fall of {args.for_fall:g}: {c['kept']:,} kept of the {target:,} needed"
            + (
                f"; ask again with --questions {-(-target * target // max(1, c['kept'])):,} (the answers paid for are "
                "read from the cache, not asked again)"
                if short > 0
                else ": enough"
            )
        )
    return 0


def accept(args: argparse.Namespace, warehouse: WarehouseAccess) -> int:
    source, review = Path(args.questions), Path(args.review)
    out = check_output(args.out, (source, review), what="--out")
    rows = list(read_csv_rows(source, ("query_id", "question", "references", "corpus_id")))
    marks = list(read_csv_rows(review, ("query_id", "accept")))
    kept = accepted(marks, rows, review, source)
    columns = list(rows[0][1]) if rows else ["query_id", "question", "references", "corpus_id"]
    prov = accepted_provenance(source, review, len(kept), len(rows))  # still a model's questions, now reviewed
    written = {out: csv_text(columns, kept)}
    if prov is not None:
        prov_path = check_output(out.with_name(f"{out.stem}.provenance.json"), (source, review), what="its provenance")
        written[prov_path] = prov
    write_texts(written)  # both, or neither
    print(f"wrote {len(kept)} of {len(rows)} question(s) to {out}: those the review accepts")
    return 0


def _review_paths(out: Path, review: str | None) -> tuple[Path, Path]:
    csv_path = Path(review) if review else out.with_name(f"{out.stem}.review.csv")
    return csv_path, csv_path.with_suffix(".html")


def _update_gold(args: argparse.Namespace) -> tuple[Path, tuple]:
    """The gold file `gold update` corrects and the inputs it reads (never written to): span gold
    (--questions and --corpus-dir), or document gold (--qrels, --queries and --corpus-dir, or --beir)."""
    kinds = [f for f, v in (("--questions", args.questions), ("--qrels", args.qrels), ("--beir", args.beir)) if v]
    if len(kinds) != 1:
        raise InputError("gold update takes one gold set: --questions (span gold), --qrels with --queries, or --beir")
    if args.beir:
        if args.corpus_dir or args.queries:
            raise InputError("--beir holds its corpus and queries: give neither --corpus-dir nor --queries")
        folder = Path(args.beir)
        return folder / "qrels" / f"{args.split}.tsv", (folder,)
    if not args.corpus_dir:
        raise InputError(f"{kinds[0]} needs --corpus-dir, the corpus the gold set is corrected for")
    if args.qrels and not args.queries:
        raise InputError("--qrels needs --queries, the queries it judges")
    if args.questions and args.queries:
        raise InputError("--queries goes with --qrels, not --questions")
    source = Path(args.questions or args.qrels)
    return source, (args.corpus_dir, *([args.queries] if args.queries else []))


def update(args: argparse.Namespace, warehouse: WarehouseAccess) -> int:
    source, inputs_read = _update_gold(args)
    out = Path(args.out)
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
    out, review_csv, review_page = (check_output(p, (source, *inputs_read), what=w) for w, p in names.items())
    exp = Experiment(
        corpus_dir=args.corpus_dir or "",
        questions=args.questions or "",
        qrels=args.qrels or "",
        queries=args.queries or "",
        beir=args.beir or "",
        split=args.split,
        corpus=tuple(split_flags(args.corpus, "--corpus")),
        html=args.html or "full",
        anchor_similarity=ANCHOR_SIMILARITY
        if args.anchor_similarity is None
        else check_anchor_similarity(args.anchor_similarity),
    )
    inputs = load_inputs(exp, remedy=False)  # says the summary line, once (not that gold update would help)
    counts = anchoring_counts(inputs.gold.anchoring)
    lines = gold_summary(inputs.gold, remedy=False)
    summary = lines[0] if lines else f"gold set {source.name}: every reference exact"
    if exp.doc_gold:
        text, review = corrected_qrels(source, inputs.gold)
        written = {
            out: text,
            review_csv: csv_text(QRELS_REVIEW_COLUMNS, review),
            review_page: qrels_review_html(review, str(source), str(out), summary),
        }
        said = (
            f"wrote the qrels of {inputs.gold.n_queries} query(ies) to {out}: {len(inputs.gold.left_out)} row(s) "
            f"naming a document or query that is gone left out, {counts['retired']} query(ies) retired"
        )
    else:
        columns, rows, review = corrected(source, inputs.gold, inputs.corpora)
        written = {
            out: csv_text(columns, rows),
            review_csv: csv_text(REVIEW_COLUMNS, review),
            review_page: review_html(review, str(source), str(out), summary),
        }
        moved = sum(1 for a in inputs.gold.anchoring if a.get("moved_from") and a["status"] != "retired")
        said = (
            f"wrote {len(rows)} question(s) to {out}: {counts['reanchored']} re-anchored"
            + (f" ({moved} moved to another document)" if moved else "")
            + f", {counts['approximate']} placed approximately, {counts['retired']} retired and left out; every "
            "question has its query_id"
        )
    for path in names.values():
        path.parent.mkdir(parents=True, exist_ok=True)
    write_texts(written)
    print(said)
    print(f"review: {review_csv} ({len(review)} change(s), an accept column) and {review_page}")
    return 0


def check(args: argparse.Namespace, warehouse: WarehouseAccess) -> int:
    check_at_least_one(args.chunk_size, "--chunk-size")
    check_at_least_one(args.limit, "--limit")
    exp = Experiment(
        corpus_dir=args.corpus_dir,
        questions=args.questions,
        corpus=tuple(split_flags(args.corpus, "--corpus")),
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
