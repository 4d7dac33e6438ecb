"""Looking at one question of a recorded run: its references in context, and for each configuration the
chunks it retrieved with their rank, score and text, the characters they share with a reference marked.

`inspect_doc` gives the data (`chunkeval inspect --json`, `chunkeval.inspect`), `format_inspect` the text a
terminal shows (colour on a terminal, `[[…]]` markers otherwise). Texts are read from the copy of the
corpus version the run read (`warehouse.layout`), never from another version.

Under document gold (a run over qrels) a question's references are its relevant documents (`doc_id`,
`grade`, best grade first), and each retrieved chunk names its document (`doc_id`) with its grade: the
chunk is relevant when its document is, and no characters are marked (the qrels judge documents, not spans)."""

from __future__ import annotations

from html import escape

import pyarrow as pa

from chunkeval.errors import InputError
from chunkeval.limits import short
from chunkeval.visible import visible
from chunkeval.vocabulary import CHUNKING_KEYS, CONFIG_KEYS, close_names, config_id, config_label, no_match

CONTEXT = 200  # characters of context on each side of a reference
ITEM_STYLE = (  # retrieved chunks in HTML (the report's drill-down, the diff page)
    ".items{padding-left:1rem;list-style:none}mark{background:#c8f0d8}details{margin:.3rem 0}summary{cursor:pointer}"
    ".chunk{font-size:.8rem;white-space:pre-wrap;border-left:3px solid #dde3ea;padding-left:.5rem;margin:.2rem 0 .6rem}"
)
PAGE_STYLE = "body{font-family:system-ui,sans-serif;margin:2rem auto;max-width:1200px;color:#1d232a;padding:0 1rem}"
MARK = ("[[", "]]")
COLOUR = ("\x1b[1;32m", "\x1b[0m")


def configurations(per_query: pa.Table, config: dict) -> list[dict]:
    """The run's configurations (every CONFIG_KEYS value) with the settings of `config`, in key order."""
    keys = [k for k in CONFIG_KEYS if k in per_query.column_names]
    found = {tuple(r[k] for k in keys) for r in per_query.select(keys).to_pylist()}
    return [dict(zip(keys, c)) for c in sorted(found) if all(dict(zip(keys, c)).get(k) == v for k, v in config.items())]


def references_by_query(wh, run_id: str) -> tuple[dict[str, str], dict[str, list[dict]]]:
    """The run's question texts, and each question's references `{corpus_id, start, end}` in order (from
    the run's reference table: one row per chunking and reference)."""
    questions, spans = {}, {}
    for r in wh.references(run_id).to_pylist():
        questions[r["query_id"]] = r["question"]
        spans.setdefault(r["query_id"], set()).add((r["corpus_id"], r["ref_start"], r["ref_end"]))
    return questions, {
        q: [{"corpus_id": c, "start": s, "end": e} for c, s, e in sorted(found, key=lambda x: (x[1], x[2], x[0]))]
        for q, found in spans.items()
    }


def overlaps(corpus_id: str, start: int, end: int, references: list[dict]) -> list[list[int]]:
    """The `[start, end)` ranges a chunk shares with the references of its corpus, merged, in order."""
    spans = sorted(
        (max(start, r["start"]), min(end, r["end"]))
        for r in references
        if r["corpus_id"] == corpus_id and r["start"] < end and start < r["end"]
    )
    merged: list[list[int]] = []
    for s, e in spans:
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    return merged


class _Texts:
    """The run's corpus texts, each read once."""

    def __init__(self, wh, run_id: str):
        self.wh, self.run_id, self.found, self.versions = wh, run_id, {}, {}

    def __call__(self, corpus_id: str, start: int, end: int) -> str | None:
        if corpus_id not in self.found:
            self.found[corpus_id] = self.wh.corpus_text(self.run_id, corpus_id, self.versions)
        text = self.found[corpus_id]
        return None if text is None else text[start:end]


def doc_judgements(wh, run_id: str) -> tuple[dict[str, str], dict[str, list[dict]]] | None:
    """Under document gold, the run's question texts and each question's judged documents `{doc_id, grade}`
    (best grade first, those of grade 0 or less too); None for a run of span gold."""
    qrels = wh.qrels(run_id)
    if qrels is None:
        return None
    questions, docs = {}, {}
    for r in qrels.to_pylist():  # ordered by query, grade down, document
        questions[r["query_id"]] = r["question"]
        docs.setdefault(r["query_id"], []).append({"doc_id": r["doc_id"], "grade": r["grade"]})
    return questions, docs


def doc_references(wh, run_id: str) -> tuple[dict[str, str], dict[str, list[dict]]] | None:
    """Under document gold, the run's question texts and each question's relevant documents `{doc_id, grade}`
    (best grade first); None for a run of span gold."""
    found = doc_judgements(wh, run_id)
    if found is None:
        return None
    questions, judged = found
    relevant = {q: [d for d in docs if d["grade"] > 0] for q, docs in judged.items()}
    return questions, {q: docs for q, docs in relevant.items() if docs}


def run_references(wh, run_id: str) -> tuple[dict[str, str], dict[str, list[dict]], bool]:
    """The question texts and references of a run: spans (`references_by_query`), or under document gold
    the relevant documents (`doc_references`); and whether the run is of document gold."""
    found = doc_references(wh, run_id)
    return (*found, True) if found is not None else (*references_by_query(wh, run_id), False)


def retrieved_items(rows: list[dict], references: list[dict], texts: _Texts, documents: bool = False) -> list[dict]:
    """The retrieved chunks of one configuration and question (rows of `retrieved.parquet`), as `inspect`
    gives them; a chunk of a PDF document with `pages`, the first and last page it spans. Under document gold
    (`documents`: the references name documents), each names its document."""
    spans = [] if documents else references
    return [
        {
            "rank": r["rank"],
            "chunk_id": f"{r['corpus_id']}:{r['start']}-{r['end']}",
            "corpus_id": r["corpus_id"],
            "start": r["start"],
            "end": r["end"],
            "score": r["score"],
            "relevant": r["relevant"],
            "grade": r["grade"],
            "text": texts(r["corpus_id"], r["start"], r["end"]),
            "overlaps": overlaps(r["corpus_id"], r["start"], r["end"], spans),
            **({"doc_id": r["corpus_id"]} if documents else {}),
            **({"pages": [r["first_page"], r["last_page"]]} if r.get("first_page") is not None else {}),
        }
        for r in sorted(rows, key=lambda r: r["rank"])
    ]


def lists_by_config(retrieved: pa.Table, configs: list[dict], query_id: str) -> list[list[dict]]:
    """For each configuration, its question's retrieved rows at its k (the first k ranks of its chunking's list)."""
    groups: dict[tuple, list[dict]] = {}
    for r in retrieved.to_pylist():
        if r["query_id"] == query_id:
            groups.setdefault(tuple(r[k] for k in CHUNKING_KEYS), []).append(r)
    return [
        [r for r in groups.get(tuple(c[k] for k in CHUNKING_KEYS), []) if r["rank"] <= c.get("k", r["rank"])]
        for c in configs
    ]


def inspect_doc(wh, run_id: str, query_id: str, config: dict | None = None) -> dict:
    """One question of a recorded run: `{query_id, question, references: [{start, end, text, context}],
    configs: [{configuration keys…, retrieved: [...]}]}` (the documented shape of `inspect --json`); under
    document gold the references are `[{doc_id, grade}]` and each retrieved chunk has its `doc_id`."""
    retrieved = wh.retrieved(run_id, [query_id])  # its errors first: unknown run, or none kept
    per_query = wh.query_results(run_id)
    if query_id not in set(per_query["query_id"].to_pylist()):
        hint = close_names(query_id, set(per_query["query_id"].to_pylist()))
        raise InputError(f"run {run_id} has no question {short(query_id)}" + (f"; {hint}" if hint else ""))
    configs = configurations(per_query, dict(config or {}))
    if not configs:
        raise InputError(no_match(dict(config or {}), configurations(per_query, {}), f"run {run_id}"))
    questions, by_query, documents = run_references(wh, run_id)
    question, references = questions.get(query_id), by_query.get(query_id, [])
    texts = _Texts(wh, run_id)
    for ref in () if documents else references:
        ref["text"] = texts(ref["corpus_id"], ref["start"], ref["end"])
        ref["context"] = texts(ref["corpus_id"], max(0, ref["start"] - CONTEXT), ref["end"] + CONTEXT)
    return {
        "query_id": query_id,
        "question": question,
        "references": references,
        "configs": [
            {
                **c,
                "label": config_label(c),
                "config_id": config_id(c),
                "retrieved": retrieved_items(rows, references, texts, documents),
            }  # fmt: skip
            for c, rows in zip(configs, lists_by_config(retrieved, configs, query_id))
        ],
    }


def marked(text: str | None, offset: int, spans: list[list[int]], colour: bool) -> str:
    """`text` (starting at corpus offset `offset`) with the `spans` marked, control characters escaped."""
    if text is None:
        return "(text not kept: the run was recorded before corpus texts were kept)"
    opening, closing = COLOUR if colour else MARK
    shown = lambda part: visible(part.replace("\n", "↵ "))  # noqa: E731 (one line per chunk)
    out, at = [], 0
    for s, e in spans:
        s, e = max(s - offset, at), min(e - offset, len(text))
        if e <= s:
            continue
        out += [shown(text[at:s]), opening, shown(text[s:e]), closing]
        at = e
    out.append(shown(text[at:]))
    return "".join(out)


def config_line(c: dict) -> str:
    """A configuration as every command names it: its label and its config_id (`size=200/k=5 [4f2a9c01]`)."""
    return f"{config_label(c)} [{config_id(c)}]"


WIDTH = 120  # columns of a terminal view: a chunk's text wraps under its line
SHOWN_CONFIGS = 8  # configurations shown by `inspect` without --all (the rest counted, and in --json)


def _wrapped(text: str, indent: str) -> list[str]:
    """A chunk's marked text in lines of at most `WIDTH` columns, each under `indent`."""
    import textwrap

    return textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=indent, break_on_hyphens=False) or [
        indent
    ]


def pages(item: dict) -> str:
    """The pages a chunk of a PDF document spans (` (page 2)`, ` (pages 2–3)`), else nothing."""
    span = item.get("pages")
    if not span:
        return ""
    return f" (page {span[0]})" if span[0] == span[1] else f" (pages {span[0]}–{span[1]})"


def format_items(items: list[dict], colour: bool, indent: str = "  ") -> list[str]:
    lines = []
    for item in items:
        score = "–" if item["score"] is None else f"{item['score']:.3f}"
        verdict = f"relevant (grade {item['grade']:g})" if item["relevant"] else "not relevant"
        if "doc_id" in item:  # document gold: the chunk is judged by its document
            verdict = f"document {visible(item['doc_id'])}, {verdict}"
        lines.append(f"{indent}#{item['rank']} score {score}, {verdict}: {visible(item['chunk_id'])}{pages(item)}")
        lines += _wrapped(marked(item["text"], item["start"], item["overlaps"], colour), indent + "   ")
    return lines


def format_inspect(doc: dict, colour: bool = False, every: bool = False) -> str:
    """The terminal's view of `inspect_doc`, within `WIDTH` columns: at most `SHOWN_CONFIGS` configurations
    (`every` for all), the rest counted."""
    import textwrap

    question = f"question {visible(doc['query_id'])}: {visible(doc['question'] or '(question text not recorded)')}"
    lines = textwrap.wrap(question, WIDTH, subsequent_indent="  ", break_on_hyphens=False)
    items = [i for c in doc["configs"] for i in c["retrieved"]]
    documents = any("doc_id" in r for r in doc["references"] + items)  # document gold
    lines.append(f"{'relevant documents' if documents else 'references'} ({len(doc['references'])}):")
    lines += [f"  {visible(r['doc_id'])} (grade {r['grade']:g})" for r in doc["references"] if documents]
    for ref in () if documents else doc["references"]:
        start = max(0, ref["start"] - CONTEXT)
        where = f"{visible(ref['corpus_id'])} [{ref['start']}, {ref['end']})"
        context = marked(ref["context"], start, [[ref["start"], ref["end"]]], colour)
        lines += _wrapped(f"{where}: …{context}…", "  ")
    shown = doc["configs"] if every else doc["configs"][:SHOWN_CONFIGS]
    for c in shown:
        lines.append("")
        lines.append(f"{config_line(c)}: {len(c['retrieved'])} retrieved")
        lines += format_items(c["retrieved"], colour)
    if len(shown) < len(doc["configs"]):
        lines += ["", f"… and {len(doc['configs']) - len(shown)} more configuration(s): --config narrows, --all shows "
                  "every one, --json gives them all"]  # fmt: skip
    return "\n".join(lines)


def item_html(item: dict) -> str:
    """One retrieved chunk: rank, id, score, relevance, and its text with the shared characters marked."""
    text, at, parts = item["text"], 0, []
    if text is None:
        parts.append("<em>text not kept</em>")
    else:
        for s, e in item["overlaps"]:
            s, e = max(s - item["start"], at), min(e - item["start"], len(text))
            if e > s:
                parts += [escape(text[at:s]), "<mark>", escape(text[s:e]), "</mark>"]
                at = e
        parts.append(escape(text[at:]))
    score = "–" if item["score"] is None else f"{item['score']:.3f}"
    verdict = f"relevant (grade {item['grade']:g})" if item["relevant"] else "not relevant"
    if "doc_id" in item:
        verdict = f"document <code>{escape(item['doc_id'])}</code>, {verdict}"
    return (
        f"<li><b>#{item['rank']}</b> <code>{escape(item['chunk_id'])}</code>{pages(item)} score {score}, {verdict}"
        f"<div class=chunk>{''.join(parts)}</div></li>"
    )
