"""A gold set that lives with its corpus (issue 29, docs/gold.md): a reference whose document changed is
re-anchored, else placed approximately, else its question retires from the run; one summary line says so, once;
`gold update` writes the corrected set; `--strict` makes a retirement an error."""

from __future__ import annotations

import csv
import json
import logging
import shutil
from pathlib import Path

import pytest
import yaml

from chunkeval.cli import main
from chunkeval.engine.inputs.anchoring import ANCHOR_SIMILARITY, place_reference
from chunkeval.engine.inputs.document_gold import load_document_gold
from chunkeval.engine.inputs.span_gold import load_span_gold
from chunkeval.paths import DEMO_DIR
from chunkeval.warehouse import Warehouse

SUMMARY = "gold set "


def demo_refs() -> list[tuple[str, str, dict]]:
    """(query id, document, reference) of every reference of the demo's questions."""
    with (DEMO_DIR / "questions.csv").open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    return [
        (f"{r['corpus_id']}:{i}", r["corpus_id"], ref)
        for i, r in enumerate(rows, 1)
        for ref in json.loads(r["references"])
    ]


def edited_demo(folder: Path) -> dict:
    """A copy of the demo whose lighthouses document has (a) a comma put into its first quoted sentence, (b) a
    paragraph inserted above every reference and (c) its fourth question's passage deleted; what each question
    of that document must become."""
    shutil.copytree(DEMO_DIR / "corpora", folder / "corpora")
    shutil.copy(DEMO_DIR / "questions.csv", folder / "questions.csv")
    doc = folder / "corpora" / "lighthouses.md"
    text = doc.read_text(encoding="utf-8")
    refs = [(q, ref["content"]) for q, c, ref in demo_refs() if c == "lighthouses"]
    comma_q, first = refs[0]
    at = text.index(first) + first.index(" ", 10)
    text = text[:at] + "," + text[at:]  # (a)
    text = "A paragraph written since, above every reference.\n\n" + text  # (b)
    gone_q, gone = refs[3]
    text = text.replace(gone, "")  # (c)
    doc.write_text(text, encoding="utf-8")
    status = {q: "reanchored" for q, _ in refs}
    status.update({comma_q: "approximate", gone_q: "retired"})
    return status


def test_each_edit_places_a_reference_as_it_should():
    text = "Intro. The answer is forty-two. Outro."
    content = "The answer is forty-two."
    assert place_reference(text, content, 7, 31, ANCHOR_SIMILARITY)["status"] == "exact"
    moved = place_reference("New line.\n" + text, content, 7, 31, ANCHOR_SIMILARITY)
    assert moved["status"] == "reanchored" and (moved["start"], moved["end"]) == (17, 41)
    edited = "Intro. The answer is, forty-two. Outro."
    placed = place_reference(edited, content, 7, 31, ANCHOR_SIMILARITY)
    assert placed["status"] == "approximate" and edited[placed["start"] : placed["end"]] == "The answer is, forty-two."
    assert ANCHOR_SIMILARITY <= placed["similarity"] < 100
    gone = place_reference("Intro. Something else entirely. Outro.", content, 7, 31, ANCHOR_SIMILARITY)
    assert gone["status"] == "retired" and "content not found" in gone["reason"]
    shrunk = place_reference("Intro.", content, 7, 31, ANCHOR_SIMILARITY)  # offsets past the end: placed again
    assert shrunk["status"] == "retired" and "out of range" in shrunk["reason"]


def test_the_edited_demo_reads_with_one_summary_line(tmp_path, caplog):
    from chunkeval.engine.pipeline.experiment import Experiment
    from chunkeval.engine.pipeline.sweep import load_inputs

    expected = edited_demo(tmp_path)
    exp = Experiment(corpus_dir=str(tmp_path / "corpora"), questions=str(tmp_path / "questions.csv"))
    with caplog.at_level(logging.WARNING, logger="chunkeval"):
        load_inputs(exp, quiet=True)  # the check before a run says nothing
        assert not caplog.records
        inputs = load_inputs(exp)
    (record,) = caplog.records
    lines = record.getMessage().splitlines()
    assert lines[0].startswith(SUMMARY) and len(lines) <= 5
    statuses = {a["query_id"]: a["status"] for a in inputs.gold.anchoring}
    assert {q: statuses[q] for q in expected} == expected
    n = len(statuses)
    assert lines[0] == (
        f"gold set questions.csv: {n} question(s): {n - len(expected)} exact, {len(expected) - 2} re-anchored, "
        f"1 placed approximately (lowest similarity {min(a['similarity'] for a in inputs.gold.anchoring if a['status'] == 'approximate'):g} of 100), "
        "1 retired"
    )
    retired = next(q for q, s in expected.items() if s == "retired")
    assert retired not in inputs.gold.query_ids and len(inputs.gold.query_ids) == n - 1
    # a stricter threshold than the comma's similarity retires that question too
    strict = load_span_gold(tmp_path / "questions.csv", inputs.corpora, similarity=100)
    assert sum(a["status"] == "retired" for a in strict.anchoring) == 2


def test_document_gold_retires_a_query_whose_documents_are_gone(tmp_path, caplog):
    from chunkeval.engine.inputs.document_gold import warn_left_out

    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "kept.md").write_text("A kept document about apples.", encoding="utf-8")
    (tmp_path / "queries.jsonl").write_text('{"_id": "a", "text": "apples"}\n{"_id": "b", "text": "pears"}\n')
    (tmp_path / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\na\tkept\t1\nb\tremoved\t1\n")
    args = ("", "test", str(tmp_path / "c"), str(tmp_path / "queries.jsonl"), str(tmp_path / "qrels.tsv"))
    docs, gold = load_document_gold(*args)
    assert gold.query_ids == ["a"] and [a["status"] for a in gold.anchoring] == ["exact", "retired"]
    with caplog.at_level(logging.WARNING, logger="chunkeval"):
        warn_left_out(docs, gold)
    (record,) = caplog.records
    assert record.getMessage().splitlines()[0] == (
        "gold set qrels.tsv: 2 question(s): 1 exact, 0 re-anchored, 0 placed approximately, 1 retired; "
        "1 qrels row(s) left out (1 unknown document)"
    )


# --------------------------------------------------------------------------- through the CLI and the flow


def experiment_file(folder: Path, questions: str = "questions.csv") -> str:
    settings = {
        "name": "living",
        "corpus_dir": "corpora",
        "questions": questions,
        "chunker": ["fixed_token"],
        "chunk_sizes": [100],
        "overlaps": [0],
        "k": [3],
        "retriever": ["bm25"],
    }
    path = folder / f"{Path(questions).stem}.yaml"
    path.write_text(yaml.safe_dump(settings))
    return str(path)


class Said(logging.Handler):
    """What chunkeval's logger said, wherever its records go on to."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def summary_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if SUMMARY in line and " question(s): " in line]


@pytest.mark.usefixtures("prefect_api")
def test_run_if_changed_on_change_and_gold_update_on_an_edited_corpus(tmp_path, monkeypatch, capsys):
    from chunkeval.flows.evaluate import evaluate

    monkeypatch.setenv("CHUNKEVAL_HOME", str(tmp_path / "home"))
    data = tmp_path / "data"
    data.mkdir()
    shutil.copytree(DEMO_DIR / "corpora", data / "corpora")
    shutil.copy(DEMO_DIR / "questions.csv", data / "questions.csv")
    exp_file = experiment_file(data)
    assert main(["run", exp_file]) == 0
    assert not summary_lines(capsys.readouterr().err)  # every reference exact: nothing to say
    shutil.rmtree(data / "corpora")
    expected = edited_demo(tmp_path / "edited")
    shutil.copytree(tmp_path / "edited" / "corpora", data / "corpora")
    retired = next(q for q, s in expected.items() if s == "retired")

    assert main(["run", exp_file, "--strict"]) == 2  # a retired question is an error with --strict
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"question {retired!r} retired" in err[0] and "strict" in err[0]

    wh = Warehouse(tmp_path / "home" / "warehouse")
    for argv in (["run", exp_file, "--if-changed"], ["run", exp_file]):
        assert main(argv) == 0
        out, err = capsys.readouterr()
        (line,) = summary_lines(err)  # once, though the check before the run reads the gold set too
        assert "1 placed approximately" in line and line.endswith("1 retired") and "completed" in out
        assert sum(f"retired {retired}" in e for e in err.splitlines()) == 1
        run_id = wh.runs("living", limit=1)[0]["run_id"]
        manifest = json.loads(wh.manifest_path(run_id).read_text())
        assert [r["query_id"] for r in manifest["questions_retired"]] == [retired]
        assert manifest["anchoring"]["retired"] == 1 and manifest["anchoring"]["approximate"] == 1
        check = wh.gold_check(run_id)
        assert {a["query_id"]: a["status"] for a in check["anchoring"] if a["query_id"] in expected} == expected
        assert retired not in set(wh.query_results(run_id)["query_id"].to_pylist())
    page = Path(out.split("report: ")[1].split()[0]).read_text(encoding="utf-8")
    assert "Retired questions: 1</summary>" in page and "1 placed approximately" in page

    said = Said()
    logging.getLogger("chunkeval").addHandler(said)
    try:  # the on-change deployment's flow
        result = evaluate(experiment=exp_file, trigger="event")
    finally:
        logging.getLogger("chunkeval").removeHandler(said)
    assert result["status"] == "completed"
    assert sum(m.startswith(SUMMARY) for m in said.messages) == 1, said.messages
    capsys.readouterr()  # in this process the CLI's handler is still on chunkeval's logger; a served flow's is not

    new = data / "questions.updated.csv"
    assert (
        main(
            [
                "gold",
                "update",
                "--corpus-dir",
                str(data / "corpora"),
                "--questions",
                str(data / "questions.csv"),
                "--out",
                str(new),
            ]
        )
        == 0
    )
    out, err = capsys.readouterr()
    assert len(summary_lines(err)) == 1 and "1 retired and left out" in out
    with new.open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    ids = [r["query_id"] for r in rows]
    assert retired not in ids and len(ids) == len(set(ids)) == len(demo_refs_questions()) - 1
    review = list(csv.DictReader((data / "questions.updated.review.csv").open(encoding="utf-8", newline="")))
    assert {r["query_id"]: r["status"] for r in review} == expected and "accept" in review[0]
    html = (data / "questions.updated.review.html").read_text(encoding="utf-8")
    assert "<script" not in html and retired in html

    assert main(["run", experiment_file(data, new.name)]) == 0  # the updated gold set: every reference exact
    out, err = capsys.readouterr()
    assert not summary_lines(err)
    run_id = wh.runs("living", limit=1)[0]["run_id"]
    assert {a["status"] for a in wh.gold_check(run_id)["anchoring"]} == {"exact"}
    assert json.loads(wh.manifest_path(run_id).read_text())["questions_retired"] == []
    # trend and the report's trend chart mark the run whose gold set changed (the updated file), and no other
    assert main(["trend", "--experiment", "living", "--metric", "span_recall", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["run_id"] for r in rows if r["gold_changed"]} == {run_id} and len({r["run_id"] for r in rows}) == 5
    page = Path(out.split("report: ")[1].split()[0]).read_text(encoding="utf-8")
    assert page.count('<line class="mark"') >= 1 and "<td>gold set changed</td>" in page
    assert main(["trend", "--experiment", "living", "--metric", "span_recall"]) == 0
    assert f"{run_id} G" in capsys.readouterr().out


def demo_refs_questions() -> set[str]:
    return {q for q, _, _ in demo_refs()}


def test_a_corpus_id_that_names_no_document_is_named_and_strict_refuses_it(tmp_path, monkeypatch, capsys):
    """A question whose corpus_id is a typo (issue 52: `chesss`, 'exits 0 with 1 moved to another document, naming
    no question') is named on the run's warning with that corpus_id and 'did you mean'; `--strict` refuses it."""
    import csv
    import shutil

    from chunkeval.cli import main
    from chunkeval.paths import DEMO_DIR

    monkeypatch.setenv("CHUNKEVAL_HOME", str(tmp_path / "home"))
    shutil.copytree(DEMO_DIR / "corpora", tmp_path / "corpora")
    with open(DEMO_DIR / "questions.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    rows[12]["corpus_id"], rows[13]["corpus_id"] = "sourdouhg", "nosuchcorpus"
    with open(tmp_path / "q.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    given = ["sweep", "--corpus-dir", str(tmp_path / "corpora"), "--questions", str(tmp_path / "q.csv"),
             "--retriever", "bm25", "--out", str(tmp_path / "r.csv")]  # fmt: skip
    assert main(given) == 0
    err = capsys.readouterr().err
    assert ("moved sourdouhg:13 (row 13) to document sourdough, which holds its references: corpus_id 'sourdouhg' "
            "names no corpus file or document (did you mean sourdough?)") in err  # fmt: skip
    assert "moved nosuchcorpus:14 (row 14) to document sourdough" in err
    assert main([*given[:-1], str(tmp_path / "r2.csv"), "--strict"]) == 2
    assert "row 13: question 'sourdouhg:13': corpus_id 'sourdouhg' names no corpus file" in capsys.readouterr().err


def test_the_gold_drift_alarms_command_runs_as_written(tmp_path, monkeypatch, capsys):
    """The gold-drift alarm tells the reader to run `chunkeval gold update …` (issue 52: it lacked --corpus-dir and
    exited 2): the very line `update_command` writes into the alarm runs, from the folder the reader is in."""
    import shlex

    from chunkeval.cli import main
    from chunkeval.engine.gold.update import update_command
    from chunkeval.engine.pipeline.experiment import Experiment
    from chunkeval.publish.alerts import gold_drift_payload

    monkeypatch.setenv("CHUNKEVAL_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    exp = Experiment.demo()
    command = update_command(exp, "demo-gold-RUN.csv")
    drifted = {"questions": 28, "retired": ["lighthouses:4"], "approximate": [], "share": 0.04, "threshold": 0.01}
    text = gold_drift_payload("demo", {"run_id": "RUN", "trigger": "schedule"}, drifted, command)["text"]
    assert f"correct it: {command} (then review" in text
    argv = shlex.split(command)
    assert argv[:3] == ["chunkeval", "gold", "update"] and "--corpus-dir" in argv
    assert main(argv[1:]) == 0
    assert (tmp_path / "demo-gold-RUN.csv").is_file() and "wrote 28 question(s)" in capsys.readouterr().out
