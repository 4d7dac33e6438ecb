"""Shared fixtures. Tests use the real model, tokenizer, DuckDB and Prefect; nothing is mocked.

What is slow to make is made once per session and shared: the embedding cache and the locally built
models (`shared_home`, `minilm_static`, `share_models`), the demo's first run (`demo_first_run`), and
one real Prefect server (`prefect_server` for processes, `prefect_api` for flows run in the test process)."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

import pytest

from prefect_server import BIN
from prefect_server import prefect_server as start_prefect_server

# The shipped demo (16 documents, 264 questions) is what a user's `chunkeval run` runs, and what the tests of the first
# run, the demo's figures and the documented commands run (they drop this variable). Every other test reads the demo
# only as small data ready to hand (the defaults of an experiment, a quick run): for them it is the three-document
# demo of before, tests/data/tiny_demo, whose numbers tests/data/demo_bm25.json and test_demo_numbers hold.
os.environ["CHUNKEVAL_DEMO_DIR"] = str(Path(__file__).resolve().parent / "data" / "tiny_demo")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# A run without PREFECT_API_URL keeps its temporary Prefect server for the next commands (10 minutes by default):
# here every run's server stops with it, so that no test leaves one behind; test_kept_server tests the kept one.
os.environ["CHUNKEVAL_SERVER_KEEP"] = "0"

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "tests" / "data" / "tiny_demo"  # the demo most tests read (above); the shipped one: SHIPPED_DEMO
SHIPPED_DEMO = ROOT / "data" / "demo"
CHROMA = (ROOT.parent / "shared" / "datasets" / "chroma_general").resolve()


# The fast tier (`pytest -m "not slow"`) leaves out what needs a server, a process tree, the model built once per
# session, or the shared data set: each test that asks for one of these fixtures is marked slow here, the rest by hand.
SLOW_FIXTURES = frozenset(
    {
        "prefect_server",
        "prefect_api",
        "demo_first_run",
        "chroma",
        "infinity_servers",
        "infinity_server",
        "minilm_static",
    }
)


# The files that take longest, longest first (seconds of the two-worker run, `--durations`, 2026-11-28): with
# `--dist loadfile` a worker takes the next file as it frees, so the long ones start first and the many short ones
# fill in around them, instead of one worker running the month alone at the end (pyproject's `--no-loadscope-reorder`
# keeps this order; xdist's own puts the files with most tests first). Files that wait for a test server's venv come
# after the first few, so that the venv is built meanwhile. The rest keep their order.
LONGEST_FIRST = (
    # served alarms first, beside the month's nights (together 268 s, 2026-12-02), not under the shipped demo's first
    # run, which keeps both cores busy for minutes
    "test_alerts.py",  # 49 s
    "test_month.py",  # 98 s and 44 of setup: five nights through the scheduler
    "test_orchestration.py",  # 110 s: kill points, four runs at once, a scheduler that creates nothing
    "test_first_run.py",  # the shipped demo's first run (170 s alone), its documented commands, its deployments served
    "test_flows.py",  # 66 s
    "test_backends.py",  # 61 s
    "test_served.py",  # 58 s: the infinity server
    "test_report.py",  # 41 s
    "test_dask.py",  # 40 s
    "test_traces.py",  # 32 s: Phoenix's export
)


def pytest_collection_modifyitems(items):
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    rank = {name: n for n, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file's own order is kept


# The test servers' own venvs (an infinity-emb server, an MLflow server, a Phoenix server: each pins what the project cannot) are
# built by the tests themselves, once per machine (kept under ~/.cache/chunkeval), and only where a selected test
# needs one: in the background from the start of the session, so that other tests run meanwhile.
_VENVS: dict[str, threading.Thread] = {}
_VENV_ERRORS: dict[str, BaseException] = {}


def _build_in_background(name: str, build) -> None:
    def run():
        try:
            build()
        except BaseException as exc:  # said by the fixture that needs it, in its own test
            _VENV_ERRORS[name] = exc

    _VENVS[name] = threading.Thread(target=run, name=f"venv-{name}", daemon=True)
    _VENVS[name].start()


def pytest_collection_finish(session):
    needed = {f for item in session.items for f in getattr(item, "fixturenames", ())}
    if needed & {"infinity_servers", "infinity_server"}:
        from served_server import ensure_venv

        _build_in_background("infinity", ensure_venv)
    if "mlflow_uri" in needed or "mlflow_python" in needed:
        from mlflow_server import ensure_venv as ensure_mlflow

        _build_in_background("mlflow", ensure_mlflow)
    if "phoenix_python" in needed:
        from phoenix_server import ensure_venv as ensure_phoenix

        _build_in_background("phoenix", ensure_phoenix)


def built_venv(name: str) -> None:
    """Wait for the venv the session builds for `name` (the build runs once per machine; afterwards, at once)."""
    thread = _VENVS.get(name)
    if thread is not None:
        thread.join()
    if name in _VENV_ERRORS:
        raise RuntimeError(f"the {name} test server's venv could not be built: {_VENV_ERRORS[name]}")


@pytest.fixture(scope="session")
def phoenix_python() -> Path:
    """The python of the Phoenix server's own venv (tests/phoenix_server.py), built in the background."""
    from phoenix_server import ensure_venv

    built_venv("phoenix")
    return ensure_venv()


@pytest.fixture(scope="session")
def chroma() -> Path:
    """The shared Chroma general evaluation data set (never copied into the repository)."""
    if not (CHROMA / "questions_df.csv").is_file():
        pytest.skip(f"the shared data set is absent: expected it at {CHROMA}")
    return CHROMA


def _runs_folder(tmp_path_factory, name: str) -> Path:
    """A folder every worker of this pytest run shares (xdist's workers have base temps side by side): what is
    built once for the run (minilm-static: each builder locks the folder, so one builds and the other reads)."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if base.name.startswith("popen-gw") else base
    folder = shared / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="session")
def shared_home(tmp_path_factory) -> Path:
    """One CHUNKEVAL_HOME for the session, so the embedding cache is shared between tests. Its backends folder
    (exports, and `backend: auto`'s probe, once per model and machine) serves every home of the session; its models
    folder (minilm-static) every worker of the run."""
    home = tmp_path_factory.mktemp("chunkeval_home")
    (home / "models").symlink_to(_runs_folder(tmp_path_factory, "built-models"), target_is_directory=True)
    os.environ["CHUNKEVAL_BACKENDS"] = str(home / "backends")
    # backend auto means torch in the suite, whatever a probe on a busy machine would say: its numbers are then
    # those of the published tables; the tests of auto itself lift the pin (test_backends)
    os.environ["CHUNKEVAL_AUTO_BACKEND"] = "torch"
    return home


@pytest.fixture(autouse=True)
def _home(monkeypatch, shared_home):
    monkeypatch.setenv("CHUNKEVAL_HOME", str(shared_home))


@pytest.fixture(scope="session")
def embedder_factory(shared_home):
    from chunkeval.engine.embedding import Embedder

    def make(**kw):
        return Embedder(cache_dir=shared_home / "cache" / "embeddings", **kw)

    return make


@pytest.fixture(scope="session")
def minilm_static(shared_home) -> Path:
    """minilm-static, built once per session into the shared home's models folder (which
    `share_models` lends to other homes)."""
    from chunkeval.engine.embedding import static

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CHUNKEVAL_HOME", str(shared_home))
        return static.ensure_model("minilm-static", quiet=True)


@pytest.fixture(scope="session")
def share_models(minilm_static):
    """`share_models(home)`: `home`'s models folder is the session's, where minilm-static is built."""

    def share(home: Path) -> Path:
        home.mkdir(parents=True, exist_ok=True)
        (home / "models").symlink_to(minilm_static.parent, target_is_directory=True)
        return home

    return share


@pytest.fixture(scope="session")
def demo_first_run(tmp_path_factory, share_models) -> tuple[subprocess.CompletedProcess, Path]:
    """The installed `chunkeval run` with no arguments (the demo), as a new user first runs it: an empty
    CHUNKEVAL_HOME but for the session's built models, and no PREFECT_API_URL (a temporary Prefect
    server). Its process (for test_first_run) and its home, whose cache then holds the demo's vectors
    (test_orchestration's served demo runs start from it)."""
    folder = tmp_path_factory.mktemp("first_run")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_") and k != "CHUNKEVAL_DEMO_DIR"}
    home = share_models(folder / "home")
    env.update(CHUNKEVAL_HOME=str(home), PREFECT_HOME=str(folder / "prefect"), HF_HUB_OFFLINE="1")
    proc = subprocess.run(
        [str(BIN / "chunkeval"), "run"], env=env, capture_output=True, text=True, timeout=900, cwd=folder
    )
    return proc, home


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory):
    """The session's one real Prefect server on 127.0.0.1; yields the environment its client processes need."""
    with start_prefect_server(tmp_path_factory.mktemp("prefect_home")) as env:
        yield env


@pytest.fixture(scope="session")
def prefect_api(prefect_server):
    """Flows run in the test process (and the processes it starts) talk to the session's server, as
    under prefect_test_harness, whose settings changes this repeats; yields the API's URL."""
    import prefect.context
    from prefect.settings import PREFECT_API_URL, temporary_settings

    url = prefect_server["PREFECT_API_URL"]
    with pytest.MonkeyPatch.context() as mp, temporary_settings(updates={PREFECT_API_URL: url}):
        mp.setenv("PREFECT_API_URL", url)
        with prefect.context._temporary_global_settings_context(prefect.context.get_settings_context()):
            yield url
            _drain_prefect_workers()


def _drain_prefect_workers() -> None:
    """Send the logs and events still queued before the server stops (as prefect_test_harness does)."""
    import inspect

    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker
    from prefect.utilities.asyncutils import run_coro_as_sync

    async def drain():
        try:
            result = APILogWorker.instance().drain()
            if inspect.isawaitable(result):
                await result
        except RuntimeError:  # never started
            pass
        result = EventsWorker.drain_all()
        if inspect.isawaitable(result):
            await result

    run_coro_as_sync(drain())


@pytest.fixture(scope="session")
def infinity_servers(tmp_path_factory):
    """The session's real OpenAI-compatible embedding servers on 127.0.0.1, started side by side: infinity-emb
    serving the bundled MiniLM as `minilm`, and another of the same width under the same name (MiniLM with
    noise in its last layer, for the swap test). Their venv is built once (served_server.py)."""
    from chunkeval.engine.embedding.folders import bundled_folder
    from served_server import Infinity, perturbed_minilm

    built_venv("infinity")
    folder = tmp_path_factory.mktemp("infinity")
    other = perturbed_minilm(bundled_folder(), folder / "swapped-minilm")
    servers = [Infinity(bundled_folder(), folder / "server.log"), Infinity(other, folder / "swapped.log")]
    try:
        for server in servers:
            server.launch()
        yield tuple(server.wait() for server in servers)
    finally:
        for server in servers:
            server.kill()


@pytest.fixture(scope="session")
def infinity_server(infinity_servers):
    """The bundled MiniLM behind infinity; a test that kills it starts it again before it ends."""
    return infinity_servers[0]
