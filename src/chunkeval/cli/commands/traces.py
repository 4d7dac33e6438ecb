"""`chunkeval traces`: production's retrievals read from traces (`import`), a seeded stratified sample of them as
questions for any grid (`sample`), and production compared with a grid's configurations on the judged sample
(`compare`, with `--race` and `--budget`). docs/traces.md."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from chunkeval.cli.ages import parse_age
from chunkeval.cli.commands import summary, traces_compare
from chunkeval.cli.options import add_anchor_similarity, add_strict, number_in, whole_number
from chunkeval.cli.session import WarehouseAccess
from chunkeval.engine.gold.update import csv_text
from chunkeval.engine.inputs.anchoring import ANCHOR_SIMILARITY, check_anchor_similarity
from chunkeval.engine.inputs.corpus import load_documents
from chunkeval.engine.inputs.placement import PLACEMENTS, place_documents
from chunkeval.engine.inputs.trace_sample import sample_queries, strata_counts
from chunkeval.engine.inputs.traces import SKIP_REASONS, check_kept, combine, read_traces
from chunkeval.errors import InputError
from chunkeval.files import check_output, write_texts
from chunkeval.visible import visible

WAREHOUSE_SESSION = False  # import writes; sample and compare read and write once each
TRACE_SUFFIXES = (".json", ".jsonl", ".ndjson", ".parquet")
UNPLACED_LISTED = 100  # unplaced documents kept in the import's record (all are counted)


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "traces",
        help=summary("traces"),
    )
    tsub = p.add_subparsers(dest="traces_command", metavar="command", required=True)
    i = tsub.add_parser(
        "import",
        help="read OpenInference / GenAI retrieval spans (OTLP JSON, Phoenix's export) into the warehouse",
        description="Read the retrieval spans (OpenInference RETRIEVER and RERANKER, OpenTelemetry GenAI retrieval) "
        "of trace files (OTLP JSON as a collector's file exporter writes it, or Phoenix's span export as Parquet "
        "or JSON lines; a folder: every .json, .jsonl, .ndjson and .parquet file in it) into the warehouse as "
        "production: queries, ranked documents with scores, time, session and trace. With --corpus-dir each "
        "document is placed in the corpus (by id, else by its content, exactly or approximately). Unusable spans "
        "are skipped and counted (with --strict, the first is one line). Spans imported before are not imported "
        "again.",
    )
    i.add_argument("paths", nargs="+", metavar="PATH", help="trace files or folders of them")
    i.add_argument("--format", default="auto", choices=("auto", "otlp-json", "phoenix"), help="default: by content")
    i.add_argument("--corpus-dir", help="the team's corpus: place production's documents in it")
    add_anchor_similarity(
        i,
        "how similar (0 to 100) a span of the corpus must be to a document's content to place it "
        f"approximately (default {ANCHOR_SIMILARITY:g}; 100: exact only)",
    )
    add_strict(
        i,
        "the first span that would be skipped is an error (one line naming its file, line and span), and "
        "nothing is imported",
    )
    i.set_defaults(func=import_traces)
    s = tsub.add_parser(
        "sample",
        help="a seeded sample of production's queries, stratified by day and session, as a questions file",
        description="Draw a seeded sample of the distinct production queries of a time window, stratified by UTC "
        "day and session, and write it as a questions file (query_id, question, corpus_id, references []) for "
        "`chunkeval run --questions` and `gold judge --questions`, and beside it what production retrieved for "
        "each (<out>.production.jsonl) for `gold judge --production` and `traces compare`.",
    )
    s.add_argument("--out", required=True, help="the questions file to write (CSV)")
    s.add_argument("--since", help="the window's start: an ISO date or time (UTC), or an age (1d, 12h)")
    s.add_argument("--until", help="the window's end (exclusive): an ISO date or time (UTC); default now")
    s.add_argument("--size", type=whole_number, default=100, help="queries in the sample (default 100)")
    s.add_argument("--seed", type=whole_number, default=0, help="the sample's seed (default 0)")
    s.add_argument("--corpus-dir", help="read unplaced documents' text here (default: as imported)")
    s.set_defaults(func=sample)
    traces_compare.add_parser(tsub)
    return p


def trace_files(paths: list[str]) -> list[Path]:
    """The trace files named: files as given, folders by their files' suffixes (sorted); none is one line."""
    out: list[Path] = []
    for given in paths:
        if not str(given).strip():
            raise InputError("an empty PATH: name a trace file or a folder of them")
        path = Path(given)
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.suffix.lower() in TRACE_SUFFIXES and p.is_file())
            if not found:
                raise InputError(f"no trace file ({', '.join(TRACE_SUFFIXES)}) in the folder", path)
            out.extend(found)
        else:
            out.append(path)
    return out


def import_files(files: list[Path], fmt: str, strict: bool, corpus_dir, similarity, warehouse) -> dict:
    """Read `files`, place their documents in `corpus_dir` (where given) and record them in the warehouse
    `warehouse()` gives, opened only once everything is read and checked: what `traces import` and the
    `production` deployment do. Each distinct (document id, content) is placed once, whatever the number of spans
    that retrieved it. The import's row, with what was read."""
    traces = check_kept(combine([read_traces(f, fmt, strict) for f in files], strict), files)
    placed = placements(traces, corpus_dir, similarity)
    none = lambda col, fill: pc.fill_null(col, fill)  # noqa: E731 (a join matches no null key)
    docs = traces.documents
    keyed = docs.append_column("_id", none(docs.column("document_id"), NO_ID)).append_column(
        "_hash", none(docs.column("content_hash"), "")
    )
    documents = keyed.join(placed, ["_id", "_hash"], join_type="left outer").sort_by(
        [("span_id", "ascending"), ("rank", "ascending")]
    )
    documents = documents.select([*docs.column_names, "placement", "corpus_id", "start", "end", "similarity"])
    counts = {k: 0 for k in PLACEMENTS}
    for v in pc.value_counts(documents.column("placement")).to_pylist():
        counts[v["values"]] = v["counts"]
    gone = placed.filter(pc.equal(placed.column("placement"), "unplaced"))
    unplaced = sorted({(d if d != NO_ID else "", h) for d, h in zip(gone.column("_id").to_pylist(),
                                                                    gone.column("_hash").to_pylist())})  # fmt: skip
    record = {
        "files": [str(f.resolve()) for f in files],
        "spans_read": traces.read,
        "spans_skipped": traces.skipped,
        "corpus": str(Path(corpus_dir).resolve()) if corpus_dir else None,
        "placements": counts,
        "unplaced": [{"document_id": d, "content_hash": h} for d, h in unplaced[:UNPLACED_LISTED]],
    }
    row = warehouse().import_production(traces.spans, documents, record, traces.contents)
    return {"row": row, "traces": traces, "documents": documents, "counts": counts, "unplaced": unplaced,
            "corpus": record["corpus"]}  # fmt: skip


NO_ID = "\x00"  # a document without an id, as a join key


def placements(traces, corpus_dir, similarity) -> pa.Table:
    """Where each distinct (document id, content hash) of `traces` is placed in the corpus of `corpus_dir`
    (unplaced everywhere without one): _id, _hash (the join keys), placement, corpus_id, start, end, similarity."""
    docs = traces.documents
    distinct = docs.select(["document_id", "content_hash"]).group_by(["document_id", "content_hash"]).aggregate([])
    pairs = sorted(zip(distinct.column("document_id").to_pylist(), distinct.column("content_hash").to_pylist()),
                   key=lambda p: (p[0] or "", p[1] or ""))  # fmt: skip
    content = dict(
        zip(traces.contents.column("content_hash").to_pylist(), traces.contents.column("content").to_pylist())
    )
    rows = [{"document_id": d, "content": content.get(h)} for d, h in pairs]
    if corpus_dir:
        texts = load_documents(Path(corpus_dir), "full").texts
        rows = place_documents(rows, texts, ANCHOR_SIMILARITY if similarity is None else similarity)
    else:
        rows = [r | {"placement": "unplaced", "corpus_id": None, "start": None, "end": None, "similarity": None}
                for r in rows]  # fmt: skip
    return pa.table({
        "_id": pa.array([d if d is not None else NO_ID for d, _ in pairs], pa.string()),
        "_hash": pa.array([h or "" for _, h in pairs], pa.string()),
        "placement": pa.array([r["placement"] for r in rows], pa.string()),
        "corpus_id": pa.array([r["corpus_id"] for r in rows], pa.string()),
        "start": pa.array([r["start"] for r in rows], pa.int64()),
        "end": pa.array([r["end"] for r in rows], pa.int64()),
        "similarity": pa.array([r["similarity"] for r in rows], pa.float64()),
    })  # fmt: skip


def import_traces(args: argparse.Namespace, warehouse: WarehouseAccess) -> int:
    if args.anchor_similarity is not None:
        check_anchor_similarity(args.anchor_similarity, "--anchor-similarity")
    files = trace_files(args.paths)
    got = import_files(files, args.format, args.strict, args.corpus_dir, args.anchor_similarity,
                       lambda: warehouse(must_exist=False))  # fmt: skip
    row, traces, documents, counts, unplaced, corpus = (
        got[k] for k in ("row", "traces", "documents", "counts", "unplaced", "corpus")
    )
    kinds = {}
    for k in traces.spans.column("kind").to_pylist():
        kinds[k] = kinds.get(k, 0) + 1
    said = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) or "none"
    print(
        f"import {row['import_id']}: {traces.read:,} span(s) read in {len(files)} file(s); {traces.kept:,} retrieval "
        f"span(s) kept ({said}); {row['spans_kept']:,} new, {row['already_imported']:,} imported before"
    )
    if traces.skipped:
        print("skipped: " + "; ".join(f"{n:,} {SKIP_REASONS[r]}" for r, n in sorted(traces.skipped.items())))
        for e in traces.examples[:3]:
            print(
                f"  e.g. {visible(e['file'])}: line {e['line']}: span {visible(e['span_id'])}: {SKIP_REASONS[e['reason']]}"
            )
    queries = len(set(traces.spans.column("query_hash").to_pylist()))
    contents = traces.contents.num_rows
    empty = found_nothing(traces)
    print(f"{queries:,} distinct quer(ies), {documents.num_rows:,} retrieved document(s) of {contents:,} distinct "
          "content(s)" + (f"; {empty:,} retrieval span(s) found nothing (kept: an empty ranking)" if empty else ""))  # fmt: skip
    if corpus:
        print("placed in the corpus: " + ", ".join(f"{n:,} {s}" for s, n in counts.items()))
        if unplaced:
            shown = ", ".join(visible(d or h)[:60] for d, h in unplaced[:5])
            print(f"{len(unplaced):,} distinct document(s) not placed (listed in the import's record): {shown}")
    return 0


def found_nothing(traces) -> int:
    """The kept spans that retrieved no document: a query production answered with nothing, kept as such."""
    held = pc.is_in(traces.spans.column("span_id"), value_set=traces.documents.column("span_id").combine_chunks())
    return traces.kept - pc.sum(held).as_py() if traces.kept else 0


def _placed_schema(base):
    return pa.schema(
        list(base)
        + [pa.field("placement", pa.string()), pa.field("corpus_id", pa.string()), pa.field("start", pa.int64()),
           pa.field("end", pa.int64()), pa.field("similarity", pa.float64())]
    )  # fmt: skip


def parse_when(text: str | None, flag: str, now: datetime) -> datetime | None:
    """A window's edge: an ISO date or time (UTC), or an age back from now (`1d`, `12h`); naive UTC."""
    if text is None:
        return None
    try:
        try:
            when = datetime.fromisoformat(text)
        except ValueError:
            return now - parse_age(text, flag)
        return when.astimezone(UTC).replace(tzinfo=None) if when.tzinfo else when
    except OverflowError:  # an age or a zone that takes the time out of the calendar's years 1 to 9999
        raise InputError(f"{flag} takes a time within the years 1 to 9999, got {text!r}") from None


def production_rows(docs: list[dict], texts: dict[str, str] | None) -> list[dict]:
    """What production retrieved, as `gold judge --production` and `traces compare` read it: placed documents by
    their span; unplaced ones by their content under `production:<content hash>`."""
    out = []
    for d in docs:
        row = {"span_id": d["span_id"], "rank": d["rank"], "score": d["score"], "placement": d["placement"]}
        if d["placement"] != "unplaced" and d["corpus_id"] is not None and (texts is None or d["corpus_id"] in texts):
            out.append(row | {"corpus_id": d["corpus_id"], "start": d["start"], "end": d["end"]})
        elif d.get("content"):
            content = d["content"]
            out.append(row | {"corpus_id": f"production:{d['content_hash']}", "start": 0, "end": len(content),
                              "content": content})  # fmt: skip
    return out


def draw_sample(wh, since, until, size: int, seed: int, corpus_dir, paths: dict) -> dict:
    """Sample production's queries of [since, until) and write the questions (`paths["--out"]`) and what
    production retrieved for them (`paths["production"]`): what `traces sample` and the `production` deployment
    do. What was drawn."""
    spans = wh.production_spans(since, until).to_pylist()
    if not spans:
        raise InputError(f"no production span from {since or 'the first'} to {until or 'now'}: "
                         "import traces first (chunkeval traces import)")  # fmt: skip
    chosen = sample_queries(spans, size, seed)
    docs = wh.production_documents([s["span_id"] for s in chosen])
    texts = load_documents(Path(corpus_dir), "full").texts if corpus_dir else None
    by_span: dict[str, list[dict]] = {}
    for row in production_rows(docs, texts):
        by_span.setdefault(row["span_id"], []).append(row)
    rows, lines = [], []
    fallback = next((d["corpus_id"] for d in docs if d["corpus_id"]), None) or "production"
    for s in chosen:
        qid = f"prod-{s['query_hash']}"
        mine = by_span.get(s["span_id"], [])
        corpus_id = next((r["corpus_id"] for r in mine if not r["corpus_id"].startswith("production:")), fallback)
        rows.append({"query_id": qid, "question": s["query"], "corpus_id": corpus_id, "references": "[]",
                     "span_id": s["span_id"], "time": s["time"].isoformat(), "session_id": s["session_id"] or ""})  # fmt: skip
        lines.extend(json.dumps({"query_id": qid, **r}, ensure_ascii=False) for r in mine)
    columns = ("query_id", "question", "corpus_id", "references", "span_id", "time", "session_id")
    write_texts({paths["--out"]: csv_text(columns, rows), paths["production"]: "".join(x + "\n" for x in lines)})
    return {"spans": spans, "chosen": chosen}


def sample(args: argparse.Namespace, warehouse: WarehouseAccess) -> int:

    number_in(args.size, 1, 100_000, "--size")
    now = datetime.now(UTC).replace(tzinfo=None)
    since, until = parse_when(args.since, "--since", now), parse_when(args.until, "--until", now)
    if since is not None and since >= (until or now):
        raise InputError(f"--since ({since}) must come before --until ({until or 'now'}): the window is empty")
    if not args.out.strip():
        raise InputError("--out names the questions file to write, got ''")
    out = Path(args.out)
    beside = out.with_name(f"{out.stem}.production.jsonl")
    paths = {"--out": check_output(out, [args.corpus_dir]), "production": check_output(beside, [args.corpus_dir])}
    got = draw_sample(warehouse(), since, until, args.size, args.seed, args.corpus_dir, paths)
    spans, chosen = got["spans"], got["chosen"]
    days = ", ".join(f"{d}: {n}" for d, n in strata_counts(chosen).items())
    distinct = len({s["query_hash"] for s in spans})
    print(f"sampled {len(chosen)} of {distinct:,} distinct production quer(ies) ({len(spans):,} span(s)) with seed "
          f"{args.seed}, by day and session ({days})")  # fmt: skip
    print(f"wrote {out} (questions for `chunkeval run --questions` and `gold judge --questions`) and {beside} "
          "(what production retrieved: `gold judge --production`, `traces compare`)")  # fmt: skip
    return 0


def window_of(days: float, now: datetime | None = None) -> tuple[datetime, datetime]:
    """The last `days` days up to now (naive UTC): the production deployment's window."""
    now = now or datetime.now(UTC).replace(tzinfo=None)
    return now - timedelta(days=days), now
