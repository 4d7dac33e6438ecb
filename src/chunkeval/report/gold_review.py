"""The HTML view of `chunkeval gold update`'s review file: each change to the gold set on one self-contained
page (no script, no link out), every value escaped, the old and the new content side by side."""

from __future__ import annotations

from html import escape

STYLE = (
    "body{font-family:system-ui,sans-serif;margin:1.5em;max-width:80em}table{border-collapse:collapse}"
    "td,th{border:1px solid #ccc;padding:.3em .5em;vertical-align:top;text-align:left}"
    "td.text{max-width:30em;white-space:pre-wrap}tr.retired td{background:#fdecea}"
    "tr.approximate td{background:#fff8e1}"
)
HEADINGS = {"reanchored": "re-anchored", "approximate": "placed approximately", "retired": "retired"}


def review_html(review: list[dict], source: str, out: str, summary: str) -> str:
    """The page: what the update did (`summary`), then one row per change of the review CSV."""
    heads = ("query", "document", "change", "similarity", "offsets", "old content", "new content", "why", "accept")
    rows = []
    for r in review:
        place = f"[{r['old_start']}, {r['old_end']})" + (
            f" → [{r['new_start']}, {r['new_end']})" if r["new_start"] != "" else ""
        )
        cells = [
            escape(str(r["query_id"])),
            escape(str(r["corpus_id"])),
            escape(HEADINGS.get(r["status"], r["status"])),
            f"{r['similarity']:g}",
            escape(place),
            escape(r["old_content"]),
            escape(r["new_content"] or "–"),
            escape(r["reason"]),
            escape(r["accept"]) or "?",
        ]
        tds = "".join(f'<td class="text">{c}</td>' if i in (5, 6) else f"<td>{c}</td>" for i, c in enumerate(cells))
        rows.append(f'<tr class="{escape(r["status"])}">{tds}</tr>')
    return _page(heads, rows, source, out, summary, "every reference is where its gold set says")


def qrels_review_html(review: list[dict], source: str, out: str, summary: str) -> str:
    """The page of a qrels update: each qrels row left out (its document or query gone) and each query retired."""
    heads = ("query", "qrels row", "document", "change", "why", "accept")
    rows = []
    for r in review:
        cells = [r["query_id"], r["row"], r["doc_id"] or "–", r["status"], r["reason"], r["accept"] or "?"]
        tds = "".join(f"<td>{escape(str(c))}</td>" for c in cells)
        rows.append(f'<tr class="{"retired" if r["status"] == "retired" else "approximate"}">{tds}</tr>')
    return _page(heads, rows, source, out, summary, "every qrels row names a document and a query that are there")


def _page(heads, rows: list[str], source: str, out: str, summary: str, unchanged: str) -> str:
    head = "".join(f"<th>{h}</th>" for h in heads)
    table = f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>gold set review: {escape(source)}'
        f"</title><style>{STYLE}</style></head><body><h1>Gold set review</h1>"
        f"<p>{escape(summary)}</p><p>The corrected gold set <code>{escape(out)}</code> holds every change below; "
        f"the input <code>{escape(source)}</code> is unchanged. Mark each row of the review CSV's <code>accept</code> "
        "column yes or no, and correct by hand in the new file what you do not accept.</p>"
        f"{table if rows else f'<p>Nothing changed: {unchanged}.</p>'}</body></html>"
    )


def _in_context(text: str, refs: list[dict], reach: int = 200) -> str:
    """The document's text around its references, each reference marked (<mark>), every part escaped."""
    spans = sorted((r["start_index"], r["end_index"]) for r in refs)
    start, end = max(0, spans[0][0] - reach), min(len(text), spans[-1][1] + reach)
    parts, at = ["…" if start else ""], start
    for s, e in spans:
        s = max(s, at)
        parts += [escape(text[at:s]), f"<mark>{escape(text[s:e])}</mark>"]
        at = max(at, e)
    parts += [escape(text[at:end]), "…" if end < len(text) else ""]
    return "".join(parts)


def generated_html(review: list[dict], kept: list[dict], texts: dict[str, str], out: str) -> str:
    """The review page of `chunkeval gold generate`: each question with its excerpts highlighted in their
    document, its similarities, what is flagged, and the accept value the review CSV starts with."""
    items = []
    for r, k in zip(review, kept):
        flag = f'<p class="flag">{escape(r["flag"])}</p>' if r["flag"] else ""
        items.append(
            f"<section><h2>{escape(str(r['query_id']))} · {escape(r['type'])} · {escape(r['corpus_id'])}</h2>"
            f"<p class=q>{escape(r['question'])}</p>{flag}"
            f"<p>excerpt similarity {r['excerpt_similarity']}, nearest kept question {r['nearest_similarity']}; "
            f"accept: {escape(r['accept']) or '?'}</p>"
            f'<div class="text">{_in_context(texts[k["document"]], k["references"])}</div></section>'
        )
    style = STYLE + "mark{background:#ffe08a}.q{font-weight:bold}.flag{color:#a33}div.text{white-space:pre-wrap}"
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>generated gold set: {escape(out)}'
        f"</title><style>{style}</style></head><body><h1>Generated gold set review</h1>"
        f"<p>{len(review)} question(s) of <code>{escape(out)}</code>, asked of a chat model. Mark each row of the "
        "review CSV's <code>accept</code> column yes or no; <code>chunkeval gold accept</code> keeps the accepted "
        f"ones.</p>{''.join(items) or '<p>No question was kept.</p>'}</body></html>"
    )
