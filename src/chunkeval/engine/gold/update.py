"""`chunkeval gold update`: the gold set corrected for the corpus it now meets, and what changed, for review.

The corrected set holds every row of the input, each with an explicit `query_id` (the id it had: its own, or
`<corpus_id>:<row>`, so that runs before and after pair question by question), its references at their new
offsets, and the new content of those placed approximately; a retired question is left out of it. The review
rows list each change (a reference re-anchored or placed approximately, a question retired) with an `accept`
column for a person: `yes` where the words are the same and only the offsets moved, empty where they are to
judge. Document gold (qrels) is corrected the same way: the qrels file without its rows that name a document gone
from the corpus (deleted, renamed, unreadable) or a query gone from the queries file, each such row a review row;
a query whose every judged document is gone is retired. Pure functions: the command writes the files
(docs/gold.md).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

from chunkeval.engine.inputs.readers import read_csv_rows, read_text
from chunkeval.engine.inputs.span_gold import SpanGold, span_query_id
from chunkeval.files import CsvRows

REVIEW_COLUMNS = (
    "query_id",
    "row",
    "corpus_id",
    "reference",
    "status",
    "similarity",
    "old_start",
    "old_end",
    "new_start",
    "new_end",
    "old_content",
    "new_content",
    "reason",
    "accept",
)


def corrected(path: Path, gold: SpanGold, corpora: dict[str, str]) -> tuple[list[str], list[dict], list[dict]]:
    """(columns, rows of the corrected gold set, review rows) of the gold file at `path`, as `gold` (read from
    it, with `corpora`) placed its references."""
    path = Path(path)
    placed = {a["row"]: a for a in gold.anchoring}
    rows, review, columns = [], [], None
    for row, rec in read_csv_rows(path, ("question", "references", "corpus_id")):
        if columns is None:
            columns = ["query_id", *[c for c in rec if c != "query_id"]]
        out = {"query_id": span_query_id(rec, row), **{c: v for c, v in rec.items() if c != "query_id"}}
        a = placed.get(row)
        if a is None:  # a question of a corpus the run left out (--corpus): kept as it is
            rows.append(out)
            continue
        refs = json.loads(rec["references"])
        for j, (ref, p) in enumerate(zip(refs, a["references"]), start=1):
            if p["status"] == "exact":
                continue
            new = corpora[a["corpus_id"]][p["start"] : p["end"]] if p["status"] != "retired" else ""
            review.append(
                {
                    "query_id": out["query_id"],
                    "row": row,
                    "corpus_id": a["corpus_id"],
                    "reference": j,
                    "status": p["status"],
                    "similarity": p["similarity"],
                    "old_start": p["was"][0],
                    "old_end": p["was"][1],
                    "new_start": p["start"] if p["status"] != "retired" else "",
                    "new_end": p["end"] if p["status"] != "retired" else "",
                    "old_content": ref["content"],
                    "new_content": new,
                    "reason": p.get("reason", ""),
                    "accept": "yes" if p["status"] == "reanchored" else "",
                }
            )
            ref.update(start_index=p["start"], end_index=p["end"], content=new or ref["content"])
        if a["status"] == "retired":
            continue
        if a.get("moved_from"):  # its document is gone and its text lives in another: the row follows it
            out["corpus_id"] = a["corpus_id"]
        out["references"] = json.dumps(refs, ensure_ascii=False)
        rows.append(out)
    return columns or [], rows, review


def csv_text(columns, rows: list[dict]) -> str:
    """Rows as CSV text (a header, then one line per row; fields quoted where they need it)."""
    buf = io.StringIO(newline="")
    writer = CsvRows(buf)
    writer.writerow(columns)
    for row in rows:
        writer.writerow(row.get(c, "") for c in columns)
    return buf.getvalue()


QRELS_REVIEW_COLUMNS = ("query_id", "row", "doc_id", "status", "reason", "accept")


def corrected_qrels(path: Path, gold) -> tuple[str, list[dict]]:
    """(the text of the qrels file at `path` without the rows `gold` left out, review rows) for document gold
    (`chunkeval.engine.inputs.document_gold.DocGold`, read from it): every other line as it was, in its format
    (BEIR's TSV with its header, or TREC's), and one review row per line left out, and per query retired."""
    lines = read_text(Path(path)).split("\n")
    first = lines[0].split("\t") if lines else []
    header = int([c.strip() for c in first] == ["query-id", "corpus-id", "score"])  # BEIR: row 1 is line 2
    dropped = {r["row"]: r for r in gold.left_out}
    kept = [line for i, line in enumerate(lines) if i < header or (i + 1 - header) not in dropped]
    review = [
        {"query_id": r["query_id"], "row": row, "doc_id": r["doc_id"], "status": "left out",
         "reason": r["reason"], "accept": "yes"}
        for row, r in sorted(dropped.items())
    ]  # fmt: skip
    review += [
        {"query_id": a["query_id"], "row": a["row"], "doc_id": "", "status": "retired", "reason": a["reason"],
         "accept": ""}
        for a in gold.anchoring if a["status"] == "retired"
    ]  # fmt: skip
    text = "\n".join(kept)
    return text if text.endswith("\n") else text + "\n", review


def update_command(exp, out: str | Path) -> str:
    """The `chunkeval gold update` command line that corrects `exp`'s gold set for the corpus it now meets, written
    to `out`: what an alarm or a notice tells a person to run, runnable as written (each value shell-quoted)."""
    import shlex

    if exp.beir:
        given = ["--beir", exp.beir] + (["--split", exp.split] if exp.split != "test" else [])
    elif exp.qrels:
        given = ["--qrels", exp.qrels, "--queries", exp.queries, "--corpus-dir", exp.corpus_dir]
    else:
        given = ["--questions", exp.questions, "--corpus-dir", exp.corpus_dir]
    return shlex.join(["chunkeval", "gold", "update", *given, "--out", str(out)])
