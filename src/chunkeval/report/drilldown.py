"""The report's drill-down into the chosen configuration's questions: a sortable per-query table whose rows
link to each question's view, worst first by the run's default metric (`report.diff.default_metric`), all
folded, each drawn by the page's script when opened from one embedded JSON blob. Under span gold a view holds the question's references in context and the chunks
retrieved at the configuration's k with the characters they share with a reference highlighted; under
document gold (qrels) its judged documents (id, grade, the first characters of the text the run kept) and
the chunks retrieved at k with their document and grade, a chunk of a relevant document highlighted whole
(the qrels judge documents, not spans). Every text is escaped or a DOM text node; the page stays one offline file."""

from __future__ import annotations

import json
from html import escape

import pyarrow as pa
import pyarrow.compute as pc

from chunkeval.analysis.comparisons import select
from chunkeval.errors import InputError
from chunkeval.report.diff import default_metric
from chunkeval.report.inspect import (
    CONTEXT,
    _Texts,
    doc_judgements,
    overlaps,
    references_by_query,
)
from chunkeval.report.sections import _num, _table
from chunkeval.stats.power import CEILING
from chunkeval.vocabulary import CHUNKING_KEYS, CONFIG_KEYS

OPEN = 5  # the worst questions the overview links to
COLUMNS = ("span_recall", "span_precision", "span_iou", "mrr")
DOC_COLUMNS = ("doc_ndcg_at_k", "doc_recall_at_k", "doc_mrr", "doc_precision_at_k")
PREVIEW = 120  # characters of a judged document's text shown (its title comes first: BEIR's title + " " + text)


def _needed(ranges: dict[str, list[tuple[int, int]]], texts: _Texts) -> dict[str, list[list]]:
    """The corpus text the views show, each character once: per corpus (or document) the merged ranges as
    `[start, text]` (a range cut short where its text ends; none where the run kept no text)."""
    pieces: dict[str, list[list]] = {}
    for corpus_id, spans in ranges.items():
        merged: list[list[int]] = []
        for s, e in sorted(spans):
            if merged and s <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], e)
            else:
                merged.append([s, e])
        for s, e in merged:
            text = texts(corpus_id, s, e)
            if text is not None:
                pieces.setdefault(corpus_id, []).append([s, text])
    return pieces


def embedded(data: dict) -> str:
    """`data` as JSON in a `<script type="application/json">` (never run: the CSP need not allow it), with
    `<`, `>` and `&` written as JSON escapes so that no text in it can close the element."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return f'<script type="application/json" id="questions-data">{text}</script>'


def _at_ceiling(value) -> bool:
    """A question at or near 1 (`CEILING`) is never among the worst, however few others fall below it."""
    return value is not None and value >= CEILING


def drilldown(wh, run_id: str, chosen: dict, per_query: pa.Table) -> tuple[str, list[dict]]:
    """The drill-down of the chosen configuration (an HTML fragment for the failure analysis), and its
    worst questions first `{anchor, query_id, question, value, metric}` (the overview links to them).

    The fragment holds the sortable table and one closed `<details>` per question, inside one closed
    `<details>`; what a question's view shows is one JSON blob (`embedded`: its references or judged
    documents, its retrieved chunks as offsets, and the corpus text they need, each character once), drawn
    by the page's script when the question is opened (`report.html.SCRIPT`, with DOM text nodes: nothing in
    the data is ever parsed as HTML)."""
    title = "<h3>Every question: what was retrieved</h3>"
    rows = select(per_query, {k: chosen[k] for k in CONFIG_KEYS if k in per_query.column_names}).to_pylist()
    metric = default_metric(wh, run_id)
    order = sorted(rows, key=lambda r: (r.get(metric) or 0, r["query_id"]))
    try:
        retrieved = wh.retrieved(run_id)
    except InputError as exc:  # recorded without its retrieved lists: the worst questions, with nothing to open
        questions = {r["query_id"]: r["question"] for r in wh.references(run_id).to_pylist()}
        worst = [
            {
                "anchor": None,
                "query_id": r["query_id"],
                "question": questions.get(r["query_id"]) or "",
                "value": r.get(metric),
                "metric": metric,
            }
            for r in order[:OPEN]
            if not _at_ceiling(r.get(metric))
        ]
        return f"{title}<p>{escape(exc.message)}</p>", worst
    mine = select(retrieved, {k: chosen[k] for k in CHUNKING_KEYS if k in retrieved.column_names})
    lists: dict[str, list[dict]] = {}
    for r in mine.filter(pc.less_equal(mine["rank"], chosen["k"])).to_pylist():
        lists.setdefault(r["query_id"], []).append(r)
    judged = doc_judgements(wh, run_id)
    documents = judged is not None
    questions, refs = judged if documents else references_by_query(wh, run_id)
    named = metric.replace("_", " ")
    metrics = [m for m in (DOC_COLUMNS if documents else COLUMNS) if m in per_query.column_names]
    table, views, data, ranges, worst = [], [], [], {}, []
    for i, r in enumerate(order):
        qid = r["query_id"]
        table.append(
            [(f'<a href="#q-{i}">{escape(qid)}</a>', qid), escape(r["corpus_id"])]
            + [(_num(r[m]), r[m] if r[m] is not None else "") for m in metrics]
        )
        question = questions.get(qid) or ""
        views.append(
            f'<details id="q-{i}" data-q="{i}"><summary>{escape(qid)}: {escape(question)} '
            f"({named} {_num(r.get(metric))})</summary></details>"
        )
        mine = refs.get(qid, [])
        if documents:
            shown = [[d["doc_id"], d["grade"]] for d in mine]
            for d in mine:
                ranges.setdefault(d["doc_id"], []).append((0, PREVIEW + 1))
        else:
            shown = [[ref["corpus_id"], ref["start"], ref["end"]] for ref in mine]
            for ref in mine:
                ranges.setdefault(ref["corpus_id"], []).append((max(0, ref["start"] - CONTEXT), ref["end"] + CONTEXT))
        items = []
        for it in sorted(lists.get(qid, []), key=lambda x: x["rank"]):
            ranges.setdefault(it["corpus_id"], []).append((it["start"], it["end"]))
            marks = [[it["start"], it["end"]]] if it["relevant"] else []
            if not documents:
                marks = overlaps(it["corpus_id"], it["start"], it["end"], mine)
            pages = [it["first_page"], it["last_page"]] if it.get("first_page") is not None else None
            items.append(
                [
                    it["rank"],
                    it["corpus_id"],
                    it["start"],
                    it["end"],
                    it["score"],
                    bool(it["relevant"]),
                    it["grade"],
                    marks,
                    pages,
                ]
            )
        data.append([shown, items])
        if len(worst) < OPEN and i < OPEN and not _at_ceiling(r.get(metric)):
            worst.append(
                {"anchor": f"q-{i}", "query_id": qid, "question": question, "value": r.get(metric), "metric": metric}
            )
    blob = {
        "k": chosen["k"],
        "documents": documents,
        "context": CONTEXT,
        "preview": PREVIEW,
        "questions": data,
        "texts": _needed(ranges, _Texts(wh, run_id)),
    }
    header = ["query", "corpus", *metrics]
    shown = (
        "its judged documents and the chunks retrieved for it, those of relevant documents highlighted"
        if documents
        else "its references in context and the chunks retrieved for it, the characters they share highlighted"
    )
    return (
        f'{title}<details id="questions"><summary>All {len(order)} questions of this configuration, worst {named} '
        f"first</summary><p>Click a column to sort, a question to see {shown}.</p>"
        f'<div class="scroll">{_table(header, table, "sortable")}</div>{"".join(views)}{embedded(blob)}</details>'
    ), worst
