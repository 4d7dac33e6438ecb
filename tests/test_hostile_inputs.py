"""Issue 30, classes 3-5 held as classes: keys go only where the user bound them; served answers are read
within a deadline and a size cap and checked to the last number; documents and BEIR inputs are bounded.
Hypothesis generates malformed inputs of each class (served answers through a stand-in server on
127.0.0.1, questions CSVs, BEIR folders, TREC files, HTML and PDF bytes): each ends in exit 2 and one line,
or runs (exit 0); never a traceback, and nothing is written outside $CHUNKEVAL_HOME and the named outputs."""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from chunkeval.cli import main
from chunkeval.engine.embedding import Embedder
from chunkeval.engine.embedding.client import Client, ServedError, count_tokens
from chunkeval.engine.embedding.served import parse_entry
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.engine.pipeline.sweep import load_inputs
from chunkeval.engine.settings.endpoints import resolve_endpoint
from chunkeval.errors import InputError
from chunkeval.limits import MAX_INT
from served_server import Proxy

FUZZ = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture()
def user(tmp_path, monkeypatch):
    """A user whose home and config folder each hold an endpoints.yaml (the home's wins on `gw`)."""
    home, config = tmp_path / "home", tmp_path / "config"
    (config / "chunkeval").mkdir(parents=True)
    home.mkdir()
    monkeypatch.setenv("CHUNKEVAL_HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    (home / "endpoints.yaml").write_text("gw: {base_url: 'https://gw.example.com/v1', api_key_env: HOME_KEY}\n")
    (config / "chunkeval" / "endpoints.yaml").write_text(
        "gw: {base_url: 'https://other.example.com', api_key_env: CONFIG_KEY}\n"
        "shared: {base_url: 'https://shared.example.com:8443/v1', api_key_env: CONFIG_KEY}\n"
    )
    monkeypatch.setenv("HOME_KEY", "sk-home-12345678\r\n")  # as a CRLF .env file leaves it
    monkeypatch.setenv("CONFIG_KEY", "sk-config-12345678")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-12345678")
    return monkeypatch


def test_a_key_goes_only_to_the_origins_the_user_bound_it_to(user):
    assert resolve_endpoint("gw") == ("https://gw.example.com/v1", {"Authorization": "Bearer sk-home-12345678"})
    assert resolve_endpoint("shared")[0] == "https://shared.example.com:8443/v1"  # beneath the home, still read
    # experiment files naming api_key_env keep working for bound hosts (any path of the origin) and loopback
    assert resolve_endpoint("https://gw.example.com/other/", "HOME_KEY")[1] == {
        "Authorization": "Bearer sk-home-12345678"
    }
    assert resolve_endpoint("http://127.0.0.2:9", "CONFIG_KEY")[1] == {"Authorization": "Bearer sk-config-12345678"}
    assert resolve_endpoint("http://[::1]:9/v1", "CONFIG_KEY")[1] == {"Authorization": "Bearer sk-config-12345678"}
    for url, env in [
        ("https://evil.example.com/v1", "HOME_KEY"),  # a host nobody bound
        ("http://gw.example.com/v1", "HOME_KEY"),  # the bound host over plain HTTP: another origin
        ("https://gw.example.com:8443/v1", "HOME_KEY"),  # another port: another origin
        ("https://other.example.com", "CONFIG_KEY"),  # bound beneath, but the home's gw binds HOME_KEY instead
        ("https://localhost.evil.example.com", "HOME_KEY"),
    ]:
        with pytest.raises(InputError, match=f"the key in {env} is not bound to .* add `NAME: {{base_url: "):
            resolve_endpoint(url, env)
    # an experiment asks for no variable: the bound one, else none (OPENAI_API_KEY goes to OpenAI and loopback)
    assert resolve_endpoint("https://evil.example.com/v1") == ("https://evil.example.com/v1", {})
    assert resolve_endpoint("https://shared.example.com:8443/x")[1] == {"Authorization": "Bearer sk-config-12345678"}
    assert resolve_endpoint("openai")[1] == {"Authorization": "Bearer sk-openai-12345678"}
    user.setenv("HOME_KEY", "sk-home 12345678")
    with pytest.raises(InputError, match="the API key in HOME_KEY holds white space") as err:
        resolve_endpoint("gw")
    assert "12345678" not in str(err.value)


def test_a_models_entry_names_an_endpoint_and_records_its_name(user):
    served = parse_entry("team", {"endpoint": "gw", "model": "m"})
    assert served.base_url == "https://gw.example.com/v1" and served.api_key() == "sk-home-12345678"
    assert served.settings() == {"model": "m", "api": "openai", "endpoint": "gw"}  # no URL, no key
    assert parse_entry("team", served.settings()) == served
    with pytest.raises(InputError, match="the key in HOME_KEY is not bound to https://evil.example.com:443"):
        parse_entry("team", {"base_url": "https://evil.example.com", "api_key_env": "HOME_KEY"}).api_key()


def test_a_bound_loopback_endpoint_gets_its_key_and_hostile_usage_is_not_believed(user):
    """A served model through `endpoint:`: the bound key is in every request; `prompt_tokens` of 1e30 is
    not believed (the tokens are counted), and the vectors are unit length."""
    with Proxy(mode="usage") as proxy:
        home = Path(os.environ["CHUNKEVAL_HOME"])
        (home / "endpoints.yaml").write_text(f"local: {{base_url: '{proxy.url}', api_key_env: CONFIG_KEY}}\n")
        embedder = Embedder("team", None, served=parse_entry("team", {"endpoint": "local", "model": "m"}))
        vectors, _ = embedder.embed(["one text", "another"])
    assert proxy.seen == [("Bearer sk-config-12345678", 2)]
    assert embedder.tokens == sum(count_tokens(["one text", "another"])) and np.allclose(
        np.linalg.norm(vectors, axis=1), 1
    )


NUMBER = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e-320, 5e-324, 1e308, 1e6 + 1, 0.0, -0.0]),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.booleans(),
    st.text(max_size=3),
    st.none(),
)
ROW = st.one_of(st.lists(NUMBER, min_size=0, max_size=4), st.lists(st.floats(-1, 1), min_size=3, max_size=3), NUMBER)
ITEM = st.fixed_dictionaries({"index": st.one_of(st.integers(-1, 3), NUMBER), "embedding": ROW})
ANSWER = st.one_of(
    st.fixed_dictionaries(
        {"data": st.lists(ITEM, min_size=0, max_size=3)},
        optional={"usage": st.dictionaries(st.sampled_from(["prompt_tokens", "total_tokens"]), NUMBER)},
    ),
    st.recursive(NUMBER, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner)),
)


@pytest.fixture(scope="module")
def stand_in():
    with Proxy(mode="payload") as proxy:
        yield proxy


@FUZZ
@given(answer=ANSWER, raw=st.one_of(st.none(), st.binary(max_size=64)))
def test_fuzzed_served_answers_are_used_checked_or_refused_in_one_line(stand_in, answer, raw):
    """Any answer of a stand-in server: unit vectors of finite numbers and believable tokens, or a
    ServedError naming the model; nothing else."""
    stand_in.payload = raw if raw is not None else json.dumps(answer, allow_nan=True).encode()
    client = Client(parse_entry("team", {"base_url": stand_in.url, "model": "m", "max_retries": 0}))
    try:
        vectors, tokens = client.request(["a", "b"])
    except ServedError as exc:
        assert str(exc).startswith(f"team: {stand_in.url}/embeddings: ") and "\n" not in str(exc)
        return
    finally:
        client.close()
    assert vectors.shape[0] == 2 and np.all(np.isfinite(vectors))
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    assert tokens is None or 0 <= tokens <= MAX_INT


def test_a_numeric_query_text_is_accepted_and_unknown_qrels_are_warned_of_once(tmp_path, caplog):
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text('{"_id": "d1", "text": "the year 1984 in words"}\n')
    (beir / "queries.jsonl").write_text('{"_id": "q1", "text": 1984}\n')
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td9\t1\n")
    exp = Experiment.from_dict({"name": "b", "beir": str(beir), "retriever": ["bm25"]})
    with caplog.at_level(logging.WARNING, logger="chunkeval"):
        load_inputs(exp, quiet=True)  # the command's check before the run: silent
        inputs = load_inputs(exp)  # the run
    assert inputs.gold.questions == ["1984"]
    (said,) = [r.getMessage() for r in caplog.records]  # the gold set's one summary line, said once
    assert said.startswith("gold set test.tsv: 1 question(s): 1 exact") and said.endswith(
        "; 1 qrels row(s) left out (1 unknown document)"
    )


# ---------------------------------------------------------------- files through the command line


def snapshot(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def outcome(argv: list, root: Path, capsys, allowed=("home/", "out")) -> None:
    """`main(argv)`: exit 0, or exit 2 with one line; no traceback; new files only under home/ and out*."""
    before = snapshot(root)
    capsys.readouterr()
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:
        code = exc.code
    _, err = capsys.readouterr()
    assert "Traceback" not in err and code in (0, 2), (code, err)
    if code == 2:
        assert len(err.strip().splitlines()) == 1 and err.startswith("chunkeval"), err
    new = snapshot(root) - before
    assert all(p.startswith(allowed) for p in new), new


def workspace(monkeypatch) -> Path:
    root = Path(tempfile.mkdtemp(prefix="fuzz-"))
    (root / "corpora").mkdir()
    (root / "corpora" / "doc.md").write_text("Alpha beta gamma. Delta epsilon zeta. " * 10)
    monkeypatch.setenv("CHUNKEVAL_HOME", str(root / "home"))
    return root


def sweep(root: Path, *extra) -> list:
    return ["sweep", "--retriever", "bm25", "--chunk-sizes", "50", "--k", "1", "--out", root / "out.csv", *extra]


LINE = st.one_of(
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40),
    st.sampled_from(['{"_id": "d1", "text": "Alpha"}', '{"_id": "q1", "text": 7}', "q1\td1\t1", "1 Q0 d1 1 1e308 r",
                     '{"_id": "", "text": "x"}', '{"_id": [1]}', "q1\td1\tnan", 'What?,"[]",doc', "q1 0 d1 2"]),
)  # fmt: skip
LINES = st.lists(LINE, max_size=4).map(lambda lines: "\n".join(lines) + "\n")


@FUZZ
@given(corpus=LINES, queries=LINES, qrels=LINES, header=st.booleans())
def test_fuzzed_beir_folders(corpus, queries, qrels, header, monkeypatch, capsys):
    root = workspace(monkeypatch)
    (root / "beir" / "qrels").mkdir(parents=True)
    (root / "beir" / "corpus.jsonl").write_text(corpus)
    (root / "beir" / "queries.jsonl").write_text(queries)
    (root / "beir" / "qrels" / "test.tsv").write_text(("query-id\tcorpus-id\tscore\n" if header else "") + qrels)
    outcome(sweep(root, "--beir", root / "beir"), root, capsys)


@FUZZ
@given(questions=LINES, header=st.sampled_from(["question,references,corpus_id\n", "query,references\n", ""]))
@example(questions="\x1e0\n", header="")  # a header quoted in the error held a record separator: two lines then
def test_fuzzed_questions_csvs(questions, header, monkeypatch, capsys):
    root = workspace(monkeypatch)
    (root / "q.csv").write_text(header + questions)
    outcome(sweep(root, "--corpus-dir", root / "corpora", "--questions", root / "q.csv"), root, capsys)


@FUZZ
@given(qrels=LINES, run=LINES, kind=st.sampled_from(["trec", "doc-qrels"]))
def test_fuzzed_trec_files(qrels, run, kind, monkeypatch, capsys):
    root = workspace(monkeypatch)
    (root / "qrels.txt").write_text(qrels)
    (root / "run.txt").write_text(run)
    outcome(["evaluate-run", "--gold", root / "qrels.txt", "--run", root / "run.txt", "--format", kind], root, capsys)


HTML = st.tuples(
    st.sampled_from([b"", b"<meta charset=", b'<meta http-equiv="Content-Type" content="text/html; charset=']),
    st.sampled_from([b"undefined", b"rot13", b"utf-16", b"latin-1", b"base64", b"x-user-defined", b"utf-8", b"idna"]),
    st.binary(max_size=64),
).map(lambda parts: parts[0] + parts[1] + b"><p>" + parts[2] + b"</p>")
PDF = st.binary(max_size=96).map(lambda b: b"%PDF-1.4\n" + b)


@FUZZ
@given(page=HTML, pdf=PDF, strict=st.booleans())
def test_fuzzed_html_and_pdf_documents(page, pdf, strict, monkeypatch, capsys):
    root = workspace(monkeypatch)
    (root / "corpora" / "page.html").write_bytes(page)
    (root / "corpora" / "paper.pdf").write_bytes(pdf)
    (root / "q.csv").write_text('question,references,corpus_id\nWhat?,"[]",doc\n')
    flags = ["--strict"] if strict else []
    outcome(sweep(root, "--corpus-dir", root / "corpora", "--questions", root / "q.csv", *flags), root, capsys)
