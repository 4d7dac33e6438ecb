"""The report's drill-down into the chosen configuration's questions: a sortable per-query table whose rows
link to each question's view, worst first by the run's default metric (`report.diff.default_metric`), the
worst questions open. Under span gold a view holds the question's references in context and the chunks
retrieved at the configuration's k with the characters they share with a reference highlighted; under
document gold (qrels) its judged documents (id, grade, the first characters of the text the run kept) and
the chunks retrieved at k with their document and grade, a chunk of a relevant document highlighted whole
(the qrels judge documents, not spans). Every text is escaped; the page stays one offline file."""

from __future__ import annotations

from html import escape

import pyarrow as pa

from chunkeval.errors import InputError
from chunkeval.report.diff import default_metric
from chunkeval.report.inspect import (
    CONTEXT,
    _Texts,
    doc_judgements,
    item_html,
    references_by_query,
    retrieved_items,
)
from chunkeval.report.sections import _num, _table
from chunkeval.vocabulary import CHUNKING_KEYS, CONFIG_KEYS

OPEN = 5  # the worst questions shown open
COLUMNS = ("span_recall", "span_precision", "span_iou", "mrr")
DOC_COLUMNS = ("doc_ndcg_at_k", "doc_recall_at_k", "doc_mrr", "doc_precision_at_k")
PREVIEW = 120  # characters of a judged document's text shown (its title comes first: BEIR's title + " " + text)


def _reference_html(ref: dict, texts: _Texts) -> str:
    start = max(0, ref["start"] - CONTEXT)
    before, inside = texts(ref["corpus_id"], start, ref["start"]), texts(ref["corpus_id"], ref["start"], ref["end"])
    after = texts(ref["corpus_id"], ref["end"], ref["end"] + CONTEXT)
    if inside is None:
        return (
            f"<li><code>{escape(ref['corpus_id'])}</code> [{ref['start']}, {ref['end']}): <em>text not kept</em></li>"
        )
    return (
        f"<li><code>{escape(ref['corpus_id'])}</code> [{ref['start']}, {ref['end']}): <div class=chunk>…{escape(before)}"
        f"<mark>{escape(inside)}</mark>{escape(after)}…</div></li>"
    )


def _spans_view(refs: list[dict], items: list[dict], texts: _Texts, k: int) -> str:
    return (
        f"<p>References ({len(refs)}), with {CONTEXT} characters of context:</p>"
        f"<ul>{''.join(_reference_html(ref, texts) for ref in refs)}</ul>"
        f"<p>Retrieved at k = {k}:</p><ol class=items>{''.join(item_html(it) for it in items)}</ol>"
    )


def _document_html(doc: dict, texts: _Texts) -> str:
    """One judged document: its id and grade, relevant ones marked, and the first characters of its text."""
    text = texts(doc["doc_id"], 0, PREVIEW + 1)
    shown = "<em>text not kept</em>" if text is None else escape(text[:PREVIEW]) + ("…" if len(text) > PREVIEW else "")
    verdict = f"<mark>relevant (grade {doc['grade']:g})</mark>" if doc["grade"] > 0 else f"grade {doc['grade']:g}"
    return f"<li><code>{escape(doc['doc_id'])}</code> {verdict}<div class=chunk>{shown}</div></li>"


def _documents_view(judged: list[dict], items: list[dict], texts: _Texts, k: int) -> str:
    relevant = sum(d["grade"] > 0 for d in judged)
    whole = [{**it, "overlaps": [[it["start"], it["end"]]] if it["relevant"] else []} for it in items]
    return (
        f"<p>Judged documents ({len(judged)}, {relevant} relevant), with their first {PREVIEW} characters:</p>"
        f"<ul>{''.join(_document_html(d, texts) for d in judged)}</ul>"
        f"<p>Retrieved at k = {k}, the chunks of relevant documents highlighted whole (the qrels judge documents):</p>"
        f"<ol class=items>{''.join(item_html(it) for it in whole)}</ol>"
    )


def drilldown(wh, run_id: str, chosen: dict, per_query: pa.Table) -> str:
    """The drill-down of the chosen configuration (an HTML fragment for the failure analysis)."""
    title = "<h3>Every question: what was retrieved</h3>"
    try:
        retrieved = wh.retrieved(run_id)
    except InputError as exc:
        return f"{title}<p>{escape(exc.message)}</p>"
    rows = [r for r in per_query.to_pylist() if all(r[k] == chosen[k] for k in CONFIG_KEYS if k in r)]
    group = tuple(chosen[k] for k in CHUNKING_KEYS)
    lists: dict[str, list[dict]] = {}
    for r in retrieved.to_pylist():
        if r["rank"] <= chosen["k"] and tuple(r[k] for k in CHUNKING_KEYS) == group:
            lists.setdefault(r["query_id"], []).append(r)
    judged = doc_judgements(wh, run_id)
    documents = judged is not None
    questions, refs = judged if documents else references_by_query(wh, run_id)
    texts = _Texts(wh, run_id)
    metric = default_metric(wh, run_id)
    named = metric.replace("_", " ")
    metrics = [m for m in (DOC_COLUMNS if documents else COLUMNS) if m in per_query.column_names]
    view = _documents_view if documents else _spans_view
    order = sorted(rows, key=lambda r: (r.get(metric) or 0, r["query_id"]))
    table, views = [], []
    for i, r in enumerate(order):
        qid = r["query_id"]
        table.append(
            [(f'<a href="#q-{i}">{escape(qid)}</a>', qid), escape(r["corpus_id"])]
            + [(_num(r[m]), r[m] if r[m] is not None else "") for m in metrics]
        )
        items = retrieved_items(lists.get(qid, []), refs.get(qid, []), texts, documents)
        summary = f"{escape(qid)}: {escape(questions.get(qid) or '')} ({named} {_num(r.get(metric))})"
        views.append(
            f'<details id="q-{i}"{" open" if i < OPEN else ""}><summary>{summary}</summary>'
            f"{view(refs.get(qid, []), items, texts, chosen['k'])}</details>"
        )
    header = ["query", "corpus", *metrics]
    shown = (
        "its judged documents and the chunks retrieved for it, those of relevant documents highlighted"
        if documents
        else "its references in context and the chunks retrieved for it, the characters they share highlighted"
    )
    return (
        f"{title}<p>The questions of this configuration, worst {named} first (the first {OPEN} open). "
        f"Click a column to sort, a question to see {shown}.</p>"
        f'<div class="scroll">{_table(header, table, "sortable")}</div>{"".join(views)}'
    )
