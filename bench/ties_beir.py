"""What the tie policy changes on real data (issue 29): a BEIR-format version of the shared set, scored under
trec_eval's tie rule and under the retriever's own order.

    python bench/ties_beir.py [--work DIR] [--model all-MiniLM-L6-v2]

The shared set's five corpora are cut into documents of whole paragraphs (at most 2,000 characters each); a
document is relevant to a question (grade 1) where it overlaps one of the question's references. The sweep is
dense retrieval with the model over 100-token chunks, MaxP document ranking, k = 10, run once per policy (the
second run reads every vector from the cache). The finance corpus repeats whole passages, so documents tie on
exactly equal scores. Printed: doc_ndcg_at_k under each policy, and how many questions had a tie within their top
10 documents.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "datasets" / "chroma_general"


def beir_folder(out: Path, max_chars: int = 2000) -> tuple[int, int]:
    """The shared set as a BEIR folder at `out`; returns (documents, judged questions)."""
    docs, spans = [], {}  # (id, text); corpus -> [(start, end, id)]
    for path in sorted((SHARED / "corpora").glob("*.md")):
        text, corpus = path.read_text(encoding="utf-8"), path.stem
        start, n = 0, 0
        while start < len(text):
            end = min(len(text), start + max_chars)
            cut = text.rfind("\n\n", start + 1, end) if end < len(text) else end
            end = cut if cut > start else end
            doc_id = f"{corpus}-{n:04d}"
            docs.append((doc_id, text[start:end]))
            spans.setdefault(corpus, []).append((start, end, doc_id))
            start, n = end, n + 1
    out.mkdir(parents=True, exist_ok=True)
    (out / "qrels").mkdir(exist_ok=True)
    with (out / "corpus.jsonl").open("w", encoding="utf-8") as fh:
        for doc_id, text in docs:
            fh.write(json.dumps({"_id": doc_id, "title": "", "text": text}) + "\n")
    judged = 0
    with (
        (SHARED / "questions_df.csv").open(newline="", encoding="utf-8") as src,
        (out / "queries.jsonl").open("w", encoding="utf-8") as queries,
        (out / "qrels" / "test.tsv").open("w", encoding="utf-8") as qrels,
    ):
        qrels.write("query-id\tcorpus-id\tscore\n")
        for row_no, row in enumerate(csv.DictReader(src), start=1):
            qid = f"q{row_no}"
            refs = json.loads(row["references"])
            relevant = sorted(
                {d for s, e, d in spans[row["corpus_id"]] for r in refs if s < r["end_index"] and r["start_index"] < e}
            )
            if relevant:
                judged += 1
                queries.write(json.dumps({"_id": qid, "text": row["question"]}) + "\n")
                qrels.writelines(f"{qid}\t{d}\t1\n" for d in relevant)
    return len(docs), judged


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    args = parser.parse_args()
    if not (SHARED / "questions_df.csv").is_file():
        print(f"the shared data set is absent: expected it at {SHARED}", file=sys.stderr)
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    work = args.work or Path(tempfile.mkdtemp(prefix="chunkeval-ties-"))
    os.environ.setdefault("CHUNKEVAL_HOME", str(work / "home"))
    import chunkeval

    n_docs, judged = beir_folder(work / "beir")
    print(f"BEIR folder: {n_docs} documents, {judged} judged questions ({work / 'beir'})")
    grid = dict(beir=str(work / "beir"), chunk_sizes=[100], overlaps=[0], k=[10], model=[args.model])
    for policy in ("trec_eval", "retriever"):
        result = chunkeval.evaluate(retriever=["dense"], ties=policy, **grid)
        rows = result.per_query
        mean = lambda column, rows=rows: sum(rows[column].to_pylist()) / rows.num_rows  # noqa: E731
        tied = sum(1 for t in rows["doc_tied_at_k"].to_pylist() if t)
        print(
            f"ties: {policy:<9}  doc_ndcg_at_k {mean('doc_ndcg_at_k'):.4f}  "
            f"(tie-aware {mean('doc_ndcg_at_k_tie_aware'):.4f}); "
            f"{tied} of {rows.num_rows} questions with tied documents in their top 10"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
