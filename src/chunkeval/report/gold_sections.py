"""The report's gold-set section: references per question, their lengths, and the gold-set check."""

from __future__ import annotations

from collections import Counter
from html import escape

import numpy as np
import pyarrow as pa

from chunkeval.analysis.comparisons import select
from chunkeval.report import charts
from chunkeval.report.sections import _folded, _num, _table, label
from chunkeval.vocabulary import CONFIG_KEYS

NO_REFERENCES = (
    "<p>This run was recorded without span references (document-level gold, or recorded through the Python API "
    "without its reference table): there are no references per question or reference lengths to show.</p>"
)


def section_gold(refs: pa.Table, per_query: pa.Table, check: dict | None = None, settings: dict | None = None) -> str:
    """The gold set of a run: references per question and their lengths, and the gold-set check's findings."""
    settings = settings or {}
    if not refs.num_rows:
        return f'<section id="gold"><h2>5. The gold set</h2>{NO_REFERENCES}{gold_check_html(check, settings)}</section>'
    first = (
        {k: refs[k][0].as_py() for k in ("model", "chunker", "chunk_size", "chunk_overlap")} if refs.num_rows else {}
    )
    one = [r for r in refs.to_pylist() if all(r[k] == v for k, v in first.items())]
    questions = {}
    for r in per_query.select(["query_id", "corpus_id"]).to_pylist():
        questions.setdefault(r["corpus_id"], set()).add(r["query_id"])
    counts = Counter(r["query_id"] for r in one)
    per_question = {c: np.array([counts[q] for q in sorted(qs)]) for c, qs in sorted(questions.items())}
    corpus_of = {q: c for c, qs in questions.items() for q in qs}  # a reference counts in its question's corpus
    tokens = {c: np.array([r["ref_tokens"] for r in one if corpus_of.get(r["query_id"]) == c]) for c in per_question}
    rows = [
        [
            escape(c),
            str(len(per_question[c])),
            str(int(per_question[c].sum())),
            _num(float(np.median(tokens[c])) if len(tokens[c]) else None, 0),
            str(int(tokens[c].max())) if len(tokens[c]) else "–",
        ]
        for c in per_question
    ]
    table = _table(["corpus", "questions", "references", "median reference tokens", "longest"], rows)
    return (
        '<section id="gold"><h2>5. The gold set</h2><p>How many references each question has, and how long they are in tokens: '
        f"short references reward small chunks.</p>{charts.gold_histograms(per_question, tokens)}{table}"
        f"{gold_check_html(check, settings)}</section>"
    )


GOLD_FINDINGS = [  # (key, title, what it means)
    (
        "ambiguous_references",
        "Ambiguous references",
        "their text occurs more than once in the corpus: a chunk over another copy holds the same words",
    ),
    (
        "overlapping_references",
        "Overlapping references",
        "they share characters with another reference of the same question",
    ),
    ("empty_references", "Empty references", "they hold only whitespace"),
    (
        "long_references",
        "Long references",
        "longer than the smallest chunk size of the experiment: no chunk of that size holds one whole",
    ),
    ("repeated_questions", "Repeated questions", "the same question asked twice about one corpus"),
    (
        "skipped_documents",
        "Unreadable documents",
        "left out of the run: they gave no text (a PDF without a text layer, a damaged file, text not UTF-8)",
    ),
    (
        "left_out_qrels",
        "Qrels rows left out",
        "they name an unreadable document, or a query or document the run does not have",
    ),
    (
        "retired_questions",
        "Retired questions",
        "left out of this run: a reference could not be placed in its changed document, or every document its "
        "qrels judge is gone (chunkeval gold update writes the corrected gold set)",
    ),
]


SHOWN = 100  # rows listed per finding; the counts cover them all
OF_DOCUMENTS = (
    "repeated_questions",
    "skipped_documents",
    "left_out_qrels",
    "retired_questions",
)  # the findings of document gold


def gold_check_html(check: dict | None, settings: dict, documents: bool = False) -> str:
    """The findings of `chunkeval gold check` recorded with the run, one list per kind (with `documents`, those
    of document gold alone: it has no spans to be ambiguous, overlap, be empty or long)."""
    if check is None:
        return "<h3>Gold-set check</h3><p>This run was recorded without a gold-set check.</p>"
    findings = [f for f in GOLD_FINDINGS if f[0] in OF_DOCUMENTS] if documents else GOLD_FINDINGS
    if documents:
        intro = "<p>What the run found in its documents and qrels.</p>"
    else:
        scoring = (
            "credit: each is replaced by the copy the retrieved chunks cover most"
            if settings.get("duplicates") == "credit"
            else "positional: only the gold copy counts (<code>--duplicates credit</code> gives the others credit)"
        )
        sizes = settings.get("chunk_sizes") or []
        intro = (
            f"<p>What <code>chunkeval gold check</code> found in this run's inputs"
            f"{f' (long means over {min(sizes)} cl100k tokens)' if sizes else ''}. Ambiguous references are scored "
            f"{scoring}.</p>"
        )
    counts = [[escape(title), str(len(check.get(key) or [])), escape(meaning)] for key, title, meaning in findings]
    intro += _anchoring_html(check.get("anchoring") or [])
    return f"<h3>Gold-set check</h3>{intro}{_table(['finding', 'count', 'meaning'], counts)}{_finding_lists(check, findings)}"


def _anchoring_html(anchoring: list[dict]) -> str:
    """How the run's questions met its corpus: how many were exact, re-anchored, placed approximately (and the
    lowest similarity) and retired (docs/gold.md); nothing for runs recorded before it was recorded."""
    if not anchoring:
        return ""
    n = Counter(a["status"] for a in anchoring)
    approx = [a["similarity"] for a in anchoring if a["status"] == "approximate"]
    lowest = f" (lowest similarity {min(approx):g} of 100)" if approx else ""
    return (
        f"<p>How the gold set met this version of the corpus: of {len(anchoring)} question(s), {n['exact']} exact, "
        f"{n['reanchored']} re-anchored (found word for word elsewhere), {n['approximate']} placed approximately"
        f"{lowest}, {n['retired']} retired.</p>"
    )


def _finding_lists(check: dict, findings: list) -> str:
    """Each finding's items, a folded table each (the first `SHOWN`)."""
    parts = []
    for key, title, _ in findings:
        items = check.get(key) or []
        if not items:
            continue
        if key == "left_out_qrels":
            header = ["row", "query", "document", "why"]
            rows = [[str(i["row"])] + [escape(i[c]) for c in ("query_id", "doc_id", "reason")] for i in items[:SHOWN]]
        elif key == "retired_questions":
            header = ["query", "corpus", "row", "why"]
            rows = [
                [
                    escape(str(i.get(c) if i.get(c) is not None else ""))
                    for c in ("query_id", "corpus_id", "row", "reason")
                ]
                for i in items[:SHOWN]
            ]
        elif key == "skipped_documents":
            header = ["document", "corpus", "file", "why"]
            rows = [[escape(i[c]) for c in ("document", "corpus", "file", "reason")] for i in items[:SHOWN]]
        elif key == "repeated_questions":
            header = ["queries", "corpus", "question"]
            rows = [
                [escape(", ".join(i["query_ids"])), escape(i["corpus_id"]), escape(i.get("question", ""))]
                for i in items[:SHOWN]
            ]
        else:
            header = ["query", "corpus", "offsets"]
            extra = {
                "ambiguous_references": (
                    "occurrences",
                    lambda i: (
                        f"{len(i['occurrences'])}: "
                        + ", ".join(f"[{a}, {b})" for a, b in i["occurrences"][:6])
                        + (" …" if len(i["occurrences"]) > 6 else "")
                    ),
                ),
                "overlapping_references": ("overlaps", lambda i: f"[{i['overlaps']['start']}, {i['overlaps']['end']})"),
                "long_references": ("tokens", lambda i: str(i["tokens"])),
            }.get(key)
            if extra:
                header.append(extra[0])
            rows = [
                [escape(i["query_id"]), escape(i["corpus_id"]), f"[{i['start']}, {i['end']})"]
                + ([escape(extra[1](i))] if extra else [])
                for i in items[:SHOWN]
            ]
        more = f" (the first {SHOWN} of {len(items)})" if len(items) > SHOWN else ""
        parts.append(f"<details><summary>{escape(title)}: {len(items)}{more}</summary>{_table(header, rows)}</details>")
    return "".join(parts)


def section_failures(chosen: dict, per_query: pa.Table, refs: pa.Table, drilldown: str = "") -> str:
    """Questions with zero recall and references that straddle a chunk boundary, then `drilldown` (the
    per-question view of what was retrieved, `report.drilldown`)."""
    questions = dict(zip(refs["query_id"].to_pylist(), refs["question"].to_pylist())) if refs.num_rows else {}
    # the chosen configuration's rows, found by Arrow before any row is a Python object (13,632 rows on the demo)
    rows = select(per_query, {k: chosen[k] for k in CONFIG_KEYS})
    rows = rows.select(["query_id", "corpus_id", "span_recall"]).to_pylist()
    zero = [
        [escape(r["query_id"]), escape(r["corpus_id"]), escape(questions.get(r["query_id"], "(no reference)"))]
        for r in rows
        if r["span_recall"] == 0
    ]
    recall = {r["query_id"]: r["span_recall"] for r in rows}
    mine = (
        [
            r
            for r in select(refs, {k: chosen[k] for k in ("chunker", "chunk_size", "chunk_overlap")}).to_pylist()
            if r["model"] in (chosen["model"], "none")
        ]
        if refs.num_rows
        else []
    )  # a semantic chunking is the chosen model's
    straddling = [
        [
            escape(r["query_id"]),
            escape(r["corpus_id"]),
            escape(r["question"]),
            f"[{r['ref_start']}, {r['ref_end']})",
            str(r["ref_tokens"]),
            _num(recall.get(r["query_id"])),
        ]
        for r in mine
        if r["straddles"]
    ]
    zero_html = (
        _folded(len(zero), f"{len(zero)} questions", _table(["query", "corpus", "question"], zero))
        if zero
        else "<p>No question has zero recall here.</p>"
    )
    straddle_html = (
        _folded(
            len(straddling),
            f"{len(straddling)} references",
            _table(["query", "corpus", "question", "reference offsets", "tokens", "span recall"], straddling),
        )
        if straddling
        else "<p>No reference straddles a chunk boundary.</p>"
        if refs.num_rows
        else "<p>This run was recorded without its reference table (through the Python API): there are no "
        "references to check.</p>"
    )
    return (
        f'<section id="failures"><h2>6. Failure analysis at {escape(label(chosen, with_id=True))}</h2>'
        f"<h3>Questions with zero recall ({len(zero)} of {len(rows)})</h3>{zero_html}"
        f"<h3>References that straddle a chunk boundary ({len(straddling)} of {len(mine)})</h3>"
        f"<p>No single chunk holds these whole: the usual reason for partial recall.</p>{straddle_html}{drilldown}</section>"
    )


def section_doc_gold(qrels: pa.Table | None, check: dict | None, settings: dict) -> str:
    """The gold set of a run over document gold: judged and relevant documents per question, and the findings
    of its documents and qrels (unreadable documents, qrels rows left out, repeated questions)."""
    if qrels is None or not qrels.num_rows:
        counts = "<p>This run was recorded without its qrels.</p>"
    else:
        rows = qrels.select(["query_id", "grade"]).to_pylist()
        judged, relevant = Counter(r["query_id"] for r in rows), Counter(r["query_id"] for r in rows if r["grade"] > 0)
        n = np.array([judged[q] for q in judged])
        m = np.array([relevant[q] for q in judged])
        counts = _table(
            ["questions", "judged documents", "relevant (grade > 0)", "median judged per question", "most"],
            [[str(len(n)), str(int(n.sum())), str(int(m.sum())), _num(float(np.median(n)), 1), str(int(n.max()))]],
        )
    return (
        '<section id="gold"><h2>5. The gold set</h2><p>Document-level gold: each question\'s judged documents and '
        f"their grades (qrels).</p>{counts}{gold_check_html(check, settings, documents=True)}</section>"
    )


def section_doc_failures(chosen: dict, drilldown: str) -> str:
    """Under document gold (no span recall, no reference to straddle a chunk): the drill-down alone."""
    return f'<section id="failures"><h2>6. Failure analysis at {escape(label(chosen, with_id=True))}</h2>{drilldown}</section>'
