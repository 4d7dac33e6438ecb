"""The report's drill-down into the chosen configuration's questions: a sortable per-query table whose
rows link to each question's view (its references in context, the chunks retrieved at the configuration's
k with the characters they share with a reference highlighted), the worst questions open. Every text is
escaped; the page stays one offline file."""

from __future__ import annotations

from html import escape

import pyarrow as pa

from chunkeval.errors import InputError
from chunkeval.report.inspect import CONTEXT, _Texts, item_html, references_by_query, retrieved_items
from chunkeval.report.sections import _num, _table
from chunkeval.vocabulary import CHUNKING_KEYS, CONFIG_KEYS

OPEN = 5  # the worst questions shown open
COLUMNS = ("span_recall", "span_precision", "span_iou", "mrr")


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
    questions, refs = references_by_query(wh, run_id)
    texts = _Texts(wh, run_id)
    metrics = [m for m in COLUMNS if m in per_query.column_names]
    order = sorted(rows, key=lambda r: (r.get("span_recall", 0) or 0, r["query_id"]))
    table, views = [], []
    for i, r in enumerate(order):
        qid = r["query_id"]
        table.append(
            [(f'<a href="#q-{i}">{escape(qid)}</a>', qid), escape(r["corpus_id"])]
            + [(_num(r[m]), r[m] if r[m] is not None else "") for m in metrics]
        )
        items = retrieved_items(lists.get(qid, []), refs.get(qid, []), texts)
        summary = f"{escape(qid)}: {escape(questions.get(qid) or '')} (span recall {_num(r.get('span_recall'))})"
        views.append(
            f'<details id="q-{i}"{" open" if i < OPEN else ""}><summary>{summary}</summary>'
            f"<p>References ({len(refs.get(qid, []))}), with {CONTEXT} characters of context:</p>"
            f"<ul>{''.join(_reference_html(ref, texts) for ref in refs.get(qid, []))}</ul>"
            f"<p>Retrieved at k = {chosen['k']}:</p><ol class=items>{''.join(item_html(it) for it in items)}</ol></details>"
        )
    header = ["query", "corpus", *metrics]
    return (
        f"{title}<p>The questions of this configuration, worst span recall first (the first {OPEN} open). "
        "Click a column to sort, a question to see its references in context and the chunks retrieved for it, "
        "the characters they share highlighted.</p>"
        f'<div class="scroll">{_table(header, table, "sortable")}</div>{"".join(views)}'
    )
