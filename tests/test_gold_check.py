"""`chunkeval gold check`: what makes a gold set unfair, found on a toy set and on the shared data."""

from __future__ import annotations

import json

from chunkeval.cli import main
from chunkeval.engine.gold.check import check_gold
from chunkeval.engine.inputs.corpus import load_corpora
from chunkeval.engine.inputs.duplicates import occurrences
from chunkeval.engine.inputs.span_gold import load_span_gold
from chunkeval.run_result import RunResult


def ref(content: str, text: str, nth: int = 0) -> str:
    start = occurrences(text, content)[nth][0]
    return f'{{""content"": ""{content}"", ""start_index"": {start}, ""end_index"": {start + len(content)}}}'


def test_every_kind_of_finding_on_a_toy_set(tmp_path, capsys):
    text = "Alpha beta gamma. The same sentence. Delta epsilon. The same sentence. Zeta eta theta iota kappa."
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "doc.md").write_text(text, encoding="utf-8")
    rows = [
        f'q1,Which sentence repeats?,"[{ref("The same sentence.", text, 1)}]",doc',
        f'q2,Greek letters?,"[{ref("Alpha beta", text)}, {ref("beta gamma", text)}]",doc',
        f'q3,Which  sentence repeats?,"[{ref("Zeta eta theta iota kappa.", text)}]",doc',
        f'q4,Blank?,"[{ref(" ", text)}]",doc',
    ]
    q = tmp_path / "q.csv"
    q.write_text("query_id,question,references,corpus_id\n" + "\n".join(rows) + "\n", encoding="utf-8")
    corpora = load_corpora(tmp_path / "c")
    report = check_gold(load_span_gold(q, corpora), corpora, chunk_size=5)
    (amb,) = report.ambiguous_references
    assert (
        amb["query_id"] == "q1"
        and amb["occurrences"] == [[18, 36], [52, 70]]
        and (amb["start"], amb["end"]) == (52, 70)
    )
    (ov,) = report.overlapping_references
    assert ov["query_id"] == "q2" and (ov["start"], ov["end"]) == (6, 16) and ov["overlaps"] == {"start": 0, "end": 10}
    assert [e["query_id"] for e in report.empty_references] == ["q4"]
    assert [r["query_id"] for r in report.long_references] == ["q3"]  # 6 tokens > 5
    assert report.repeated_questions == [
        {"query_ids": ["q1", "q3"], "corpus_id": "doc", "question": "which sentence repeats?"}
    ]
    assert (
        main(
            ["gold", "check", "--corpus-dir", str(tmp_path / "c"), "--questions", str(q), "--chunk-size", "5", "--json"]
        )
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {
        "ambiguous_references",
        "overlapping_references",
        "empty_references",
        "long_references",
        "repeated_questions",
        "skipped_documents",
        "left_out_qrels",  # of document gold: `gold check` reads span gold, so none
        "retired_questions",  # references that could not be placed in the corpus (test_gold_anchoring)
        "anchoring",  # each question's status
    }
    assert doc["skipped_documents"] == doc["left_out_qrels"] == doc["retired_questions"] == []
    assert {a["status"] for a in doc["anchoring"]} == {"exact"}
    assert doc["ambiguous_references"][0]["occurrences"] == [[18, 36], [52, 70]]
    assert main(["gold", "check", "--corpus-dir", str(tmp_path / "c"), "--questions", str(q)]) == 0
    out = capsys.readouterr().out
    assert "1 ambiguous reference(s)" in out and "1 repeated question(s)" in out


def test_the_report_shows_the_check_recorded_with_the_run(tmp_path, caplog):
    from chunkeval.engine.embedding.embedders import Embedders
    from chunkeval.engine.pipeline.experiment import Experiment
    from chunkeval.engine.pipeline.sweep import load_inputs, run_sweep
    from chunkeval.report.html import build_report
    from chunkeval.warehouse import Warehouse

    text = "Alpha beta gamma. The same sentence. Delta epsilon. The same sentence. Zeta eta theta iota kappa."
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "doc.md").write_text(text, encoding="utf-8")
    (tmp_path / "c" / "legacy.txt").write_bytes(b"caf\xe9\x00\x01 au lait")  # no text at all: left out, and recorded
    rows = [
        f'q1,Which sentence repeats?,"[{ref("The same sentence.", text, 1)}]",doc',
        f'q2,Greek <b>letters</b>?,"[{ref("Alpha beta gamma.", text)}]",doc',
    ]
    (tmp_path / "q.csv").write_text(
        "query_id,question,references,corpus_id\n" + "\n".join(rows) + "\n", encoding="utf-8"
    )
    exp = Experiment(
        name="g",
        corpus_dir=str(tmp_path / "c"),
        questions=str(tmp_path / "q.csv"),
        chunk_sizes=(3, 8),
        k=(1,),
        retriever=("bm25",),
    )
    result = run_sweep(exp, Embedders(tmp_path / "cache"))
    inputs = load_inputs(exp)
    wh = Warehouse(tmp_path / "warehouse")
    run_id = wh.begin_run("g", {}, "manual", exp.to_dict())
    check = check_gold(inputs.gold, inputs.corpora, min(exp.chunk_sizes), inputs.skipped).to_dict()
    wh.complete_run(
        run_id,
        RunResult(
            result.per_query,
            result.summary,
            texts_embedded=0,
            references=result.references,
            models=result.models,
            gold_check=check,
        ),
    )
    assert wh.gold_check(run_id) == check
    html = build_report(wh, "g")
    assert "<h3>Gold-set check</h3>" in html and "long means over 3 cl100k tokens" in html
    assert "<summary>Ambiguous references: 1</summary>" in html and "2: [18, 36), [52, 70)" in html
    assert "<summary>Long references: 2</summary>" in html and "only the gold copy counts" in html
    assert "<summary>Unreadable documents: 1</summary>" in html and "legacy.txt</td><td>not UTF-8 text" in html
    # a damaged file is moved aside, said once, and reads as not recorded
    path = wh.results_dir / run_id / "gold_check.json"
    path.write_text('{"ambiguous_references": [', encoding="utf-8")
    assert "recorded without a gold-set check" in build_report(wh, "g")
    assert not path.exists() and path.with_name("gold_check.json.corrupt").exists()
    assert "damaged" in caplog.text


def test_the_shared_finance_corpus_repeats_passages(chroma, capsys):
    assert (
        main(
            [
                "gold",
                "check",
                "--corpus-dir",
                str(chroma / "corpora"),
                "--questions",
                str(chroma / "questions_df.csv"),
                "--corpus",
                "finance",
                "--chunk-size",
                "200",
                "--json",
            ]
        )
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    ambiguous = doc["ambiguous_references"]
    assert ambiguous and all(r["corpus_id"] == "finance" and len(r["occurrences"]) > 1 for r in ambiguous)
    assert all([r["start"], r["end"]] in r["occurrences"] for r in ambiguous)


def test_the_python_api_checks_a_gold_set_held_in_memory():
    import chunkeval

    text = "One two three. One two three. Four five."
    found = chunkeval.check_gold(
        {"doc": text},
        [
            {
                "question": "Count?",
                "corpus_id": "doc",
                "references": [{"content": "One two three.", "start_index": 0, "end_index": 14}],
            }
        ],
    )
    assert found["ambiguous_references"][0]["occurrences"] == [[0, 14], [15, 29]]


def test_questions_reach_the_terminal_with_control_characters_escaped(tmp_path, capsys):
    """A question holding an escape sequence is printed as `\\x1b[2J`, never sent to the terminal."""
    text = "The same sentence. Other words. The same sentence."
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "doc.md").write_text(text, encoding="utf-8")
    q = tmp_path / "q.csv"
    rows = [f'q{i},"Clear\x1b[2J the screen?","[{ref("Other words.", text)}]",doc' for i in (1, 2)]
    q.write_text("query_id,question,references,corpus_id\n" + "\n".join(rows) + "\n", encoding="utf-8")
    assert main(["gold", "check", "--corpus-dir", str(tmp_path / "c"), "--questions", str(q)]) == 0
    out = capsys.readouterr().out  # the repeated question is listed (lower-cased, as the check compares them)
    assert "1 repeated question(s)" in out and "clear\\x1b[2j the screen?" in out and "\x1b" not in out
