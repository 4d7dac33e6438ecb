"""The settings table (`chunkeval.engine.settings.table`): every way a setting arrives (flag, experiment file,
mapping, Python API) is made from it and checked by it, and docs/settings.md shows what it says.

The property tests feed malformed experiment files and flags: each is an experiment or one line of
`InputError` (exit 2 at the command line), never another exception."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import chunkeval
from chunkeval.cli.main import build_parser
from chunkeval.cli.options import experiment_from_args
from chunkeval.engine.pipeline.experiment import SETTINGS, Experiment, settings_reference
from chunkeval.engine.settings.table import MAX_K, SECTIONS, Setting, renamed, setting, table_of
from chunkeval.errors import InputError

DOCS = Path(__file__).resolve().parents[1] / "docs" / "settings.md"


def test_the_docs_table_is_the_generated_one():
    """docs/settings.md holds the reference the table makes (regenerate: python -m chunkeval.engine.pipeline.experiment
    docs/settings.md)."""
    assert settings_reference() in DOCS.read_text(encoding="utf-8")


def test_every_setting_has_a_section_help_and_a_readable_kind():
    kinds = {"path", "text", "bool", "int", "number", "ints", "names", "index", "models", "alerts"}
    for s in SETTINGS:
        assert s.section in SECTIONS and s.help and s.kind in kinds, s.name
        assert (s.flag is None) or s.flag == "--" + s.name.replace("_", "-"), s.name


def test_the_choices_are_the_implementations():
    from chunkeval.engine.embedding.backends import BACKENDS, QUANTIZE
    from chunkeval.engine.embedding.precision import PRECISIONS
    from chunkeval.engine.inputs.duplicates import MODES
    from chunkeval.engine.inputs.extract import HTML_MODES

    table = {s.name: s.choices for s in SETTINGS}
    assert set(table["duplicates"]) == set(MODES) and set(table["backend"]) == {"auto", *BACKENDS}
    assert set(table["quantize"]) == set(QUANTIZE) and set(table["precision"]) == set(PRECISIONS)
    assert set(table["html"]) == set(HTML_MODES)


def test_every_flag_every_keyword_every_key_comes_from_the_table():
    sweep = build_parser()._subparsers._group_actions[0].choices["sweep"]
    flags = {flag for action in sweep._actions for flag in action.option_strings}
    assert {s.flag for s in SETTINGS if s.flag} <= flags
    keywords = inspect.signature(chunkeval.evaluate).parameters
    assert {s.name for s in SETTINGS} <= set(keywords)
    assert all(
        f"    {s.name}: " in chunkeval.evaluate.__doc__ for s in SETTINGS if s.name not in ("corpus_dir", "questions")
    )
    assert Experiment.from_dict({s.name: s.default for s in SETTINGS if s.kind != "models"}).k == (5,)


def test_an_old_spelling_is_read_with_a_note_and_never_beside_the_new():
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Renamed:
        depth: tuple = setting((5,), "ints", "retrieval depths", "retrieval", deprecated=("k",))

    table = table_of(Renamed)
    notes = []
    assert renamed({"k": [3]}, table, "exp.yaml", notes.append) == {"depth": [3]}
    assert notes == ["note: exp.yaml: k is deprecated; write depth"]
    with pytest.raises(InputError, match="k is an old spelling of depth: give one of them"):
        renamed({"depth": [1], "k": [3]}, table)
    assert isinstance(table[0], Setting) and table[0].flag == "--depth"


def test_a_value_past_its_maximum_is_refused_however_it_arrives(tmp_path):
    line = f"k must be at most {MAX_K}"
    with pytest.raises(InputError, match=line):
        Experiment.from_dict({"k": [MAX_K + 1]})
    (tmp_path / "e.yaml").write_text(f"k: [{MAX_K + 1}]\n")
    with pytest.raises(InputError, match=line):
        Experiment.from_yaml(tmp_path / "e.yaml")
    with pytest.raises(InputError, match=line):
        Experiment().with_overrides(k=(MAX_K + 1,))
    with pytest.raises(InputError, match="batch_size must be at most 65536"):
        chunkeval.evaluate(batch_size=10**9)
    with pytest.raises(InputError, match=line):
        chunkeval.evaluate(k=[1_000_000_000])


# --------------------------------------------------------------------------- malformed input, generated

NAMES = [s.name for s in SETTINGS] + ["chunk_size", "top_k", "plugin"]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(alphabet="ab1.:%-_ /,", max_size=12),
    st.sampled_from(["fixed_token", "bm25", "dense", "exact", "hnsw:m=abc", "..x:f", ".x:f", "none", "10%", "1e400"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=2),
    max_leaves=6,
)
keys = st.one_of(st.sampled_from(NAMES), st.integers(), st.booleans(), st.none())


def _one_line_or_experiment(call) -> None:
    try:
        call()
    except InputError as exc:
        assert "\n" not in str(exc) and str(exc)
    except SystemExit as exc:  # argparse's usage error: exit 2
        assert exc.code == 2


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(keys, values, max_size=5), st.booleans())
def test_a_malformed_experiment_file_is_one_line(tmp_path, data, twice):
    text = yaml.safe_dump(data, allow_unicode=True) if data else "{}\n"
    if twice and data:
        text += text.splitlines()[0] + "\n"  # the first key, given again
    path = tmp_path / "exp.yaml"
    path.write_text(text, encoding="utf-8")
    _one_line_or_experiment(lambda: Experiment.from_yaml(path))


FLAGS = [s.flag for s in SETTINGS if s.flag and s.kind != "bool"]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(FLAGS + ["--batch-size", "--plugin"]),
            st.one_of(
                st.integers(min_value=-(2**65), max_value=2**65).map(str),
                st.text(alphabet="ab1.:%-_,e9", min_size=1, max_size=12),
            ),
        ),
        max_size=4,
    )
)
def test_malformed_flags_are_one_line(pairs):
    argv = ["sweep", "--out", "x.csv", "--retriever", "bm25", *[part for pair in pairs for part in pair]]
    _one_line_or_experiment(lambda: experiment_from_args(build_parser().parse_args(argv)))


def test_a_large_grid_through_the_python_api_needs_yes_or_max_configurations(tmp_path, monkeypatch):
    """chunkeval.evaluate never asks: a grid past 500 configurations is refused with its estimate (a probe of the
    model on a first run) until `yes=True` or `max_configurations` says it is intended; allowed, the estimate is
    still said first. bm25's grid embeds nothing: no probe, no time."""
    from chunkeval.engine.embedding.embedders import Embedders
    from chunkeval.engine.pipeline.grid import Consent, check_grid
    from chunkeval.paths import DEMO_DIR

    monkeypatch.setenv("CHUNKEVAL_HOME", str(tmp_path / "home"))  # no warehouse: no past run to measure by
    data = dict(corpus_dir=DEMO_DIR / "corpora", questions=DEMO_DIR / "questions.csv")
    grid = dict(chunk_sizes=list(range(10, 61)), k=list(range(1, 11)))
    with pytest.raises(InputError) as refused:
        chunkeval.evaluate(**data, **grid, retriever=["dense"])
    message = str(refused.value)
    assert message.startswith("this grid scores 510 configurations (each at each k) and embeds about ")
    assert "of embedding (from a probe); more than 500 configurations need yes=True, or the experiment key " in message
    assert not (tmp_path / "home" / "cache" / "embeddings").exists() or not any(
        (tmp_path / "home" / "cache").rglob("*.parquet")
    )
    with pytest.raises(InputError, match="510 configurations .* and embeds about 0 texts; more than 500"):
        chunkeval.evaluate(**data, **grid, retriever=["bm25"])
    said = []
    for yes, intended in ((True, 0), (False, 510)):
        exp = Experiment.from_dict({**Experiment().to_dict(), **grid, "retriever": ["bm25"]})
        exp = exp.with_overrides(max_configurations=intended)
        check_grid(exp, Embedders(tmp_path / "cache"), Consent(yes, None, say=said.append))
    assert said == ["this grid scores 510 configurations (each at each k) and embeds about 0 texts"] * 2


def test_a_large_grid_asks_on_a_terminal_and_starts_nothing_when_told_no(tmp_path):
    """On a terminal a grid past LARGE_GRID prints its estimate and asks; `n` starts nothing (one line, exit 2,
    no output written). bm25 over 26 chunk sizes × 20 depths: 520 configurations, nothing to embed."""
    import os
    import pty
    import subprocess
    import sys

    from chunkeval.paths import DEMO_DIR

    out = tmp_path / "grid.csv"
    sizes = ",".join(str(40 + 10 * i) for i in range(26))
    argv = [sys.executable, "-m", "chunkeval.cli", "sweep", "--retriever", "bm25", "--chunk-sizes", sizes]
    argv += ["--k", ",".join(str(k) for k in range(1, 21)), "--out", str(out)]
    argv += ["--corpus-dir", str(DEMO_DIR / "corpora"), "--questions", str(DEMO_DIR / "questions.csv")]
    terminal, other = pty.openpty()
    env = {**os.environ, "CHUNKEVAL_HOME": str(tmp_path / "home")}
    with subprocess.Popen(argv, stdin=other, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as p:
        os.write(terminal, b"n\n")  # read by the prompt, whenever it comes
        said, err = p.communicate(timeout=300)
    os.close(terminal)
    os.close(other)
    assert p.returncode == 2 and "go on? [y/N]" in said, said + err
    lines = err.strip().splitlines()
    assert "520 configurations" in lines[0] and lines[-1] == "chunkeval: error: the grid was not started", err
    assert not out.exists()
