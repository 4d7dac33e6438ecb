"""Can the gold set be trusted? Findings that make span metrics unfair or questions count twice.

- ambiguous references: the reference's text occurs more than once in its corpus, so a chunk over
  another copy holds the same words and gets no credit (every occurrence is listed);
- overlapping references: two references of one question share characters (their characters count once);
- empty references: the reference holds only whitespace;
- long references: longer than a chunk size in cl100k tokens, so no single chunk of that size holds one;
- repeated questions: the same question text asked twice about the same corpus;
- unreadable documents: documents of the corpus folder left out of the run, since they gave no text (a PDF
  without a text layer, a damaged file, text that is not UTF-8);
- qrels rows left out (document gold): rows naming an unreadable document, an unknown query or an unknown
  document (each an error with `--strict`);
- retired questions: a reference could not be placed in its changed document, or (document gold) every
  document its qrels judge is gone; they are left out of the run (an error with `--strict`);
- anchoring: each question's status (exact, reanchored, approximate, retired) and its lowest similarity, the
  record of how the gold set met this version of the corpus (`chunkeval.engine.inputs.anchoring.place_reference`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from chunkeval.engine.chunking import count_tokens
from chunkeval.engine.inputs.document_gold import DocGold
from chunkeval.engine.inputs.duplicates import occurrences
from chunkeval.engine.inputs.span_gold import SpanGold


@dataclass(frozen=True)
class GoldReport:
    ambiguous_references: list[dict] = field(default_factory=list)
    overlapping_references: list[dict] = field(default_factory=list)
    empty_references: list[dict] = field(default_factory=list)
    long_references: list[dict] = field(default_factory=list)
    repeated_questions: list[dict] = field(default_factory=list)
    skipped_documents: list[dict] = field(default_factory=list)
    left_out_qrels: list[dict] = field(default_factory=list)
    retired_questions: list[dict] = field(default_factory=list)
    anchoring: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    def counts(self) -> dict[str, int]:
        return {name: len(items) for name, items in self.to_dict().items()}


def check_gold(
    gold: SpanGold | DocGold, corpora: dict[str, str], chunk_size: int | None = None, skipped=()
) -> GoldReport:
    """What a gold set says about itself; of document gold, its repeated questions alone (it has no spans).
    `skipped`: the documents left out as unreadable (`chunkeval.engine.inputs.corpus.Skipped`)."""
    left_out, anchoring = [], list(gold.anchoring)
    if isinstance(gold, DocGold):
        left_out, gold = [dict(r) for r in gold.left_out], gold.without_spans()
    report = GoldReport(
        skipped_documents=[s.to_dict() for s in skipped],
        left_out_qrels=left_out,
        retired_questions=[
            {k: a[k] for k in ("query_id", "row", "corpus_id", "reason")} for a in anchoring if a["status"] == "retired"
        ],
        anchoring=[{k: a[k] for k in ("query_id", "status", "similarity")} for a in anchoring],
    )
    corpus_of = [gold.corpus_ids[q] for q in gold.ref_query.tolist()]
    texts = [corpora[c][s:e] for c, s, e in zip(corpus_of, gold.ref_start.tolist(), gold.ref_end.tolist())]
    items = [
        {"query_id": gold.query_ids[q], "corpus_id": c, "start": s, "end": e}
        for q, c, s, e in zip(gold.ref_query.tolist(), corpus_of, gold.ref_start.tolist(), gold.ref_end.tolist())
    ]
    seen: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for item, text in zip(items, texts):
        if not text.strip():
            report.empty_references.append(item)
            continue
        key = (item["corpus_id"], text)
        if key not in seen:
            seen[key] = occurrences(corpora[item["corpus_id"]], text)
        if len(seen[key]) > 1:
            report.ambiguous_references.append({**item, "occurrences": [list(o) for o in seen[key]]})
    # overlaps within a question: sort its references by start, compare each with the furthest end so far
    order = np.lexsort((gold.ref_start, gold.ref_query))
    q, s, e = gold.ref_query[order], gold.ref_start[order], gold.ref_end[order]
    for i in range(1, len(order)):
        first = np.searchsorted(q, q[i])  # the question's first reference in this order
        if first < i and s[i] < e[first:i].max():
            j = first + int(np.argmax(e[first:i]))
            report.overlapping_references.append(
                {**items[order[i]], "overlaps": {"start": int(s[j]), "end": int(e[j])}}
            )
    if chunk_size is not None and texts:
        tokens = count_tokens(texts)
        report.long_references.extend(
            {**item, "tokens": int(t)} for item, t in zip(items, tokens.tolist()) if t > chunk_size
        )
    asked: dict[tuple[str, str], list[str]] = {}
    for qid, question, corpus in zip(gold.query_ids, gold.questions, gold.corpus_ids):
        asked.setdefault((corpus, " ".join(question.split()).lower()), []).append(qid)
    report.repeated_questions.extend(
        {"query_ids": ids, "corpus_id": corpus, "question": text}
        for (corpus, text), ids in asked.items()
        if len(ids) > 1
    )
    return report
