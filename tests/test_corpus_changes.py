"""What a team's documents go through between two nights (issue 40), as a class: each change runs with one clear
line, or, under `strict`, fails in one line before anything is recorded. Span gold and document gold (qrels) alike,
and `gold update` writes the set the corpus now supports. bm25 only: nothing here needs the model."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from chunkeval.cli import main
from chunkeval.paths import DEMO_DIR


def _delete(c: Path) -> None:
    (c / "honeybees.md").unlink()


def _rename(c: Path) -> None:
    (c / "honeybees.md").rename(c / "bees.md")


def _new_document(c: Path) -> None:
    (c / "notes.md").write_text("# Notes\n\nA page that no question asks about.\n", encoding="utf-8")


def _empty(c: Path) -> None:
    (c / "honeybees.md").write_bytes(b"")


def _latin1(c: Path) -> None:  # sourdough.md holds non-ASCII letters: its bytes really change
    path = c / "sourdough.md"
    path.write_bytes(path.read_text(encoding="utf-8").encode("latin-1"))


def _utf16(c: Path) -> None:
    path = c / "honeybees.md"
    path.write_bytes(path.read_text(encoding="utf-8").encode("utf-16"))


def _crlf(c: Path) -> None:
    path = c / "honeybees.md"
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))


def _split(c: Path) -> None:  # cut at a paragraph: no reference spans the cut
    text = (c / "honeybees.md").read_text(encoding="utf-8")
    cut = text.index("\n\n", len(text) // 2)
    (c / "honeybees-1.md").write_text(text[:cut], encoding="utf-8")
    (c / "honeybees-2.md").write_text(text[cut:], encoding="utf-8")
    (c / "honeybees.md").unlink()


def _merge(c: Path) -> None:
    merged = (
        (c / "honeybees.md").read_text(encoding="utf-8") + "\n\n" + (c / "sourdough.md").read_text(encoding="utf-8")
    )
    (c / "kitchen-and-garden.md").write_text(merged, encoding="utf-8")
    (c / "honeybees.md").unlink()
    (c / "sourdough.md").unlink()


HONEYBEES = 9  # questions of the demo about honeybees.md
SOURDOUGH = 9
# change -> (what the summary line says, how many questions are left to score, whether strict refuses it)
CHANGES = {
    "deleted": (_delete, f"{HONEYBEES} retired", 28 - HONEYBEES, True),
    "renamed": (_rename, f"{HONEYBEES} re-anchored ({HONEYBEES} moved to another document)", 28, False),
    "a new document": (_new_document, None, 28, False),
    "emptied": (_empty, "document 'honeybees' is unreadable and left out: file is empty", 28 - HONEYBEES, True),
    "saved as Latin-1": (_latin1, "document 'sourdough' is not UTF-8: read as Windows-1252", 28, False),
    "saved as UTF-16": (_utf16, "document 'honeybees' is not UTF-8: read as UTF-16", 28, False),
    "CRLF line endings": (_crlf, None, 28, False),
    "split in two": (_split, f"{HONEYBEES} re-anchored ({HONEYBEES} moved to another document)", 28, False),
    "two merged": (_merge, f"{HONEYBEES + SOURDOUGH} moved to another document", 28, False),
}


def _copy(tmp_path: Path) -> tuple[Path, Path]:
    corpus, questions = tmp_path / "corpora", tmp_path / "questions.csv"
    shutil.copytree(DEMO_DIR / "corpora", corpus)
    shutil.copyfile(DEMO_DIR / "questions.csv", questions)
    return corpus, questions


def _sweep(corpus: Path, questions: Path, out: Path, *extra: str) -> int:
    return main(
        ["sweep", "--corpus-dir", str(corpus), "--questions", str(questions), "--chunker", "fixed_token",
         "--chunk-sizes", "100", "--retriever", "bm25", "--k", "3", "--out", str(out), *extra]
    )  # fmt: skip


@pytest.mark.parametrize("change", list(CHANGES))
def test_each_change_of_a_corpus_runs_with_one_clear_line(change, tmp_path, capsys):
    alter, said, scored, strict_refuses = CHANGES[change]
    corpus, questions = _copy(tmp_path)
    alter(corpus)
    assert _sweep(corpus, questions, tmp_path / "out.csv") == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    warnings = [line for line in err.splitlines() if line.startswith("chunkeval: WARNING:")]
    if said is None:
        assert not warnings, err
    else:
        assert said in err, err
        assert len([w for w in warnings if "gold set" in w]) <= 1, err  # one summary line, however much changed
    with (tmp_path / "out.per_query.csv").open(newline="", encoding="utf-8") as fh:
        assert len({r["query_id"] for r in csv.DictReader(fh)}) == scored
    if change in ("deleted", "emptied"):  # the retired questions are named, by id, every one of them
        named = [f"honeybees:{row}" for row in range(20, 29)]
        assert all(q in err for q in named), err
    if strict_refuses:  # strict: nothing may be set aside; one line, exit 2, nothing written
        out = tmp_path / "strict.csv"
        assert _sweep(corpus, questions, out, "--strict") == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "strict" in err and not out.exists(), err


def test_gold_update_writes_the_set_the_corpus_now_supports(tmp_path, capsys):
    """A deleted document's questions are left out of the updated set (and it says so, without telling you to run
    `gold update`); a renamed one's questions follow it: their corpus_id is the new document's, their query_id kept."""
    corpus, questions = _copy(tmp_path)
    _delete(corpus)
    out = tmp_path / "deleted.csv"
    assert main(["gold", "update", "--corpus-dir", str(corpus), "--questions", str(questions), "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert f"{HONEYBEES} retired and left out" in printed.out
    assert "gold update` writes" not in printed.err  # the command itself never recommends itself
    with out.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 28 - HONEYBEES and all(r["corpus_id"] != "honeybees" for r in rows)
    assert _sweep(corpus, out, tmp_path / "after.csv") == 0
    assert "WARNING" not in capsys.readouterr().err  # every reference exact again

    corpus, questions = _copy(tmp_path / "renamed")
    _rename(corpus)
    out = tmp_path / "renamed.csv"
    assert main(["gold", "update", "--corpus-dir", str(corpus), "--questions", str(questions), "--out", str(out)]) == 0
    assert f"{HONEYBEES} re-anchored ({HONEYBEES} moved to another document)" in capsys.readouterr().out
    with out.open(newline="", encoding="utf-8") as fh:
        rows = {r["query_id"]: r for r in csv.DictReader(fh)}
    assert len(rows) == 28 and rows["honeybees:20"]["corpus_id"] == "bees"
    review = (tmp_path / "renamed.review.csv").read_text(encoding="utf-8")
    assert "moved from document 'honeybees'" in review


def _doc_gold(tmp_path: Path) -> tuple[Path, Path, Path]:
    corpus = tmp_path / "corpora"
    shutil.copytree(DEMO_DIR / "corpora", corpus)
    queries, qrels = tmp_path / "queries.jsonl", tmp_path / "qrels.tsv"
    asked = {"q1": "lighthouses", "q2": "honeybees", "q3": "sourdough", "q4": "honeybees"}
    queries.write_text("".join(json.dumps({"_id": q, "text": f"about {d}"}) + "\n" for q, d in asked.items()))
    qrels.write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t1\n" for q, d in asked.items()) + "q4\tsourdough\t1\n"
    )
    return corpus, queries, qrels


def test_document_gold_goes_on_without_a_deleted_document_and_gold_update_writes_its_qrels(tmp_path, capsys):
    corpus, queries, qrels = _doc_gold(tmp_path)
    _delete(corpus)
    args = ["--corpus-dir", str(corpus), "--queries", str(queries), "--qrels", str(qrels)]
    assert (
        main(
            [
                "sweep",
                *args,
                "--chunk-sizes",
                "100",
                "--retriever",
                "bm25",
                "--k",
                "3",
                "--out",
                str(tmp_path / "r.csv"),
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert "1 retired" in err and "2 qrels row(s) left out (2 unknown document)" in err, err  # q2 retires; q4 goes on
    out = tmp_path / "qrels.v2.tsv"
    assert main(["gold", "update", *args, "--out", str(out)]) == 0
    assert "2 row(s) naming a document or query that is gone left out, 1 query(ies) retired" in capsys.readouterr().out
    assert out.read_text() == "query-id\tcorpus-id\tscore\nq1\tlighthouses\t1\nq3\tsourdough\t1\nq4\tsourdough\t1\n"
    review = (tmp_path / "qrels.v2.review.csv").read_text()
    assert "q2,2,honeybees,left out,unknown document,yes" in review and "q2,2,,retired," in review
    assert main(["sweep", *args[:4], "--qrels", str(out), "--chunk-sizes", "100", "--retriever", "bm25", "--k", "3",
                 "--out", str(tmp_path / "r2.csv")]) == 0  # fmt: skip
    assert "WARNING" not in capsys.readouterr().err
