"""Models chunkeval builds locally: a real (small) distillation from the bundled MiniLM, no mocks.

The build mechanics are tested on `tiny-static`, the same recipe as `minilm-static` on the first
1,000 word pieces (seconds instead of a minute); the real `minilm-static` is built once per session
(conftest's `minilm_static`), and one test checks it.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from chunkeval.engine.embedding import model_fingerprint
from chunkeval.engine.embedding import static as models
from chunkeval.engine.embedding.built import RECORD
from chunkeval.errors import InputError

TINY = models.ModelSpec(
    "tiny-static",
    "the static recipe on 1,000 word pieces, for tests",
    models.build_static,
    {"base": "all-MiniLM-L6-v2", "dims": 32, "max_pieces": 1000},
)


@pytest.fixture(autouse=True)
def _tiny(monkeypatch):
    monkeypatch.setitem(models.MODELS, TINY.name, TINY)


@pytest.fixture
def tiny():
    """The built tiny model (built once per test session, in the session's CHUNKEVAL_HOME)."""
    return models.ensure_model(TINY.name)


def test_registry():
    assert models.is_buildable("minilm-static")
    assert not models.is_buildable("no-such-model")
    with pytest.raises(InputError, match="no-such-model"):
        models.ensure_model("no-such-model")


def test_tiny_builds_and_loads(tiny, shared_home):
    from sentence_transformers import SentenceTransformer

    assert tiny == shared_home / "models" / "tiny-static"
    assert models.is_built(TINY.name)
    vectors = SentenceTransformer(str(tiny), device="cpu").encode(["the cat sat on the mat", "a"])
    assert vectors.shape == (2, 32) and np.isfinite(vectors).all()
    # its build leaves nothing behind (the folder is the run's: another worker may be building minilm-static in it)
    assert not [p for p in (shared_home / "models").iterdir() if "tiny" in p.name and p.name.endswith((".tmp", ".old"))]


def test_second_call_does_not_rebuild(tiny, capfd):
    mtime = (tiny / "model.safetensors").stat().st_mtime_ns
    capfd.readouterr()
    assert models.ensure_model(TINY.name) == tiny
    assert (tiny / "model.safetensors").stat().st_mtime_ns == mtime
    assert capfd.readouterr().err == ""


def test_leftover_temp_folder_is_ignored_and_removed(tiny):
    # what a build killed half-way leaves: a temporary folder of a process that is gone
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    leftover = tiny.parent / f".{TINY.name}.{int(dead.stdout)}.{'0' * 32}.tmp"
    leftover.mkdir()
    (leftover / "modules.json").write_text("[]")
    assert models.ensure_model(TINY.name) == tiny  # the leftover is never used
    (tiny / RECORD).unlink()  # now force a build: it clears the leftover
    assert models.ensure_model(TINY.name, quiet=True) == tiny
    assert not leftover.exists() and models.is_built(TINY.name)


def test_damaged_folder_is_rebuilt_with_the_same_content(tiny, capfd):
    before = model_fingerprint(str(tiny))
    weights = tiny / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])  # truncated
    assert not models.is_built(TINY.name)
    capfd.readouterr()
    assert models.ensure_model(TINY.name) == tiny
    err = capfd.readouterr().err
    assert err.splitlines() == [
        "chunkeval: building tiny-static (the static recipe on 1,000 word pieces, for tests), once…"
    ]
    assert models.is_built(TINY.name)
    assert model_fingerprint(str(tiny)) == before  # the build is deterministic


def test_record_from_another_recipe_is_rebuilt(tiny):
    record = json.loads((tiny / RECORD).read_text())
    record["model"]["recipe"] = -1
    (tiny / RECORD).write_text(json.dumps(record))
    assert not models.is_built(TINY.name)
    models.ensure_model(TINY.name, quiet=True)
    assert models.is_built(TINY.name)


def test_embedder_normalises(tiny, embedder_factory):
    embedder = embedder_factory(model=str(tiny))
    # each text has a piece that tiny-static knows (single characters, like "a"; its longer words are zero)
    texts = ["a honeybee makes honey", "a lighthouse burned coal in 1781", "a honeybee makes honey"]
    vectors, truncated = embedder.embed(texts)
    assert vectors.shape == (3, 32) and vectors.dtype == np.float32 and np.isfinite(vectors).all()
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert not truncated.any()  # a static model has no length limit
    np.testing.assert_array_equal(vectors[0], vectors[2])


def test_a_run_builds_a_missing_model_once_and_says_so_in_one_line(tmp_path, monkeypatch, capfd, prefect_api):
    """What a new user's first `chunkeval run` of the demo prints for minilm-static, on tiny-static:
    the build's one line in the command's output, once, and nothing the second time."""
    from chunkeval.cli import main
    from chunkeval.paths import DEMO_DIR

    monkeypatch.setenv("CHUNKEVAL_HOME", str(tmp_path / "home"))
    settings = ["--corpus-dir", str(DEMO_DIR / "corpora"), "--questions", str(DEMO_DIR / "questions.csv")]
    grid = ["--model", "tiny-static", "--chunk-sizes", "100", "--k", "1"]
    capfd.readouterr()
    assert main(["run", "--experiment", "tiny", *settings, *grid]) == 0
    out, err = capfd.readouterr()
    assert "experiment tiny: run " in out and "Traceback" not in err
    said = [line for line in err.splitlines() if "building" in line]
    assert said[0] == "chunkeval: building tiny-static (the static recipe on 1,000 word pieces, for tests), once…"
    assert [line.split("]")[1].split()[0] for line in said[1:]] == ["0/1000", "1000/1000"]  # its bar, off a terminal
    assert main(["run", "--experiment", "tiny"]) == 0
    assert "building" not in capfd.readouterr().err


def test_minilm_static_real_build(minilm_static, shared_home):
    """The real model: built once (per session, by the `minilm_static` fixture), 256 wide, and it ranks
    a related text above an unrelated one."""
    from sentence_transformers import SentenceTransformer

    mtime = (minilm_static / "model.safetensors").stat().st_mtime_ns
    folder = models.ensure_model("minilm-static", quiet=True)
    assert folder == minilm_static == shared_home / "models" / "minilm-static" and models.is_built("minilm-static")
    assert (folder / "model.safetensors").stat().st_mtime_ns == mtime  # not built again
    model = SentenceTransformer(str(folder), device="cpu")
    query, related, unrelated = model.encode(
        [
            "how do bees make honey",
            "honeybees turn nectar into honey in the hive",
            "the lighthouse lens was designed in 1822",
        ]
    )
    assert query.shape == (256,) and np.isfinite(query).all()
    assert query @ related > query @ unrelated


@pytest.mark.slow
def test_a_build_shows_a_bar_and_is_timed_as_its_own_stage(tiny):
    """A first run's model build (issue 35): a progress bar over the word pieces, with the time left once it
    knows the pace, and its seconds in a stage of their own, taken out of the stage that needed the model."""
    import io

    from chunkeval import progress

    (tiny / RECORD).unlink()  # force a build
    shown, clock = io.StringIO(), progress.Stopwatch()
    with progress.show_progress(shown), clock.stage("checks"):
        assert models.ensure_model(TINY.name, quiet=True) == tiny
    lines = shown.getvalue().splitlines()
    assert lines[0].startswith("building static model [") and lines[0].endswith("0/1000     0 s")
    assert lines[-1].startswith("building static model [" + "#" * 28 + "] 1000/1000")
    assert list(clock.seconds) == ["building models", "checks"]
    assert clock.seconds["checks"] < 0.5 * clock.seconds["building models"]


def test_a_terminal_bar_says_how_long_is_left():
    import io
    import re

    from chunkeval import progress

    class Tty(io.StringIO):
        def isatty(self):
            return True

    shown = Tty()
    bar = progress.TerminalProgress(shown)
    bar("embedding", 0, 100)
    bar("embedding", 25, 100)
    bar("embedding", 100, 100)
    first, quarter, done = shown.getvalue().split("\r")[1:]
    assert "left" not in first and "left" not in done  # no pace yet; nothing left
    assert re.fullmatch(r"embedding  \[#{7}\.{21}\] 25/100 +\d+ s, about \d+ s left", quarter), quarter


def test_off_a_terminal_a_long_step_says_where_it_is_without_updates(monkeypatch):
    """Off a terminal every long step prints a line at least every 10 s (issue 42): a build whose batch, a chat
    request or a stage that takes long sends no update meanwhile, so the display's clock says the line again; a
    step that is over (its bar full, its stage closed) is not repeated."""
    import io
    import time

    from chunkeval import progress

    monkeypatch.setattr(progress, "OFF_TERMINAL_EVERY", 0.0)  # every tick is due
    shown = io.StringIO()
    bar = progress.TerminalProgress(shown)
    bar("building static model", 0, 29528)
    bar.tick()
    bar.tick()
    lines = shown.getvalue().splitlines()
    assert len(lines) == 3 and all(line.startswith("building static model [....") for line in lines), lines
    bar("building static model", 29528, 29528)
    bar.tick()
    bar("chunking", None, None)
    bar.tick()
    bar.end("chunking")
    bar.tick()
    lines = shown.getvalue().splitlines()[3:]
    assert len(lines) == 3 and lines[0].endswith("29528/29528     0 s"), lines
    assert lines[1] == "chunking…" and lines[2].startswith("chunking…"), lines

    monkeypatch.setattr(progress, "OFF_TERMINAL_EVERY", 0.02)  # and the clock of show_progress calls tick
    shown = io.StringIO()
    with progress.show_progress(shown):
        progress.step("asking the chat model", 0, 5)
        deadline = time.monotonic() + 30
        while len(shown.getvalue().splitlines()) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert len(shown.getvalue().splitlines()) >= 2, shown.getvalue()
