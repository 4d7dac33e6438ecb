"""Contextual chunk headers (issue 33, part 1): `context: none | title | headings`. Worked examples of the headers
of a Markdown, an HTML and a JSONL document; the text embedded and indexed is the header and the chunk, scored on
the chunk's own span; `context: none` gives exactly the numbers of a run without the setting; and the axis in the
warehouse, trend, compare, regressions and the report."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from chunkeval.cli import main
from chunkeval.engine.embedding.embedders import Embedders
from chunkeval.engine.inputs.corpus import Documents, read_jsonl_documents
from chunkeval.engine.inputs.extract import Extracted
from chunkeval.engine.inputs.extract.html import extract
from chunkeval.engine.inputs.headings import (
    Outline,
    chunk_headers,
    file_outline,
    markdown_outline,
    with_headers,
)
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.engine.pipeline.sweep import run_sweep
from chunkeval.paths import DEMO_DIR
from chunkeval.run_result import RunResult
from chunkeval.warehouse import Warehouse

GUIDE = (
    "# Guide\n\nIntro words.\n\n## Setup\n\nInstall it.\n\n```\n# not a heading\n```\n\n### Linux\n\nUse apt.\n\n"
    "## Usage\n\nRun it.\n"
)


def headers_at(text: str, doc: str, outline: Outline, context: str, starts_of: list[str]) -> list[str]:
    """The headers of chunks starting where each of `starts_of` is first found in `text`."""
    starts = np.array([text.index(s) for s in starts_of])
    return chunk_headers((doc,), np.zeros(len(starts), np.int32), starts, {doc: outline}, context).tolist()


def test_markdown_headers_worked_example():
    outline = markdown_outline(GUIDE, "guide-file")
    assert outline.title == "Guide"  # the first `#` heading; the fenced `# not a heading` is none
    assert outline.names == ("Guide", "Setup", "Linux", "Usage") and outline.levels == (1, 2, 3, 2)
    starts = ["# Guide", "Intro", "Install", "not a heading", "Use apt", "Run it"]
    assert headers_at(GUIDE, "g", outline, "headings", starts) == [
        "Guide",  # at the title's own heading: the title, not repeated
        "Guide",
        "Guide > Setup",
        "Guide > Setup",  # inside the fence: still under Setup
        "Guide > Setup > Linux",
        "Guide > Usage",  # a level-2 heading closes Setup and Linux
    ]
    assert headers_at(GUIDE, "g", outline, "title", starts) == ["Guide"] * 6
    assert headers_at(GUIDE, "g", outline, "none", starts) == [""] * 6
    # no `#` heading: the file's name titles it, and every chunk gets it under headings too
    plain = file_outline("notes/plain.md", Extracted("just text\n\nmore text"))
    assert plain == Outline("plain") and headers_at("just text", "p", plain, "headings", ["text"]) == ["plain"]
    assert file_outline("a/b.txt", Extracted("# not read as a heading")) == Outline("b")


def test_the_text_is_the_header_then_the_chunk_unless_the_chunk_begins_with_it():
    texts = ["Intro words.", "Guide and more", "Run it."]
    assert with_headers(texts, ["Guide", "Guide", ""]) == ["Guide\n\nIntro words.", "Guide and more", "Run it."]


PAGE = b"""<html><head><title>Refund  policy</title></head><body><nav>Home</nav><h1>Refunds</h1><p>Intro text.</p>
<h2>Timing <b>rules</b></h2><p>Within 30 days.</p><h3>Exceptions</h3><p>Sale items.</p><h2>Contact</h2>
<p>Mail us.</p></body></html>"""


@pytest.mark.parametrize("mode", ["full", "main"])
def test_html_headers_worked_example(mode):
    page = extract(PAGE, mode)
    assert page.title == "Refund policy"
    assert [(level, name) for _, level, name in page.headings] == [
        (1, "Refunds"), (2, "Timing rules"), (3, "Exceptions"), (2, "Contact"),
    ]  # fmt: skip
    for start, _, name in page.headings:  # each where its words are in the extracted text
        assert " ".join(page.text[start:].split()[: len(name.split())]) == name
    outline = file_outline("site/refunds.html", page)
    starts = ["Intro", "Within", "Sale", "Mail"]
    assert headers_at(page.text, "r", outline, "headings", starts) == [
        "Refund policy > Refunds",
        "Refund policy > Refunds > Timing rules",
        "Refund policy > Refunds > Timing rules > Exceptions",
        "Refund policy > Refunds > Contact",
    ]
    if mode == "full":  # the navigation above the first heading: the title alone
        assert headers_at(page.text, "r", outline, "headings", ["Home"]) == ["Refund policy"]
    untitled = extract(b"<html><body><p>Only text.</p></body></html>", mode)
    assert file_outline("site/untitled.html", untitled) == Outline("untitled")


def test_pdf_headers_from_its_metadata_title_and_outline():
    import io

    import pypdf

    from chunkeval.engine.inputs.extract.pdf import extract as extract_pdf

    source = Path(__file__).parent / "data" / "formats" / "handbook.pdf"
    writer = pypdf.PdfWriter(clone_from=source)
    writer.add_metadata({"/Title": "Keeper's handbook"})
    writer.add_outline_item("Keeper's handbook", 0)
    paraffin = writer.add_outline_item("Paraffin", 1)
    writer.add_outline_item("Brass", 1, parent=paraffin)
    writer.add_outline_item("Fog signals", 3)
    writer.add_outline_item("Not on its page", 0)  # its words are not on page 1: placed where the page starts
    out = io.BytesIO()
    writer.write(out)
    pdf = extract_pdf(out.getvalue())
    assert pdf.title == "Keeper's handbook"
    placed = {name: (start, level) for start, level, name in pdf.headings}
    assert placed["Brass"] == (pdf.text.index("Brass"), 2) and placed["Not on its page"] == (0, 1)
    outline = file_outline("handbook.pdf", pdf)
    starts = ["The keeper", "Paraffin", "Brass is", "Fog signals"]
    assert headers_at(pdf.text, "h", outline, "headings", starts) == [
        "Keeper's handbook > Not on its page",  # placed at the page's start, after the entry before it
        "Keeper's handbook > Paraffin",
        "Keeper's handbook > Paraffin > Brass",
        "Keeper's handbook > Fog signals",
    ]
    bare = extract_pdf(source.read_bytes())
    assert file_outline("handbook.pdf", bare) == Outline(bare.title or "handbook")


def test_jsonl_documents_get_their_title_only_on_chunks_that_do_not_begin_them(tmp_path):
    path = tmp_path / "faq.jsonl"
    path.write_text(
        json.dumps({"_id": "d1", "title": "Shipping", "text": "Parcels leave daily. Tracking is emailed."})
        + "\n"
        + json.dumps({"_id": "d2", "text": "No title here. Second part."})
        + "\n"  # fmt: skip
    )
    docs = Documents({}, {})
    read_jsonl_documents(path, "faq", docs)
    names, texts = ("d1", "d2"), docs.texts
    starts = np.array([0, texts["d1"].index("Tracking"), texts["d2"].index("Second")])
    corpus = np.array([0, 0, 1])
    chunks = [texts[names[c]][s:] for c, s in zip(corpus, starts)]
    for context in ("title", "headings"):
        headers = chunk_headers(names, corpus, starts, docs.outlines, context)
        assert with_headers(chunks, headers) == [
            "Shipping Parcels leave daily. Tracking is emailed.",  # begins with its title already
            "Shipping\n\nTracking is emailed.",
            "d2\n\nSecond part.",  # no title: its id
        ]


def test_many_documents_and_headings_are_found_by_one_search():
    """The vectorised search gives, for every chunk, what a plain scan of its own document's headings gives."""
    rng = np.random.default_rng(3)
    outlines, names = {}, []
    for d in range(40):
        n = int(rng.integers(0, 6))
        starts = sorted(rng.choice(1000, size=n, replace=False).tolist())
        outlines[f"d{d}"] = Outline(f"T{d}", tuple(starts), tuple([1] * n), tuple(f"H{d}.{i}" for i in range(n)))
        names.append(f"d{d}")
    corpus = rng.integers(0, 40, size=500)
    start = rng.integers(0, 1100, size=500)
    got = chunk_headers(tuple(names), corpus, start, outlines, "headings").tolist()
    for c, s, header in zip(corpus.tolist(), start.tolist(), got):
        o = outlines[f"d{c}"]
        above = [i for i, h in enumerate(o.starts) if h <= s]
        assert header == (f"T{c} > {o.names[above[-1]]}" if above else f"T{c}")


# --------------------------------------------------------------------------------------------- sweeps and runs


def small(**changes) -> Experiment:
    grid = {
        "chunker": ("fixed_token",),
        "chunk_sizes": (100,),
        "overlaps": ("0",),
        "k": (1, 3),
        "retriever": ("dense", "bm25"),
    }
    return Experiment.demo().with_overrides(model=("all-MiniLM-L6-v2",), **{**grid, **changes})


@pytest.fixture(scope="module")
def sweeps(shared_home):
    embedders = Embedders(shared_home / "cache" / "embeddings")
    plain = run_sweep(small(), embedders)
    headed = run_sweep(small(context=("none", "title", "headings")), embedders)
    return plain, headed, embedders


@pytest.mark.slow  # two sweeps of the demo with the model: 10 s on a quiet machine
def test_context_none_gives_exactly_the_numbers_of_a_run_without_the_setting(sweeps):
    plain, headed, _ = sweeps
    assert "context" not in small().to_dict()  # recorded as before the axis existed
    none = headed.per_query.filter(pa.compute.equal(headed.per_query["context"], "none"))
    assert none.num_rows == plain.per_query.num_rows and set(plain.per_query["context"].to_pylist()) == {"none"}
    assert none.to_pylist() == plain.per_query.to_pylist()
    rows = headed.summary.to_pylist()
    assert sorted({r["context"] for r in rows}) == ["headings", "none", "title"]
    assert len(rows) == 3 * plain.summary.num_rows
    assert headed.references.to_pylist() == plain.references.to_pylist()  # the contexts share their chunking's


@pytest.mark.slow  # two sweeps of the demo with the model: 10 s on a quiet machine
def test_headers_are_embedded_and_indexed_but_spans_stay_the_chunks(sweeps):
    plain, headed, embedders = sweeps
    per_query = headed.per_query.to_pylist()
    by = {}
    for r in per_query:
        by.setdefault((r["context"], r["retriever"], r["k"]), []).append(r)
    # bm25 reads the headers: its rankings change under headings (the demo's sections name what they hold)
    assert [r["mrr"] for r in by[("headings", "bm25", 3)]] != [r["mrr"] for r in by[("none", "bm25", 3)]]
    # retrieved_tokens counts the chunks' own tokens, never the header (it is not sent to the reader)
    from chunkeval.engine.chunking import count_tokens

    top = [r for r in headed.retrieved.to_pylist() if r["context"] == "headings" and r["retriever"] == "bm25"]
    sent = {}
    for r in top:
        if r["rank"] <= 3:
            text = headed.corpora[r["corpus_id"]][r["start"] : r["end"]]
            sent[r["query_id"]] = sent.get(r["query_id"], 0) + count_tokens([text])[0]
    assert {r["query_id"]: r["retrieved_tokens"] for r in by[("headings", "bm25", 3)]} == sent
    # the cache is keyed by the text embedded: the headed texts have vectors of their own
    from chunkeval.engine.chunking import chunk_corpora
    from chunkeval.engine.inputs.headings import chunk_headers as headers_of
    from chunkeval.engine.pipeline.sweep import load_inputs

    exp = small(context=("title",))
    inputs = load_inputs(exp, quiet=True)
    chunks = chunk_corpora(inputs.corpora, exp.grid()[0])
    texts = chunks.texts(inputs.corpora)
    # what was retrieved are the chunks' own spans: every span of a headed row is one of the chunking's chunks
    names = chunks.corpus_names
    own = set(zip([names[c] for c in chunks.corpus.tolist()], chunks.start.tolist(), chunks.end.tolist()))
    assert set(zip(*(headed.retrieved[c].to_pylist() for c in ("corpus_id", "start", "end")))) <= own
    headed_texts = with_headers(
        texts, headers_of(chunks.corpus_names, chunks.corpus, chunks.start, inputs.outlines, "title")
    )
    assert all(h.endswith(t) and h != t for h, t in zip(headed_texts, texts))
    embedder = embedders["all-MiniLM-L6-v2"]
    assert embedder.missing(headed_texts) == [] and embedder.missing(texts) == []
    a, _ = embedder.embed(headed_texts[:2])
    b, _ = embedder.embed(texts[:2])
    assert not np.allclose(a, b)


@pytest.mark.slow  # two sweeps of the demo with the model: 10 s on a quiet machine
def test_runs_record_rows_per_context_and_every_reader_tells_them_apart(sweeps, tmp_path, monkeypatch, capsys):
    from chunkeval.report.html import build_report

    _, headed, _ = sweeps
    monkeypatch.setenv("CHUNKEVAL_HOME", str(tmp_path))
    exp = small(context=("none", "title", "headings"))
    wh = Warehouse.at_home()
    ids = []
    for _ in range(2):
        run_id = wh.begin_run("ctx", {}, "manual", exp.to_dict())
        wh.complete_run(
            run_id, RunResult(headed.per_query, headed.summary, references=headed.references, models=headed.models)
        )
        ids.append(run_id)
    with wh.connect() as con:
        got = con.execute(
            "SELECT context, count(*) FROM config_summary WHERE run_id = ? GROUP BY 1 ORDER BY 1", [ids[0]]
        )
        assert got.fetchall() == [("headings", 4), ("none", 4), ("title", 4)]
        labels = {r[0] for r in con.execute("SELECT label FROM config_summary").fetchall()}
    assert {"size=100/context=title/k=3", "size=100/k=3", "bm25/size=100/context=headings/k=1"} <= labels
    trend = wh.trend("ctx", "span_recall", {"retriever": "bm25", "k": 3})
    assert sorted(r["context"] for r in trend) == ["headings", "headings", "none", "none", "title", "title"]
    assert all(r["change"] == 0.0 for r in trend if r["run_id"] == ids[1])  # each against its own context
    assert wh.regressions("ctx", ["span_recall"], 0.0) == []
    assert main(["compare", "--run", ids[1], "--run", ids[0], "--metric", "mrr", "--json"]) == 0
    compared = json.loads(capsys.readouterr().out)
    assert {c["a"]["context"] for c in compared} == {"none", "title", "headings"}
    assert all(c["a"]["context"] == c["b"]["context"] for c in compared)  # runs pair each context with itself
    assert main(["compare", "--run", ids[0], "--metric", "mrr", "--json"]) == 0  # within a run: against the best
    assert len({c["b"]["context"] for c in json.loads(capsys.readouterr().out)}) == 3
    with wh.session():
        page = build_report(wh, "ctx")
    assert "context=headings" in page
    from chunkeval.publish.mlflow import _label  # MLflow's nested runs: one name and `context` param per row

    summary = wh.summary(ids[0]).to_pylist()
    assert len({_label(r) for r in summary}) == len(summary) == 12 and {r["context"] for r in summary} == {
        "none", "title", "headings",
    }  # fmt: skip


def test_a_run_through_the_flow_records_each_context(tmp_path, monkeypatch, share_models, prefect_api, capsys):
    """The demo run (`chunkeval run`) with `--context title,headings`: its rows of each context in the warehouse."""
    monkeypatch.setenv("CHUNKEVAL_HOME", str(tmp_path))
    share_models(tmp_path)
    argv = ["run", "--experiment", "ctx-run", "--chunker", "fixed_token", "--chunk-sizes", "200", "--k", "1,5",
            "--model", "all-MiniLM-L6-v2", "--retriever", "dense,bm25", "--context", "title,headings",
            "--corpus-dir", str(DEMO_DIR / "corpora"), "--questions", str(DEMO_DIR / "questions.csv")]  # fmt: skip
    assert main(argv) == 0
    wh = Warehouse.at_home()
    done = wh.last_completed("ctx-run")
    assert json.loads(done["settings"])["context"] == ["title", "headings"]
    rows = wh.summary(done["run_id"]).to_pylist()
    assert sorted({r["context"] for r in rows}) == ["headings", "title"] and len(rows) == 2 * 2 * 2


@pytest.mark.slow  # the sweeps above
def test_runs_recorded_before_the_axis_read_context_none(sweeps, tmp_path):
    """A warehouse of schema 10 and a run it recorded (results without the column) read `context: none` after the
    upgrade, with the configuration ids they had; a new run of the same settings trends on from it unchanged."""
    import duckdb
    import pyarrow.parquet as pq

    from chunkeval.warehouse import SCHEMA_VERSION

    plain, _, _ = sweeps
    old = Warehouse(tmp_path / "wh")
    old.db_path.parent.mkdir(parents=True, exist_ok=True)
    with duckdb.connect(str(old.db_path)) as con:
        old._migrate(con, upto=SCHEMA_VERSION - 1)
        con.execute(
            "INSERT INTO runs (run_id, experiment, status, trigger, started_at, texts_embedded, settings) "
            "VALUES ('old-run', 'ctx', 'completed', 'manual', now()::TIMESTAMP - INTERVAL 1 DAY, 0, '{}')"
        )
        folder = old._file("old-run", "summary").parent
        folder.mkdir(parents=True)
        for kind, table in (("summary", plain.summary), ("per_query", plain.per_query)):
            table = table.drop_columns(["context"])
            pq.write_table(
                table.append_column("run_id", pa.array(["old-run"] * table.num_rows)), old._file("old-run", kind)
            )
        old._materialize(con, ["old-run"])
    wh = Warehouse(tmp_path / "wh")
    run_id = wh.begin_run("ctx", {}, "manual", small().to_dict())
    wh.complete_run(run_id, RunResult(plain.per_query, plain.summary))
    with wh.connect() as con:
        assert con.execute("SELECT DISTINCT context FROM config_summary").fetchall() == [("none",)]
        assert con.execute("SELECT DISTINCT context FROM query_results").fetchall() == [("none",)]
        ids = con.execute("SELECT run_id, list(config_id ORDER BY config_id) FROM config_summary GROUP BY 1").fetchall()
    assert ids[0][1] == ids[1][1]  # the same configuration ids before and after the upgrade
    rows = wh.trend("ctx", "span_recall", {"retriever": "dense", "k": 3})
    assert [r["run_id"] for r in rows] == ["old-run", run_id] and rows[1]["change"] == 0.0
