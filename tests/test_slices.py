"""Slices of the gold set (issue 20): `--slice-by type,tags` over the demo's questions with two extra columns, bm25
only (no model). Per-slice means are held to the means over each slice's queries computed here from the
per-query table; the warehouse's view, `trend --slice`, the regressions per slice (one step-down max-T family with
the whole gold set's, each slice's t-test held to scipy) and the report's section; and `compare --json`'s `mde` and
`n_needed` held to Student's t quantiles of scipy."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from scipy import stats as sp

from chunkeval.analysis import comparisons as C
from chunkeval.cli import main
from chunkeval.engine.embedding.embedders import Embedders
from chunkeval.engine.inputs.slices import load_slices
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.engine.pipeline.sweep import run_sweep
from chunkeval.paths import DEMO_DIR
from chunkeval.report.html import build_report
from chunkeval.run_result import RunResult
from chunkeval.stats import maxt_adjusted
from chunkeval.vocabulary import CONFIG_KEYS
from chunkeval.warehouse import Warehouse

METRICS = ("span_recall", "span_precision", "mrr", "ndcg_at_k")


def slice_columns(i: int) -> tuple[str, list[str]]:
    """The demo's question i (from 0): type `names`/`numbers` by turns (14 each; question 6 has none), and tags:
    `a` for questions 0–11 (12), `b` as well for questions 0–3 (a question in two slices), none for the rest."""
    kind = "" if i == 6 else ("numbers" if i % 2 else "names")
    return kind, (["a", "b"] if i < 4 else ["a"] if i < 12 else [])


@pytest.fixture(scope="module")
def sliced(tmp_path_factory):
    root = tmp_path_factory.mktemp("slices")
    rows = list(csv.DictReader(open(DEMO_DIR / "questions.csv", encoding="utf-8")))
    with open(root / "questions.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=[*rows[0], "type", "tags"])
        writer.writeheader()
        for i, row in enumerate(rows):
            kind, tags = slice_columns(i)
            writer.writerow({**row, "type": kind, "tags": "" if not tags and i % 2 else json.dumps(tags)})  # "" or []
    exp = Experiment(
        name="sliced",
        corpus_dir=str(DEMO_DIR / "corpora"),
        questions=str(root / "questions.csv"),
        retriever=("bm25",),
        chunk_sizes=(50, 200),
        k=(1, 3),
        slice_by=("type", "tags"),
    )
    return root, exp, run_sweep(exp, Embedders())


def membership(root: Path) -> dict[str, set[str]]:
    """slice → query ids, read here from the questions file (a query id is `<corpus_id>:<row>`)."""
    out: dict[str, set[str]] = {}
    for row, rec in enumerate(csv.DictReader(open(root / "questions.csv", encoding="utf-8")), start=1):
        qid = f"{rec['corpus_id']}:{row}"
        if rec["type"]:
            out.setdefault(f"type={rec['type']}", set()).add(qid)
        for tag in json.loads(rec["tags"] or "[]"):
            out.setdefault(f"tags={tag}", set()).add(qid)
    return out


def test_per_slice_means_are_the_means_over_each_slices_queries(sliced):
    root, _, result = sliced
    slices = membership(root)
    assert {k: len(v) for k, v in slices.items()} == {"type=names": 13, "type=numbers": 14, "tags=a": 12, "tags=b": 4}
    per_query = result.per_query.to_pylist()
    by_slice = result.by_slice.to_pylist()
    assert len(by_slice) == 4 * len(slices)  # 4 configurations × 4 slices
    for row in by_slice:
        name = f"{row['slice_column']}={row['slice_value']}"
        mine = [r for r in per_query if r["query_id"] in slices[name] and all(r[k] == row[k] for k in CONFIG_KEYS)]
        assert row["n_queries"] == len(mine) == len(slices[name])
        assert row["too_small"] == (len(mine) < 10)
        for m in METRICS:
            assert row[f"{m}_mean"] == pytest.approx(np.mean([r[m] for r in mine]), abs=1e-12)
            assert row[f"{m}_ci_low"] <= row[f"{m}_mean"] <= row[f"{m}_ci_high"]
        micro = sum(r["covered"] for r in mine) / sum(r["ref_chars"] for r in mine)
        assert row["span_recall_micro"] == pytest.approx(micro, abs=1e-12)


def test_the_sweep_command_writes_the_per_slice_summary(sliced, tmp_path, capsys):
    root, exp, result = sliced
    out = tmp_path / "out.csv"
    argv = ["sweep", "--corpus-dir", exp.corpus_dir, "--questions", exp.questions, "--retriever", "bm25"]
    assert main([*argv, "--chunk-sizes", "200", "--k", "3", "--slice-by", "type,tags", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "out.by_slice.csv" in printed and "tags=b 4*" in printed and "too small to test" in printed
    written = list(csv.DictReader(open(tmp_path / "out.by_slice.csv", encoding="utf-8")))
    same = [r for r in result.by_slice.to_pylist() if r["chunk_size"] == 200 and r["k"] == 3]
    assert [(r["slice_column"], r["slice_value"]) for r in written] == [
        (r["slice_column"], r["slice_value"]) for r in same
    ]
    assert [float(r["span_recall_mean"]) for r in written] == pytest.approx([r["span_recall_mean"] for r in same])


def test_document_gold_slices_from_query_fields_and_metadata(tmp_path):
    """BEIR queries carry fields beside _id and text, or under `metadata`; a list is one slice per item."""
    from test_beir import make_beir

    folder = make_beir(tmp_path / "beir")
    queries = [json.loads(line) for line in (folder / "queries.jsonl").read_text().splitlines()]
    for i, q in enumerate(queries):
        q["metadata"] = {"type": "even" if i % 2 == 0 else "odd"}
        q["tags"] = ["x", "y"] if i < 3 else []
    (folder / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in queries) + "\n")
    exp = Experiment.from_dict(
        {"beir": str(folder), "retriever": "bm25", "chunker": "none", "k": [3], "slice_by": ["type", "tags"]}
    )
    result = run_sweep(exp, Embedders())
    values = dict(zip(result.per_query["query_id"].to_pylist(), result.per_query["doc_ndcg_at_k"].to_pylist()))
    judged = set(values)  # q9 has no qrels: left out, and of no slice
    expect = {
        "type=even": {f"q{i}" for i in range(0, 10, 2)} & judged,
        "type=odd": {f"q{i}" for i in range(1, 10, 2)} & judged,
        "tags=x": {"q0", "q1", "q2"},
        "tags=y": {"q0", "q1", "q2"},
    }
    rows = {f"{r['slice_column']}={r['slice_value']}": r for r in result.by_slice.to_pylist()}
    assert set(rows) == set(expect)
    for name, queries in expect.items():
        assert rows[name]["n_queries"] == len(queries) and rows[name]["too_small"]
        assert rows[name]["doc_ndcg_at_k_mean"] == pytest.approx(np.mean([values[q] for q in queries]), abs=1e-12)


@pytest.fixture(scope="module")
def recorded(sliced, tmp_path_factory):
    """Two runs of the sliced experiment: the second loses 0.3 of span recall on every question of type=numbers
    and of tags=b (too small to test)."""
    root, exp, result = sliced
    wh = Warehouse(tmp_path_factory.mktemp("slices_home") / "warehouse")
    first = wh.begin_run("sliced", {}, "manual", exp.to_dict())
    wh.complete_run(first, RunResult(result.per_query, result.summary, texts_embedded=0, references=result.references, slices=result.slices, by_slice=result.by_slice))  # fmt: skip
    slices = membership(root)
    hit = slices["type=numbers"] | slices["tags=b"]
    lowered = [max(v - 0.3, 0.0) if q in hit else v for q, v in
               zip(result.per_query["query_id"].to_pylist(), result.per_query["span_recall"].to_pylist())]  # fmt: skip
    per_query = result.per_query.set_column(
        result.per_query.column_names.index("span_recall"), "span_recall", pa.array(lowered)
    )
    second = wh.begin_run("sliced", {}, "manual", exp.to_dict())
    wh.complete_run(
        second,
        RunResult(per_query, result.summary, texts_embedded=0, references=result.references, slices=result.slices),
    )  # by_slice made here
    return wh, first, second, per_query, slices


def test_the_view_trend_and_regressions_per_slice(recorded, monkeypatch, capsys):
    wh, first, second, per_query, slices = recorded
    with wh.connect() as con:
        got = con.execute(
            "SELECT n_queries, span_recall_mean, too_small FROM slice_summary WHERE run_id = ? AND slice_value = 'numbers' "
            "AND chunk_size = 200 AND k = 3",
            [second],
        ).fetchall()
    mine = [r["span_recall"] for r in per_query.to_pylist() if r["query_id"] in slices["type=numbers"]
            and r["chunk_size"] == 200 and r["k"] == 3]  # fmt: skip
    assert got == [(14, pytest.approx(np.mean(mine), abs=1e-12), False)]
    assert wh.slices("sliced") == ["tags=a", "tags=b", "type=names", "type=numbers"]

    monkeypatch.setenv("CHUNKEVAL_HOME", str(wh.root.parent))
    assert (
        main(["trend", "--experiment", "sliced", "--metric", "span_recall", "--slice", "type=numbers", "--json"]) == 0
    )
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 8 and all(r["n_queries"] == 14 for r in rows)
    assert all(r["change"] is None if r["run_id"] == first else r["change"] < -0.1 for r in rows)

    falls = wh.regressions("sliced", ["span_recall"], 0.02)
    # tags=a holds 8 lowered questions of 12; tags=b fell too, but is too small to test; type=names lost on 2 of 13
    assert {f["slice"] for f in falls} == {"type=numbers", "tags=a", None}
    assert sum(f["slice"] is None for f in falls) == 4  # the whole gold set fell as well (14 of 28 questions)
    code = main(["trend", "--experiment", "sliced", "--metric", "span_recall", "--fail-on-regression",
                 "--slice", "type=names"])  # fmt: skip
    assert code == 0 and "no regression" in capsys.readouterr().out


def test_slices_share_the_whole_gold_sets_max_t_family(recorded):
    """Every check, all of them returned (`paired_checks`, before any verdict): the adjusted p-values are one
    step-down max-T over all of them at once, each slice's column holding its own questions' changes (a question
    flips in the whole set's checks and its slices' alike), and a slice's t-test is scipy's over its paired
    questions."""
    wh, first, second, per_query, slices = recorded
    before = wh.query_results(first).drop_columns(["candidates"])  # null for every row: not a key here
    checks, _, correction = C.paired_checks(
        per_query.drop_columns(["candidates"]), before, ["span_recall", "mrr"], slices=slices
    )
    tested = [n for n, q in slices.items() if len(q) >= 10]
    assert len(checks) == 4 * 2 * (1 + len(tested))  # configurations × metrics × (whole set + slices large enough)
    ids = sorted(set(per_query["query_id"].to_pylist()))
    keyed = lambda t: {(r["chunk_size"], r["k"], r["query_id"]): r for r in t.to_pylist()}  # noqa: E731
    new, old = keyed(per_query), keyed(before)
    matrix = np.full((len(ids), len(checks)), np.nan)
    for j, c in enumerate(checks):
        for i, q in enumerate(ids):
            if c["slice"] is None or q in slices[c["slice"]]:
                key = (c["chunk_size"], c["k"], q)
                matrix[i, j] = new[key][c["metric"]] - old[key][c["metric"]]
    assert [c["p_adjusted"] for c in checks] == list(maxt_adjusted(matrix).adjusted)
    assert correction == {"procedure": "step-down max-T", "n_resamples": 10_000, "exact": False, "seed": 0}
    one = next(c for c in checks if c["slice"] == "type=names" and c["metric"] == "span_recall" and c["k"] == 1)
    pick = lambda t: {r["query_id"]: r["span_recall"] for r in t.to_pylist()  # noqa: E731
                      if r["chunk_size"] == one["chunk_size"] and r["k"] == 1 and r["query_id"] in slices["type=names"]}  # fmt: skip
    a, b = pick(per_query), pick(before)
    qs = sorted(a)
    assert one["p_ttest"] == pytest.approx(sp.ttest_rel([a[q] for q in qs], [b[q] for q in qs]).pvalue, rel=1e-9)


def test_compare_json_gives_the_mde_and_the_questions_needed(recorded, monkeypatch, capsys):
    wh, first, second, per_query, _ = recorded
    monkeypatch.setenv("CHUNKEVAL_HOME", str(wh.root.parent))
    assert main(["compare", "--run", second, "--metric", "span_precision", "--json"]) == 0
    results = json.loads(capsys.readouterr().out)
    values = {}
    for r in per_query.to_pylist():
        values.setdefault((r["chunk_size"], r["k"]), {})[r["query_id"]] = r["span_precision"]
    for c in results:
        a, b = values[(c["a"]["chunk_size"], c["a"]["k"])], values[(c["b"]["chunk_size"], c["b"]["k"])]
        d = np.array([a[q] - b[q] for q in sorted(a)])
        n = len(d)
        want = (sp.t.ppf(0.975, n - 1) + sp.t.ppf(0.8, n - 1)) * d.std(ddof=1) / math.sqrt(n)
        assert c["mde"] == pytest.approx(want, rel=1e-9)
        assert list(c["n_needed"]) == ["0.02", "0.05", "0.10"]
        assert c["n_needed"]["0.02"] >= c["n_needed"]["0.05"] >= c["n_needed"]["0.10"] >= 2
    assert main(["compare", "--run", second, "--metric", "span_precision"]) == 0
    assert "with 28 questions, a difference in span precision under" in capsys.readouterr().out


def test_the_report_shows_the_slices_and_what_the_gold_set_can_tell(recorded):
    wh, first, second, _, _ = recorded
    with wh.session():  # one connection for the page's questions, as write_report holds it
        page = build_report(wh, "sliced")
    section = page[page.index('<section id="slices">') :]
    section = section[: section.index("</section>")]
    assert (
        "type=numbers" in section and "tags=b" in section and "too small to test (fewer than 10 questions)" in section
    )
    assert "regression in" in section and "no regression" in section  # type=numbers fell; type=names did not
    assert 'href="#slices"' in page and "ith 28 questions, a difference in span recall under" in page
    assert "mde 0." in page


def test_slice_settings_that_are_refused(tmp_path):
    """A slice is written `column=value`: a column name holding '=' or ',' is refused, as is one named twice; a
    span gold file's own columns (question, references, query_id) make no slices."""
    from chunkeval.errors import InputError

    for columns, message in ((["type=x"], "without '=' or ','"), (["type", "type"], "names 'type' twice")):
        with pytest.raises(InputError, match=message):
            Experiment(slice_by=tuple(columns)).validate()
    with pytest.raises(InputError, match="unknown slice column 'question': it is the gold set's own column"):
        run_sweep(Experiment(retriever=("bm25",), slice_by=("question",)), Embedders())
    row = next(csv.DictReader(open(DEMO_DIR / "questions.csv", encoding="utf-8")))
    with open(tmp_path / "q.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=[*row, "tags"])
        writer.writeheader()
        writer.writerow({**row, "tags": "[oops"})
    with pytest.raises(InputError, match=r"q.csv: row 1: column tags: broken JSON"):
        load_slices(Experiment(questions=str(tmp_path / "q.csv"), slice_by=("tags",)), ["lighthouses:1"])
