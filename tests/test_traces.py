"""`chunkeval traces import` and `traces sample` (issue 43, docs/traces.md): production's retrievals read from traces
made by the real OpenTelemetry SDK with the OpenInference semantic conventions package and written through the SDK's
own OTLP exporter to a collector-like receiver that writes OTLP JSON (`otel_traces`), from a small retriever over the
demo corpus. No mock: the SDK, DuckDB and the warehouse are real."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from chunkeval.cli import main
from chunkeval.engine.inputs.placement import place_documents
from chunkeval.engine.inputs.trace_sample import sample_queries
from chunkeval.engine.inputs.traces import read_traces, text_hash
from chunkeval.warehouse import Warehouse
from otel_traces import DEMO_CORPORA, Collector, make_traces, retrieve
from phoenix_server import export, phoenix_server
from prefect_server import wait_for

DEMO_QUESTIONS = DEMO_CORPORA.parent / "questions.csv"


def questions() -> list[str]:
    with open(DEMO_QUESTIONS, newline="", encoding="utf-8") as f:
        return [r["question"] for r in csv.DictReader(f)]


def edit(doc: str, start: int, end: int, text: str) -> tuple[str, str]:
    """Production's view of a paragraph: its own ids, and a third of the texts edited or foreign."""
    kind = start % 3
    if kind == 0:
        return f"kb-{doc}-{start}", text  # another id, the same text: placed exactly
    if kind == 1:
        return f"kb-{doc}-{start}", text.replace(" the ", " teh ", 1)  # a typo: placed approximately
    return f"kb-{doc}-{start}", "A passage from an old wiki that the corpus never held. " * 3  # not placed


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """Two trace files of the real SDK: day one (OpenInference ids = chunk ids, GenAI spans and rerankers), day
    two (production's own ids and edited texts)."""
    t = tmp_path_factory.mktemp("traces")
    qs = questions()
    with Collector(t / "day1.jsonl") as endpoint:
        made1 = make_traces(endpoint, qs, genai_every=5, reranker_every=7)
    with Collector(t / "day2.jsonl") as endpoint:
        made2 = make_traces(endpoint, qs, edit=edit, start_ns=1_767_312_000 * 10**9, sessions=2)
    return {"t": t, "made": (made1, made2), "questions": qs}


def test_every_retrieval_span_is_read_with_its_ranked_documents(traced):
    got = read_traces(traced["t"] / "day1.jsonl")
    qs = traced["questions"]
    assert got.kept == traced["made"][0] and not got.skipped
    kinds = got.spans.column("kind").to_pylist()
    assert kinds.count("genai") == len(qs) // 5 and kinds.count("reranker") == len(qs) // 7
    docs = got.documents_with_content().to_pylist()
    for span in got.spans.to_pylist():
        mine = [d for d in docs if d["span_id"] == span["span_id"]]
        expected = retrieve(span["query"])
        if span["kind"] == "reranker":
            expected = expected[::-1]  # the reranker's output: the retriever's list reversed
        assert [d["rank"] for d in mine] == [1, 2, 3]
        assert [d["document_id"] for d in mine] == [f"{doc}:{s}-{e}" for doc, s, e, _, _ in expected]
        assert [d["content"] for d in mine] == [text for *_, text, _ in expected]
        if span["kind"] != "reranker":
            assert [d["score"] for d in mine] == pytest.approx([score for *_, score in expected])
        assert span["query_hash"] == text_hash(span["query"]) and len(span["trace_id"]) == 32
        assert span["session_id"].startswith("session-") and span["time"].year == 2026
    assert {d["content_hash"] for d in docs} == {text_hash(d["content"]) for d in docs}


def test_documents_are_placed_by_id_content_or_alignment_and_the_rest_counted(traced):
    texts = {p.stem: p.read_text(encoding="utf-8") for p in DEMO_CORPORA.glob("*.md")}
    day1 = place_documents(read_traces(traced["t"] / "day1.jsonl").documents_with_content().to_pylist(), texts)
    assert {d["placement"] for d in day1} == {"id"}
    for d in day1:
        assert texts[d["corpus_id"]][d["start"] : d["end"]] == d["content"]
    day2 = place_documents(read_traces(traced["t"] / "day2.jsonl").documents_with_content().to_pylist(), texts)
    for d in day2:
        start = int(d["document_id"].rsplit("-", 1)[1])
        want = {0: "exact", 1: "approximate", 2: "unplaced"}[start % 3]
        assert d["placement"] == want, d
        if want != "unplaced":
            assert d["start"] == start and d["similarity"] >= 90


def test_import_records_production_once_and_samples_by_day_and_session(traced, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CHUNKEVAL_HOME", str(tmp_path / "home"))
    argv = ["traces", "import", str(traced["t"]), "--corpus-dir", str(DEMO_CORPORA)]
    assert main(argv) == 0
    said = capsys.readouterr().out
    total = sum(traced["made"])
    assert f"{total} retrieval span(s) kept" in said and f"{total} new, 0 imported before" in said
    assert "unplaced" in said and "not placed (listed in the import's record)" in said
    assert main(argv) == 0  # the same files again: nothing new
    assert f"0 new, {total} imported before" in capsys.readouterr().out
    wh = Warehouse(tmp_path / "home" / "warehouse")
    imports = wh.production_imports()
    assert [i["spans_kept"] for i in imports] == [total, 0]
    assert json.loads(imports[0]["placements"])["unplaced"] > 0 and json.loads(imports[0]["unplaced"])
    spans = wh.production_spans().to_pylist()
    assert len(spans) == total and len({s["query_hash"] for s in spans}) == len(traced["questions"])
    # the sample: seeded, one span per distinct query, every (day, session) stratum represented
    a, b = sample_queries(spans, 10, seed=1), sample_queries(spans, 10, seed=1)
    assert [s["span_id"] for s in a] == [s["span_id"] for s in b] and len(a) == 10
    assert len({s["query_hash"] for s in a}) == 10
    assert [s["span_id"] for s in sample_queries(spans, 10, seed=2)] != [s["span_id"] for s in a]
    strata = {(s["time"].date(), s["session_id"]) for s in spans if s["query_hash"] in {x["query_hash"] for x in spans}}
    firsts = {}
    for s in spans:
        firsts.setdefault(s["query_hash"], s)
    first_strata = {(s["time"].date(), s["session_id"]) for s in firsts.values()}
    assert {(s["time"].date(), s["session_id"]) for s in sample_queries(spans, len(first_strata), 0)} == first_strata
    assert strata >= first_strata
    out = tmp_path / "q.csv"
    assert main(["traces", "sample", "--out", str(out), "--size", "12", "--since", "2025-12-31"]) == 0
    rows = list(csv.DictReader(open(out, newline="", encoding="utf-8")))
    assert len(rows) == 12 and all(r["references"] == "[]" and r["query_id"].startswith("prod-") for r in rows)
    production = [json.loads(x) for x in open(out.with_name("q.production.jsonl"), encoding="utf-8")]
    assert {p["query_id"] for p in production} == {r["query_id"] for r in rows}
    assert all(p["corpus_id"].startswith("production:") == (p["placement"] == "unplaced") for p in production)


def bad_lines(t: Path) -> Path:
    """One export request with one span of each kind of trouble, beside good spans."""
    with Collector(t / "good.jsonl") as endpoint:
        make_traces(endpoint, questions()[:14])
    requests = [json.loads(x) for x in (t / "good.jsonl").read_text().splitlines()]
    line = requests[0]  # one request of every span the collector's batches held
    spans = line["resourceSpans"][0]["scopeSpans"][0]["spans"]
    spans += [s for r in requests[1:] for s in r["resourceSpans"][0]["scopeSpans"][0]["spans"]]
    retrievers = [s for s in spans if any(a["value"].get("stringValue") == "RETRIEVER" for a in s["attributes"])]
    retrievers[0]["attributes"] = [a for a in retrievers[0]["attributes"] if a["key"] != "input.value"]
    for a in retrievers[1]["attributes"]:
        if a["key"].endswith("document.score"):
            a["value"] = {"stringValue": "high"}
    for a in retrievers[2]["attributes"]:
        if a["key"].endswith("0.document.content"):
            a["value"] = {"stringValue": "x" * 300_000}
    retrievers[3]["attributes"].append({"key": "input.value", "value": {"intValue": "7"}})
    retrievers[3]["attributes"] = [
        a for a in retrievers[3]["attributes"] if a["value"] != {"stringValue": questions()[3]}
    ]
    spans.append(json.loads(json.dumps(retrievers[4])))  # its span id twice

    def attribute(span, key, value):
        span["attributes"] = [a for a in span["attributes"] if a["key"] != key] + [{"key": key, "value": value}]

    attribute(retrievers[5], "input.value", {"stringValue": " \t\n"})  # white space only: no query
    del retrievers[6]["startTimeUnixNano"]
    retrievers[7]["startTimeUnixNano"] = "1" + "0" * 30  # past 2262
    attribute(retrievers[8], "retrieval.documents.0.document.id", {"doubleValue": "Infinity"})
    retrievers[9]["traceId"] = "not-a-trace\x1b[2J"
    attribute(retrievers[10], "retrieval.documents.0.document.metadata", {"stringValue": "m" * 300_000})
    retrievers[11]["attributes"].append({"key": "input.value", "value": {"stringValue": "asked twice"}})
    attribute(retrievers[12], "retrieval.documents.99999999999999999999.document.id", {"stringValue": "far"})
    retrievers[13]["spanId"] = "0" * 16
    (t / "bad.jsonl").write_text(json.dumps(line) + "\n")
    return t / "bad.jsonl"


def test_bad_spans_are_skipped_and_counted_or_one_line_with_strict(tmp_path, monkeypatch, capsys):
    path = bad_lines(tmp_path)
    got = read_traces(path)
    assert got.skipped == {
        "no_query": 2, "document_type": 2, "content_size": 2, "query_type": 1, "duplicate_span": 1, "start_time": 2,
        "trace_id": 1, "attribute_twice": 1, "document_index": 1, "span_id": 1,
    }  # fmt: skip
    assert got.kept == 14 - 13 and len(got.examples) == 10
    monkeypatch.setenv("CHUNKEVAL_HOME", str(tmp_path / "home"))
    assert main(["traces", "import", "--strict", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad.jsonl: line 1: span " in err and "no query" in err
    assert not (tmp_path / "home" / "warehouse").exists()  # nothing written
    # a span id of an earlier file is a duplicate too: counted and shown, or with --strict one line naming its file
    good = path.with_name("good.jsonl")
    assert main(["traces", "import", "--strict", str(good), str(good)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "good.jsonl: line 1: span " in err and "seen before" in err
    assert not (tmp_path / "home" / "warehouse").exists()
    assert main(["traces", "import", str(good), str(good)]) == 0
    out = capsys.readouterr().out
    assert f"skipped: {read_traces(good).kept} a span id seen before" in out and "e.g. " in out
    # a line that is no export request, however it is wrong: one line, nothing written
    for n, wrong in enumerate(['{"resourceSpans": 5}', '{"resourceSpans": [{"scopeSpans": [{"spans": [1]}]}]}', "[1]"]):
        (tmp_path / f"wrong{n}.jsonl").write_text(good.read_text() + wrong + "\n")
        assert main(["traces", "import", str(tmp_path / f"wrong{n}.jsonl")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and ": line 3: not an OTLP export request" in err, err  # good.jsonl has 2


def test_a_file_read_in_pieces_reads_the_same_and_finds_duplicates_across_them(traced, tmp_path):
    """A file of JSON lines is read a piece of lines at a time (memory bounded whatever its size): pieces of a
    line each give what one piece gives, and a span id repeated in a later piece is a duplicate."""
    path = traced["t"] / "day1.jsonl"
    whole, split = read_traces(path), read_traces(path, piece_bytes=1)
    assert split.spans.equals(whole.spans) and split.documents.equals(whole.documents) and split.read == whole.read
    assert sorted(split.contents.to_pylist(), key=str) == sorted(whole.contents.to_pylist(), key=str)
    lines = path.read_text().splitlines()
    (tmp_path / "twice.jsonl").write_text("\n".join([*lines, lines[0]]) + "\n")
    again = read_traces(tmp_path / "twice.jsonl", piece_bytes=1)
    (tmp_path / "first.jsonl").write_text(lines[0] + "\n")
    assert again.kept == whole.kept and again.skipped == {"duplicate_span": read_traces(tmp_path / "first.jsonl").kept}


def test_phoenix_s_own_export_is_read(tmp_path, phoenix_python):
    """Traces of the SDK sent to a real Phoenix server over OTLP/HTTP, exported by Phoenix's own client as its
    spans data frame (Parquet), are read: every retrieval span, with its ranked documents."""
    python = phoenix_python
    qs = questions()[:8]
    with phoenix_server(python, tmp_path) as url:
        made = make_traces(url + "/v1/traces", qs, genai_every=3, reranker_every=4)
        wait_for(lambda: read_traces(export(python, url, tmp_path / "spans.parquet")).kept == made, 60, "phoenix")
    got = read_traces(tmp_path / "spans.parquet")
    assert got.kept == made and not got.skipped
    docs = got.documents_with_content().to_pylist()
    assert len(docs) == 3 * made and {d["rank"] for d in docs} == {1, 2, 3} and all(d["content"] for d in docs)
    assert {s["query"] for s in got.spans.to_pylist()} == set(qs)


def test_a_repaired_catalogue_keeps_production(traced, tmp_path, monkeypatch, capsys):
    """Production lives only in the catalogue: `warehouse repair` copies it from the damaged file it moved aside where
    that file still reads (here the damage is in the runs table's blocks alone, as a bad sector would leave it)."""
    import duckdb

    home = tmp_path / "home"
    monkeypatch.setenv("CHUNKEVAL_HOME", str(home))
    assert main(["traces", "import", str(traced["t"] / "day1.jsonl")]) == 0
    db = home / "warehouse" / "chunkeval.duckdb"
    kept = Warehouse(home / "warehouse").production_spans(None, None).num_rows
    with duckdb.connect(str(db), read_only=True) as con:
        blocks = lambda t: {b for (b,) in con.execute(f"SELECT block_id FROM pragma_storage_info('{t}')").fetchall()}  # noqa: E731
        production = set().union(*(blocks(t) for t in ("production_spans", "production_documents")))
        catalogue = (blocks("meta") | blocks("runs")) - production  # what the health check reads first
        size = con.execute("SELECT block_size FROM pragma_database_size()").fetchone()[0]
    with open(db, "r+b") as f:
        for b in sorted(b for b in catalogue if b >= 0):
            f.seek(3 * 4096 + b * size + 100)  # DuckDB's file: three header blocks of 4 KiB, then its blocks
            f.write(b"\xff" * 64)
    capsys.readouterr()
    assert main(["runs"]) == 4 and "damaged" in capsys.readouterr().err
    assert main(["warehouse", "repair"]) == 0
    out = capsys.readouterr()
    assert (
        f"production copied from the damaged file: {kept} span(s) of 1 import(s)" in " ".join(out.out.split())
        and not out.err
    )
    assert Warehouse(home / "warehouse").production_spans(None, None).num_rows == kept
