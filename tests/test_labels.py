"""One label per configuration (issue 32): `chunkeval.vocabulary.config_label` and `config_id`, the same in
Python and in the warehouse's SQL, and the Python API taking one string wherever it takes a list."""

from __future__ import annotations

import itertools

import duckdb
import pyarrow as pa
import pytest

import chunkeval
from chunkeval.errors import InputError
from chunkeval.vocabulary import (
    CONFIG_KEYS,
    LABEL_DEFAULTS,
    config_id,
    config_id_sql,
    config_label,
    config_label_sql,
)

DEFAULT = {**LABEL_DEFAULTS, "candidates": None}


def test_a_label_leaves_out_what_holds_its_default():
    assert config_label(DEFAULT) == "default"
    assert config_label({**DEFAULT, "retriever": "bm25", "model": "none", "index": "none"}) == "bm25"
    row = {**DEFAULT, "chunker": "recursive_token", "chunk_size": 400, "chunk_overlap": 50, "k": 10}
    assert config_label(row) == "recursive_token/size=400/overlap=50/k=10"
    row = {**DEFAULT, "model": "BAAI/bge-small-en", "index": "hnsw", "reranker": "models/ms-marco", "candidates": 50}
    assert config_label(row) == "bge-small-en/hnsw>ms-marco@50"
    assert " " not in config_label({**DEFAULT, "chunker": "my chunker"})  # a TREC run tag holds no space


def test_the_defaults_a_label_leaves_out_are_the_experiments():
    from chunkeval.engine.pipeline.experiment import SETTINGS

    defaults = {s.name: s.default for s in SETTINGS}
    setting = {"chunk_size": "chunk_sizes", "chunk_overlap": "overlaps"}
    for key, value in LABEL_DEFAULTS.items():
        default = defaults[setting.get(key, key)]
        assert str(value) == str(default[0] if isinstance(default, tuple) else default), key


def test_every_axis_is_declared_once_and_swept_by_one_setting():
    """`vocabulary.AXES` is the one declaration of the configuration axes: each is swept by exactly one setting of
    the experiment (whose default is the axis's), every derived
    list follows it, and the warehouse's key columns are its columns in its order."""
    from chunkeval.engine.pipeline.experiment import SETTINGS
    from chunkeval.vocabulary import ADDED_KEYS, AXES, FIRST, NUMBER_KEYS, OPTIONAL_KEYS
    from chunkeval.warehouse.tables import _KEYS

    swept = {}
    for s in SETTINGS:
        if s.axis:
            assert s.axis not in swept, f"{s.axis} swept by {swept.get(s.axis)} and {s.name}"
            swept[s.axis] = s
    assert sorted(swept) == sorted(CONFIG_KEYS) and CONFIG_KEYS == [a.key for a in AXES]
    for a in AXES:
        s = swept[a.key]
        if s.default:
            assert str(s.default[0]) == str(a.default), a.key
        assert (a.key in OPTIONAL_KEYS) == a.optional and (a.key in ADDED_KEYS) == (a.before is not FIRST)
    assert NUMBER_KEYS == {a.key for a in AXES if a.number}
    assert list(_KEYS) == ["run_id", *CONFIG_KEYS]
    assert all(a.optional for a in AXES if a.before is not FIRST and a.group != "rerank")  # later axes keep ids


def test_config_id_is_stable_and_tells_configurations_apart():
    assert config_id(DEFAULT) == config_id(dict(reversed(list(DEFAULT.items()))))  # order of the dict: no matter
    assert config_id(DEFAULT) == config_id({k: v for k, v in DEFAULT.items() if k not in ("reranker", "candidates")})
    rows = [dict(zip(CONFIG_KEYS, v)) for v in itertools.product(
        ["all-MiniLM-L6-v2", "none"], ["dense", "bm25"], ["exact", "none"], ["none", "ce"], [None, 20],
        ["fixed_token", "recursive_token"], [100, 200], [0, 25], ["none", "title"], [1, 5],
    )]  # fmt: skip
    ids = {config_id(r) for r in rows}
    assert len(ids) == len(rows) and all(len(i) == 8 and int(i, 16) >= 0 for i in ids)


def test_a_later_axis_at_its_default_keeps_the_id_and_label_of_before():
    """The axes added later (issue 33: vectors, dims, expand, context) at their defaults leave a configuration's
    id and label as they were before they existed: the id is the MD5 of the other keys' values alone; another
    value is in both."""
    import hashlib

    from chunkeval.vocabulary import OPTIONAL_KEYS

    before = [k for k in CONFIG_KEYS if k not in OPTIONAL_KEYS]
    text = "|".join("" if DEFAULT[k] is None else str(DEFAULT[k]) for k in before)
    assert config_id(DEFAULT) == hashlib.md5(text.encode()).hexdigest()[:8]
    assert config_id({k: v for k, v in DEFAULT.items() if k not in OPTIONAL_KEYS}) == config_id(DEFAULT)
    titled = {**DEFAULT, "context": "title", "chunk_size": 400}
    assert config_id(titled) != config_id(DEFAULT) and config_label(titled) == "size=400/context=title"
    late = {**DEFAULT, "late": "window:size=512"}  # issue 44
    assert config_id(late) != config_id(DEFAULT) and config_label(late) == "late=window:size=512"


def test_the_views_label_and_id_are_pythons():
    values = {
        "model": ["all-MiniLM-L6-v2", "org/m"], "retriever": ["dense", "bm25"], "index": ["exact", "hnsw"],
        "vectors": ["float32", "binary"], "dims": ["full", "128"], "reranker": ["none", "a/ce"], "candidates": [None, 9],
        "expand": ["none", "window:n=1"], "chunker": ["fixed_token", "semantic"], "chunk_size": [200, 300],
        "chunk_overlap": [0, 10], "context": ["none", "headings"], "late": ["none", "window:size=512"], "k": [5, 1],
    }  # fmt: skip
    assert list(values) == CONFIG_KEYS
    rows = [dict(zip(CONFIG_KEYS, v)) for v in itertools.product(*values.values())]
    configs = pa.Table.from_pylist(rows)  # noqa: F841 (read by DuckDB by name)
    got = duckdb.connect().execute(f"SELECT {config_label_sql()}, {config_id_sql()} FROM configs").fetchall()
    assert got == [(config_label(r), config_id(r)) for r in rows]


def test_every_list_argument_of_the_api_takes_one_string(tmp_path, monkeypatch):
    monkeypatch.setenv("CHUNKEVAL_HOME", str(tmp_path / "home"))
    with pytest.raises(InputError) as caught:  # the metric is read whole; then the missing warehouse is the error
        chunkeval.regressions("x", metrics="mrr")
    assert "unknown metric" not in str(caught.value)
    with pytest.raises(InputError, match="unknown metric 'nope'; choose from"):
        chunkeval.regressions("x", metrics="mrr,nope")
    res = chunkeval.score({"q1": ["c3"], "q2": ["c1"]}, {"q1": ["c3", "c1"], "q2": ["c2", "c1"]}, k=2)
    other = chunkeval.score({"q1": ["c3"], "q2": ["c1"]}, {"q1": ["c1", "c3"], "q2": ["c1", "c2"]}, k=2)
    by_text = chunkeval.compare(res, other, metric="mrr", config="k=2")
    assert len(by_text) == 1 and by_text == chunkeval.compare(res, other, metric="mrr", config={"k": 2})
    with pytest.raises(InputError, match="key=value"):
        chunkeval.compare(res, other, metric="mrr", config="k")
    from chunkeval.paths import DEMO_DIR as demo_dir  # the tests' demo (conftest)

    one = chunkeval.check_gold(str(demo_dir / "corpora"), str(demo_dir / "questions.csv"), corpus="honeybees")
    listed = chunkeval.check_gold(str(demo_dir / "corpora"), str(demo_dir / "questions.csv"), corpus=["honeybees"])
    assert one == listed


def test_the_apis_mistakes_are_one_line_as_the_commands_are(tmp_path, monkeypatch):
    """What a notebook gets wrong raises chunkeval's InputError with what it looks like, never Python's TypeError or
    pyarrow's KeyError: a misspelt keyword, a config mapping with an unknown key or a value of the wrong type, a
    corpus id that would be a path, questions that are no list."""
    monkeypatch.setenv("CHUNKEVAL_HOME", str(tmp_path / "home"))
    res = chunkeval.score({"q1": ["c3"], "q2": ["c1"]}, {"q1": ["c3", "c1"], "q2": ["c2", "c1"]}, k=2)
    other = chunkeval.score({"q1": ["c3"], "q2": ["c1"]}, {"q1": ["c1", "c3"], "q2": ["c1", "c2"]}, k=2)
    with pytest.raises(InputError, match=r"unknown keyword of chunkeval.compare\(\) 'metrc'; did you mean metric\?"):
        chunkeval.compare(res, other, metrc="mrr")
    with pytest.raises(InputError, match="unknown config key 'kk'; did you mean k"):
        chunkeval.compare(res, other, metric="mrr", config={"kk": 2})
    with pytest.raises(InputError, match="a value is a name or a whole number, got"):
        chunkeval.compare(res, other, metric="mrr", config={"k": [1, 2]})
    with pytest.raises(InputError, match="unknown keyword of chunkeval.score"):
        chunkeval.score({"q1": ["c3"]}, {"q1": ["c3"]}, kk=2)
    with pytest.raises(InputError, match="corpus id '../x' must be a file name"):
        chunkeval.evaluate({"../x": "text"}, [], chunker="fixed_token", chunk_sizes=[100], retriever="bm25")
    assert not (tmp_path / "x.md").exists() and not any(tmp_path.glob("**/x.md"))
    with pytest.raises(InputError, match="questions must be a file's path or a list of mappings, got int"):
        chunkeval.evaluate({"doc": "text"}, 5, chunker="fixed_token", chunk_sizes=[100], retriever="bm25")
    with pytest.raises(InputError, match="question 1: references must be a list, got int"):
        chunkeval.evaluate({"doc": "text"}, [{"question": "q", "references": 5, "corpus_id": "doc"}], retriever="bm25")
    with pytest.raises(InputError, match="a has no values of metric 'doc_mrr'"):  # span gold measures no doc_*
        chunkeval.compare(res, other, metric="doc_mrr")
    with pytest.raises(InputError, match="^alpha must be strictly between 0 and 1, got '0.05'"):
        chunkeval.compare(res, other, metric="mrr", alpha="0.05")
    with pytest.raises(InputError, match="chunk_size must be a whole number from 1"):
        chunkeval.check_gold({"doc": "text"}, [], chunk_size="200")
    with pytest.raises(InputError, match="cache_dir must be a folder's path, got int"):
        chunkeval.evaluate({"doc": "text"}, [], retriever="bm25", cache_dir=5)


def test_what_python_would_read_loosely_is_refused_by_the_api(tmp_path, monkeypatch):
    """Values Python takes without a word, and a run would then score wrong or explain badly: a grade that is NaN, an
    item that is None (it became the text 'None'), "no" for a yes-or-no keyword (true in Python), a table named by a
    number; and an error about questions or a corpus given as objects names the argument, not the temporary file
    they were written to."""
    monkeypatch.setenv("CHUNKEVAL_HOME", str(tmp_path / "home"))
    gold, run = {"q1": ["c3"]}, {"q1": ["c3", "c1"]}
    for grade in (float("nan"), float("inf"), None, "2"):
        with pytest.raises(InputError, match="grade of 'c3' must be a finite number"):
            chunkeval.score({"q1": {"c3": grade}}, run)
    for item in (None, 1.5, True):
        with pytest.raises(InputError, match="run of query 'q1': an item is a chunk id or a text"):
            chunkeval.score(gold, {"q1": [item, "c3"]})
    assert chunkeval.score({"q1": [7]}, {"q1": ["c1", 7]}, k=2).summary["mrr_mean"][0].as_py() == 0.5
    with pytest.raises(InputError, match="gold must be a mapping of query id"):
        chunkeval.score(["c3"], run)
    with pytest.raises(InputError, match="skip_empty_gold must be True or False, got 'yes'"):
        chunkeval.score(gold, run, skip_empty_gold="yes")
    res = chunkeval.score(gold, run, k=2)
    with pytest.raises(InputError, match="all_pairs must be True or False, got 'no'"):
        chunkeval.compare(res, metric="mrr", all_pairs="no")
    with pytest.raises(InputError, match="^yes must be True or False, got 'no'"):
        chunkeval.evaluate({"doc": "text"}, [], retriever="bm25", yes="no")
    with pytest.raises(InputError, match="^device must be auto, cpu, cuda or cuda:N, got 'gpu'"):
        chunkeval.evaluate({"doc": "text"}, [], retriever="bm25", device="gpu")
    with pytest.raises(InputError, match=r"a table is named by text \(summary"):
        res.table(5)
    with pytest.raises(InputError, match="no table 'per_quer'; did you mean per_query"):
        res.to_pandas("per_quer")
    with pytest.raises(InputError, match="^unknown config key 'kk'; did you mean k"):  # the keyword, not --config
        chunkeval.compare(res, metric="mrr", config="kk=2")
    with pytest.raises(InputError, match="^compare two recorded runs by their ids, or two results held in memory"):
        chunkeval.compare(res, "20261128T000000-aaaaaaaa", metric="mrr")
    with pytest.raises(InputError, match="^corpus_dir must be a folder's path or a mapping corpus_id → text, got int"):
        chunkeval.check_gold(123, [])  # never read as a path: `123: corpus folder not found`
    with pytest.raises(InputError, match="^experiment must be a file's path, a name or a mapping, got int"):
        chunkeval.evaluate({"doc": "text"}, [], experiment=5)
    bad = [{"question": "q", "corpus_id": "doc", "references": [{"content": "x", "start_index": "a", "end_index": 1}]}]
    for call in (chunkeval.check_gold, lambda c, q: chunkeval.evaluate(c, q, retriever="bm25")):
        with pytest.raises(InputError, match="^questions: question 1: reference 1 of question 'q'"):
            call({"doc": "text"}, bad)
        with pytest.raises(InputError, match="^corpus_dir: no documents"):
            call({}, bad)


def test_a_notebook_repr_names_configurations_as_the_terminal_does():
    res = chunkeval.score({"q1": ["c3"], "q2": ["c1"]}, {"q1": ["c3", "c1"], "q2": ["c2", "c1"]}, k=2)
    text = repr(res)
    row = res.summary.to_pylist()[0]
    assert f"{config_label(row)}" in text and config_id(row) in text and "config_id" in res._repr_html_()
