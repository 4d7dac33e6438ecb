"""Empty is a result (issue 55): every step that filters rows meets the case where nothing is left with one line
and the right exit status, never an internal error.

- `traces import` of a file that is valid but keeps no retrieval span (no span at all, none a retrieval span, every
  retrieval span skipped) is bad input: exit 2, one line naming the file, what was skipped and why, nothing
  written. A retriever span that found nothing is kept (an empty ranking is production's answer), exit 0; so are
  documents given by id alone (no content to keep). A Phoenix export of the wrong shape is exit 2 naming what was
  expected (docs/exit-codes.md, docs/traces.md).
- Sampling, placement and slicing of nothing give an empty result of the right shape, or one line.

The traces of the CLI cases are made by the real OpenTelemetry SDK through its OTLP exporter (`otel_traces`), as
tests/test_traces.py makes them; the properties write OTLP JSON by hand, every span spoiled one way or another.
"""

from __future__ import annotations

import csv
import json
import tempfile
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chunkeval.cli import main
from chunkeval.cli.commands.traces import import_files
from chunkeval.engine.inputs.placement import place_documents, placement_counts
from chunkeval.engine.inputs.slices import load_slices
from chunkeval.engine.inputs.span_gold import load_span_gold
from chunkeval.engine.inputs.trace_sample import read_production, sample_queries, strata_counts
from chunkeval.engine.inputs.traces import CONTENT_CHARS, QUERY_CHARS, read_traces
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.errors import EXIT_INPUT, InputError
from chunkeval.stats.summaries import summarize_slices
from chunkeval.warehouse import Warehouse
from otel_traces import Collector, make_traces

QUESTIONS = ["How tall is the lighthouse?", "Who kept the light?", "When was the lamp changed?"]
FAST = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def one_line_error(argv: list, capsys) -> str:
    """Run the CLI, which must end with exit 2 and one line on stderr, no traceback; that line."""
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert code == EXIT_INPUT, err
    assert err.count("\n") == 1 and err.startswith("chunkeval: error: ") and "Traceback" not in err, err
    assert "internal error" not in err, err
    return err


def no_retrieval_span(path: Path) -> Path:
    """A trace file of the SDK whose spans are an application's but none a retrieval (a CHAIN and an LLM span)."""
    from openinference.semconv.trace import OpenInferenceSpanKindValues, SpanAttributes
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    with Collector(path) as endpoint:
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
        tracer = provider.get_tracer("demo-rag")
        with tracer.start_as_current_span("query") as root:
            root.set_attribute(SpanAttributes.OPENINFERENCE_SPAN_KIND, OpenInferenceSpanKindValues.CHAIN.value)
            with tracer.start_as_current_span("answer") as llm:
                llm.set_attribute(SpanAttributes.OPENINFERENCE_SPAN_KIND, OpenInferenceSpanKindValues.LLM.value)
                llm.set_attribute(SpanAttributes.INPUT_VALUE, QUESTIONS[0])
        provider.force_flush()
        provider.shutdown()
    return path


def sdk_traces(path: Path, questions=QUESTIONS, **kw) -> Path:
    with Collector(path) as endpoint:
        make_traces(endpoint, questions, **kw)
    return path


def without_queries(path: Path) -> Path:
    """The SDK's file with the query of every retrieval span taken out: every retrieval span is skipped."""
    lines = []
    for raw in path.read_text().splitlines():
        request = json.loads(raw)
        for rs in request["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    span["attributes"] = [a for a in span["attributes"] if a["key"] != "input.value"]
        lines.append(json.dumps(request))
    out = path.with_name("no_queries.jsonl")
    out.write_text("\n".join(lines) + "\n")
    return out


def phoenix_nested(path: Path) -> Path:
    """Phoenix's span frame written with its attributes nested in one object (not its export's flattened
    columns), as JSON lines."""
    row = {"context.span_id": "ab" * 8, "context.trace_id": "cd" * 16, "start_time": "2026-01-01T00:00:00+00:00",
           "attributes": {"openinference.span.kind": "RETRIEVER", "input.value": QUESTIONS[0]}}  # fmt: skip
    path.write_text(json.dumps(row) + "\n")
    return path


def phoenix_without_kind(path: Path) -> Path:
    """A Parquet file with Phoenix's span id column but no column that says a span's kind."""
    pq.write_table(pa.table({"context.span_id": ["ab" * 8], "name": ["retrieve"]}), path)
    return path


NOTHING = {
    "its only span is skipped (a document's content of 5 MB)": (
        lambda t: sdk_traces(t / "big.jsonl", QUESTIONS[:1], k=1, edit=lambda d, s, e, x: (d, "x" * 5_000_000)),
        f"big.jsonl: nothing to import: 2 span(s) read, 1 retrieval span(s) skipped (1 a document's content or "
        f"metadata is over {CONTENT_CHARS:,} characters; e.g. line 1), none kept",
    ),
    "no retrieval span": (
        lambda t: no_retrieval_span(t / "chain.jsonl"),
        "chain.jsonl: nothing to import: 2 span(s) read, none a retrieval span (openinference.span.kind RETRIEVER "
        "or RERANKER, or gen_ai.operation.name retrieval)",
    ),
    "every span skipped": (
        lambda t: without_queries(sdk_traces(t / "sdk.jsonl")),
        "no_queries.jsonl: nothing to import: 6 span(s) read, 3 retrieval span(s) skipped (3 no query",
    ),
    "a Phoenix export of the wrong shape (JSON lines)": (
        lambda t: phoenix_nested(t / "phoenix.jsonl"),
        "phoenix.jsonl: not Phoenix's span export (columns context.span_id, span_kind and attributes.input.value, "
        "… flattened): no span_kind (or attributes.openinference.span.kind, attributes.gen_ai.operation.name); no "
        "attributes.* (attributes nested in one column)",
    ),
    "a Phoenix export of the wrong shape (Parquet)": (
        lambda t: phoenix_without_kind(t / "phoenix.parquet"),
        "phoenix.parquet: not Phoenix's span export (columns context.span_id, span_kind and attributes.input.value, "
        "… flattened): no span_kind",
    ),
}


@pytest.mark.parametrize("case", list(NOTHING))
def test_an_import_that_keeps_nothing_is_one_line_exit_2_and_writes_nothing(case, tmp_path, monkeypatch, capsys):
    home = tmp_path / "home"
    monkeypatch.setenv("CHUNKEVAL_HOME", str(home))
    make, message = NOTHING[case]
    path = make(tmp_path)
    err = one_line_error(["traces", "import", path], capsys)
    assert message in err, err
    assert not home.exists() or not any(home.rglob("*")), "nothing written: no warehouse, no log"


def test_a_folder_of_files_that_keep_nothing_says_how_many_files(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CHUNKEVAL_HOME", str(tmp_path / "home"))
    folder = tmp_path / "traces"
    folder.mkdir()
    no_retrieval_span(folder / "a.jsonl")
    without_queries(sdk_traces(tmp_path / "sdk.jsonl")).rename(folder / "b.jsonl")
    err = one_line_error(["traces", "import", folder], capsys)
    assert "nothing to import: 8 span(s) read in 2 trace files, 3 retrieval span(s) skipped (3 no query" in err
    assert "e.g. b.jsonl: line 1), none kept" in err
    assert not (tmp_path / "home" / "warehouse").exists()


def test_a_retriever_that_found_nothing_is_kept_as_an_empty_ranking_and_sampled(tmp_path, monkeypatch, capsys):
    """A query production answered with nothing is production's answer (recall 0), not an unusable span: kept,
    imported (exit 0), said, and sampled with no production row; documents by id alone are kept too."""
    monkeypatch.setenv("CHUNKEVAL_HOME", str(tmp_path / "home"))
    empty = sdk_traces(tmp_path / "empty.jsonl", k=0)
    assert main(["traces", "import", str(empty)]) == 0
    out = capsys.readouterr().out
    assert "3 retrieval span(s) kept (3 retriever); 3 new" in out
    assert "0 retrieved document(s) of 0 distinct content(s); 3 retrieval span(s) found nothing" in out
    by_id = sdk_traces(tmp_path / "ids.jsonl", ["What does the keeper log?"], start_ns=1_767_312_000 * 10**9)
    request = json.loads(by_id.read_text().splitlines()[0])
    for rs in request["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                span["attributes"] = [a for a in span["attributes"] if not a["key"].endswith("document.content")]
    by_id.write_text(json.dumps(request) + "\n")
    assert main(["traces", "import", str(by_id)]) == 0
    assert "3 retrieved document(s) of 0 distinct content(s)" in capsys.readouterr().out
    wh = Warehouse(tmp_path / "home" / "warehouse")
    assert [i["spans_kept"] for i in wh.production_imports()] == [3, 1]
    q = tmp_path / "q.csv"
    assert main(["traces", "sample", "--out", str(q), "--since", "2025-12-31", "--until", "2026-01-01T12:00"]) == 0
    capsys.readouterr()
    assert len(list(csv.DictReader(open(q, newline="", encoding="utf-8")))) == 3
    assert q.with_name("q.production.jsonl").read_text() == ""  # nothing retrieved: no row, and no error


# --- properties: every span filtered out, whatever the way -------------------------------------------------------


def _value(v):
    return {"stringValue": v} if isinstance(v, str) else v


def good_span(n: int) -> dict:
    attrs = {"openinference.span.kind": "RETRIEVER", "input.value": f"question {n}",
             "retrieval.documents.0.document.id": f"doc-{n}", "retrieval.documents.0.document.content": "some text",
             "retrieval.documents.0.document.score": {"doubleValue": 0.5}}  # fmt: skip
    return {"traceId": "ab" * 16, "spanId": f"{n + 1:016x}", "startTimeUnixNano": "1767225600000000000",
            "attributes": attrs}  # fmt: skip


SPOILERS = {  # each leaves a span that no import keeps
    "not a retrieval": lambda s: s["attributes"].update({"openinference.span.kind": "LLM"}),
    "no kind": lambda s: s["attributes"].pop("openinference.span.kind"),
    "no query": lambda s: s["attributes"].pop("input.value"),
    "white space": lambda s: s["attributes"].update({"input.value": " \t\n "}),
    "query not text": lambda s: s["attributes"].update({"input.value": {"intValue": "7"}}),
    "query too long": lambda s: s["attributes"].update({"input.value": "q" * (QUERY_CHARS + 1)}),
    "content too long": lambda s: s["attributes"].update(
        {"retrieval.documents.0.document.content": "c" * (CONTENT_CHARS + 1)}
    ),
    "score not a number": lambda s: s["attributes"].update({"retrieval.documents.0.document.score": "high"}),
    "no span id": lambda s: s.pop("spanId"),
    "span id of zeros": lambda s: s.update({"spanId": "0" * 16}),
    "bad trace id": lambda s: s.update({"traceId": "not-a-trace"}),
    "no start time": lambda s: s.pop("startTimeUnixNano"),
    "start past 2262": lambda s: s.update({"startTimeUnixNano": "1" + "0" * 30}),
}


def spoiled(n: int, how: str) -> dict:
    span = good_span(n)
    SPOILERS[how](span)
    span["attributes"] = [{"key": k, "value": _value(v)} for k, v in span["attributes"].items()]
    return span


def request_line(spans: list[dict]) -> str:
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}) + "\n"


def write_files(folder: Path, groups: list[list[dict]], per_line: int) -> list[Path]:
    """Each group of spans as one file of JSON lines, `per_line` spans to a line (an empty file's one line is an
    export request of no span)."""
    files = []
    for i, spans in enumerate(groups):
        lines = [request_line(spans[j : j + per_line]) for j in range(0, len(spans), per_line)] or [request_line([])]
        path = folder / f"t{i}.jsonl"
        path.write_text("".join(lines))
        files.append(path)
    return files


def no_warehouse():
    raise AssertionError("an import that keeps nothing opens no warehouse")


spoils = st.lists(st.sampled_from(sorted(SPOILERS)), max_size=8)


@FAST
@given(groups=st.lists(spoils, min_size=1, max_size=3), per_line=st.integers(1, 3), strict=st.booleans(),
       piece=st.sampled_from([1, 1 << 20]))  # fmt: skip
def test_an_import_whose_every_span_is_filtered_out_is_one_clean_input_error(groups, per_line, strict, piece):
    """Whatever spoils every span (not a retrieval, no query, a field of the wrong type or size, an id or a time
    that is not one), over any number of files, lines and pieces: one InputError (exit 2), one line, and the
    warehouse never opened; with --strict the first skipped span's line, or "nothing to import" where none was a
    retrieval span."""
    with tempfile.TemporaryDirectory() as t:
        spans = [[spoiled(100 * g + n, how) for n, how in enumerate(group)] for g, group in enumerate(groups)]
        files = write_files(Path(t), spans, per_line)
        read = [read_traces(f, "auto", strict, piece_bytes=piece) for f in files if not strict]
        assert sum(t.kept for t in read) == 0  # each file read alone: nothing kept, nothing wrong yet
        with pytest.raises(InputError) as got:
            import_files(files, "auto", strict, None, None, no_warehouse)
        err = got.value
        assert err.exit_code == EXIT_INPUT and "\n" not in str(err)
        assert "nothing to import" in str(err) or (strict and "leave out --strict" in str(err)), str(err)


@FAST
@given(spoils=spoils, found_nothing=st.integers(1, 3), per_line=st.integers(1, 3))
def test_kept_spans_that_retrieved_nothing_import_beside_the_spoiled_ones(spoils, found_nothing, per_line):
    """Spans whose retriever found nothing, beside spoiled ones: an empty-but-valid import (each kept, no
    document, no content), recorded once."""
    with tempfile.TemporaryDirectory() as t:
        spans = [spoiled(n, how) for n, how in enumerate(spoils)]
        for n in range(found_nothing):
            span = good_span(1000 + n)
            span["attributes"] = [{"key": k, "value": _value(v)} for k, v in span["attributes"].items()
                                  if not k.startswith("retrieval.documents")]  # fmt: skip
            spans.append(span)
        files = write_files(Path(t), [spans], per_line)
        wh = Warehouse(Path(t) / "warehouse")
        got = import_files(files, "auto", False, None, None, lambda: wh)
        assert got["row"]["spans_kept"] == found_nothing and got["documents"].num_rows == 0
        assert got["traces"].contents.num_rows == 0 and sum(got["traces"].skipped.values()) == len(spoils) - sum(
            how in ("not a retrieval", "no kind") for how in spoils
        )


# --- sampling, placement, slicing of nothing ---------------------------------------------------------------------

span_rows = st.lists(
    st.builds(
        lambda q, day, session, n: {
            "span_id": f"{n:016x}",
            "query_hash": f"h{q}",
            "session_id": session,
            "time": datetime(2026, 1, 1) + timedelta(days=day),
        },
        st.integers(0, 20),
        st.integers(0, 5),
        st.sampled_from([None, "", "s1", "s2"]),
        st.integers(1, 10**6),
    ),
    max_size=30,
    unique_by=lambda s: s["span_id"],
)


@settings(max_examples=100, deadline=None)
@given(spans=span_rows, size=st.integers(1, 40), seed=st.integers(0, 2**32))
def test_a_sample_of_nothing_is_empty_and_of_some_is_a_subset(spans, size, seed):
    chosen = sample_queries(spans, size, seed)
    assert len(chosen) == min(size, len({s["query_hash"] for s in spans}))
    assert {s["span_id"] for s in chosen} <= {s["span_id"] for s in spans}
    assert sum(strata_counts(chosen).values()) == len(chosen)
    assert sample_queries([], size, seed) == [] and strata_counts([]) == {}


@settings(max_examples=50, deadline=None)
@given(ids=st.lists(st.text(min_size=1, max_size=8), max_size=10), asked=st.sets(st.text(max_size=8), max_size=5))
def test_production_rows_of_no_sampled_question_are_an_empty_result(ids, asked, tmp_path_factory):
    """`traces compare` reads what production retrieved: rows of questions not asked are left out, down to none."""
    path = tmp_path_factory.mktemp("production") / "p.production.jsonl"
    rows = [{"query_id": q, "rank": 1, "corpus_id": "d", "start": 0, "end": 1} for q in dict.fromkeys(ids)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    questions = {q: "?" for q in asked if q not in ids}
    assert read_production(path, questions) == ([], {})


@settings(max_examples=50, deadline=None)
@given(contents=st.lists(st.one_of(st.none(), st.just(""), st.text(alphabet="qwjkvXY\x00", max_size=30)), max_size=10))
def test_documents_that_place_nowhere_are_each_unplaced_and_counted(contents):
    texts = {"doc": "Alpha beta gamma. Delta epsilon zeta."}
    placed = place_documents([{"document_id": None, "content": c} for c in contents], texts)
    assert [p["placement"] for p in placed] == ["unplaced"] * len(contents)
    assert placement_counts(placed) == {"id": 0, "exact": 0, "approximate": 0, "unplaced": len(contents)}
    assert place_documents([], texts) == []


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 5), similarity=st.floats(90, 100))
def test_a_gold_set_whose_every_reference_is_nowhere_is_one_line(n, similarity, tmp_path_factory):
    """Gold placement that keeps no question: one line naming the file and the first question's reason."""
    path = tmp_path_factory.mktemp("gold") / "g.csv"
    refs = json.dumps([{"content": "Zeta eta theta", "start_index": 0, "end_index": 14}])
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["question", "references", "corpus_id"])
        w.writerows([[f"What {i}?", refs, "doc"] for i in range(n)])
    with pytest.raises(InputError, match=f"g.csv: every question is retired: none of the references of {n} "):
        load_span_gold(path, {"doc": "Alpha beta gamma. " * 10}, similarity=similarity)


empty_cells = st.sampled_from(["", " ", "\t", "[]", '[""]', "[null]", "[ ]"])


@settings(max_examples=50, deadline=None)
@given(types=st.lists(st.sampled_from(["", " ", "\t"]), min_size=1, max_size=6), data=st.data())
def test_slices_of_no_query_are_an_empty_table_and_an_empty_summary(types, data, tmp_path_factory):
    """A slice column that puts no query in any slice (empty cells, empty lists), or a run whose queries the file
    does not hold: the membership is an empty table of its three columns, and the summary by slice has no row."""
    path = tmp_path_factory.mktemp("slices") / "q.csv"
    tags = [data.draw(empty_cells) for _ in types]
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["question", "references", "corpus_id", "type", "tags"])
        w.writerows([[f"What {i}?", "[]", "doc", t, g] for i, (t, g) in enumerate(zip(types, tags))])
    exp = Experiment(questions=str(path), slice_by=("type", "tags"))
    ids = [f"doc:{i + 1}" for i in range(len(types))]
    for wanted in (ids, [], ["elsewhere:1"]):
        got = load_slices(exp, wanted)
        assert got.num_rows == 0 and got.column_names == ["query_id", "slice_column", "slice_value"]
        assert all(t == pa.string() for t in got.schema.types)
        per_query = pa.table({"query_id": ids, "config": ["c"] * len(ids), "recall_at_k": [1.0] * len(ids)})
        by_slice = summarize_slices(per_query, got, ["config"])
        assert by_slice.num_rows == 0 and "too_small" in by_slice.column_names


@pytest.mark.parametrize("fmt", ["otlp-json", "phoenix"])
def test_a_line_past_its_bound_is_one_line_before_it_is_read_whole(fmt, tmp_path, monkeypatch, capsys):
    """A line of JSON over `LINE_BYTES` (32 MiB: about 17,000 spans, where a collector writes 512 a line) is refused
    by its number before it is held whole (a line is parsed whole: one of 100,000 spans, 185 MB, peaked at 3.6 GB;
    issue 55), after the lines before it were read in pieces; the bound is the real one."""
    from chunkeval.engine.inputs.traces import LINE_BYTES

    home = tmp_path / "home"
    monkeypatch.setenv("CHUNKEVAL_HOME", str(home))
    path = tmp_path / "spans.jsonl"
    with open(path, "wb") as f:
        f.write(b'{"resourceSpans": []}\n' * 3)
        f.write(b'{"padding": "' + b"x" * LINE_BYTES + b'"}\n')
    err = one_line_error(["traces", "import", "--format", fmt, path], capsys)
    assert f"line 4 is over {LINE_BYTES >> 20} MiB" in err and str(path) in err, err
    assert not home.exists() or not any(home.rglob("*")), "nothing written: no warehouse, no log"
