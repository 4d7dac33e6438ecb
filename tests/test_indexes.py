"""The index axis (docs/indexes.md): faiss's HNSW and IVF in process, and a real Chroma, embedded and as a
server on 127.0.0.1 started here. Oracles: exact top-k by numpy's argsort, and faiss's own output."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import faiss
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from chunkeval.cli import main
from chunkeval.engine.embedding.embedders import Embedders
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.engine.pipeline.sweep import run_sweep
from chunkeval.engine.retrieval import indexes
from chunkeval.engine.retrieval.indexes import parse_index, persist
from chunkeval.engine.retrieval.indexes.measure import measure
from chunkeval.errors import InputError
from chunkeval.paths import DEMO_DIR
from chunkeval.run_result import RunResult
from chunkeval.warehouse import SCHEMA_VERSION, Warehouse

ROOT = Path(__file__).resolve().parents[1]
CHROMA_BIN = Path(sys.executable).parent / "chroma"


def unit(rows: int, width: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((rows, width)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def exact_ids(q: np.ndarray, c: np.ndarray, k: int) -> np.ndarray:
    """The oracle: every score, sorted (stable: the lower chunk first among equals)."""
    return np.argsort(-(q @ c.T), axis=1, kind="stable")[:, :k]


def share_found(ann: np.ndarray, exact: np.ndarray) -> np.ndarray:
    return np.array([len(set(a[a >= 0].tolist()) & set(e.tolist())) / len(e) for a, e in zip(ann, exact)])


@pytest.fixture()
def own_home(tmp_path, monkeypatch):
    monkeypatch.setenv("CHUNKEVAL_HOME", str(tmp_path / "home"))
    indexes.forget()
    yield tmp_path / "home"
    indexes.forget()


# ------------------------------------------------------------------------------------------------ settings


def test_settings_take_the_installed_librarys_defaults_and_sort_their_parameters():
    probe = faiss.IndexHNSWFlat(8, 32)
    assert parse_index("hnsw").key == (
        f"hnsw:ef_construction={probe.hnsw.efConstruction}:ef_search={probe.hnsw.efSearch}:m=32"
    )
    assert (
        parse_index("hnsw:m=16:ef_search=64").key
        == f"hnsw:ef_construction={probe.hnsw.efConstruction}:ef_search=64:m=16"
    )
    assert parse_index({"kind": "hnsw", "m": 16, "ef_construction": 200}).key.startswith("hnsw:ef_construction=200:")
    assert parse_index("ivf:nlist=1024:nprobe=16").key == "ivf:nlist=1024:nprobe=16"
    assert parse_index("ivf:nlist=64:pq_m=48").key == "ivf:nlist=64:nprobe=1:pq_m=48:pq_nbits=8"
    from chromadb.api.collection_configuration import populate_create_hnsw_defaults

    d = populate_create_hnsw_defaults({"space": "cosine"})
    served = parse_index("chroma:url=http://127.0.0.1:8000:ef_search=50")
    assert served.url == "http://127.0.0.1:8000"
    assert served.key == f"chroma:ef_construction={d['ef_construction']}:ef_search=50:m={d['max_neighbors']}"
    assert (
        parse_index("chroma").key
        == f"chroma:ef_construction={d['ef_construction']}:ef_search={d['ef_search']}:m={d['max_neighbors']}"
    )
    assert parse_index("exact").key == "exact" and not parse_index("exact").approximate


# ------------------------------------------------------------------------------------------------ faiss


@pytest.mark.parametrize("setting", ["hnsw:m=16:ef_construction=200:ef_search=2000", "ivf:nlist=16:nprobe=16"])
def test_at_full_depth_an_index_answers_the_exact_top_k(setting, own_home):
    """ef_search as deep as the set (nprobe = nlist): the exact top k, and ann_recall_at_k = 1."""
    c, q = unit(1500, 32, 1), unit(200, 32, 2)
    spec = parse_index(setting)
    ids, _ = indexes.search(spec, q, c, 10)
    assert np.array_equal(np.sort(ids, axis=1), np.sort(exact_ids(q, c, 10), axis=1))
    found = measure(spec, q, c, (1, 10))
    assert np.all(found.recall(0) == 1.0) and np.all(found.recall(1) == 1.0)


def test_exact_search_is_timed_only_beside_an_index():
    """Untimed (a grid without an approximate index), exact search keeps its recall of 1 and its size, and its
    latency columns are empty; timed (beside an index, its baseline), it has them. An index is always timed."""
    c, q = unit(500, 16, 1), unit(40, 16, 2)
    alone, beside = measure(parse_index("exact"), q, c, (5,), timed=False), measure(parse_index("exact"), q, c, (5,))
    assert np.all(alone.recall(0) == 1.0) and alone.stats()["index_bytes"] == c.nbytes
    assert {alone.stats()[m] for m in ("latency_p50_ms", "latency_p95_ms", "batch_ms_per_query")} == {None}
    assert beside.stats()["latency_p95_ms"] >= beside.stats()["latency_p50_ms"] > 0
    assert beside.stats()["batch_ms_per_query"] > 0
    assert measure(parse_index("ivf:nlist=4:nprobe=4"), q, c, (5,), timed=False).stats()["latency_p50_ms"] > 0


def test_a_shallow_search_loses_recall_measured_as_the_share_of_exact_ids_found(own_home):
    """On 20,000 random vectors with ef_search 1 HNSW misses; ann_recall_at_k is the share of the exact top k
    it found, computed here from an argsort, and equal to what faiss's own output gives."""
    c, q = unit(20000, 48, 3), unit(300, 48, 4)
    spec = parse_index("hnsw:m=4:ef_construction=8:ef_search=1")
    k = 10
    found = measure(spec, q, c, (k,))
    ann, _ = indexes.search(spec, q, c, k)
    want = share_found(ann, exact_ids(q, c, k))
    assert want.mean() < 0.9
    np.testing.assert_allclose(found.recall(0), want)
    faiss.omp_set_num_threads(1)
    own = faiss.IndexHNSWFlat(48, 4, faiss.METRIC_INNER_PRODUCT)
    own.hnsw.efConstruction = 8
    own.add(c)
    faiss.omp_set_num_threads(os.cpu_count() or 1)
    _, theirs = own.search(q, k, params=faiss.SearchParametersHNSW(efSearch=1))
    np.testing.assert_allclose(found.recall(0), share_found(theirs, exact_ids(q, c, k)))
    stats = found.stats()
    assert stats["index_bytes"] > c.nbytes and stats["latency_p95_ms"] >= stats["latency_p50_ms"] > 0


def test_with_own_corpus_each_corpus_gets_its_own_index(own_home):
    """Queries search their corpus's index only; sizes and build times add up over the corpora."""
    c, q = unit(1200, 16, 11), unit(90, 16, 12)
    chunk_groups, query_groups = np.repeat([0, 1, 2], [600, 300, 300]), np.repeat([0, 1, 2], 30)
    spec = parse_index("ivf:nlist=4:nprobe=1")
    found = measure(spec, q, c, (5,), query_groups, chunk_groups, ["a", "b", "c"])
    for g in range(3):
        rows, cols = query_groups == g, np.flatnonzero(chunk_groups == g)
        ann, _ = indexes.search(spec, q[rows], c[cols], 5)
        np.testing.assert_allclose(found.recall(0)[rows], share_found(ann, exact_ids(q[rows], c[cols], 5)))
    assert found.nbytes == sum(indexes.get(spec, c[chunk_groups == g]).nbytes for g in range(3))
    with pytest.raises(InputError, match="nlist 400 is above the number of vectors, 300 \\(corpus b\\)"):
        measure(parse_index("ivf:nlist=400"), q, c, (5,), query_groups, chunk_groups, ["a", "b", "c"])


def test_ties_count_as_found():
    """A corpus that repeats a passage: the index may return either copy of the k-th best."""
    from chunkeval.engine.retrieval.indexes.measure import found_at

    c = unit(5, 8, 5)
    c = np.vstack([c, c[2:3]])  # chunk 5 repeats chunk 2
    q = c[2:3] * 0.9 + c[0:1] * 0.1
    q /= np.linalg.norm(q)
    assert found_at(q, c, np.array([[5]]), exact_ids(q, c, 1)) == [1.0]
    assert found_at(q, c, np.array([[0, -1]]), exact_ids(q, c, 2)) == [0.0]


def test_a_build_is_shared_persisted_reused_and_rebuilt_alike_when_damaged(own_home):
    c, q = unit(3000, 32, 6), unit(100, 32, 7)
    a, b = parse_index("hnsw:m=8:ef_search=8"), parse_index("hnsw:m=8:ef_search=64")
    first, _ = indexes.search(a, q, c, 5)
    persist.wait_all()  # the file is written in the background while the run searches
    files = sorted((own_home / "indexes" / "faiss").glob("*.faiss"))
    assert len(files) == 1  # two ef_search values, one build
    indexes.search(b, q, c, 5)
    assert sorted((own_home / "indexes" / "faiss").glob("*.faiss")) == files
    built = indexes.get(a, c)
    mtime = files[0].stat().st_mtime_ns
    indexes.forget()  # a new process: read from disk, with the build time recorded when it was built
    again = indexes.get(a, c)
    assert files[0].stat().st_mtime_ns == mtime and again.build_seconds == built.build_seconds
    np.testing.assert_array_equal(indexes.search(a, q, c, 5)[0], first)
    data = bytearray(files[0].read_bytes())
    data[len(data) // 2] ^= 0xFF
    files[0].write_bytes(bytes(data))
    indexes.forget()
    np.testing.assert_array_equal(indexes.search(a, q, c, 5)[0], first)  # rebuilt: a deterministic build
    assert files[0].with_name(files[0].name + ".damaged").is_file()
    persist.wait_all()
    record = files[0].with_suffix(".json")
    kept = json.loads(record.read_text())
    assert set(kept) == {"xxh3_128", "build_seconds"}
    # a record of the SHA-256 days is still checked, and read
    old = {"sha256": hashlib.sha256(files[0].read_bytes()).hexdigest(), "build_seconds": kept["build_seconds"]}
    record.write_text(json.dumps(old))
    mtime = files[0].stat().st_mtime_ns
    indexes.forget()
    assert indexes.get(a, c).build_seconds == kept["build_seconds"] and files[0].stat().st_mtime_ns == mtime


# ------------------------------------------------------------------------------------------------ Chroma


def test_an_embedded_chroma_collection_is_built_once_and_exact_at_full_depth(own_home):
    c, q = unit(800, 32, 8), unit(60, 32, 9)
    spec = parse_index("chroma:ef_search=800")
    found = measure(spec, q, c, (1, 5))
    assert np.all(found.recall(1) == 1.0)
    built = indexes.get(spec, c)
    folders = [p for p in (own_home / "indexes" / "chroma").iterdir() if p.is_dir()]
    assert len(folders) == 1 and built.nbytes > 0
    indexes.forget()
    again = indexes.get(spec, c)  # found complete: nothing added
    assert again.build_seconds == built.build_seconds
    assert [p for p in (own_home / "indexes" / "chroma").iterdir() if p.is_dir()] == folders


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(port: int, proc: subprocess.Popen, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"chroma run ended with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError("chroma run did not listen")


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory):
    """One real Chroma server for the session (`chroma run`), on 127.0.0.1; yields its URL."""
    if not CHROMA_BIN.is_file():
        pytest.skip(f"chromadb's `chroma` command is absent beside {sys.executable}")
    port = free_port()
    path = tmp_path_factory.mktemp("chroma_server")
    proc = subprocess.Popen(
        [str(CHROMA_BIN), "run", "--path", str(path), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(port, proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


class CuttingProxy:
    """A TCP proxy in front of the real server that, once armed, drops every connection at the first
    query it carries (after the collection was filled): the server gone in the middle of a run, as a
    client sees it."""

    def __init__(self, target_port: int):
        self.target = target_port
        self.cut = threading.Event()
        self.armed = threading.Event()
        self.server = socket.socket()
        self.server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(16)
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            if self.cut.is_set():
                client.close()
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, a, b):
        try:
            while not self.cut.is_set():
                data = a.recv(65536)
                if not data:
                    break
                if self.armed.is_set() and b"/query" in data:
                    self.cut.set()
                    break
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.close()
                except OSError:
                    pass

    def close(self):
        self.server.close()


def small_grid(tmp_path: Path, index: str, retrievers: str = "dense,bm25") -> list[str]:
    return [
        "--corpus-dir",
        str(DEMO_DIR / "corpora"),
        "--questions",
        str(DEMO_DIR / "questions.csv"),
        "--chunker",
        "fixed_token",
        "--chunk-sizes",
        "100",
        "--k",
        "1,5",
        "--model",
        "minilm-static",
        "--retriever",
        retrievers,
        "--index",
        index,
    ]


def test_a_sweep_crosses_the_index_axis_with_every_measure(tmp_path, own_home, share_models, chroma_server, capsys):
    """exact, hnsw, ivf and a Chroma server in one grid; bm25 is not crossed (index none)."""
    share_models(own_home)
    out = tmp_path / "grid.csv"
    grid = f"exact,hnsw:ef_search=500,ivf:nlist=4:nprobe=4,chroma:url={chroma_server}:ef_search=500"
    assert main(["sweep", *small_grid(tmp_path, grid, "dense,bm25,hybrid"), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    rows = list(csv.DictReader(out.open()))
    by_index = {}
    for r in rows:
        by_index.setdefault((r["retriever"], r["index"]), []).append(r)
    assert {i for (ret, i) in by_index if ret == "bm25"} == {"none"}
    dense = {i for (ret, i) in by_index if ret == "dense"}
    assert len(dense) == 4 and "exact" in dense
    for (retriever, index), found in by_index.items():
        for r in found:
            if retriever == "bm25":
                assert r["ann_recall_at_k_mean"] == "" and r["latency_p50_ms"] == ""
            else:  # at full depth every index finds the exact top k
                assert float(r["ann_recall_at_k_mean"]) == 1.0, (index, r["k"])
                assert float(r["latency_p95_ms"]) >= float(r["latency_p50_ms"]) > 0
                assert float(r["batch_ms_per_query"]) > 0
                assert (r["index_bytes"] == "") == index.startswith("chroma")  # a server's size is not known
    for retriever in ("dense", "hybrid"):  # at full depth, the numbers of exact search
        exact = {r["k"]: r["span_recall_mean"] for r in by_index[(retriever, "exact")]}
        for index in dense:
            assert {r["k"]: r["span_recall_mean"] for r in by_index[(retriever, index)]} == exact
    assert "ann_recall" in printed


def test_a_chroma_server_gone_mid_run_fails_the_run_in_one_line_and_the_rerun_completes(
    tmp_path, own_home, share_models, chroma_server, prefect_api, capsys
):
    share_models(own_home)
    port = int(chroma_server.rsplit(":", 1)[1])
    proxy = CuttingProxy(port)
    url = f"http://127.0.0.1:{proxy.port}"
    proxy.armed.set()
    argv = ["run", "--experiment", "chroma-night", *small_grid(tmp_path, f"chroma:url={url}:ef_search=64")]
    code = main(argv)
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]  # after the progress lines: the one line of the error
    assert code == 2 and last.startswith("chunkeval") and f"Chroma server {url}" in last and "Traceback" not in err
    wh = Warehouse.at_home()
    assert [r["status"] for r in wh.runs("chroma-night")] == ["failed"]
    proxy.armed.clear()
    proxy.cut.clear()  # the server is back
    indexes.forget()
    assert main(argv) == 0
    assert sorted(r["status"] for r in wh.runs("chroma-night")) == ["completed", "failed"]
    done = wh.last_completed("chroma-night")
    import chromadb

    assert json.loads(done["settings"])["index_libraries"] == {"chromadb": chromadb.__version__}  # recorded per run
    summary = wh.summary(done["run_id"])
    (page,) = [p.read_text() for p in own_home.rglob(f"{done['run_id']}.html")]
    assert 'id="indexes"' in page and "ann_recall_at_k against p95 latency" in page  # the report's index section
    assert {r["index"] for r in summary.to_pylist()} == {"none", parse_index("chroma:ef_search=64").key}
    proxy.close()


# ------------------------------------------------------------------------------------------------ warehouse


def test_runs_recorded_before_the_index_axis_read_exact_and_none(tmp_path, share_models, minilm_static):
    exp = Experiment.demo().with_overrides(
        chunker=("fixed_token",), chunk_sizes=(100,), k=(1, 3), model=("minilm-static",), retriever=("dense", "bm25")
    )
    result = run_sweep(exp, Embedders(tmp_path / "cache"))
    new_columns = ["index", "ann_recall_at_k", "ann_found", "ann_depth"]
    old = Warehouse(tmp_path / "wh")
    old.db_path.parent.mkdir(parents=True, exist_ok=True)
    with duckdb.connect(str(old.db_path)) as con:
        old._migrate(con, upto=6)  # a warehouse as schema 6 left it, and a run it recorded
        con.execute(
            "INSERT INTO runs (run_id, experiment, status, trigger, started_at, texts_embedded, settings) "
            "VALUES ('old-run', 'demo', 'completed', 'manual', now()::TIMESTAMP - INTERVAL 1 DAY, 0, '{}')"
        )
        folder = old._file("old-run", "summary").parent
        folder.mkdir(parents=True)
        keep = [c for c in result.summary.column_names if not c.startswith(("ann_", "index", "latency", "batch_"))]
        pq.write_table(
            result.summary.select(keep).append_column("run_id", pa.array(["old-run"] * result.summary.num_rows)),
            old._file("old-run", "summary"),
        )
        pq.write_table(
            result.per_query.drop_columns(new_columns).append_column(
                "run_id", pa.array(["old-run"] * result.per_query.num_rows)
            ),
            old._file("old-run", "per_query"),
        )
        old._materialize(con, ["old-run"])
    wh = Warehouse(tmp_path / "wh")
    with wh.connect() as con:
        assert wh.schema_version(con) == SCHEMA_VERSION == 14
        rows = con.execute("SELECT DISTINCT retriever, index FROM config_summary ORDER BY 1").fetchall()
        assert rows == [("bm25", "none"), ("dense", "exact")]
        assert con.execute("SELECT DISTINCT index FROM query_results WHERE retriever = 'dense'").fetchall() == [
            ("exact",)
        ]
    run_id = wh.begin_run("demo", {}, "manual", exp.to_dict())
    wh.complete_run(run_id, RunResult(result.per_query, result.summary, texts_embedded=0))
    config = {
        "model": "minilm-static",
        "retriever": "dense",
        "index": "exact",
        "chunk_size": 100,
        "chunk_overlap": 0,
        "k": 3,
    }
    rows = wh.trend("demo", "span_recall", config)
    assert [r["run_id"] for r in rows] == ["old-run", run_id]
    assert rows[1]["change"] == 0.0  # one line across the upgrade: the same configuration, the same numbers


def test_the_docs_define_every_index_measure():
    text = (ROOT / "docs" / "indexes.md").read_text()
    for word in (
        "ann_recall_at_k",
        "index_build_seconds",
        "index_bytes",
        "latency_p50_ms",
        "latency_p95_ms",
        "batch_ms_per_query",
        "How to add an index",
    ):
        assert word in text
