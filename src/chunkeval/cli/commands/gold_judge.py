"""`chunkeval gold judge`: graded relevance where there is no gold: a chat model grades the passages a recorded
run retrieved for a file of questions (docs/gold.md, "Judge a run's passages")."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from chunkeval import paths, progress
from chunkeval.cli.options import check_at_least_one, number_in
from chunkeval.cli.session import WarehouseAccess
from chunkeval.engine.gold import judge as gj
from chunkeval.engine.gold.chat import Chat
from chunkeval.engine.gold.update import csv_text
from chunkeval.engine.inputs.corpus import load_documents
from chunkeval.engine.inputs.document_gold import read_qrels
from chunkeval.engine.inputs.span_gold import load_span_gold
from chunkeval.engine.inputs.trace_sample import read_production
from chunkeval.errors import InputError
from chunkeval.files import check_output, field, write_texts
from chunkeval.visible import visible


def add_parser(gsub) -> None:
    j = gsub.add_parser(
        "judge",
        help="graded relevance where there is no gold: a chat model grades 0-3 the passages a recorded run retrieved",
        description="Pool the chunks every configuration of a recorded run retrieved for the questions of --questions "
        "down to --depth, and ask a chat model behind an OpenAI-compatible /chat/completions endpoint to grade each "
        f"0-3 (prompt {gj.PROMPT_VERSION}, in the manner of UMBRELA; docs/gold.md). Writes the judged passages as "
        "character spans (--out), document qrels (.qrels.tsv) with the questions (.queries.jsonl) for "
        "`chunkeval run --queries --qrels`, chunk qrels of the run's chunkings (.chunk_qrels.jsonl) and a provenance "
        "record (.provenance.json) that marks them judged by a model. With --human, the judge's agreement with human "
        "gold for the same questions.",
    )
    j.add_argument("--questions", required=True, help="CSV with query_id and question (references are not read)")
    j.add_argument("--run", required=True, help="a completed run over those questions (run id)")
    j.add_argument("--out", required=True, help="the judged passages: a new CSV file; the others are beside it")
    j.add_argument("--endpoint", required=True, help="an endpoint of endpoints.yaml, or a base URL (docs/served.md)")
    j.add_argument("--chat-model", required=True, help="the model name the endpoint knows")
    j.add_argument("--depth", type=int, default=gj.DEPTH, help=f"pool each list down to this rank (default {gj.DEPTH})")
    j.add_argument(
        "--min-grade",
        type=int,
        default=gj.MIN_GRADE,
        help=f"the lowest grade that is relevant, 1 to 3 (default {gj.MIN_GRADE}); lower grades are written 0",
    )
    j.add_argument("--human", help="human gold for the same questions: a span gold CSV, or qrels (BEIR TSV or TREC)")
    j.add_argument("--corpus-dir", help="read documents here where the run kept no copy of its texts")
    j.add_argument(
        "--production",
        help="what production retrieved for the questions (`traces sample`'s <out>.production.jsonl): its passages "
        "join the pool (docs/traces.md)",
    )
    j.add_argument("--timeout", type=float, default=120.0, help="seconds per request, its whole answer included")
    j.add_argument("--max-retries", type=int, default=6, help="tries again after 429, 5xx or a dropped connection")
    j.add_argument("--yes", action="store_true", help="go ahead over the estimate's limit of requests")
    j.set_defaults(func=judge)


ASK_YES_REQUESTS = 5000  # a pool of more passages asks for --yes
log = logging.getLogger("chunkeval")


def _texts(wh, run_id: str, documents: set[str], corpus_dir: str | None) -> dict[str, str]:
    cache: dict = {}
    texts = {d: wh.corpus_text(run_id, d, cache) for d in sorted(documents)}
    missing = [d for d, t in texts.items() if t is None]
    if missing and corpus_dir:
        found = load_documents(Path(corpus_dir), "full").texts
        texts.update({d: found[d] for d in missing if d in found})
        missing = [d for d in missing if d not in found]
    if missing:
        raise InputError(
            f"run {run_id} kept no copy of document {missing[0]!r} ({len(missing)} missing): pass --corpus-dir"
        )
    return texts


def _human(path: str, verdicts: list[dict], texts: dict[str, str], relevance: str) -> tuple[list, bool]:
    """Each verdict's human grade (None where the human gold does not judge it) and whether it is graded."""
    if Path(path).suffix.lower() == ".csv":
        return gj.human_span_grades(verdicts, load_span_gold(Path(path), texts, set(texts)), relevance), False
    qrels: dict[str, dict[str, float]] = {}
    for _, q, d, g in read_qrels(Path(path)):
        qrels.setdefault(q, {})[d] = g
    return gj.human_qrels_grades(verdicts, qrels), True


def judge(args: argparse.Namespace, warehouse: WarehouseAccess) -> int:
    import datetime
    import json

    check_at_least_one(args.depth, "--depth")
    number_in(args.min_grade, 1, 3, "--min-grade")
    number_in(args.timeout, 0.001, 86400, "--timeout")
    number_in(args.max_retries, 0, 100, "--max-retries")
    out = Path(args.out)
    inputs = [args.questions] + [p for p in (args.human, args.corpus_dir, args.production) if p]
    names = {
        "--out": out,
        "the document qrels": out.with_name(f"{out.stem}.qrels.tsv"),
        "the queries file": out.with_name(f"{out.stem}.queries.jsonl"),
        "the chunk qrels": out.with_name(f"{out.stem}.chunk_qrels.jsonl"),
        "the provenance record": out.with_name(f"{out.stem}.provenance.json"),
    }
    paths_out = {w: check_output(p, inputs, what=w) for w, p in names.items()}
    questions = gj.read_questions(Path(args.questions))
    for q in questions:  # the qrels are TSV, whose tabs and line breaks no id may hold: refused before any request
        field(q, "\t", "query_id", args.questions)
    wh = warehouse()
    run = wh.run(args.run)  # an unknown run id is one line
    settings = json.loads(run.get("settings") or "{}")
    relevance = settings.get("relevance") or "overlap"
    retrieved = wh.retrieved(args.run, list(questions)).to_pylist()
    if not retrieved:
        raise InputError(f"run {args.run} retrieved nothing for any question of {args.questions}: judge its own run")
    production, production_texts = read_production(args.production, questions) if args.production else ([], {})
    asked = {r["query_id"] for r in retrieved + production}
    pooled = gj.pool(retrieved + production, questions, args.depth)
    for p in pooled:
        field(p.corpus_id, "\t", "document id", f"run {args.run}")
    canaries = gj.canaries(pooled, questions)
    chat = Chat(
        args.endpoint,
        args.chat_model,
        cache_dir=paths.home() / "cache" / "chat",
        timeout=args.timeout,
        max_retries=args.max_retries,
    )
    chat.client()  # the endpoint and its key, checked before any work
    texts = _texts(wh, args.run, {p.corpus_id for p in pooled} - set(production_texts), args.corpus_dir)
    texts |= production_texts
    requests = len(pooled) + len(canaries)
    print(
        f"{len(pooled)} passage(s) pooled from run {args.run} at depth {args.depth} for {len(asked)} of "
        f"{len(questions)} question(s), and {len(canaries)} canary passage(s): {requests} request(s) to "
        f"{visible(args.chat_model)} at {chat.url}"
    )
    if requests > ASK_YES_REQUESTS and not args.yes:
        raise InputError(f"{requests:,} requests is more than {ASK_YES_REQUESTS:,}: pass --yes to go ahead")
    try:
        with progress.show_progress():  # a bar on a terminal; off one a line at least every 10 s
            verdicts, unusable = gj.judge(pooled, questions, texts, chat)
            canary_verdicts, _ = gj.judge(canaries, questions, texts, chat, what="judging the canaries")
    finally:
        chat.close()
    canary = gj.canary_report(canary_verdicts, len(canaries), args.min_grade)
    if not verdicts:
        raise InputError(
            f"{chat.url} answered nothing usable: {len(unusable)} answer(s), none a grade from 0 to 3 "
            f"({unusable[0]['reason'] if unusable else 'no answer'})"
        )
    qrels = gj.doc_qrels(verdicts, args.min_grade)
    chunks = sorted({(r["query_id"], str(r["corpus_id"]), int(r["start"]), int(r["end"])) for r in retrieved})
    grades, judged = gj.chunk_grades(verdicts, chunks, relevance)
    chunk_qrels: dict[str, dict[str, int]] = {}
    for (q, doc, s, e), g, j in zip(chunks, grades.tolist(), judged.tolist()):
        if j:
            chunk_qrels.setdefault(q, {})[f"{doc}:{s}-{e}"] = g if g >= args.min_grade else 0
    agreement = None
    if args.human:
        human, graded = _human(args.human, verdicts, texts, relevance)
        both = [(v["grade"], h) for v, h in zip(verdicts, human) if h is not None]
        agreement = gj.agreement([a for a, _ in both], [b for _, b in both], args.min_grade, graded) | {
            "human_gold": str(Path(args.human).resolve()),
            "human_graded": graded,
        }
    by_grade = {str(g): sum(v["grade"] == g for v in verdicts) for g in gj.GRADES}
    provenance = {
        "kind": "judged",
        "judged_by": "model",
        "model": args.chat_model,
        "endpoint": chat.url,
        "prompt_version": gj.PROMPT_VERSION,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "questions": str(Path(args.questions).resolve()),
        "run_id": args.run,
        "production": str(Path(args.production).resolve()) if args.production else None,
        "settings": {"depth": args.depth, "min_grade": args.min_grade, "relevance": relevance},
        "counts": {
            "pooled": len(pooled),
            "pooled_from_production": len(
                {(p["query_id"], p["corpus_id"], p["start"], p["end"]) for p in production if p["rank"] <= args.depth}
            ),  # fmt: skip
            "judged": len(verdicts),
            "unusable": len(unusable),
            "by_grade": by_grade,
            "flagged_instruction_like": sum(1 for v in verdicts if v["flag"]),
        },
        "canaries": canary,
        "requests": {"made": chat.requests, "from_cache": chat.cached},
        "tokens": {"sent": chat.sent_tokens, "received": chat.received_tokens},
        "agreement": agreement,
        "unusable_answers": unusable,
    }
    rows = [v | {"question": questions[v["query_id"]]} for v in gj.verdict_rows(verdicts, args.chat_model)]
    qrels_tsv = "query-id\tcorpus-id\tscore\n" + "".join(
        f"{field(q, chr(9), 'query_id')}\t{field(d, chr(9), 'document id')}\t{g}\n"
        for q, docs in qrels.items()
        for d, g in docs.items()
    )
    dumps = lambda obj: json.dumps(obj, ensure_ascii=False)  # noqa: E731
    write_texts(
        {
            paths_out["--out"]: csv_text(("query_id", "question", *gj.VERDICT_COLUMNS[1:]), rows),
            paths_out["the document qrels"]: qrels_tsv,
            paths_out["the queries file"]: "".join(dumps({"_id": q, "text": questions[q]}) + "\n" for q in qrels),
            paths_out["the chunk qrels"]: "".join(
                dumps({"query_id": q, "query": questions[q], "relevant_chunk_ids": ids}) + "\n"
                for q, ids in chunk_qrels.items()
            ),
            paths_out["the provenance record"]: json.dumps(provenance, indent=2, ensure_ascii=False) + "\n",
        }
    )
    grades_said = ", ".join(f"{n} graded {g}" for g, n in by_grade.items())
    print(
        f"wrote {len(verdicts)} judged passage(s) to {out} ({grades_said}); {len(unusable)} unusable answer(s), "
        "left unjudged (not relevant)"
    )
    print(
        f"tokens: {chat.sent_tokens:,} sent, {chat.received_tokens:,} received in {chat.requests} request(s) "
        f"({chat.cached} answered from the cache)"
    )
    flagged = provenance["counts"]["flagged_instruction_like"]
    if flagged:
        print(f"{flagged} judged passage(s) hold instruction-like text: flagged in {out} (column flag)")
    if canary["graded"]:
        print(
            f"canaries: {canary['graded_relevant']} of {canary['graded']} canary passage(s) graded relevant "
            f"({canary['rate']:.0%}; passages of other documents, known not relevant)"
        )
    if canary["warning"]:
        log.warning(
            "the judge graded %d of %d canary passages relevant (%.0f%%, more than %.0f%%): it may be obeying text in "
            "the passages or grading everything high; do not trust these verdicts before looking (docs/gold.md)",
            canary["graded_relevant"],
            canary["graded"],
            100 * canary["rate"],
            100 * gj.CANARY_RATE,
        )
    if agreement is not None:
        wk = "n/a (binary human gold)" if agreement["weighted_kappa"] is None else agreement["weighted_kappa"]
        print(
            f"agreement with {args.human} on {agreement['passages']} passage(s): quadratic weighted kappa {wk}, "
            f"kappa on relevant (grade >= {args.min_grade}) {agreement['kappa_relevant']}"
        )
        print(
            "confusion (judge grade: human grade = passages): "
            + "; ".join(
                f"{a}: " + ", ".join(f"{b}={n}" for b, n in r.items()) for a, r in agreement["confusion"].items()
            )
        )
    print(
        f"judged by a model: run it as document gold with --queries {paths_out['the queries file']} "
        f"--qrels {paths_out['the document qrels']} (runs record the gold kind `judged`)"
    )
    return 0
