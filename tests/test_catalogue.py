"""The catalogue of bad input: every command, every kind of mistake a user makes.

Each case must end with exit status 2 and one line on stderr that names the file and row or the
setting, print no traceback, and write nothing: no output file, no cache part, no warehouse row
(input is rejected before a run starts). Commands added later bring their cases here.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from chunkeval.cli import main
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.engine.pipeline.sweep import run_sweep
from chunkeval.run_result import RunResult
from chunkeval.warehouse import Warehouse

GOOD_REFS = '[{""content"": ""Delta epsilon"", ""start_index"": 18, ""end_index"": 31}]'
NOWHERE = '[{""content"": ""Zeta eta"", ""start_index"": 0, ""end_index"": 8}]'


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, embedder_factory):
    """A home whose warehouse holds one completed run of experiment `cat` (a real sweep of the demo)."""
    home = tmp_path_factory.mktemp("catalogue_home")
    exp = Experiment(name="cat", chunker=("fixed_token",), chunk_sizes=(100,), overlaps=("0",), k=(3,))
    result = run_sweep(exp, embedder_factory())
    wh = Warehouse(home / "warehouse")
    per_query = result.per_query  # a run whose questions are all others: nothing to pair with
    renamed = per_query.set_column(
        per_query.column_names.index("query_id"),
        "query_id",
        pa.array(["other-" + q for q in per_query["query_id"].to_pylist()]),
    )
    disjoint = wh.begin_run("cat", {}, "manual", exp.to_dict())
    wh.complete_run(disjoint, RunResult(renamed, result.summary, texts_embedded=0, references=result.references))
    kept = {"retrieved": result.retrieved, "corpora": result.corpora}  # the disjoint run predates retrieved lists
    credit = wh.begin_run("cat", {}, "manual", exp.with_overrides(duplicates="credit").to_dict())  # scored otherwise
    wh.complete_run(
        credit,
        RunResult(
            result.per_query, result.summary, texts_embedded=result.texts_embedded, references=result.references, **kept
        ),
    )
    run_id = wh.begin_run("cat", {}, "manual", exp.to_dict())
    wh.complete_run(
        run_id,
        RunResult(
            result.per_query, result.summary, texts_embedded=result.texts_embedded, references=result.references, **kept
        ),
    )
    return home, run_id, credit, disjoint


ENVIRONMENT = ("HOME", "PREFECT_HOME", "PREFECT_API_URL", "TMPDIR", "SQLITE_TMPDIR", "CHUNKEVAL_SERVER_KEEP")


def environ(**values) -> None:
    """Set (a value) or unset (None) variables of ENVIRONMENT for one case: the `ws` fixture restores them."""
    for name, value in values.items():
        os.environ.pop(name, None) if value is None else os.environ.__setitem__(name, str(value))


@pytest.fixture()
def ws(tmp_path, recorded, monkeypatch):
    """A workspace: good corpus and questions files, a regular file to put impossible paths under,
    and CHUNKEVAL_HOME pointing at the recorded warehouse."""
    home, run_id, credit_run_id, disjoint_run_id = recorded
    monkeypatch.setenv("CHUNKEVAL_HOME", str(home))
    monkeypatch.setenv("CHUNKEVAL_LOCK_TIMEOUT", "120")  # restored after the cases that change it
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # the user's endpoints.yaml, if a case writes one
    for name in ENVIRONMENT:  # so are these, which cases set with `environ` (setenv records them, set or not)
        was = os.environ.get(name)
        monkeypatch.setenv(name, was or "")
        if was is None:
            monkeypatch.delenv(name)
    corpus = tmp_path / "corpora"
    corpus.mkdir()
    (corpus / "doc.md").write_text("Alpha beta gamma. Delta epsilon zeta. " * 20, encoding="utf-8")
    (tmp_path / "q.csv").write_text(f'question,references,corpus_id\nWhat?,"{GOOD_REFS}",doc\n', encoding="utf-8")
    (tmp_path / "plain").write_text("a regular file\n")
    (tmp_path / "gold.csv").write_text('query_id,query,relevant_chunk_ids\n1,q one,"[""A""]"\n')
    (tmp_path / "run.jsonl").write_text('{"query_id": "1", "retrieved_chunk_ids": ["A"]}\n')
    return {
        "t": tmp_path,
        "setenv": monkeypatch.setenv,
        "home": home,
        "run_id": run_id,
        "credit_run_id": credit_run_id,
        "disjoint_run_id": disjoint_run_id,
    }


def free_port() -> int:
    """A port of 127.0.0.1 nobody listens on."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def max_pooling_model(t: Path) -> Path:
    """A sentence-transformers folder whose Pooling module takes the maximum (which onnx does not run)."""
    folder = t / "max-pooled"
    (folder / "1_Pooling").mkdir(parents=True, exist_ok=True)
    (folder / "modules.json").write_text(
        json.dumps(
            [
                {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            ]
        )
    )
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_max_tokens": True}))
    return folder


def write(path: Path, content: str | bytes) -> Path:
    path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content, encoding="utf-8")
    return path


def sweep(t: Path, *extra, questions=None, corpus=None, out=None):
    return [
        "sweep",
        "--corpus-dir",
        corpus or t / "corpora",
        "--questions",
        questions or t / "q.csv",
        "--chunk-sizes",
        "50",
        "--out",
        out or t / "out.csv",
        *extra,
    ]


def bad_refs(t: Path, refs: str) -> Path:
    return write(t / "bad.csv", f'question,references,corpus_id\nWhat?,"{refs}",doc\n')


def experiment(t: Path, text: str | bytes) -> Path:
    return write(t / "exp.yaml", text)


def evaluate_run(t: Path, gold: Path | None = None, run: Path | None = None, *extra):
    return ["evaluate-run", "--gold", gold or t / "gold.csv", "--run", run or t / "run.jsonl", *extra]


GOOD_YAML = "corpus_dir: corpora\nquestions: q.csv\nchunk_sizes: [50]\nk: [1]\n"

# name → (argv from the workspace, a piece of the one line the user must read)
CASES = {
    # ---------------------------------------------------------------- sweep: files
    "sweep: corpus folder missing": (lambda w: sweep(w["t"], corpus=w["t"] / "nope"), "corpus folder not found"),
    "sweep: corpus folder misspelt": (
        lambda w: sweep(w["t"], corpus=w["t"] / "corpra"),
        "corpra: corpus folder not found; did you mean corpora?",
    ),
    "sweep: questions missing": (lambda w: sweep(w["t"], questions=w["t"] / "nope.csv"), "nope.csv: file not found"),
    "sweep: questions is a folder": (lambda w: sweep(w["t"], questions=w["t"] / "corpora"), "cannot read file"),
    "sweep: questions under a regular file": (lambda w: sweep(w["t"], questions=w["t"] / "plain" / "q.csv"), "q.csv"),
    "sweep: questions empty": (lambda w: sweep(w["t"], questions=write(w["t"] / "e.csv", "")), "file is empty"),
    "sweep: questions not UTF-8": (
        lambda w: sweep(w["t"], questions=write(w["t"] / "l1.csv", b"question,references,corpus_id\ncaf\xe9,[],doc\n")),
        "not UTF-8",
    ),
    "sweep: corpus not text": (  # not UTF-8, and no text in Windows-1252 either (a Latin-1 file is read: test_month)
        lambda w: [write(w["t"] / "corpora" / "doc.md", b"caf\xe9\x00\x01 au lait"), *sweep(w["t"])][1:],
        "doc.md: not UTF-8",
    ),
    "sweep: corpus empty": (
        lambda w: [write(w["t"] / "corpora" / "doc.md", "  \n"), *sweep(w["t"])][1:],
        "file is empty",
    ),
    "sweep: broken CSV quoting": (
        lambda w: sweep(w["t"], questions=write(w["t"] / "b.csv", 'question,references,corpus_id\n"What?,[],doc\n')),
        "b.csv",
    ),
    "sweep: a lone carriage return in the questions' header": (  # found by test_hostile_inputs' fuzzing
        lambda w: sweep(w["t"], questions=write(w["t"] / "cr.csv", 'question\rx,references,corpus_id\na,"[]",doc\n')),
        "cr.csv: row 1: malformed CSV header",
    ),
    "sweep: missing column": (
        lambda w: sweep(w["t"], questions=write(w["t"] / "m.csv", "question,corpus_id\nWhat?,doc\n")),
        "missing column",
    ),
    "sweep: broken JSON in references": (
        lambda w: sweep(w["t"], questions=bad_refs(w["t"], "[{oops")),
        "row 1: column references: broken JSON",
    ),
    "sweep: references not a list": (
        lambda w: sweep(w["t"], questions=bad_refs(w["t"], '{""a"": 1}')),
        "bad.csv: row 1",
    ),
    "sweep: offsets out of range": (
        lambda w: sweep(
            w["t"], questions=bad_refs(w["t"], '[{""content"": ""x"", ""start_index"": 5, ""end_index"": 99999}]')
        ),
        "out of range",
    ),
    "sweep: reversed offsets": (
        lambda w: sweep(
            w["t"], questions=bad_refs(w["t"], '[{""content"": ""x"", ""start_index"": 9, ""end_index"": 3}]')
        ),
        "reversed",
    ),
    "sweep: offsets not numbers": (
        lambda w: sweep(
            w["t"], questions=bad_refs(w["t"], '[{""content"": ""x"", ""start_index"": ""a"", ""end_index"": 3}]')
        ),
        "bad.csv: row 1",
    ),
    "sweep: reference not found": (
        lambda w: sweep(
            w["t"], questions=bad_refs(w["t"], '[{""content"": ""omega"", ""start_index"": 0, ""end_index"": 5}]')
        ),
        "not found",
    ),
    "sweep: question names an unknown corpus": (  # its text in no document either (else it moves there)
        lambda w: sweep(
            w["t"], questions=write(w["t"] / "u.csv", f'question,references,corpus_id\nWhat?,"{NOWHERE}",nope\n')
        ),
        "u.csv: every question is retired: none of the references of 1 question(s) could be placed in its document "
        "(row 1: corpus_id 'nope' names no corpus file or document (deleted or renamed?)",
    ),
    # ---------------------------------------------------------------- sweep: settings
    "sweep: unknown corpus": (lambda w: sweep(w["t"], "--corpus", "nope"), "no corpus named nope"),
    "sweep: unknown chunker": (lambda w: sweep(w["t"], "--chunker", "magic"), "unknown chunker 'magic'"),
    # ---------------------------------------------------------------- sweep: the index axis (docs/indexes.md)
    "sweep: unknown index kind": (lambda w: sweep(w["t"], "--index", "annoy"), "unknown index kind 'annoy'"),
    "sweep: unknown index parameter": (
        lambda w: sweep(w["t"], "--index", "hnsw:efsearch=64"),
        "index hnsw: unknown parameter 'efsearch'",
    ),
    "sweep: hnsw m below 2": (lambda w: sweep(w["t"], "--index", "hnsw:m=1"), "index hnsw: m must be at least 2"),
    "sweep: index parameter not a number": (
        lambda w: sweep(w["t"], "--index", "hnsw:ef_search=lots"),
        "ef_search must be a whole number",
    ),
    "sweep: nprobe above nlist": (
        lambda w: sweep(w["t"], "--index", "ivf:nlist=4:nprobe=8"),
        "index ivf: nprobe 8 is above nlist 4",
    ),
    "sweep: ivf without nlist": (lambda w: sweep(w["t"], "--index", "ivf"), "index ivf needs nlist"),
    "sweep: nlist above the number of vectors": (
        lambda w: sweep(w["t"], "--index", "ivf:nlist=5000"),
        "nlist 5000 is above the number of vectors",
    ),
    "sweep: pq_m not dividing the width": (
        lambda w: sweep(w["t"], "--index", "ivf:nlist=1:pq_m=5"),
        "pq_m 5 does not divide the vector width 384",
    ),
    "sweep: index but no retriever reads vectors": (
        lambda w: sweep(w["t"], "--retriever", "bm25", "--index", "hnsw"),
        "no retriever of the grid reads vectors",
    ),
    "sweep: the same index twice": (
        lambda w: sweep(w["t"], "--index", "hnsw:m=32,hnsw"),
        "are the same index",
    ),
    "sweep: chroma url not http": (
        lambda w: sweep(w["t"], "--index", "chroma:url=ftp://127.0.0.1:21"),
        "url must be http(s)://HOST:PORT",
    ),
    "sweep: chroma url where no server is": (
        lambda w: sweep(w["t"], "--index", f"chroma:url=http://127.0.0.1:{free_port()}"),
        "Chroma server http://127.0.0.1:",
    ),
    # ---------------------------------------------------------------- sweep: contextual chunk headers (issue 33)
    "sweep: unknown context": (
        lambda w: sweep(w["t"], "--context", "summary"),
        "context must be none or title or headings, got 'summary'",
    ),
    "sweep: the same context twice": (lambda w: sweep(w["t"], "--context", "title,title"), "context 'title' listed"),
    "sweep: chunker module not importable": (
        lambda w: sweep(w["t"], "--chunker", "nosuchpkg.mod:fn"),
        "chunker 'nosuchpkg.mod:fn': cannot import 'nosuchpkg.mod'",
    ),
    "sweep: unknown model": (lambda w: sweep(w["t"], "--model", "no-such-model"), "model 'no-such-model'"),
    "sweep: chunk size not a number": (
        lambda w: sweep(w["t"], "--chunk-sizes", "abc"),
        "--chunk-sizes must be whole numbers",
    ),
    "sweep: chunk size 0": (lambda w: sweep(w["t"], "--chunk-sizes", "0"), "chunk_sizes must be at least 1"),
    "sweep: overlap not a number": (
        lambda w: sweep(w["t"], "--overlaps", "ten%"),
        "--overlaps: overlap must be a whole number",
    ),
    "sweep: overlap not below size": (lambda w: sweep(w["t"], "--overlaps", "50"), "chunk_overlap"),
    "sweep: k below 1": (lambda w: sweep(w["t"], "--k", "0"), "k must be at least 1"),
    "sweep: a value left out of --k": (
        lambda w: sweep(w["t"], "--k", "1,,5"),
        "--k: an empty item in '1,,5' (two commas together, or one at an end)",
    ),
    "sweep: --metrics ending in a comma": (lambda w: sweep(w["t"], "--metrics", "mrr,"), "--metrics: an empty item"),
    "sweep: unknown device": (
        lambda w: sweep(w["t"], "--device", "tpu"),
        "--device must be auto, cpu, cuda or cuda:N, got 'tpu'",
    ),
    "sweep: batch size 0": (lambda w: sweep(w["t"], "--batch-size", "0"), "--batch-size must be at least 1"),
    "sweep: output suffix": (lambda w: sweep(w["t"], out=w["t"] / "out.txt"), ".csv or .parquet"),
    "sweep: output folder missing": (
        lambda w: sweep(w["t"], out=w["t"] / "none" / "out.csv"),
        "output folder does not exist",
    ),
    "sweep: output under a regular file": (
        lambda w: sweep(w["t"], out=w["t"] / "plain" / "out.csv"),
        "output folder does not exist",
    ),
    "sweep: unknown retriever": (lambda w: sweep(w["t"], "--retriever", "dense,magic"), "unknown retriever 'magic'"),
    "sweep: retriever module not importable": (
        lambda w: sweep(w["t"], "--retriever", "nosuchpkg:fn"),
        "cannot import 'nosuchpkg'",
    ),
    "sweep: model listed twice": (
        lambda w: sweep(w["t"], "--model", "all-MiniLM-L6-v2,all-MiniLM-L6-v2"),
        "model 'all-MiniLM-L6-v2' listed twice",
    ),
    "sweep: model folder without a model": (
        lambda w: sweep(w["t"], "--model", w["t"] / "corpora"),
        "nor a local folder",
    ),
    "sweep: model folder that does not load": (
        lambda w: [write(w["t"] / "corpora" / "config.json", "{}"), *sweep(w["t"], "--model", w["t"] / "corpora")][1:],
        "cannot be loaded as a sentence-transformers model",
    ),
    "sweep: semantic chunker below 50 tokens": (
        lambda w: sweep(w["t"], "--chunker", "cluster_semantic", "--chunk-sizes", "30"),
        "chunker 'cluster_semantic' needs chunk_size ≥ 50, got 30",
    ),
    "sweep: misspelt metric of the summary": (
        lambda w: sweep(w["t"], "--metrics", "mrrr"),
        "unknown metric 'mrrr'; did you mean mrr",
    ),
    "sweep: unknown duplicates setting": (
        lambda w: sweep(w["t"], "--duplicates", "exact"),
        "--duplicates must be positional or credit, got 'exact'",
    ),
    "sweep: unknown backend": (
        lambda w: sweep(w["t"], "--backend", "tensorrt"),
        "--backend must be auto or torch or onnx or openvino, got 'tensorrt'",
    ),
    "sweep: unknown quantisation": (
        lambda w: sweep(w["t"], "--backend", "onnx", "--quantize", "int4"),
        "--quantize must be none or int8, got 'int4'; did you mean int8?",
    ),
    "sweep: int8 on the torch backend": (
        lambda w: sweep(w["t"], "--backend", "torch", "--quantize", "int8"),
        "quantize: int8 needs backend onnx or openvino",
    ),
    "sweep: int8 with backend auto (lossless backends only)": (
        lambda w: sweep(w["t"], "--quantize", "int8"),
        "quantize: int8 needs backend onnx or openvino named (backend auto chooses lossless backends only)",
    ),
    "sweep: unknown precision": (
        lambda w: sweep(w["t"], "--precision", "fp8"),
        "--precision must be fp32 or bf16 or fp16, got 'fp8'",
    ),
    "sweep: fp16 on the CPU": (
        lambda w: sweep(w["t"], "--precision", "fp16", "--device", "cpu"),
        "precision fp16 needs a GPU",
    ),
    "sweep: bf16 with int8": (
        lambda w: sweep(w["t"], "--backend", "openvino", "--quantize", "int8", "--precision", "bf16"),
        "precision bf16 with quantize: int8",
    ),
    "sweep: bf16 on onnx": (
        lambda w: sweep(w["t"], "--backend", "onnx", "--precision", "bf16"),
        "onnxruntime's CPU kernels have no bf16",
    ),
    "sweep: bf16 with a static model": (
        lambda w: sweep(w["t"], "--model", "minilm-static", "--precision", "bf16"),
        "a static model looks its vectors up",
    ),
    "sweep: onnx with a max-pooling model": (
        lambda w: sweep(w["t"], "--backend", "onnx", "--model", str(max_pooling_model(w["t"]))),
        "pool by mean or cls token; ",
    ),
    "sweep: rrf-k negative": (
        lambda w: sweep(w["t"], "--retriever", "hybrid", "--rrf-k", "-1"),
        "rrf_k must be 0 or more",
    ),
    "sweep: splitter chunk not in the corpus": (
        lambda w: sweep(w["t"], "--chunker", "plugins_for_tests:invents_text", "--retriever", "bm25"),
        "that is not in corpus 'doc'",
    ),
    "sweep: plug-in retriever out of range": (
        lambda w: sweep(w["t"], "--retriever", "plugins_for_tests:out_of_range"),
        "returned indices out of range",
    ),
    "sweep: plug-in retriever wrong shape": (
        lambda w: sweep(w["t"], "--retriever", "plugins_for_tests:wrong_shape"),
        "plugins_for_tests:wrong_shape",
    ),
    "sweep: CHUNKEVAL_HOME under a regular file": (
        lambda w: [os.environ.__setitem__("CHUNKEVAL_HOME", str(w["t"] / "plain" / "home")), *sweep(w["t"])][1:],
        "is a file, not a folder",
    ),
    # ---------------------------------------------------------------- run
    "run: experiment file missing": (lambda w: ["run", w["t"] / "nope.yaml"], "nope.yaml: file not found"),
    "run: an experiment's name given as its file": (
        lambda w: ["run", "demo"],
        "no experiment file 'demo' here; to run the experiment of that name: chunkeval run --experiment demo",
    ),
    "run: misspelt metric of the summary": (
        lambda w: ["run", "--metrics", "span_recal"],
        "unknown metric 'span_recal'; did you mean span_recall",
    ),
    "run: flag value blamed on the flag, not the demo's file": (
        lambda w: ["run", "--experiment", "demo", "--context", "titel"],
        "error: --context: context must be none or title or headings, got 'titel'; did you mean title?",
    ),
    "run: misspelt experiment": (lambda w: ["run", "--experiment", "dmo"], "no experiment named 'dmo' (not demo,"),
    "run: unknown task runner": (
        lambda w: ["run", "--task-runner", "ray"],
        "--task-runner must be local, dask, dask:N or dask=tcp://HOST:PORT",
    ),
    "run: dask without workers": (
        lambda w: ["run", "--task-runner", "dask:0"],
        "takes a number of workers of at least 1",
    ),
    "run: dask address without tcp://": (
        lambda w: ["run", "--task-runner", "dask=scheduler:8786"],
        "takes a scheduler address like tcp://scheduler:8786",
    ),
    "run: dask scheduler that does not answer": (
        lambda w: ["run", "--task-runner", f"dask=tcp://127.0.0.1:{free_port()}"],
        "no Dask scheduler answers there",
    ),
    "run: experiment file broken YAML": (
        lambda w: ["run", experiment(w["t"], "k: [1, 2\nchunker: x")],
        "exp.yaml: broken YAML: line 2, column 8: expected ',' or ']', but got ':'",
    ),
    "run: experiment file not a mapping": (lambda w: ["run", experiment(w["t"], "- a\n- b\n")], "a YAML mapping"),
    "run: experiment file with an empty item of a list": (
        lambda w: ["run", experiment(w["t"], "name: cat\nk: [1, '', 5]\n")],
        "exp.yaml: k: list items must not be empty",
    ),
    "run: experiment file not UTF-8": (lambda w: ["run", experiment(w["t"], b"name: caf\xe9\n")], "not UTF-8"),
    "run: experiment file unknown key": (
        lambda w: ["run", experiment(w["t"], GOOD_YAML + "chunk_size: 3\n")],
        "unknown experiment key 'chunk_size'; did you mean chunk_sizes",
    ),
    "run: experiment file wrong type": (
        lambda w: ["run", experiment(w["t"], "corpus_dir: corpora\nquestions: q.csv\nchunk_sizes: [fifty]\n")],
        "chunk_sizes must be whole numbers",
    ),
    "run: experiment file with an unknown tie policy": (
        lambda w: ["run", experiment(w["t"], GOOD_YAML + "ties: random\n")],
        "ties must be trec_eval or retriever, got 'random'",
    ),
    "run: experiment file context not a name": (
        lambda w: ["run", experiment(w["t"], GOOD_YAML + "context: {title: 1}\n")],
        "context must be a name or a list of names",
    ),
    "run: experiment file bad name": (
        lambda w: ["run", experiment(w["t"], GOOD_YAML + "name: two words\n")],
        "must be one word",
    ),
    "run: experiment file broken questions": (
        lambda w: ["run", experiment(w["t"], GOOD_YAML.replace("q.csv", "bad.csv")), bad_refs(w["t"], "[{oops")][:2],
        "bad.csv: row 1: column references: broken JSON",
    ),
    "run: unknown experiment without settings": (
        lambda w: ["run", "--experiment", "nosuch"],
        "no experiment named 'nosuch'",
    ),
    "run: k below 1": (lambda w: ["run", "--experiment", "cat", "--k", "0"], "k must be at least 1"),
    "run: a flag given by its first letters": (  # argparse took it for --chunk-sizes and ran, recorded
        lambda w: ["run", "--experiment", "cat", "--chunk-size", "100"],
        "unknown flag --chunk-size; did you mean --chunk-sizes?",
    ),
    "runs: a flag cut short": (lambda w: ["runs", "--exp", "cat"], "unknown flag --exp; did you mean --experiment?"),
    "a misspelt command with its own flags": (  # the command is the mistake, not its flags
        lambda w: ["rnu", "--experiment", "cat"],
        "unknown command 'rnu'; did you mean run?",
    ),
    "run: unknown chunker": (lambda w: ["run", "--experiment", "cat", "--chunker", "magic"], "unknown chunker 'magic'"),
    "run: unknown model": (
        lambda w: ["run", "--experiment", "cat", "--model", "no-such-model"],
        "model 'no-such-model'",
    ),
    "run: unknown retriever": (
        lambda w: ["run", "--experiment", "cat", "--retriever", "magic"],
        "unknown retriever 'magic'",
    ),
    "run: experiment file model of wrong type": (
        lambda w: ["run", experiment(w["t"], GOOD_YAML + "model: {a: 1}\n")],
        "model must be a name or a list",
    ),
    "run: experiment file flag of wrong type": (
        lambda w: ["run", experiment(w["t"], GOOD_YAML + "own_corpus: maybe\n")],
        "own_corpus must be true or false",
    ),
    "run: experiment file unknown duplicates setting": (
        lambda w: ["run", experiment(w["t"], GOOD_YAML + "duplicates: exact\n")],
        "duplicates must be positional or credit, got 'exact'",
    ),
    "run: experiment file unknown backend": (
        lambda w: ["run", experiment(w["t"], GOOD_YAML + "backend: tensorrt\n")],
        "unknown backend 'tensorrt'; choose auto, torch, onnx, openvino",
    ),
    "run: experiment file unknown precision": (
        lambda w: ["run", experiment(w["t"], GOOD_YAML + "precision: fp8\n")],
        "precision must be fp32 or bf16 or fp16, got 'fp8'",
    ),
    "run: experiment file fp16 on openvino": (
        lambda w: ["run", experiment(w["t"], GOOD_YAML + "backend: openvino\nprecision: fp16\n")],
        "precision fp16 needs a GPU",
    ),
    "run: experiment file int8 on torch": (
        lambda w: ["run", experiment(w["t"], GOOD_YAML + "quantize: int8\n")],
        "quantize: int8 needs backend onnx or openvino",
    ),
    "run: CHUNKEVAL_HOME under a regular file": (
        lambda w: [
            os.environ.__setitem__("CHUNKEVAL_HOME", str(w["t"] / "plain" / "home")),
            "run",
            experiment(w["t"], GOOD_YAML),
        ][1:],
        "is a file, not a folder",
    ),
    # ---------------------------------------------------------------- evaluate-run
    "evaluate-run: gold missing": (lambda w: evaluate_run(w["t"], w["t"] / "nope.csv"), "nope.csv: file not found"),
    "evaluate-run: gold empty": (lambda w: evaluate_run(w["t"], write(w["t"] / "g.csv", "")), "file is empty"),
    "evaluate-run: gold grade not a number": (
        lambda w: evaluate_run(
            w["t"], write(w["t"] / "g.csv", 'query_id,query,relevant_chunk_ids\n1,q,"{""A"": ""x""}"\n')
        ),
        "g.csv: row 1",
    ),
    "evaluate-run: run broken JSON": (
        lambda w: evaluate_run(
            w["t"], None, write(w["t"] / "r.jsonl", '{"query_id": "1", "retrieved_chunk_ids": ["A"\n')
        ),
        "r.jsonl: row 1: broken JSON",
    ),
    "evaluate-run: run names an unknown query": (
        lambda w: evaluate_run(
            w["t"], None, write(w["t"] / "r.jsonl", '{"query_id": "9", "retrieved_chunk_ids": ["A"]}\n')
        ),
        "query_id '9' is not in the gold set",
    ),
    "evaluate-run: run list of wrong type": (
        lambda w: evaluate_run(
            w["t"], None, write(w["t"] / "r.jsonl", '{"query_id": "1", "retrieved_chunk_ids": "A"}\n')
        ),
        "r.jsonl: row 1",
    ),
    "evaluate-run: TREC qrels line short": (
        lambda w: evaluate_run(
            w["t"],
            write(w["t"] / "q.trec", "1 0 A\n"),
            write(w["t"] / "r.trec", "1 Q0 A 1 1.0 t\n"),
            "--format",
            "trec",
        ),
        "q.trec: row 1: a qrels line has 4 fields",
    ),
    "evaluate-run: TREC run score not a number": (
        lambda w: evaluate_run(
            w["t"],
            write(w["t"] / "q.trec", "1 0 A 1\n"),
            write(w["t"] / "r.trec", "1 Q0 A 1 high t\n"),
            "--format",
            "trec",
        ),
        "r.trec: row 1: score 'high'",
    ),
    "evaluate-run: k below 1": (lambda w: evaluate_run(w["t"], None, None, "--k", "0"), "--k must be at least 1"),
    "evaluate-run: k not a number": (
        lambda w: evaluate_run(w["t"], None, None, "--k", "ten"),
        "--k: 'ten' is not a whole number",
    ),
    "evaluate-run: unknown format": (
        lambda w: evaluate_run(w["t"], None, None, "--format", "xml"),
        "--format must be one of auto, chunk-ids, strings, trec, doc-qrels, got 'xml'",
    ),
    # ---------------------------------------------------------------- runs, trend, report, baseline
    "runs: unknown experiment": (lambda w: ["runs", "--experiment", "nosuch"], "no experiment named 'nosuch'"),
    "trend: unknown experiment": (
        lambda w: ["trend", "--experiment", "nosuch", "--metric", "span_recall"],
        "no experiment named 'nosuch'",
    ),
    "trend: unknown metric among --metrics": (
        lambda w: ["trend", "--experiment", "cat", "--metrics", "mrr,accuracy"],
        "unknown metric 'accuracy'; choose from span_precision,",
    ),
    "trend: --metric and --metrics": (
        lambda w: ["trend", "--experiment", "cat", "--metric", "mrr", "--metrics", "span_recall"],
        "give --metric NAME or --metrics M1,M2 (or --wide), not both",
    ),
    "trend: --metrics naming none": (
        lambda w: ["trend", "--experiment", "cat", "--metrics", ","],
        "--metrics: an empty item in ','",
    ),
    "trend: unknown metric": (
        lambda w: ["trend", "--experiment", "cat", "--metric", "accuracy"],
        "unknown metric 'accuracy'",
    ),
    "trend: unknown configuration key": (
        lambda w: ["trend", "--experiment", "cat", "--metric", "mrr", "--config", "chunk_szes=100"],
        "unknown --config key 'chunk_szes'; did you mean chunk_size",
    ),
    "trend: configuration value not a number": (
        lambda w: ["trend", "--experiment", "cat", "--metric", "mrr", "--config", "chunk_size=big"],
        "--config chunk_size must be whole numbers",
    ),
    "trend: configuration not in the experiment, the verdict alone": (
        lambda w: ["trend", "--experiment", "cat", "--metric", "mrr", "--fail-on-regression", "--config", "k=999"],
        "no configuration of experiment 'cat' matches --config k=999",
    ),
    "trend: configuration not in the experiment": (
        lambda w: ["trend", "--experiment", "cat", "--metric", "mrr", "--config", "chunk_size=999"],
        "no configuration of experiment 'cat' matches",
    ),
    "trend: retriever not in the experiment": (
        lambda w: ["trend", "--experiment", "cat", "--metric", "mrr", "--config", "retriever=bm25"],
        "no configuration of experiment 'cat' matches",
    ),
    "trend: configuration without =": (
        lambda w: ["trend", "--experiment", "cat", "--metric", "mrr", "--config", "chunk_size"],
        "--config takes key=value",
    ),
    "trend: last 0": (
        lambda w: ["trend", "--experiment", "cat", "--metric", "mrr", "--last", "0"],
        "--last must be at least 1",
    ),
    "trend: negative threshold": (
        lambda w: ["trend", "--experiment", "cat", "--metric", "mrr", "--threshold", "-1"],
        "--threshold must be 0 or more",
    ),
    "trend: alpha outside (0, 1)": (
        lambda w: ["trend", "--experiment", "cat", "--metric", "mrr", "--fail-on-regression", "--alpha", "0"],
        "--alpha must be strictly between 0 and 1",
    ),
    "trend: unknown baseline run": (
        lambda w: ["trend", "--experiment", "cat", "--metric", "mrr", "--baseline", "nosuch"],
        "no run 'nosuch'",
    ),
    "trend: no warehouse yet": (
        lambda w: [
            os.environ.__setitem__("CHUNKEVAL_HOME", str(w["t"] / "fresh")),
            "trend",
            "--experiment",
            "cat",
            "--metric",
            "mrr",
        ][1:],
        "no warehouse here yet",
    ),
    "report: unknown run": (lambda w: ["report", "--run", "nosuch"], "no run 'nosuch'"),
    "report: unknown experiment": (lambda w: ["report", "--experiment", "nosuch"], "no experiment named 'nosuch'"),
    "report: neither run nor experiment": (lambda w: ["report"], "give --run ID or --experiment NAME"),
    "report: a configuration for a page not asked for": (
        lambda w: ["report", "--run", w["run_id"], "--config", "k=1"],
        "--config chooses the configuration of the HTML report's failure analysis: give --html PATH",
    ),
    "inspect: a misspelt question": (
        lambda w: ["inspect", "--run", w["run_id"], "--query", "lighthouse:1"],
        "has no question 'lighthouse:1'; did you mean lighthouses:1",
    ),
    "report: run of another experiment": (
        lambda w: ["report", "--experiment", "other", "--run", w["run_id"]],
        "no experiment named 'other'",
    ),
    "report: html folder missing": (
        lambda w: ["report", "--experiment", "cat", "--html", w["t"] / "none" / "r.html"],
        "output folder does not exist",
    ),
    "report: html under a regular file": (
        lambda w: ["report", "--experiment", "cat", "--html", w["t"] / "plain" / "r.html"],
        "output folder does not exist",
    ),
    "report: html is a folder": (
        lambda w: ["report", "--experiment", "cat", "--html", w["t"] / "corpora"],
        "output is a folder",
    ),
    "report: configuration not in the run": (
        lambda w: ["report", "--experiment", "cat", "--html", w["t"] / "r.html", "--config", "chunk_size=999"],
        "no configuration of the run matches",
    ),
    "report: --since not an age": (
        lambda w: ["report", "--experiment", "cat", "--since", "a week"],
        "--since takes an age such as 36h, 7d or 2w",
    ),
    "report: --since with --run": (
        lambda w: ["report", "--experiment", "cat", "--run", w["run_id"], "--since", "7d"],
        "--since prints the rollup",
    ),
    "runs delete: unknown run": (lambda w: ["runs", "delete", w["run_id"], "nosuch"], "no run 'nosuch'"),
    "runs prune: no rule": (
        lambda w: ["runs", "prune", "--experiment", "cat"],
        "takes one of --keep-last K or --older-than AGE",
    ),
    "runs prune: both rules": (
        lambda w: ["runs", "prune", "--experiment", "cat", "--keep-last", "2", "--older-than", "9d"],
        "takes one of --keep-last K",
    ),
    "runs prune: age not an age": (
        lambda w: ["runs", "prune", "--experiment", "cat", "--older-than", "ninety"],
        "--older-than takes an age",
    ),
    "runs prune: keep-last 0": (
        lambda w: ["runs", "prune", "--experiment", "cat", "--keep-last", "0"],
        "--keep-last must be at least 1",
    ),
    "runs prune: unknown experiment": (
        lambda w: ["runs", "prune", "--experiment", "nosuch", "--keep-last", "1"],
        "no experiment named 'nosuch'",
    ),
    "baseline: unknown run": (lambda w: ["baseline", "--experiment", "cat", "--run", "nosuch"], "no run 'nosuch'"),
    "baseline: unknown experiment": (
        lambda w: ["baseline", "--experiment", "nosuch", "--run", w["run_id"]],
        "no experiment named 'nosuch'",
    ),
    "compare: unknown run": (lambda w: ["compare", "--run", "nosuch", "--metric", "mrr"], "no run 'nosuch'"),
    "compare: unknown metric": (
        lambda w: ["compare", "--run", w["run_id"], "--metric", "accuracy"],
        "unknown metric 'accuracy'",
    ),
    "compare: unknown metric among --metrics": (
        lambda w: ["compare", "--run", w["run_id"], "--metrics", "nonsense"],
        "unknown metric 'nonsense'; choose from span_precision,",
    ),
    "compare: --metric and --wide": (
        lambda w: ["compare", "--run", w["run_id"], "--metric", "mrr", "--wide"],
        "give --metric NAME or --metrics M1,M2 (or --wide), not both",
    ),
    "compare: span metric among --metrics of run files": (
        lambda w: [
            "compare",
            "--gold",
            w["t"] / "gold.csv",
            *["--run-file", w["t"] / "run.jsonl"] * 2,
            "--metrics",
            "mrr,span_iou",
        ],
        "set and rank metrics only",
    ),
    "compare: unknown experiment": (
        lambda w: ["compare", "--experiment", "nosuch", "--metric", "mrr"],
        "no experiment named 'nosuch'",
    ),
    "compare: configuration not in the run": (
        lambda w: ["compare", "--run", w["run_id"], "--metric", "mrr", "--config", "chunk_size=999"],
        "no configuration of run",
    ),
    "compare: one configuration only": (
        lambda w: ["compare", "--run", w["run_id"], "--metric", "mrr"],
        "a comparison needs two",
    ),
    "compare: alpha outside (0, 1)": (
        lambda w: ["compare", "--run", w["run_id"], "--metric", "mrr", "--alpha", "1.5"],
        "--alpha must be strictly between 0 and 1",
    ),
    "compare: three runs": (
        lambda w: ["compare", "--run", w["run_id"], "--run", w["run_id"], "--run", w["run_id"], "--metric", "mrr"],
        "at most two --run",
    ),
    "compare: runs scored with different duplicates settings": (
        lambda w: ["compare", "--run", w["run_id"], "--run", w["credit_run_id"], "--metric", "mrr"],
        "are never compared",
    ),
    "trend: baseline scored with another duplicates setting": (
        lambda w: [
            "trend",
            "--experiment",
            "cat",
            "--metric",
            "mrr",
            "--fail-on-regression",
            "--baseline",
            w["credit_run_id"],
        ],
        "are never compared",
    ),
    "compare: one run file": (
        lambda w: ["compare", "--gold", w["t"] / "gold.csv", "--run-file", w["t"] / "run.jsonl", "--metric", "mrr"],
        "--run-file A --run-file B",
    ),
    "compare: span metric of run files": (
        lambda w: [
            "compare",
            "--gold",
            w["t"] / "gold.csv",
            "--run-file",
            w["t"] / "run.jsonl",
            "--run-file",
            w["t"] / "run.jsonl",
            "--metric",
            "span_recall",
        ],
        "set and rank metrics only",
    ),
    "compare: run file broken": (
        lambda w: [
            "compare",
            "--gold",
            w["t"] / "gold.csv",
            "--run-file",
            w["t"] / "run.jsonl",
            "--run-file",
            write(w["t"] / "r.jsonl", "{oops\n"),
            "--metric",
            "mrr",
        ],
        "r.jsonl: row 1: broken JSON",
    ),
    "gold check: questions missing": (
        lambda w: ["gold", "check", "--corpus-dir", w["t"] / "corpora", "--questions", w["t"] / "nope.csv"],
        "nope.csv: file not found",
    ),
    "gold check: corpus folder missing": (
        lambda w: ["gold", "check", "--corpus-dir", w["t"] / "nope", "--questions", w["t"] / "q.csv"],
        "nope",
    ),
    "gold check: broken references": (
        lambda w: ["gold", "check", "--corpus-dir", w["t"] / "corpora", "--questions", bad_refs(w["t"], "[{oops")],
        "bad.csv: row 1",
    ),
    "gold check: chunk size 0": (
        lambda w: [
            "gold",
            "check",
            "--corpus-dir",
            w["t"] / "corpora",
            "--questions",
            w["t"] / "q.csv",
            "--chunk-size",
            "0",
        ],
        "--chunk-size must be at least 1",
    ),
    "warehouse repair: no warehouse": (
        lambda w: [os.environ.__setitem__("CHUNKEVAL_HOME", str(w["t"] / "fresh")), "warehouse", "repair"][1:],
        "nothing to repair",
    ),
    "run: mlflow URI not http": (lambda w: ["run", "--mlflow", "file:///tmp/mlruns"], "--mlflow takes the http(s) URI"),
    "run: mlflow URI not a server": (
        lambda w: ["run", "--mlflow", f"http://127.0.0.1:{free_port()}"],
        "--mlflow: no MLflow server answers at http://127.0.0.1:",
    ),
    "run: experiment mlflow key not http": (
        lambda w: ["run", experiment(w["t"], GOOD_YAML + "mlflow: file:///tmp/mlruns\n")],
        "mlflow takes the http(s) URI",
    ),
    "run: experiment mlflow key not a server": (
        lambda w: ["run", experiment(w["t"], GOOD_YAML + f"mlflow: http://127.0.0.1:{free_port()}\n")],
        "the experiment's mlflow: no MLflow server answers at http://127.0.0.1:",
    ),
    "inspect: unknown run": (lambda w: ["inspect", "--run", "nosuch", "--query", "q"], "no run 'nosuch'"),
    "inspect: unknown query": (
        lambda w: ["inspect", "--run", w["run_id"], "--query", "nosuch"],
        "has no question 'nosuch'",
    ),
    "inspect: configuration not in the run": (
        lambda w: ["inspect", "--run", w["run_id"], "--query", "lighthouses:1", "--config", "chunk_size=999"],
        "matches --config chunk_size=999; its chunk_size: ",
    ),
    "inspect: misspelt configuration value": (
        lambda w: ["inspect", "--run", w["run_id"], "--query", "lighthouses:1", "--config", "chunker=fixed_tokn"],
        "matches --config chunker=fixed_tokn; did you mean chunker=fixed_token?",
    ),
    "backends: a model that is none": (
        lambda w: ["backends", "--model", "minilm-statc"],
        "model 'minilm-statc' is neither the bundled all-MiniLM-L6-v2, nor one chunkeval builds (minilm-static), nor a "
        "local folder; did you mean minilm-static?",
    ),
    "inspect: unknown configuration key": (
        lambda w: ["inspect", "--run", w["run_id"], "--query", "lighthouses:1", "--config", "sise=1"],
        "unknown --config key 'sise'; did you mean size",
    ),
    "inspect: run recorded before retrieved lists": (
        lambda w: ["inspect", "--run", w["disjoint_run_id"], "--query", "other-lighthouses:1"],
        "was recorded before chunkeval kept retrieved lists",
    ),
    "inspect: no query": (lambda w: ["inspect", "--run", w["run_id"]], "the following arguments are required: --query"),
    "diff: one run": (lambda w: ["diff", "--run", w["run_id"]], "diff takes two runs: --run A --run B"),
    "diff: unknown run": (lambda w: ["diff", "--run", w["run_id"], "--run", "nosuch"], "no run 'nosuch'"),
    "diff: runs scored otherwise": (
        lambda w: ["diff", "--run", w["credit_run_id"], "--run", w["run_id"]],
        "duplicates: credit",
    ),
    "diff: run recorded before retrieved lists": (
        lambda w: ["diff", "--run", w["disjoint_run_id"], "--run", w["run_id"]],
        "was recorded before chunkeval kept retrieved lists",
    ),
    "diff: negative threshold": (
        lambda w: ["diff", "--run", w["run_id"], "--run", w["run_id"], "--threshold", "-1"],
        "--threshold must be 0 or more",
    ),
    "diff: unknown metric": (
        lambda w: ["diff", "--run", w["run_id"], "--run", w["run_id"], "--metric", "accuracy"],
        "accuracy",
    ),
    "diff: configuration not shared": (
        lambda w: ["diff", "--run", w["credit_run_id"], "--run", w["credit_run_id"], "--config", "chunk_size=999"],
        "no configuration",
    ),
    "warehouse snapshot: folder missing": (
        lambda w: ["warehouse", "snapshot", w["t"] / "none" / "snap.duckdb"],
        "the snapshot's folder does not exist",
    ),
    "warehouse snapshot: under a regular file": (
        lambda w: ["warehouse", "snapshot", w["t"] / "plain" / "snap.duckdb"],
        "the snapshot's folder does not exist",
    ),
    "warehouse snapshot: a folder": (lambda w: ["warehouse", "snapshot", w["t"]], "the snapshot path is a folder"),
    "warehouse snapshot: no warehouse": (
        lambda w: [os.environ.__setitem__("CHUNKEVAL_HOME", str(w["t"] / "fresh")), "warehouse", "snapshot", "s.db"][
            1:
        ],
        "no warehouse here yet",
    ),
    "sql: not read-only": (lambda w: ["sql", "DELETE FROM runs"], "only reads (SELECT, WITH …, EXPLAIN)"),
    "sql: copies out": (lambda w: ["sql", f"COPY runs TO '{w['t']}/out.csv'"], "the statement is a COPY"),
    "sql: does not parse": (lambda w: ["sql", "SELEC 1"], "the query does not parse: Parser Error"),
    "sql: two statements": (lambda w: ["sql", "SELECT 1; SELECT 2"], "give one statement, got 2"),
    "sql: unknown table": (lambda w: ["sql", "SELECT * FROM nosuch"], "the query failed: Catalog Error"),
    "sql: json and csv": (lambda w: ["sql", "SELECT 1", "--json", "--csv"], "not allowed with argument"),
    "sql: no warehouse": (
        lambda w: [os.environ.__setitem__("CHUNKEVAL_HOME", str(w["t"] / "fresh")), "sql", "SELECT 1"][1:],
        "no warehouse here yet",
    ),
    "runs: lock timeout not a number": (
        lambda w: [os.environ.__setitem__("CHUNKEVAL_LOCK_TIMEOUT", "soon"), "runs"][1:],
        "CHUNKEVAL_LOCK_TIMEOUT must be a number of seconds, 0 or more, got 'soon'",
    ),
    "runs: lock timeout negative": (
        lambda w: [os.environ.__setitem__("CHUNKEVAL_LOCK_TIMEOUT", "-1"), "runs"][1:],
        "CHUNKEVAL_LOCK_TIMEOUT must be a number of seconds",
    ),
    "unknown command": (lambda w: ["frobnicate"], "unknown command 'frobnicate'; choose from run, runs,"),
    "misspelt command": (lambda w: ["repot"], "unknown command 'repot'; did you mean report?"),
    "misspelt flag of a subcommand": (
        lambda w: ["gold", "check", "--questions", "q.csv", "--strct"],
        "unknown flag --strct; did you mean --strict?",
    ),
    "misspelt required flag": (lambda w: ["trend", "--experimnt", "cat"], "unknown flag --experimnt; did you mean"),
}


def _gpu() -> bool:
    import torch

    return torch.cuda.is_available()


if not _gpu():  # CI and this project's machines have none; on a GPU machine `--device cuda` is good input
    CASES["sweep: cuda on a machine without a GPU"] = (
        lambda w: sweep(w["t"], "--device", "cuda"),
        "torch sees no CUDA GPU",
    )
    CASES["sweep: fp16 where auto means the CPU"] = (
        lambda w: sweep(w["t"], "--precision", "fp16"),
        "precision fp16 needs a GPU",
    )
else:  # on a GPU machine: the exported backends run on the CPU
    CASES["sweep: onnx on the GPU"] = (
        lambda w: sweep(w["t"], "--backend", "onnx", "--device", "cuda"),
        "backend onnx runs on the CPU",
    )


def fifo(t: Path) -> Path:
    path = t / "q.fifo.csv"
    if not path.exists():
        os.mkfifo(path)
    return path


def big_bad_header(t: Path) -> Path:
    """20 MB of rows under a header without the columns asked for: refused from its first line."""
    path = t / "big.csv"
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("q,refs,corpus\n")
        fh.write("What?,[],doc\n" * 1_600_000)
    return path


def deep_json(t: Path) -> Path:
    return write(t / "deep.jsonl", '{"query_id": "1", "retrieved_chunk_ids": ' + "[" * 5000 + "]" * 5000 + "}\n")


ALIAS_BOMB = "".join(
    f"{name}: &{name} [{', '.join(['*' + prev] * 9)}]\n" for name, prev in zip("bcdefghi", "abcdefgh")
).join(["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n", "overlaps: *i\n"])

# ---------------------------------------------------------------- inputs within bounds, names, numbers (safety)
CASES.update(
    {
        "sweep: questions is a FIFO": (
            lambda w: sweep(w["t"], questions=fifo(w["t"])),
            "is a FIFO, not a regular file",
        ),
        "sweep: questions is a device": (lambda w: sweep(w["t"], questions=Path("/dev/zero")), "is a device"),
        "sweep: 20 MB of questions under a wrong header": (
            lambda w: sweep(w["t"], questions=big_bad_header(w["t"])),
            "big.csv: missing column(s) question, references, corpus_id",
        ),
        "sweep: k past a machine integer": (
            lambda w: sweep(w["t"], "--k", "99999999999"),
            "must be at most 2147483647",
        ),
        "evaluate-run: JSON nested 5,000 deep": (
            lambda w: evaluate_run(w["t"], run=deep_json(w["t"])),
            "deep.jsonl: row 1: broken JSON (nested deeper than 64 levels",
        ),
        "evaluate-run: TREC grade nan": (
            lambda w: evaluate_run(
                w["t"],
                write(w["t"] / "q.qrels", "1 0 A nan\n"),
                write(w["t"] / "r.trec", "1 Q0 A 1 1.0 x\n"),
                "--format",
                "trec",
            ),
            "q.qrels: row 1: grade 'nan' is not a finite number",
        ),
        "evaluate-run: TREC score inf": (
            lambda w: evaluate_run(
                w["t"],
                write(w["t"] / "q.qrels", "1 0 A 1\n"),
                write(w["t"] / "r.trec", "1 Q0 A 1 inf x\n"),
                "--format",
                "trec",
            ),
            "r.trec: row 1: score 'inf' is not a finite number",
        ),
        "run: experiment file alias bomb": (
            lambda w: ["run", experiment(w["t"], GOOD_YAML + ALIAS_BOMB)],
            "exp.yaml: YAML whose aliases expand past 100,000 values is refused",
        ),
        "run: experiment name with ..": (
            lambda w: ["run", experiment(w["t"], GOOD_YAML + "name: ../../x\n")],
            "experiment name '../../x' must be one word",
        ),
        "run: experiment name with a control character": (
            lambda w: ["run", experiment(w["t"], GOOD_YAML + 'name: "a\\x1b[31mb"\n')],
            "experiment name 'a\\x1b[31mb' must be one word",
        ),
        "run: experiment name of 300 characters": (
            lambda w: ["run", experiment(w["t"], GOOD_YAML + "name: " + "n" * 300 + "\n")],
            "at most 100 characters",
        ),
        "run: experiment name with a NUL byte": (
            lambda w: ["run", experiment(w["t"], GOOD_YAML + 'name: "a\\0b"\n')],
            "must be one word",
        ),
        "run: overlap of 18.9 tokens": (
            lambda w: ["run", experiment(w["t"], GOOD_YAML + "overlaps: [18.9]\n")],
            "overlap must be a whole number or a percentage like 10%, got '18.9'",
        ),
        "run: k true": (
            lambda w: ["run", experiment(w["t"], GOOD_YAML.replace("k: [1]", "k: [true]"))],
            "k must be whole numbers, got True",
        ),
        "run: k 1e400": (
            lambda w: ["run", experiment(w["t"], GOOD_YAML.replace("k: [1]", "k: [1e400]"))],
            "k must be whole numbers",
        ),
        "run: chunk size past a machine integer": (
            lambda w: ["run", experiment(w["t"], GOOD_YAML.replace("[50]", "[9223372036854775808]"))],
            "chunk_sizes must be at most 2147483647",
        ),
        "run: rrf_k given as a list": (
            lambda w: ["run", experiment(w["t"], GOOD_YAML + "rrf_k: [1, 2]\n")],
            "rrf_k takes one whole number, got [1, 2]",
        ),
        "run: duplicates given as a list": (
            lambda w: ["run", experiment(w["t"], GOOD_YAML + "duplicates: [credit]\n")],
            "duplicates takes one value",
        ),
        "run: a mapping inside a list": (
            lambda w: ["run", experiment(w["t"], GOOD_YAML + "chunker: [{kind: fixed_token}]\n")],
            "list items must be single values",
        ),
        "run: overlap share past 100%": (
            lambda w: ["run", experiment(w["t"], GOOD_YAML + "overlaps: [1e400%]\n")],
            "an overlap share must be between 0% and 100%",
        ),
        "run: a plug-in the experiment file does not list": (
            lambda w: ["run", experiment(w["t"], GOOD_YAML + "chunker: [plugins_for_tests:paragraphs]\n")],
            "runs code from 'plugins_for_tests', which is not listed under plugins:",
        ),
        "run: the standard library as a chunker, listed": (
            lambda w: ["run", experiment(w["t"], GOOD_YAML + "chunker: ['pty:spawn']\nplugins: [pty]\n")],
            "chunker 'pty:spawn': 'pty' is the standard library's, never a plug-in",
        ),
        "sweep: the standard library as a retriever": (
            lambda w: sweep(w["t"], "--retriever", "this:s"),
            "retriever 'this:s': 'this' is the standard library's, never a plug-in",
        ),
        "run: --experiment outside the home": (
            lambda w: ["run", "--experiment", "../../x"],
            "experiment name '../../x' must be one word",
        ),
        "report: --experiment as an absolute path": (
            lambda w: ["report", "--experiment", "/etc/passwd"],
            "experiment name '/etc/passwd' must be one word",
        ),
        "runs prune: --experiment ..": (
            lambda w: ["runs", "prune", "--experiment", "..", "--keep-last", "1"],
            "experiment name '..' must be one word",
        ),
        "trend: threshold nan": (
            lambda w: [
                "trend",
                "--experiment",
                "cat",
                "--metric",
                "span_recall",
                "--fail-on-regression",
                "--threshold",
                "nan",
            ],
            "--threshold must be 0 or more and finite, got nan",
        ),
        "trend: threshold inf": (
            lambda w: ["trend", "--experiment", "cat", "--metric", "span_recall", "--threshold", "inf"],
            "--threshold must be 0 or more and finite, got inf",
        ),
        "compare: alpha nan": (
            lambda w: ["compare", "--experiment", "cat", "--metric", "span_recall", "--alpha", "nan"],
            "--alpha must be strictly between 0 and 1, got nan",
        ),
        "run: rrf_k past a machine integer": (
            lambda w: ["run", "--experiment", "cat", "--retriever", "hybrid", "--rrf-k", "99999999999"],
            "--rrf-k must be at most 2147483647, got 99999999999",
        ),
        "run: the fall to detect out of range": (
            lambda w: ["run", "--experiment", "cat", "--detect-fall", "2"],
            "--detect-fall: detect_fall must be at most 1 (docs/limits.md), got 2.0",
        ),
        "run: the fall to detect no number": (
            lambda w: ["run", "--experiment", "cat", "--detect-fall", "x"],
            "argument --detect-fall: invalid float value: 'x'",
        ),
        "run: a race's alpha out of range": (
            lambda w: ["run", "--experiment", "cat", "--race", "--race-alpha", "1"],
            "race_alpha takes a number between 0 and 1, got 1.0",
        ),
        "run: a race's budget below its first batch": (
            lambda w: ["run", "--experiment", "cat", "--race", "--budget", "1"],
            "budget 1 cells is less than the race's first batch:",
        ),
        "run: a race's batch past the largest whole number": (
            lambda w: ["run", "--experiment", "cat", "--race", "--race-batch", "99999999999"],
            "--race-batch must be at most 2147483647, got 99999999999",
        ),
        "run: a race's setting without --race": (
            lambda w: ["run", "--experiment", "cat", "--race-delta", "0.02"],
            "race_delta is a setting of a race: give race (--race) with it",
        ),
        "run: the experiment file is a FIFO": (lambda w: ["run", fifo(w["t"])], "is a FIFO, not a regular file"),
        "run: the experiment file is a device": (lambda w: ["run", "/dev/zero"], "is a device"),
        "evaluate-run: gold is a device": (lambda w: evaluate_run(w["t"], Path("/dev/zero")), "is a device"),
        "evaluate-run: run file's first line is broken JSON, 20 MB follow": (
            lambda w: evaluate_run(
                w["t"],
                run=write(w["t"] / "r.jsonl", "{oops\n" + '{"query_id": "1", "retrieved_chunk_ids": []}\n' * 400_000),
            ),
            "r.jsonl: row 1: broken JSON",
        ),
        "sweep: a JSON cell nested 5,000 deep": (
            lambda w: sweep(w["t"], questions=bad_refs(w["t"], "[" * 5000 + "]" * 5000)),
            "bad.csv: row 1: column references: broken JSON (nested deeper than 64 levels",
        ),
        "run: experiment file nested 5,000 deep": (
            lambda w: ["run", experiment(w["t"], GOOD_YAML + "overlaps: " + "[" * 5000 + "]" * 5000 + "\n")],
            "exp.yaml:",
        ),
        "sweep: --k 18.9": (lambda w: sweep(w["t"], "--k", "18.9"), "--k must be whole numbers, got '18.9'"),
        "sweep: --chunk-sizes 1e3": (
            lambda w: sweep(w["t"], "--chunk-sizes", "1e3"),
            "--chunk-sizes must be whole numbers",
        ),
        "runs: --experiment with an escape sequence": (
            lambda w: ["runs", "--experiment", "a\x1b[2Jb"],
            "experiment name 'a\\x1b[2Jb' must be one word",
        ),
        "trend: --experiment empty": (
            lambda w: ["trend", "--experiment", "", "--metric", "span_recall"],
            "experiment name '' must be one word",
        ),
        "compare: alpha -inf": (
            lambda w: ["compare", "--experiment", "cat", "--metric", "span_recall", "--alpha=-inf"],
            "--alpha must be strictly between 0 and 1",
        ),
        "run: a plug-in retriever the file does not list": (
            lambda w: ["run", experiment(w["t"], GOOD_YAML + "retriever: ['plugins_for_tests:reversed_dense']\n")],
            "runs code from 'plugins_for_tests'",
        ),
        "run: a home so deep that the report path is too long": (
            lambda w: [
                os.environ.__setitem__("CHUNKEVAL_HOME", str(w["t"] / "/".join(["d" * 199] * 20))),
                *["run", "--experiment", "deep", "--corpus-dir", w["t"] / "corpora", "--questions", w["t"] / "q.csv"],
            ][1:],
            "$CHUNKEVAL_HOME would be a path too long for this file system",
        ),
        "run: index mapping without a kind": (
            lambda w: ["run", experiment(w["t"], GOOD_YAML + "index: [{m: 16}]\n")],
            "exp.yaml: an index mapping needs a kind",
        ),
        "run: model folder relative to the experiment file": (
            lambda w: ["run", experiment(w["t"], GOOD_YAML + "model: [models/mine]\n")],
            "/models/mine' is neither",  # an absolute path: the file's folder joined with models/mine
        ),
    }
)


_BAD_SERVERS: dict[str, str] = {}


def bad_server(mode: str) -> str:
    """The URL of a server that answers every request as `mode` says (401, 404, html, nan, short, wide;
    served_server.Proxy with nothing behind it), started on first use and kept for the session."""
    if mode not in _BAD_SERVERS:
        from served_server import Proxy

        _BAD_SERVERS[mode] = Proxy(mode=mode).__enter__().url
    return _BAD_SERVERS[mode]


def served_yaml(t: Path, url: str, **settings) -> Path:
    entry = {"base_url": url, "model": "minilm", "max_retries": 0, **settings}
    entry = {k: v for k, v in entry.items() if v is not None}  # no base_url: an endpoint names the server
    body = ", ".join(f"{k}: {json.dumps(v)}" for k, v in entry.items())
    return experiment(t, GOOD_YAML + f"model: [team]\nmodels:\n  team: {{{body}}}\n")


# served models (issue 18): name → (the server: a URL, a bad_server mode, or None for none there; the
# models: entry's settings beyond base_url and model; a piece of the one line)
SERVED_CASES = {
    "models entry with an unknown key": (
        "http://127.0.0.1:9",
        {"batch": 8},
        "exp.yaml: models: team: unknown key(s) batch",
    ),
    "models base_url with credentials": ("http://user:secret@127.0.0.1:9", {}, "must hold no user, password"),
    "api_key_env names a variable that is not set": (
        "http://127.0.0.1:9",
        {"api_key_env": "CHUNKEVAL_NO_SUCH_KEY"},
        "the API key variable CHUNKEVAL_NO_SUCH_KEY is not set",
    ),
    "concurrency below 1": ("http://127.0.0.1:9", {"concurrency": 0}, "team: concurrency must be at least 1, got 0"),
    "batch_size below 1": ("http://127.0.0.1:9", {"batch_size": 0}, "team: batch_size must be at least 1, got 0"),
    "max_batch_tokens below 1": ("http://127.0.0.1:9", {"max_batch_tokens": -5}, "max_batch_tokens must be at least 1"),
    "served model whose server is not there": (None, {}, "/embeddings: no answer after 1 tries (ConnectError"),
    "served model answers 401": ("401", {}, "/embeddings: HTTP 401: Incorrect API key provided"),
    "served model answers 404 (unknown model)": ("404", {}, "/embeddings: HTTP 404: The model does not exist"),
    "served model answers one vector too few": ("short", {}, "answered 4 vector(s) for 5 input(s)"),
    "served model answers another width than dimensions": ("wide", {"dimensions": 384}, "width 385, not 384"),
    "served model answers NaN": ("nan", {}, "answered vectors with numbers that are not finite"),
    # issue 30: keys bound to hosts by the user; hostile answers
    "api_key_env sent to a host nobody bound it to": (
        "http://10.255.255.1:9",
        {"api_key_env": "CHUNKEVAL_TEST_KEY"},
        "the key in CHUNKEVAL_TEST_KEY is not bound to http://10.255.255.1:9; a key goes only to hosts you bind",
    ),
    "a key with white space inside": ("401", {"api_key_env": "CHUNKEVAL_SPACED_KEY"}, "holds white space"),
    "a key ending in CR, quoted late in the server's message": (
        "quote",
        {"api_key_env": "CHUNKEVAL_TEST_KEY"},
        "xxxxxxxxxx Bearer ***",
    ),
    "an endpoint nobody defined": ("", {"endpoint": "nope"}, "no endpoint 'nope' in"),
    "an endpoint beside a base_url": ("http://127.0.0.1:9", {"endpoint": "team-gw"}, "give it without base_url"),
    "served model drips its answer past the timeout": ("drip", {"timeout": 1}, "no answer after 1 tries (ReadTimeout"),
    "served model answers 300 MB": ("huge", {}, "answered more than the 2,359,296 bytes read for 5 input(s)"),
    "served model answers subnormal numbers": ("subnormal", {}, "answered vectors with subnormal numbers"),
    "served model answers 1e308": ("1e308", {}, "answered vectors with a component beyond 1e+06"),
    "served model answers a zero vector": ("zero", {}, "answered a zero vector"),
}


def served_case(server: str | None, settings: dict):
    def argv(w):
        w["setenv"]("CHUNKEVAL_TEST_KEY", "sk-test-" + "k" * 24 + "\r")  # as a CRLF .env file leaves it
        w["setenv"]("CHUNKEVAL_SPACED_KEY", "sk-test one")
        config = w["t"] / "config" / "chunkeval"
        config.mkdir(parents=True, exist_ok=True)
        write(config / "endpoints.yaml", "team-gw: {base_url: 'https://gw.example.com/v1', api_key_env: TEAM_KEY}\n")
        if server == "":
            return ["run", served_yaml(w["t"], None, **settings)]
        url = server if server and server.startswith("http") else f"http://127.0.0.1:{free_port()}"
        return ["run", served_yaml(w["t"], bad_server(server) if server and url != server else url, **settings)]

    return argv


CASES.update(
    {f"run: {name}": (served_case(server, settings), m) for name, (server, settings, m) in SERVED_CASES.items()}
)
# sweep flags of served models and rerankers (issue 18): name → (flags, a piece of the one line); a flag
# `{html}` is the URL of a server that answers HTML
SWEEP_FLAG_CASES = {
    "openai spec without a model": (["--model", "openai:"], "write openai:MODEL"),
    "openai spec with a base URL without a host": (["--model", "openai:m@http://"], "http:// or https:// with a host"),
    "openai spec with a port that is no number": (["--model", "openai:m@http://127.0.0.1:port"], "is not a URL"),
    "served model answers HTML": (
        ["--model", "openai:minilm@{html}"],
        "/embeddings: answered text/html that is not JSON",
    ),
    "a reranker that is no model": (
        ["--reranker", "none,cohere-rerank", "--candidates", "10"],
        "unknown reranker 'cohere-rerank'; choose none, an embedding model",
    ),
    "candidates below every k": (
        ["--reranker", "all-MiniLM-L6-v2", "--candidates", "3,4", "--k", "5"],
        "candidates 3, 4 below every k (5)",
    ),
    "candidates below 1": (["--reranker", "all-MiniLM-L6-v2", "--candidates", "0,10"], "candidates must be at least 1"),
    "a reranker without candidates": (["--reranker", "all-MiniLM-L6-v2"], "a reranker needs candidates"),
    # compressed vectors (docs/vectors.md)
    "unknown vectors": (["--vectors", "float32,int4"], "vectors must be float32, int8, binary or binary-rescore:depth"),
    "vectors int8 with a parameter": (["--vectors", "int8:bits=4"], "vectors int8 takes no parameters"),
    "binary-rescore without a depth": (["--vectors", "binary-rescore"], "binary-rescore takes depth=N"),
    "binary-rescore depth not a number": (["--vectors", "binary-rescore:depth=ten"], "binary-rescore takes depth=N"),
    "binary-rescore depth below every k": (
        ["--vectors", "binary-rescore:depth=2", "--k", "3,5"],
        "binary-rescore depth 2 below every k (3, 5)",
    ),
    "vectors listed twice": (["--vectors", "int8,binary,int8"], "vectors 'int8' listed twice"),
    "dims not a number": (["--dims", "full,half"], "dims must be full or a whole number of dimensions"),
    "dims of 0": (["--dims", "0"], "dims must be full or a whole number of dimensions of at least 1"),
    "dims above the model's width": (["--dims", "full,512"], "dims 512 exceeds the 384 of model all-MiniLM-L6-v2"),
}


def sweep_flags_case(flags: list[str]):
    return lambda w: sweep(w["t"], *(f.replace("{html}", bad_server("html")) if "{html}" in f else f for f in flags))


CASES.update({f"sweep: {name}": (sweep_flags_case(flags), m) for name, (flags, m) in SWEEP_FLAG_CASES.items()})
# small-to-big retrieval (issue 33, docs/metrics.md): the expand axis's values
EXPAND_CASES = {
    "window below 0": (["--expand", "window:n=-1"], "expand takes none, window:n=N"),
    "parent of size 0": (["--expand", "none,parent:size=0"], "expand takes none, window:n=N"),
    "unknown expansion kind": (["--expand", "sentence:n=2"], "got 'sentence:n=2'"),
    "expansion without its parameter": (["--expand", "window"], "got 'window'"),
    "the same expansion twice": (["--expand", "window:n=1,window:n=01"], "expand 'window:n=1' listed twice"),
}
CASES.update({f"sweep: {name}": (sweep_flags_case(flags), m) for name, (flags, m) in EXPAND_CASES.items()})
# late chunking (issue 44, docs/design_space.md): the late axis's values and the models that cannot read chunks late
LATE_CASES = {
    "late without its size": (["--late", "window"], "late must be none or window:size=N"),
    "late of another kind": (["--late", "sentence:size=64"], "late must be none or window:size=N"),
    "late window too small": (["--late", "window:size=4"], "late window:size must be at least 8 tokens"),
    "late past the position limit": (
        ["--late", "none,window:size=513"],
        "late: window:size=513 exceeds all-MiniLM-L6-v2's position limit (512 tokens)",
    ),
    "the same late twice": (["--late", "window:size=64,window:size=64"], "late 'window:size=64' listed twice"),
    "late with a served model": (
        ["--late", "window:size=256", "--model", "openai:text-embedding-3-small"],
        "is a served model, whose endpoint returns one vector per text",
    ),
    "late without none, with a context": (
        ["--late", "window:size=256", "--context", "title"],
        "late other than none is crossed with context none only",
    ),
    "late with a static model": (
        ["--late", "window:size=256", "--model", "minilm-static"],
        "late: minilm-static is a static model",
    ),
}
CASES.update({f"sweep: {name}": (sweep_flags_case(flags), m) for name, (flags, m) in LATE_CASES.items()})


BEIR_DOC = '{"_id": "d1", "title": "T", "text": "Some words here."}\n'
BEIR_QUERY = '{"_id": "q1", "text": "words"}\n'
BEIR_QRELS = "query-id\tcorpus-id\tscore\nq1\td1\t1\n"


def beir_sweep(t: Path, corpus=BEIR_DOC, queries=BEIR_QUERY, qrels=BEIR_QRELS, *extra):
    """`sweep --beir` over a BEIR folder written from the parts given (None leaves a file out)."""
    folder = t / "beir"
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    for name, text in (("corpus.jsonl", corpus), ("queries.jsonl", queries), ("qrels/test.tsv", qrels)):
        if text is not None:
            write(folder / name, text)
    return ["sweep", "--beir", folder, "--retriever", "bm25", "--out", t / "out.csv", *extra]


# issue 20: document gold
CASES.update(
    {
        "sweep: BEIR folder without queries.jsonl": (
            lambda w: beir_sweep(w["t"], queries=None),
            "a BEIR folder holds queries.jsonl; it is missing",
        ),
        "sweep: BEIR corpus line without _id": (
            lambda w: beir_sweep(w["t"], corpus='{"text": "words"}\n'),
            "corpus.jsonl: row 1: missing key(s) _id",
        ),
        "sweep: BEIR corpus line without text": (
            lambda w: beir_sweep(w["t"], corpus='{"_id": "d1"}\n'),
            "corpus.jsonl: row 1: missing key(s) text",
        ),
        "sweep: duplicate document ids": (
            lambda w: beir_sweep(w["t"], corpus=BEIR_DOC * 2),
            "corpus.jsonl: row 2: document id 'd1' appears twice",
        ),
        "sweep: a split with no qrels": (
            lambda w: beir_sweep(w["t"], BEIR_DOC, BEIR_QUERY, BEIR_QRELS, "--split", "dev"),
            "qrels/dev.tsv; it is missing",
        ),
        "sweep: qrels judging no query": (
            lambda w: beir_sweep(w["t"], qrels="query-id\tcorpus-id\tscore\nq9\td1\t1\n"),
            "test.tsv: no query of the queries file has qrels",
        ),
        "sweep: --questions with --qrels": (
            lambda w: sweep(
                w["t"],
                "--queries",
                write(w["t"] / "qs.jsonl", BEIR_QUERY),
                "--qrels",
                write(w["t"] / "qr.tsv", BEIR_QRELS),
            ),
            "questions (span gold) and qrels (document gold) cannot be scored in one experiment",
        ),
        "sweep: a relevance rule with F outside (0, 1]": (
            lambda w: sweep(w["t"], "--relevance", "coverage:1.5"),
            "relevance must be overlap, coverage:F with F in (0, 1], or contains; got 'coverage:1.5'",
        ),
        "sweep: qrels naming an unknown document with --strict": (
            lambda w: beir_sweep(w["t"], BEIR_DOC, BEIR_QUERY, BEIR_QRELS + "q1\td9\t1\n", "--strict"),
            "test.tsv: row 2: names an unknown document 'd9'",
        ),
        "sweep: qrels naming an unknown query with --strict": (
            lambda w: beir_sweep(w["t"], BEIR_DOC, BEIR_QUERY, BEIR_QRELS + "q7\td1\t1\n", "--strict"),
            "test.tsv: row 2: names an unknown query 'q7'",
        ),
        "evaluate-run: doc-qrels with a run item that is not a chunk id": (
            lambda w: evaluate_run(
                w["t"],
                write(w["t"] / "qrels.tsv", BEIR_QRELS),
                write(w["t"] / "run.jsonl", '{"query_id": "q1", "retrieved_chunk_ids": ["d1"]}\n'),
                "--format",
                "doc-qrels",
            ),
            "run.jsonl: query 'q1': 'd1' is not a chunk id <doc_id>:<start>-<end>",
        ),
        "sweep: qrels line with three fields": (
            lambda w: beir_sweep(w["t"], qrels="q1 0 d1\n"),
            "test.tsv: row 1: qrels must be BEIR's TSV",
        ),
    }
)


FORMATS = Path(__file__).resolve().parent / "data" / "formats"


def in_corpus(t: Path, name: str, content: str | bytes | None = None) -> Path:
    """A document file put into the workspace's corpus folder: a fixture of tests/data/formats, or `content`."""
    path = t / "corpora" / name
    return write(path, (FORMATS / name).read_bytes() if content is None else content)


def extract(t: Path, *extra, corpus=None, out=None):
    return ["extract", corpus or t / "corpora", "--out", out or t / "texts", *extra]


LATIN_PAGE = b"<html><body><p>caf\xe9 au lait</p></body></html>"

# issue 20: corpora in the formats teams have (docs/formats.md)
CASES.update(
    {
        "sweep: a PDF without a text layer with --strict": (
            lambda w: [in_corpus(w["t"], "scanned.pdf"), *sweep(w["t"], "--strict")][1:],
            "scanned.pdf: document 'scanned' is unreadable: no text layer",
        ),
        "sweep: an HTML page in no declared charset with --strict": (
            lambda w: [in_corpus(w["t"], "page.html", LATIN_PAGE), *sweep(w["t"], "--strict")][1:],
            "page.html: document 'page' is unreadable: not UTF-8",
        ),
        "sweep: a question about an unreadable document": (
            lambda w: [
                in_corpus(w["t"], "scanned.pdf"),
                *sweep(w["t"], questions=write(w["t"] / "s.csv", "question,references,corpus_id\nWhat?,[],scanned\n")),
            ][1:],
            "s.csv: every question is retired: none of the references of 1 question(s) could be placed in its "
            "document (row 1: corpus_id 'scanned' names an unreadable document (",
        ),
        "run: experiment file with an unknown html setting": (
            lambda w: ["run", experiment(w["t"], GOOD_YAML + "html: article\n")],
            "html must be full or main, got 'article'",
        ),
        "extract: corpus missing": (
            lambda w: extract(w["t"], corpus=w["t"] / "nope"),
            "corpus folder or file not found",
        ),
        "extract: not a document file": (
            lambda w: extract(w["t"], corpus=w["t"] / "q.csv"),
            "q.csv: not a document file",
        ),
        "extract: --out holds files": (
            lambda w: extract(w["t"], out=w["t"] / "corpora"),
            "must be a new or empty folder",
        ),
        "extract: unreadable document with --strict": (
            lambda w: [in_corpus(w["t"], "damaged.pdf"), *extract(w["t"], "--strict")][1:],
            "damaged.pdf: document 'damaged' is unreadable: damaged PDF",
        ),
    }
)


def sparse(path: Path, size: int) -> Path:
    """A file of `size` bytes that takes no disk (a hole), to cross a size limit fast."""
    with open(path, "wb") as fh:
        fh.truncate(size)
    return path


# issue 30: documents and BEIR inputs, each class of input bounded
CASES.update(
    {
        "sweep: an HTML page declaring charset=undefined with --strict": (
            lambda w: [
                in_corpus(w["t"], "u.html", b"<meta charset=undefined><p>caf\xe9</p>"),
                *sweep(w["t"], "--strict"),
            ][1:],
            "u.html: document 'u' is unreadable: not UTF-8 and declares an unknown charset 'undefined'",
        ),
        "sweep: an HTML page declaring a codec that is no charset (rot13) with --strict": (
            lambda w: [in_corpus(w["t"], "r.html", b"<meta charset=rot13><p>caf\xe9</p>"), *sweep(w["t"], "--strict")][
                1:
            ],
            "declares an unknown charset 'rot13'",
        ),
        "sweep: a document file over the size limit": (
            lambda w: [sparse(w["t"] / "corpora" / "big.html", (64 << 20) + 1), *sweep(w["t"])][1:],
            "big.html: a document file of more than 64 MiB is refused",
        ),
        "sweep: BEIR corpus line with an empty _id": (
            lambda w: beir_sweep(w["t"], corpus='{"_id": "", "text": "words"}\n'),
            "corpus.jsonl: row 1: empty document _id",
        ),
        "sweep: BEIR corpus line with a list for an id": (
            lambda w: beir_sweep(w["t"], corpus='{"id": [1], "text": "words"}\n'),
            "corpus.jsonl: row 1: document id must be text or a number, got [1]",
        ),
        "sweep: BEIR query text that is a list": (
            lambda w: beir_sweep(w["t"], queries='{"_id": "q1", "text": ["words"]}\n'),
            "queries.jsonl: row 1: query text must be text, got ['words']",
        ),
        "sweep: BEIR grade of 1e308": (
            lambda w: beir_sweep(w["t"], qrels="query-id\tcorpus-id\tscore\nq1\td1\t1e308\n"),
            "test.tsv: row 1: grade '1e308' is beyond ±1,000",
        ),
        "evaluate-run: TREC qrels grade of -1e308": (
            lambda w: evaluate_run(
                w["t"],
                write(w["t"] / "qrels.txt", "q1 0 d1 -1e308\n"),
                write(w["t"] / "run.txt", "q1 Q0 d1 1 1.0 r\n"),
                "--format",
                "trec",
            ),
            "qrels.txt: row 1: grade '-1e308' is beyond ±1,000",
        ),
        **{  # issue 30 gaps: a run's scores are bounded as grades are (and non-finite ones refused)
            f"evaluate-run: TREC run score of {score}": (
                lambda w, score=score: evaluate_run(
                    w["t"],
                    write(w["t"] / "qrels.txt", "q1 0 d1 1\n"),
                    write(w["t"] / "run.txt", f"q1 Q0 d2 1 0.5 r\nq1 Q0 d1 2 {score} r\n"),
                    "--format",
                    "trec",
                ),
                message,
            )
            for score, message in {
                "1e308": "run.txt: row 2: score '1e308' is beyond ±1e+30 (docs/limits.md)",
                "-1e31": "run.txt: row 2: score '-1e31' is beyond ±1e+30",
                "1e400": "run.txt: row 2: score '1e400' is not a finite number",
                "-inf": "run.txt: row 2: score '-inf' is not a finite number",
            }.items()
        },
        "run: an MLflow URI where a proxy answers HTML": (
            lambda w: ["run", "--mlflow", bad_server("html")],
            "answered GET mlflow/experiments/search?max_results=1 with text/html that is not JSON",
        ),
    }
)

# issue 20: slices of the gold set
CASES.update(
    {
        "sweep: an unknown slice column": (
            lambda w: sweep(w["t"], "--slice-by", "type"),
            "q.csv: unknown slice column 'type': it is not a column of the file; slice by one of corpus_id",
        ),
        "sweep: an unknown slice field of a queries file": (
            lambda w: beir_sweep(w["t"], BEIR_DOC, BEIR_QUERY, BEIR_QRELS, "--slice-by", "type"),
            "queries.jsonl: unknown slice column 'type': no query has it as a field or under metadata (fields: none)",
        ),
        "run: an unknown slice column": (
            lambda w: [
                *["run", "--experiment", "sliced", "--corpus-dir", w["t"] / "corpora", "--questions", w["t"] / "q.csv"],
                *["--slice-by", "type"],
            ],
            "q.csv: unknown slice column 'type'",
        ),
        "trend: an unknown slice": (
            lambda w: ["trend", "--experiment", "cat", "--metric", "mrr", "--slice", "type=numbers"],
            "no slice 'type=numbers' in the runs of experiment 'cat'; its runs recorded no slices (run with --slice-by)",
        ),
    }
)

# issue 30, classes 7 and 9: settings read through the one settings table (docs/settings.md, docs/limits.md)
MANY_SIZES = ",".join(str(n) for n in range(10, 61))  # 51 sizes × 10 k of bm25: 510 configurations
CASES.update(
    {
        "run: a key given twice": (
            lambda w: ["run", experiment(w["t"], GOOD_YAML + "k: [5]\n")],
            "exp.yaml: key 'k' given twice (line 5)",
        ),
        "run: a number as a key": (lambda w: ["run", experiment(w["t"], GOOD_YAML + "1: a\n")], "key must be a name"),
        "run: null as a key": (lambda w: ["run", experiment(w["t"], GOOD_YAML + "~: a\n")], "key must be a name"),
        "run: a list as a key": (lambda w: ["run", experiment(w["t"], GOOD_YAML + "[a, 1]: b\n")], "got 'a sequence'"),
        "run: a key given twice in a mapping": (
            lambda w: ["run", experiment(w["t"], GOOD_YAML + "models:\n  a: {model: m, model: n}\n")],
            "key 'model' given twice",
        ),
        "sweep: --k 1000000000": (lambda w: sweep(w["t"], "--k", "1000000000"), "k must be at most 10000"),
        "run: k past its maximum in a file": (
            lambda w: ["run", experiment(w["t"], GOOD_YAML.replace("k: [1]", "k: [10001]"))],
            "exp.yaml: k must be at most 10000",
        ),
        "sweep: --chunk-sizes past its maximum": (
            lambda w: sweep(w["t"], "--chunk-sizes", "2000000"),
            "chunk_sizes must be at most 1000000",
        ),
        "sweep: --candidates past its maximum": (
            lambda w: sweep(w["t"], "--reranker", "all-MiniLM-L6-v2", "--candidates", "20000"),
            "candidates must be at most 10000",
        ),
        "sweep: --batch-size past its maximum": (
            lambda w: sweep(w["t"], "--batch-size", "100000000"),
            "--batch-size must be at most 65536",
        ),
        "evaluate-run: --k 1000000000": (
            lambda w: evaluate_run(w["t"], None, None, "--k", "1000000000"),
            "--k must be at most 10000",
        ),
        "sweep: reference offset 1e400": (
            lambda w: sweep(
                w["t"], questions=bad_refs(w["t"], '[{""content"": ""x"", ""start_index"": 1e400, ""end_index"": 3}]')
            ),
            "start_index and end_index must be whole numbers up to 2147483647, got inf and 3",
        ),
        "sweep: a relative plug-in chunker": (
            lambda w: sweep(w["t"], "--chunker", ".x:f"),
            "chunker '.x:f' is not module:function",
        ),
        "sweep: --plugin ..x": (lambda w: sweep(w["t"], "--plugin", "..x"), "--plugin '..x' is not a module name"),
        "run: a relative module under plugins:": (
            lambda w: ["run", experiment(w["t"], GOOD_YAML + "plugins: [..x]\n")],
            "exp.yaml: plugins: '..x' is not a module name",
        ),
        "run: a relative plug-in retriever, listed": (
            lambda w: ["run", experiment(w["t"], GOOD_YAML + "retriever: ['..x:f']\nplugins: [x]\n")],
            "exp.yaml: retriever '..x:f' is not module:function",
        ),
        "sweep: a large grid off a terminal": (
            lambda w: sweep(w["t"], "--retriever", "bm25", "--chunk-sizes", MANY_SIZES, "--k", "1,2,3,4,5,6,7,8,9,10"),
            "510 configurations (each at each k)",
        ),
        "run: a large grid off a terminal": (
            lambda w: [
                "run",
                experiment(
                    w["t"],
                    GOOD_YAML.replace("[50]", f"[{MANY_SIZES}]").replace("[1]", "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]")
                    + "retriever: [bm25]\n",
                ),
            ],
            "510 configurations (each at each k) and embeds about 0 texts; more than 500 configurations need --yes",
        ),
        "run: a grid past its max_configurations": (
            lambda w: [
                "run",
                experiment(w["t"], GOOD_YAML.replace("[50]", "[50, 60, 70]") + "max_configurations: 2\n"),
            ],
            "the grid has 3 configurations, more than its max_configurations (2)",
        ),
        "run: max_configurations below 0": (
            lambda w: ["run", experiment(w["t"], GOOD_YAML + "max_configurations: -1\n")],
            "max_configurations must be 0 or more",
        ),
    }
)


# runs that share no configuration or no paired question: one line, exit status 3 (never "no regression")
NOTHING_COMPARABLE_CASES = {
    "compare: no query in common": (
        lambda w: ["compare", "--run", w["run_id"], "--run", w["disjoint_run_id"], "--metric", "mrr"],
        "no query in common",
    ),
    "trend: baseline with no paired question": (
        lambda w: ["trend", "--experiment", "cat", "--fail-on-regression", "--baseline", w["disjoint_run_id"]],
        "0 paired question(s)",
    ),
}


@pytest.mark.parametrize("case", list(NOTHING_COMPARABLE_CASES))
def test_nothing_comparable_gets_one_line_exit_3_and_writes_nothing(case, ws, capsys):
    make, message = NOTHING_COMPARABLE_CASES[case]
    before, rows_before = snapshot(ws["t"], ws["home"]), catalogue_rows(ws["home"])
    code = call([str(a) for a in make(ws)])
    err = capsys.readouterr().err
    assert code == 3 and "Traceback" not in err, err
    assert err.strip().count("\n") == 0 and message in err, err
    assert snapshot(ws["t"], ws["home"]) == before and catalogue_rows(ws["home"]) == rows_before


def gold_update(t: Path, *extra, questions=None, out=None):
    return ["gold", "update", "--corpus-dir", t / "corpora", "--questions", questions or t / "q.csv",
            "--out", out or t / "new.csv", *extra]  # fmt: skip


GONE = '[{""content"": ""A sentence deleted from the document."", ""start_index"": 0, ""end_index"": 37}]'

# issue 29: a gold set that lives with its corpus (docs/gold.md)
CASES.update(
    {
        "sweep: every question retired": (
            lambda w: sweep(w["t"], questions=bad_refs(w["t"], GONE)),
            "bad.csv: every question is retired: none of the references of 1 question(s) could be placed",
        ),
        "run: every question retired": (
            lambda w: ["run", experiment(w["t"], GOOD_YAML.replace("q.csv", "bad.csv")), bad_refs(w["t"], GONE)][:2],
            "every question is retired",
        ),
        "sweep: a retired question with --strict": (
            lambda w: sweep(
                w["t"],
                "--strict",
                questions=write(
                    w["t"] / "two.csv", f'question,references,corpus_id\nWhat?,"{GOOD_REFS}",doc\nGone?,"{GONE}",doc\n'
                ),
            ),
            "two.csv: row 2: question 'doc:2' retired, reference 1: content not found in document 'doc'",
        ),
        "sweep: anchor similarity out of range": (
            lambda w: sweep(w["t"], "--anchor-similarity", "101"),
            "anchor_similarity must be at most 100 (docs/limits.md), got 101",
        ),
        "gold update: the output is its input": (
            lambda w: gold_update(w["t"], out=w["t"] / "q.csv"),
            "is the gold set it corrects: write it to a new file",
        ),
        "gold update: the review file is its input": (
            lambda w: gold_update(w["t"], "--review", w["t"] / "q.csv"),
            "the review CSV",
        ),
        "gold update: every question retired": (
            lambda w: gold_update(w["t"], questions=bad_refs(w["t"], GONE)),
            "every question is retired",
        ),
    }
)


# issue 34: gold generate and gold accept (docs/gold.md); the stand-in chat server replays text, it is no model
_CHAT_SERVERS: dict[str, str] = {}


def chat_server(mode: str) -> str:
    """The base URL of a stand-in chat server (tests/chat_server.py) answering as `mode` says, kept for the session."""
    if mode not in _CHAT_SERVERS:
        from chat_server import ChatServer

        _CHAT_SERVERS[mode] = ChatServer(mode).__enter__().url
    return _CHAT_SERVERS[mode]


def gold_generate(t: Path, *extra, endpoint="http://127.0.0.1:9/v1", corpus=None, out=None):
    return ["gold", "generate", "--corpus-dir", corpus or t / "corpora", "--out", out or t / "gen.csv",
            "--endpoint", endpoint, "--chat-model", "m", "--max-retries", "0", *extra]  # fmt: skip


def many(t: Path) -> Path:
    """A corpus of 150 distinct paragraphs: passages enough for 2,000 questions at 20 a passage."""
    (t / "many").mkdir(exist_ok=True)
    write(
        t / "many" / "doc.md",
        "\n\n".join(f"Paragraph {i} tells of the number {i} and little else." for i in range(150)),
    )
    return t / "many"


def blank(t: Path) -> Path:
    (t / "blank").mkdir(exist_ok=True)
    write(t / "blank" / "empty.md", " \n\n ")
    return t / "blank"


def gold_accept(t: Path, review: str):
    gold = write(
        t / "gen.csv",
        f'query_id,question,references,corpus_id\ng1,What?,"{GOOD_REFS}",doc\ng2,Who?,"{GOOD_REFS}",doc\n',
    )
    return ["gold", "accept", "--questions", gold, "--review", write(t / "r.csv", review), "--out", t / "ok.csv"]


CASES.update(
    {
        "gold generate: the endpoint answers nothing usable": (
            lambda w: gold_generate(w["t"], endpoint=chat_server("garbage")),
            "/chat/completions answered nothing usable: 1 answer(s), none a JSON list of questions",  # 1 passage, once
        ),
        "gold generate: no server at the endpoint": (
            lambda w: gold_generate(w["t"]),
            "/chat/completions: no answer after 1 tries (ConnectError",
        ),
        "gold generate: a corpus with no text": (
            lambda w: gold_generate(w["t"], corpus=blank(w["t"])),
            "empty.md: file is empty",
        ),
        "gold generate: an endpoint nobody defined": (
            lambda w: gold_generate(w["t"], endpoint="nope"),
            "--endpoint: no endpoint 'nope' in",
        ),
        "gold generate: a fall to size for out of range": (
            lambda w: gold_generate(w["t"], "--for-fall", "2"),
            "--for-fall takes a number from 0.001 to 0.999, got 2",
        ),
        "gold generate: a fall to size for beside a number of questions": (
            lambda w: gold_generate(w["t"], "--for-fall", "0.1", "--questions", "5"),
            "give --questions N or --for-fall X, not both",
        ),
        "gold generate: checks without a fall": (
            lambda w: gold_generate(w["t"], "--checks", "4"),
            "--checks goes with --for-fall X",
        ),
        "gold generate: a target past its budget of requests": (
            lambda w: gold_generate(
                w["t"],
                "--for-fall",
                "0.3",
                "--per-passage",
                "1",
                "--passage-chars",
                "100",
                "--budget",
                "1",
                corpus=many(w["t"]),
            ),  # 21 questions, 21 requests  # fmt: skip
            "more than --budget 1: raise the budget or --per-passage, or ask for fewer",
        ),
        "gold generate: an unknown question type": (
            lambda w: gold_generate(w["t"], "--types", "fact,opinion"),
            "--types takes fact, number, list, section; got opinion",
        ),
        "gold generate: a dedup threshold beyond 1": (
            lambda w: gold_generate(w["t"], "--dedup-similarity", "78"),
            "--dedup-similarity takes a number from -1 to 1, got 78",
        ),
        "gold generate: more tokens than asked for without --yes": (
            lambda w: gold_generate(
                w["t"],
                "--questions",
                "2000",
                "--per-passage",
                "20",
                "--passage-chars",
                "100",
                endpoint=chat_server("garbage"),
                corpus=many(w["t"]),
            ),
            "pass --yes to go ahead",
        ),
        "gold generate: more questions than the passages can be asked for": (
            lambda w: gold_generate(w["t"], "--questions", "2000", endpoint=chat_server("garbage")),
            "--questions 2,000 is more than the corpus's 1 passage(s) can be asked for",
        ),
        "gold generate: the gold set inside its corpus folder": (
            lambda w: gold_generate(w["t"], out=w["t"] / "corpora" / "gen.csv"),
            "is inside the command's own input",
        ),
        "gold accept: a review id that is not in the gold set": (
            lambda w: gold_accept(w["t"], "query_id,accept\ng1,yes\ng2,no\ng9,yes\n"),
            "r.csv: query_id 'g9' (row 3) is not a question of",
        ),
        "gold accept: a question without a review row": (
            lambda w: gold_accept(w["t"], "query_id,accept\ng1,yes\n"),
            "r.csv: no review row for 1 question(s) of",
        ),
        "gold accept: accept neither yes nor no": (
            lambda w: gold_accept(w["t"], "query_id,accept\ng1,maybe\ng2,yes\n"),
            "accept takes yes, no or nothing, got 'maybe'",
        ),
        "gold judge: the endpoint answers nothing usable": (
            lambda w: gold_judge(w, "--depth", "1", endpoint=chat_server("garbage")),
            "/chat/completions answered nothing usable: ",
        ),
        "gold judge: an empty questions file": (
            lambda w: gold_judge(w, questions=write(w["t"] / "empty.csv", "")),
            "empty.csv: file is empty",
        ),
        "gold judge: an unknown run id": (lambda w: gold_judge(w, run="20200101T000000-nope"), "no run '20200101T"),
        "gold judge: a run over none of the questions": (
            lambda w: gold_judge(w, questions=write(w["t"] / "prod.csv", "query_id,question\np1,Who?\n")),
            "retrieved nothing for any question of",
        ),
        "gold judge: a relevant grade beyond 3": (
            lambda w: gold_judge(w, "--min-grade", "4"),
            "--min-grade takes a number from 1 to 3, got 4",
        ),
    }
)


def gold_judge(w, *extra, endpoint="http://127.0.0.1:9/v1", questions=None, run=None, out=None):
    questions = questions or Path(__file__).resolve().parent / "data" / "tiny_demo" / "questions.csv"
    return ["gold", "judge", "--questions", questions, "--run", run or w["run_id"], "--out", out or w["t"] / "j.csv",
            "--endpoint", endpoint, "--chat-model", "m", "--max-retries", "0", *extra]  # fmt: skip


# issue 30: an output a user names never replaces a warehouse file, a device, a folder or the command's input
def target(w, kind: str, suffix: str) -> Path:
    """An output path of one kind (made in the workspace where it is a link or a FIFO); `suffix` is the command's."""
    t, wh = w["t"], w["home"] / "warehouse"
    made = {
        "the live catalogue": lambda: wh / "chunkeval.duckdb",
        "its WAL": lambda: wh / "chunkeval.duckdb.wal",
        "a run's Parquet": lambda: wh / "results" / w["run_id"] / "per_query.parquet",
        "a character device": lambda: linked(t / f"null{suffix}", Path("/dev/null")),  # refused, never written
        "a FIFO": lambda: made_fifo(t / f"fifo{suffix}"),
        "an input": lambda: t / "q.csv" if suffix.endswith(".csv") else t / "corpora" / f"new{suffix}",
        "a folder": lambda: t / "corpora",
        "a link to the warehouse": lambda: linked(t / f"wh{suffix}", wh / "chunkeval.duckdb"),
        "a relative link into the warehouse": lambda: linked(t / f"rel{suffix}", Path("../" * 40 + str(wh)[1:], "x")),
    }
    return made[kind]()


def linked(link: Path, to: Path) -> Path:
    if not link.is_symlink():
        link.symlink_to(to)
    return link


def made_fifo(path: Path) -> Path:
    if not path.exists():
        os.mkfifo(path)
    return path


def companion(w, out: Path) -> Path:
    """A sweep --out whose .per_query companion is a link (named after `out`) to `out`."""
    name = f"c{hashlib.sha256(str(out).encode()).hexdigest()[:12]}"
    return linked(w["t"] / f"{name}.per_query.csv", out.absolute()).with_name(f"{name}.csv")


OWN = "inside chunkeval's own folder"
TARGET_KINDS = {  # the kind → what the one line says
    "the live catalogue": OWN,
    "its WAL": OWN,
    "a run's Parquet": OWN,
    "a character device": "is a character device, not a regular file",
    "a FIFO": "is a FIFO, not a regular file",
    "an input": "the command's own input",
    "a folder": "is a folder, not a file",
    "a link to the warehouse": OWN,
    "a relative link into the warehouse": OWN,
}
OUTPUT_COMMANDS = {  # command → (argv for an output path, the output's suffix, what it says otherwise)
    "warehouse snapshot": (lambda w, out: ["warehouse", "snapshot", out], ".duckdb", {"a folder": "is a folder"}),
    "report": (lambda w, out: ["report", "--experiment", "cat", "--html", out], ".html", {}),
    "diff": (lambda w, out: ["diff", "--run", w["credit_run_id"], "--run", w["run_id"], "--html", out], ".html", {}),
    "sweep": (
        lambda w, out: sweep(w["t"], out=out),
        ".csv",
        dict.fromkeys(("the live catalogue", "its WAL", "a folder"), "output must end in .csv or .parquet"),
    ),
    "sweep (its .per_query file)": (
        lambda w, out: sweep(w["t"], out=companion(w, out)),
        ".csv",
        {"a folder": "a folder"},
    ),
    "gold update": (
        lambda w, out: [
            "gold",
            "update",
            "--corpus-dir",
            w["t"] / "corpora",
            "--questions",
            w["t"] / "q.csv",
            "--out",
            out,
        ],
        ".csv",
        {"an input": "is the gold set it corrects", "a folder": "is a folder: give a file name"},
    ),
    "gold generate": (
        lambda w, out: gold_generate(w["t"], out=out),
        ".csv",
        {"a folder": "is a folder, not a file"},
    ),
    "gold judge": (
        lambda w, out: gold_judge(w, questions=w["t"] / "q.csv", out=out),
        ".csv",
        {"a folder": "is a folder, not a file"},
    ),
    "extract": (
        lambda w, out: extract(w["t"], out=out),
        "",
        {
            **dict.fromkeys(("the live catalogue", "a run's Parquet", "a link to the warehouse"), "a regular file"),
            "a character device": "is a character device, not a folder",
            "a FIFO": "is a FIFO, not a folder",
            "a folder": "--out must be a new or empty folder",
        },
    ),
}
OUTPUT_CASES = {
    f"{command}: output aimed at {kind}": (
        lambda w, argv=argv, kind=kind, suffix=suffix: argv(w, target(w, kind, suffix)),
        says.get(kind, message),
    )
    for command, (argv, suffix, says) in OUTPUT_COMMANDS.items()
    for kind, message in TARGET_KINDS.items()
    if kind != "an input" or command in ("sweep", "sweep (its .per_query file)", "extract", "gold update", "gold judge")
}
CASES.update(OUTPUT_CASES)
CASES["sweep: a companion file linked to --out itself"] = (
    lambda w: sweep(w["t"], out=linked(w["t"] / "c.by_corpus.csv", w["t"] / "c.csv").with_name("c.csv")),
    "companion files (.per_query, .by_corpus, .by_slice) name one file twice",
)


# issue 29: a deployments file `chunkeval serve` would hand the Prefect server, refused before any is served
def deployments_file(t: Path, name: str, **entry) -> list:
    d = {"name": "nightly", "entrypoint": "chunkeval.flows.evaluate:evaluate", **entry}
    path = t / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"deployments": [{k: v for k, v in d.items() if v is not None}]}))
    return ["serve", "--prefect-file", path]


CASES.update(
    {
        "serve: a cron the scheduler cannot read": (
            lambda w: deployments_file(w["t"], "cron", schedules=[{"cron": "61 * * * *"}]),
            "deployment nightly: '61 * * * *' is not a cron expression",
        ),
        "serve: an interval of 0 s": (
            lambda w: deployments_file(w["t"], "zero", schedules=[{"interval": 0}]),
            "deployment nightly: interval must be seconds from 1 to a year, got 0",
        ),
        "serve: an unknown timezone": (
            lambda w: deployments_file(w["t"], "tz", schedules=[{"cron": "0 2 * * *", "timezone": "Mars/Base"}]),
            "deployment nightly: unknown timezone 'Mars/Base'",
        ),
        "serve: an anchor_date that is no time": (
            lambda w: deployments_file(w["t"], "anchor", schedules=[{"interval": 60, "anchor_date": "soon"}]),
            "deployment nightly: anchor_date must be an ISO time, got 'soon'",
        ),
        "serve: an entrypoint that is no flow": (
            lambda w: deployments_file(w["t"], "notflow", entrypoint="chunkeval.paths:home"),
            "entrypoint 'chunkeval.paths:home' is not a Prefect flow",
        ),
        "serve: a relative entrypoint module": (
            lambda w: deployments_file(w["t"], "relative", entrypoint="..evaluate:evaluate"),
            "is not a module name",
        ),
        "serve: a parameter the flow does not take": (
            lambda w: deployments_file(w["t"], "param", parameters={"experiment": "demo", "nightly": True}),
            "deployment nightly: ",
        ),
    }
)


# issue 30: the folders the temporary Prefect server of `run` writes (docs/limits.md)
def run_where(w, **values) -> list:
    environ(PREFECT_API_URL=None, **values)
    return ["run", "--corpus-dir", w["t"] / "corpora", "--questions", w["t"] / "q.csv"]


SET_PREFECT_HOME = "set PREFECT_HOME to a writable folder, or PREFECT_API_URL to a running Prefect server"
CASES.update(
    {
        "run: HOME missing (the temporary Prefect server's ~/.prefect)": (
            lambda w: run_where(w, HOME=w["t"] / "gone", PREFECT_HOME=None),
            "/gone/.prefect (by default ~/.prefect, and HOME is ",
        ),
        "run: HOME is a regular file": (
            lambda w: run_where(w, HOME=w["t"] / "plain", PREFECT_HOME=None),
            f"plain is not a folder: {SET_PREFECT_HOME}",
        ),
        "run: PREFECT_HOME is a regular file": (
            lambda w: run_where(w, PREFECT_HOME=w["t"] / "plain"),
            f"plain, which is not a folder: {SET_PREFECT_HOME}",
        ),
        "run: TMPDIR missing": (
            lambda w: run_where(w, PREFECT_HOME=w["t"], TMPDIR=w["t"] / "gone"),
            "/gone, which is not a writable folder: set TMPDIR to one, or PREFECT_API_URL",
        ),
        "run: CHUNKEVAL_SERVER_KEEP not a number of seconds": (
            lambda w: run_where(w, PREFECT_HOME=w["t"], CHUNKEVAL_SERVER_KEEP="soon"),
            "CHUNKEVAL_SERVER_KEEP is 'soon': the seconds a temporary Prefect server stays for the next command",
        ),
        "run: CHUNKEVAL_SERVER_KEEP negative": (
            lambda w: run_where(w, PREFECT_HOME=w["t"], CHUNKEVAL_SERVER_KEEP="-5"),
            "a number of 0 or more (0 stops it with its command)",
        ),
        "run: SQLITE_TMPDIR is a regular file": (
            lambda w: run_where(w, PREFECT_HOME=w["t"], SQLITE_TMPDIR=w["t"] / "plain"),
            "SQLITE_TMPDIR is ",
        ),
    }
)


# issue 30: `chunkeval sql` is read-only by DuckDB's settings, with a time limit and a row cap
ENDLESS_SQL = "SELECT count(*) FROM range(9223372036854775807) t(i) WHERE i % 7 = 3"
CASES.update(
    {
        "sql: EXPLAIN ANALYZE COPY to a file": (
            lambda w: ["sql", f"EXPLAIN ANALYZE COPY (SELECT 1) TO '{w['t']}/any.csv'"],
            "the query failed: Permission Error",
        ),
        "sql: EXPLAIN ANALYZE COPY over a run's results": (
            lambda w: [
                "sql",
                f"EXPLAIN ANALYZE COPY (SELECT 1 AS a WHERE false) TO "
                f"'{w['home']}/warehouse/results/{w['run_id']}/per_query.parquet' (FORMAT parquet)",
            ],
            "the query failed: Permission Error",
        ),
        "sql: EXPLAIN ANALYZE INSTALL": (lambda w: ["sql", "EXPLAIN ANALYZE INSTALL httpfs"], "Permission Error"),
        "sql: a file outside the warehouse": (
            lambda w: ["sql", "SELECT * FROM read_csv('/etc/passwd')"],
            "the query failed: Permission Error",
        ),
        "sql: past its time limit": (
            lambda w: ["sql", ENDLESS_SQL, "--timeout", "0.5"],
            "the query ran past its time limit of 0.5 s (--timeout) and was stopped",
        ),
        "sql: a time limit of 0": (lambda w: ["sql", "SELECT 1", "--timeout", "0"], "time limit must be more than 0"),
        "sql: a time limit of nan": (lambda w: ["sql", "SELECT 1", "--timeout", "nan"], "got nan"),
        "sql: a limit of 0": (lambda w: ["sql", "SELECT 1", "--limit", "0"], "--limit must be at least 1"),
        "sql: a table too long to align": (
            lambda w: ["sql", "SELECT 1", "--limit", "1000000"],
            "add --csv or --json, which stream",
        ),
        "sql: past the memory cap": (
            lambda w: ["sql", "SELECT count(*) FROM (SELECT repeat('x', 1000) s FROM range(3000000) ORDER BY s)"],
            "the query failed: Out of Memory Error",
        ),
    }
)


# issue 41: model output is untrusted input; keys go only where a name truly resolves; every answer is bounded
def keyed(w) -> dict:
    """The workspace with a key in OPENAI_API_KEY (what goes to a loopback endpoint unasked)."""
    w["setenv"]("OPENAI_API_KEY", "sk-catalogue-0123456789")
    return w


def fifo_deployments(t: Path) -> list:
    return ["serve", "--prefect-file", made_fifo(t / "deployments.yaml")]


def accept_twice(t: Path, provenance: bool = False) -> list:
    """A generated gold set with its provenance record, and `gold accept` to a file beside it."""
    argv = gold_accept(t, "query_id,accept\ng1,no\ng2,yes\ng1,yes\n")
    if provenance:
        write(t / "gen.provenance.json", '{"generated_by": "chunkeval gold generate", "model": "m"}')
        write(t / "r.csv", "query_id,accept\ng1,yes\ng2,yes\n")
        argv[-1] = t / "gen.tsv"  # whose provenance would be gen.provenance.json: the input's own
    return argv


CASES.update(
    {
        "gold generate: a key variable asked for evil.localhost": (
            lambda w: gold_generate(keyed(w)["t"], endpoint="http://evil.localhost:9/v1"),
            "/chat/completions: no answer after 1 tries",  # sent without the key: the name is not loopback
        ),
        "gold generate: every excerpt absent from the corpus": (
            lambda w: gold_generate(w["t"], "--questions", "1", endpoint=chat_server("absent")),
            "no question kept: all 1 proposed by",
        ),
        "gold generate: 100,000,000 questions": (
            lambda w: gold_generate(w["t"], "--questions", "100000000"),
            "--questions takes a number from 1 to 100000, got 1e+08",
        ),
        "gold generate: more questions per passage than an answer is read for": (
            lambda w: gold_generate(w["t"], "--per-passage", "1000"),
            "--per-passage takes a number from 1 to 20, got 1000",
        ),
        "gold generate: the key quoted in every answer": (
            lambda w: gold_generate(keyed(w)["t"], "--questions", "1", endpoint=chat_server("echo")),
            "(the answer quotes an API key: refused, and kept nowhere)",
        ),
        "gold judge: the key quoted in every answer": (
            lambda w: gold_judge(keyed(w), "--depth", "1", endpoint=chat_server("echo")),
            "(the answer quotes an API key: refused, and kept nowhere)",
        ),
        "gold judge: a query_id holding tabs and a line break (it would forge qrels rows)": (
            lambda w: gold_judge(
                w,
                questions=write(w["t"] / "tabs.csv", 'query_id,question,corpus_id\n"q1\td9\t3\nq2",What?,doc\n'),
            ),
            "holds a separator of the file (a tab, a space or a line break): it would forge a row",
        ),
        "gold accept: one query_id reviewed no, then yes": (
            lambda w: accept_twice(w["t"]),
            "r.csv: row 3: query_id 'g1' has two review rows (1 and 3: accept no, then yes): keep one",
        ),
        "gold accept: its provenance would replace the input's own": (
            lambda w: accept_twice(w["t"], provenance=True),
            "its provenance is the command's own input",
        ),
        "gold check: --limit -1": (
            lambda w: [
                "gold",
                "check",
                "--corpus-dir",
                w["t"] / "corpora",
                "--questions",
                w["t"] / "q.csv",
                "--limit",
                "-1",
            ],
            "argument --limit: '-1' is below 0",
        ),
        "gold check: --limit 0": (
            lambda w: [
                "gold",
                "check",
                "--corpus-dir",
                w["t"] / "corpora",
                "--questions",
                w["t"] / "q.csv",
                "--limit",
                "0",
            ],
            "--limit must be at least 1, got 0",
        ),
        "trend: --json --last past a machine integer": (
            lambda w: ["trend", "--experiment", "cat", "--json", "--last", "99999999999999999999999"],
            "argument --last: '99999999999999999999999' is over 2147483647 (docs/limits.md)",
        ),
        "sweep: a query_id given twice is named": (
            lambda w: sweep(
                w["t"],
                questions=write(
                    w["t"] / "twice.csv",
                    f'query_id,question,references,corpus_id\nq7,What?,"{GOOD_REFS}",doc\nq7,Why?,"{GOOD_REFS}",doc\n',
                ),
            ),
            "twice.csv: row 2: query_id 'q7' appears twice (rows 1 and 2)",
        ),
        "serve: a cron that never fires (31 February)": (
            lambda w: deployments_file(w["t"], "feb31", schedules=[{"cron": "0 0 31 2 *"}]),
            "deployment nightly: '0 0 31 2 *' never fires",
        ),
        "serve: an anchor_date in the year 9999": (
            lambda w: deployments_file(w["t"], "far", schedules=[{"interval": 60, "anchor_date": "9999-12-31"}]),
            "deployment nightly: anchor_date '9999-12-31' is more than 366 days ahead",
        ),
        "serve: two deployments of one name": (
            lambda w: [
                "serve",
                "--prefect-file",
                write(
                    w["t"] / "twice.yaml",
                    yaml.safe_dump(
                        {"deployments": [{"name": "n", "entrypoint": "chunkeval.flows.evaluate:evaluate"}] * 2}
                    ),
                ),
            ],
            "deployment n: the name is given twice (deployments 1 and 2)",
        ),
        "serve: an entrypoint in the standard library (this:x prints the Zen on import)": (
            lambda w: deployments_file(w["t"], "zen", entrypoint="this:x"),
            "entrypoint 'this:x' names a standard-library module, not a flow",
        ),
        "serve: a FIFO as --prefect-file": (
            lambda w: fifo_deployments(w["t"]),
            "deployments.yaml: the deployments file is a FIFO, not a regular file",
        ),
        "sql: a row of 400 MB": (
            lambda w: ["sql", "SELECT repeat('x', 400000000) AS s", "--csv"],
            "row 1 of the result holds 381 MiB, more than the 16 MiB a printed row may",
        ),
    }
)


def snapshot(*roots: Path) -> dict:
    """Every file under the roots (the catalogue file by its rows, since opening it may touch its bytes), but the
    chat response cache: every answer a chat model gave is kept there as it arrives, also by a command that then
    refuses its answers (issue 41: a rerun pays for no request twice), and it is no output."""
    files = sorted(
        str(p.relative_to(root))
        for root in roots
        if root.exists()
        for p in root.rglob("*")
        if p.is_file()
        and not p.name.startswith("chunkeval.duckdb")
        and "cache/chat" not in p.relative_to(root).as_posix()
    )
    return {"files": files}


def catalogue_rows(home: Path) -> list:
    """The catalogue's runs and baselines, read by DuckDB itself (read-only: no migration, no view made, 5 ms
    where opening a `Warehouse` takes 60)."""
    path = home / "warehouse" / "chunkeval.duckdb"
    if not path.is_file():
        return []
    with duckdb.connect(str(path), read_only=True) as con:
        return con.execute(
            "SELECT run_id, status FROM runs UNION ALL SELECT run_id, experiment FROM baselines ORDER BY 1"
        ).fetchall()


# issue 43: production traces (`chunkeval traces import`, `traces sample`): a file that is not traces is one line
# naming it and its line; with --strict, the first unusable span is one line naming the file, line and span
ONE_SPAN = json.dumps(
    {"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "ab" * 16, "spanId": "cd" * 8,
        "startTimeUnixNano": "1767225600000000000", "attributes": [
        {"key": "openinference.span.kind", "value": {"stringValue": "RETRIEVER"}}]}]}]}]}
)  # fmt: skip
CASES.update(
    {
        "traces import: a line that is not JSON": (
            lambda w: ["traces", "import", write(w["t"] / "t.jsonl", '{"resourceSpans": []}\nnot json\n')],
            "t.jsonl: line 2: not JSON",
        ),
        "traces import: a file that is not traces": (
            lambda w: ["traces", "import", write(w["t"] / "t.jsonl", '{"hello": 1}\n')],
            "not a trace file chunkeval reads",
        ),
        "traces import: a folder without trace files": (
            lambda w: ["traces", "import", w["t"] / "corpora"],
            "no trace file (.json, .jsonl, .ndjson, .parquet) in the folder",
        ),
        "traces import: --strict and a retrieval span without a query": (
            lambda w: ["traces", "import", "--strict", write(w["t"] / "t.jsonl", ONE_SPAN + "\n")],
            "t.jsonl: line 1: span 'cdcdcdcdcdcdcdcd': no query",
        ),
        "traces import: a line of the wrong shape": (
            lambda w: ["traces", "import", write(w["t"] / "t.jsonl", '{"resourceSpans": []}\n{"resourceSpans": 5}\n')],
            "t.jsonl: line 2: not an OTLP export request (resourceSpans, scopeSpans and spans: lists of objects)",
        ),
        "traces import: an empty path": (lambda w: ["traces", "import", ""], "an empty PATH: name a trace file"),
        "traces import: anchor similarity out of range": (
            lambda w: ["traces", "import", "--anchor-similarity", "150", write(w["t"] / "t.jsonl", ONE_SPAN + "\n")],
            "--anchor-similarity: anchor_similarity takes a number from 0 to 100, got 150",
        ),
        "traces import: a FIFO": (lambda w: ["traces", "import", fifo(w["t"])], "is a FIFO"),
        "traces sample: no production span yet": (
            lambda w: ["traces", "sample", "--out", w["t"] / "s.csv"],
            "no production span from the first to now: import traces first",
        ),
        "traces sample: an age past the calendar": (
            lambda w: ["traces", "sample", "--out", w["t"] / "s.csv", "--since", "99999999d"],
            "--since takes a time within the years 1 to 9999, got '99999999d'",
        ),
        "traces sample: a window that ends before it starts": (
            lambda w: ["traces", "sample", "--out", w["t"] / "s.csv", "--since", "2026-03-01", "--until", "2026-01-01"],
            "--since (2026-03-01 00:00:00) must come before --until (2026-01-01 00:00:00)",
        ),
        "traces sample: an empty --out": (
            lambda w: ["traces", "sample", "--out", ""],
            "--out names the questions file to write, got ''",
        ),
        "traces sample: a sample of no query": (
            lambda w: ["traces", "sample", "--out", w["t"] / "s.csv", "--size", "0"],
            "--size takes a number from 1 to 100000, got 0",
        ),
        "traces compare: neither the judged pool nor a judge": (
            lambda w: traces_compare(w),
            "give the judged pool (--judged) or a judge (--endpoint and --chat-model)",
        ),
        "traces compare: a budget on grades already made": (
            lambda w: traces_compare(w, "--judged", write(w["t"] / "j.csv", "x\n"), "--budget", "10"),
            "--budget caps what is judged here",
        ),
        "traces compare: production's file is not JSON lines": (
            lambda w: traces_compare(w, "--judged", write(w["t"] / "j.csv", "x\n"), production="{oops\n"),
            "p.production.jsonl: line 1: not JSON",
        ),
        "traces compare: a production row without its span": (
            lambda w: traces_compare(w, "--judged", write(w["t"] / "j.csv", "x\n"), production='{"query_id": "q"}\n'),
            "line 1: a production row has query_id, rank (from 1), corpus_id, 0 ≤ start < end",
        ),
        "traces compare: a rank given twice": (
            lambda w: traces_compare(w, "--judged", write(w["t"] / "j.csv", "x\n"), production=2 * PRODUCTION_ROW),
            "p.production.jsonl: line 2: query 'q' has rank 1 twice",
        ),
        "traces compare: production's file a FIFO": (
            lambda w: production_at(traces_compare(w, "--judged", write(w["t"] / "j.csv", "x\n")), fifo(w["t"])),
            "the production file is a FIFO",
        ),
        "traces compare: a tolerance below zero": (
            lambda w: traces_compare(w, "--judged", write(w["t"] / "j.csv", "x\n"), "--race", "--delta", "-1"),
            "--delta takes a number from 0 to below 1, got -1",
        ),
        "traces compare: a timeout that is no number": (
            lambda w: traces_compare(w, "--endpoint", "http://127.0.0.1:9", "--chat-model", "m", "--timeout", "nan"),
            "--timeout takes a number from 0.001 to 86400, got nan",
        ),
        "gold judge: production's file is not JSON lines": (
            lambda w: gold_judge(w, "--production", write(w["t"] / "p.production.jsonl", "[1, 2]\n")),
            "p.production.jsonl: line 1: a production row has query_id",
        ),
    }
)


PRODUCTION_ROW = '{"query_id": "q", "rank": 1, "corpus_id": "d", "start": 0, "end": 1}\n'


def production_at(args: list, path) -> list:
    """`traces compare`'s arguments with --production naming `path`."""
    at = args.index("--production") + 1
    return [*args[:at], path, *args[at + 1 :]]


def traces_compare(w, *extra, production=PRODUCTION_ROW):
    demo = Path(__file__).resolve().parent / "data" / "tiny_demo" / "questions.csv"
    return ["traces", "compare", "--questions", demo, "--run", w["run_id"], "--production",
            write(w["t"] / "p.production.jsonl", production), *extra]  # fmt: skip


def test_the_catalogue_is_large_enough():
    commands = {name.split(":")[0] for name in CASES}
    assert len(CASES) >= 40
    assert {
        "sweep",
        "run",
        "evaluate-run",
        "runs",
        "runs delete",
        "runs prune",
        "trend",
        "report",
        "baseline",
        "warehouse repair",
        "warehouse snapshot",
        "sql",
        "inspect",
        "diff",
        "compare",
        "gold check",
        "gold update",
        "gold generate",
        "gold accept",
        "gold judge",
        "extract",
    } <= commands


ASKING = re.compile(r"(asking the chat model|judging the pool|judging the canaries) \[[#.]+\] \d+/\d+ ")


# CASES itself, not a copy: pytest reads it at collection, once the whole module ran, so a block of cases added at
# the end of the file is parametrized too
@pytest.mark.parametrize("case", CASES)
def test_bad_input_gets_one_line_exit_2_and_writes_nothing(case, ws, capsys):
    make, message = CASES[case]
    argv = [str(a) for a in make(ws)]  # writes the case's input files
    before = snapshot(ws["t"], ws["home"])
    rows_before = catalogue_rows(ws["home"])
    code = call(argv)
    _, err = capsys.readouterr()
    assert code == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    if case.startswith(("gold generate:", "gold judge:")):
        # what the model answers is known only once it was asked: the asking's progress (off a terminal, a line as
        # it begins and one as the last answer arrives; docs/gold.md) comes before the one line of the error
        lines = [line for line in lines if not ASKING.match(line)]
    assert len(lines) == 1, err
    assert lines[0].startswith("chunkeval") and message in lines[0], err
    home = Path(os.environ["CHUNKEVAL_HOME"])
    after = snapshot(ws["t"], ws["home"])
    assert after == before, "nothing may be written"
    assert catalogue_rows(ws["home"]) == rows_before
    assert not (home.exists() and home != ws["home"] and any(home.rglob("*"))), "no new CHUNKEVAL_HOME content"


def call(argv: list[str]) -> int:
    """`main`, with argparse's own exit (usage mistakes) turned into its status."""
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


def test_run_of_an_unknown_experiment_with_settings_defines_it(ws, capsys):
    """`run --experiment NAME` with settings is how a new experiment is named: checked here up to the
    point where the flow would start, by an input error that only a defined experiment reaches."""
    t = ws["t"]
    code = main(
        ["run", "--experiment", "fresh", "--corpus-dir", str(t / "corpora"), "--questions", str(bad_refs(t, "[{oops"))]
    )
    _, err = capsys.readouterr()
    assert code == 2 and "bad.csv: row 1: column references: broken JSON" in err


def test_trend_of_a_recorded_experiment_still_works(ws, capsys):
    assert main(["trend", "--experiment", "cat", "--metric", "mrr", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and rows[-1]["run_id"] == ws["run_id"] and rows[-1]["duplicates"] == "positional"
    assert rows[-1]["change"] == pytest.approx(0)  # against the positional run before the credit one


def contents(*roots: Path) -> dict:
    """Every regular file under the roots, by path and SHA-256 of its bytes (links followed; FIFOs never opened)."""
    return {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest()
        for root in roots
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def via(w, p: Path, times: int = 1) -> Path:
    """A link (a chain of `times` links) in the workspace to `p`, named after it."""
    for i in range(times):
        p = linked(w["t"] / f"via{i}-{hashlib.sha256(str(p).encode()).hexdigest()[:12]}", p.absolute())
    return p


PATH_FORMS = {  # how a user may spell an output path: each form names the same file
    "as made": lambda w, p: p,
    "relative": lambda w, p: Path(os.path.relpath(p)),
    "with . and ..": lambda w, p: p.parent / "." / "nowhere" / ".." / p.name,
    "through a link": lambda w, p: via(w, p),
    "through two links": lambda w, p: via(w, p, 2),
    "in a linked folder": lambda w, p: via(w, p.parent) / p.name,
}


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    command=st.sampled_from(sorted(OUTPUT_COMMANDS)),
    kind=st.sampled_from(sorted(TARGET_KINDS)),
    form=st.sampled_from(sorted(PATH_FORMS)),
)
def test_no_output_path_of_a_refused_kind_changes_a_file(command, kind, form, ws, capsys):
    """Property: an output aimed at the warehouse's files, a device, a FIFO, a folder or an input, however its
    path is spelled, ends in one line and exit 2, every file's bytes as they were, and `runs` still works."""
    assume(kind != "an input" or command in ("sweep", "sweep (its .per_query file)", "extract"))
    argv, suffix, _ = OUTPUT_COMMANDS[command]
    argv = [str(a) for a in argv(ws, PATH_FORMS[form](ws, target(ws, kind, suffix)))]  # makes its links
    before = contents(ws["t"], ws["home"])
    code = call(argv)
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert contents(ws["t"], ws["home"]) == before
    assert main(["runs", "--experiment", "cat"]) == 0 and ws["run_id"] in capsys.readouterr().out


@pytest.fixture()
def mounted(tmp_path):
    """`mounted(options)`: a small tmpfs of its own (root only: the test is skipped where mount is refused)."""
    import subprocess

    points = []

    def mount(options: str) -> Path:
        point = tmp_path / f"mnt{len(points)}"
        point.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)], capture_output=True)
        if done.returncode:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
        points.append(point)
        return point

    yield mount
    for point in points:
        subprocess.run(["umount", str(point)], check=True)


def test_a_read_only_home_and_a_full_tmpdir_are_one_line_naming_the_folder(ws, mounted, capsys):
    """An unwritable HOME is bad configuration (exit 2); a full TMPDIR or PREFECT_HOME is a fault of the machine
    (exit 4): never the Prefect server's SQLite tracebacks. A 1 MB tmpfs stands for a full disk."""
    read_only, small = mounted("ro,size=1M"), mounted("size=1M")
    cases = [
        ({"HOME": read_only, "PREFECT_HOME": None}, 2, f"cannot be made: {read_only} is not writable"),
        ({"PREFECT_HOME": small}, 4, f"cannot write its database: {small} has 1.0 MB free"),
        ({"PREFECT_HOME": ws["t"], "TMPDIR": small}, 4, f"{small} has 1.0 MB free (it needs 16 MB); free space, or "),
    ]
    for values, status, message in cases:
        code = call([str(a) for a in run_where(ws, **values)])
        err = capsys.readouterr().err
        assert code == status and err.count("\n") == 1 and message in err and "Traceback" not in err, err
    assert not any(small.iterdir()) and not any(read_only.iterdir())


def test_an_unexpected_exception_is_one_line_exit_4_and_its_traceback_goes_to_the_logs(ws, capsys):
    """A bug (here a plug-in's KeyError that nothing in chunkeval expects) never exits 1, which means "a
    regression", and prints no traceback: one line saying where the traceback was written, exit 4."""
    code = call([str(a) for a in sweep(ws["t"], "--retriever", "plugins_for_tests:has_a_bug")])
    err = capsys.readouterr().err
    assert code == 4 and err.count("\n") == 1 and "Traceback" not in err, err
    assert "an internal error (KeyError: 'no such key'): please report it; the traceback is in " in err
    log = Path(err.strip().rsplit(" ", 1)[1])
    assert log.parent == ws["home"] / "logs" and "in has_a_bug" in log.read_text() and "Traceback" in log.read_text()
    assert not (ws["t"] / "out.csv").exists()


# issue 55: an import that keeps nothing: a trace file that is valid but holds no retrieval span to keep is bad
# input (exit 2, one line naming the file and what was skipped and why, nothing written), and a Phoenix export of
# the wrong shape is one line naming what was expected (a retriever that found nothing is kept: exit 0, not here)
def otlp_spans(t: Path, name: str, *spans: dict) -> Path:
    """One export request of `spans` (each: span id, then attributes as key → string) as a file of OTLP JSON."""
    made = [{"traceId": "ab" * 16, "spanId": s.pop("spanId"), "startTimeUnixNano": "1767225600000000000",
             "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in s.items()]} for s in spans]  # fmt: skip
    return write(t / name, json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": made}]}]}) + "\n")


def parquet_at(path: Path, table: pa.Table) -> Path:
    import pyarrow.parquet as pq

    pq.write_table(table, path)
    return path


RETRIEVER = {"openinference.span.kind": "RETRIEVER", "input.value": "How tall is the lighthouse?"}
CASES.update(
    {
        "traces import: nothing to import: its only span skipped (a document's content of 5 MB)": (
            lambda w: [
                "traces",
                "import",
                otlp_spans(
                    w["t"],
                    "t.jsonl",
                    {"spanId": "cd" * 8, **RETRIEVER, "retrieval.documents.0.document.content": "x" * 5_000_000},
                ),
            ],
            "t.jsonl: nothing to import: 1 span(s) read, 1 retrieval span(s) skipped (1 a document's content or "
            "metadata is over 200,000 characters; e.g. line 1), none kept",
        ),
        "traces import: nothing to import: no retrieval span": (
            lambda w: [
                "traces",
                "import",
                otlp_spans(w["t"], "t.jsonl", {"spanId": "cd" * 8, **RETRIEVER, "openinference.span.kind": "LLM"}),
            ],
            "t.jsonl: nothing to import: 1 span(s) read, none a retrieval span (openinference.span.kind RETRIEVER "
            "or RERANKER, or gen_ai.operation.name retrieval)",
        ),
        "traces import: nothing to import: every span skipped": (
            lambda w: [
                "traces",
                "import",
                otlp_spans(
                    w["t"],
                    "t.jsonl",
                    {"spanId": "cd" * 8, **RETRIEVER, "input.value": " "},
                    {"spanId": "00" * 8, **RETRIEVER},
                ),
            ],
            "t.jsonl: nothing to import: 2 span(s) read, 2 retrieval span(s) skipped (1 no query (input.value, "
            "reranker.query or gen_ai.retrieval.query.text); 1 no span id",
        ),
        "traces import: nothing to import: no span at all": (
            lambda w: ["traces", "import", write(w["t"] / "t.jsonl", '{"resourceSpans": []}\n')],
            "t.jsonl: nothing to import: no span",
        ),
        "traces import: nothing to import: a folder of files that keep nothing": (
            lambda w: [
                "traces",
                "import",
                otlp_spans(
                    w["t"] / "corpora", "a.jsonl", {"spanId": "cd" * 8, **RETRIEVER, "openinference.span.kind": "CHAIN"}
                ).parent,
            ],
            "nothing to import: 1 span(s) read, none a retrieval span",
        ),
        "traces import: a Phoenix export of the wrong shape (JSON lines, attributes nested)": (
            lambda w: [
                "traces",
                "import",
                write(
                    w["t"] / "p.jsonl",
                    json.dumps(
                        {
                            "context.span_id": "cd" * 8,
                            "span_kind": "RETRIEVER",
                            "attributes": {"input.value": "How tall?"},
                        }
                    )
                    + "\n",
                ),
            ],
            "p.jsonl: not Phoenix's span export (columns context.span_id, span_kind and attributes.input.value, … "
            "flattened): no attributes.* (attributes nested in one column)",
        ),
        "traces import: a Phoenix export of the wrong shape (Parquet, no span kind)": (
            lambda w: [
                "traces",
                "import",
                parquet_at(
                    w["t"] / "p.parquet",
                    pa.table({"context.span_id": ["cd" * 8], "attributes.input.value": ["How tall?"]}),
                ),
            ],
            "p.parquet: not Phoenix's span export (columns context.span_id, span_kind and attributes.input.value, … "
            "flattened): no span_kind (or attributes.openinference.span.kind, attributes.gen_ai.operation.name); "
            "found ['attributes.input.value', 'context.span_id']",
        ),
    }
)


def alarm_test(t: Path, entry: dict) -> list:
    """`alerts test` of an experiment whose one alarm goes to the destination `entry` of the user's endpoints.yaml."""
    (t / "config" / "chunkeval").mkdir(parents=True, exist_ok=True)
    write(t / "config" / "chunkeval" / "endpoints.yaml", yaml.safe_dump({"team-alerts": entry}))
    exp = write(t / "alarmed.yaml", GOOD_YAML + "alerts: [{to: team-alerts, events: [completed]}]\n")
    return ["alerts", "test", exp]


SLACK_SECRET = "T000/B000/S3CRETt0ken"
# issue 55: an alarm destination refused by its check is named with the part that is wrong, never shown (its token
# ends the URL); a variable it names that is not set is the user's input (it exited 4)
CASES.update(
    {
        "alerts test: a Slack URL whose port is past 65535": (
            lambda w: alarm_test(
                w["t"], {"base_url": f"https://hooks.slack.com:443000/services/{SLACK_SECRET}", "kind": "slack"}
            ),
            "destination team-alerts: base_url is not a URL: its port is not a number from 0 to 65535",
        ),
        "alerts test: a Slack URL with a stray '['": (
            lambda w: alarm_test(
                w["t"], {"base_url": f"https://[hooks.slack.com/services/{SLACK_SECRET}", "kind": "slack"}
            ),
            "destination team-alerts: base_url is not a URL: its host is not valid",
        ),
        "alerts test: a webhook token's variable that is not set": (
            lambda w: alarm_test(
                w["t"],
                {"base_url": "http://127.0.0.1:9/hook", "kind": "webhook", "api_key_env": "CHUNKEVAL_UNSET_HOOK"},
            ),
            "destination team-alerts: the API key variable CHUNKEVAL_UNSET_HOOK is not set",
        ),
        "alerts test: an SMTP password's variable that is not set": (
            lambda w: alarm_test(
                w["t"],
                {
                    "base_url": "smtp://127.0.0.1:9",
                    "kind": "email",
                    "to": ["a@example.com"],
                    "username": "u",
                    "password_env": "CHUNKEVAL_UNSET_SMTP",
                },
            ),  # fmt: skip
            "destination team-alerts: the API key variable CHUNKEVAL_UNSET_SMTP is not set",
        ),
    }
)


# issue 55: exit codes by whose fault it is
def symlink_loop(t: Path) -> Path:
    """A link that points at itself: the system cannot resolve a path through it (ELOOP)."""
    loop = t / "loop"
    if not loop.is_symlink():
        loop.symlink_to(loop)
    return loop


CASES.update(
    {
        "run: CHUNKEVAL_HOME is a symlink loop": (
            lambda w: [
                os.environ.__setitem__("CHUNKEVAL_HOME", str(symlink_loop(w["t"]))),
                "run",
                "--experiment",
                "x",
                "--corpus-dir",
                w["t"] / "corpora",
                "--questions",
                w["t"] / "q.csv",
            ][1:],  # fmt: skip
            "$CHUNKEVAL_HOME cannot be used: a symbolic link on its way points back round to itself",
        ),
        "runs: CHUNKEVAL_HOME under a symlink loop": (
            lambda w: [os.environ.__setitem__("CHUNKEVAL_HOME", str(symlink_loop(w["t"]) / "home")), "runs"][1:],
            "$CHUNKEVAL_HOME cannot be used: a symbolic link on its way points back round to itself",
        ),
        "serve: an RRule that is no RRule": (
            lambda w: deployments_file(w["t"], "rrule", schedules=[{"rrule": "FREQ=SOMETIMES"}]),
            "deployment nightly: 'FREQ=SOMETIMES' is not an RRule (RFC 5545)",
        ),
        "serve: an RRule whose COUNT has passed": (
            lambda w: deployments_file(w["t"], "count", schedules=[{"rrule": "FREQ=DAILY;COUNT=2"}]),
            "deployment nightly: 'FREQ=DAILY;COUNT=2' never fires: no time from now on matches it",
        ),
        "serve: an RRule the server's scheduler cannot compute": (
            lambda w: deployments_file(w["t"], "until", schedules=[{"rrule": "FREQ=DAILY;UNTIL=20300101T000000Z"}]),
            "deployment nightly: schedule 'FREQ=DAILY;UNTIL=20300101T000000Z' cannot be read by the server",
        ),
    }
)

# a configured Prefect server that does not answer: the machine's fault, one line naming the URL, exit 4
FAULT_CASES = {
    "serve: the Prefect server down": (
        lambda w: [environ(PREFECT_API_URL=f"http://127.0.0.1:{free_port()}/api"), "serve"][1:],
        "(PREFECT_API_URL) does not answer",
    ),
    "run: the Prefect server down": (
        lambda w: [
            environ(PREFECT_API_URL=f"http://127.0.0.1:{free_port()}/api"),
            "run",
            "--experiment",
            "x",
            "--corpus-dir",
            w["t"] / "corpora",
            "--questions",
            w["t"] / "q.csv",
        ][1:],  # fmt: skip
        "(PREFECT_API_URL) does not answer",
    ),
}


@pytest.mark.parametrize("case", list(FAULT_CASES))
def test_an_unreachable_prefect_server_is_one_line_exit_4_naming_it(case, ws, capsys):
    make, message = FAULT_CASES[case]
    argv = [str(a) for a in make(ws)]
    before, rows_before = snapshot(ws["t"], ws["home"]), catalogue_rows(ws["home"])
    code = call(argv)
    err = capsys.readouterr().err
    assert code == 4 and err.count("\n") == 1 and "Traceback" not in err and "internal error" not in err, err
    assert message in err and os.environ["PREFECT_API_URL"] in err, err
    assert snapshot(ws["t"], ws["home"]) == before and catalogue_rows(ws["home"]) == rows_before


def test_a_connection_to_the_prefect_api_that_fails_later_is_the_same_fault(ws, monkeypatch):
    """Past the check up front (a server that went down mid-command): Prefect's ConnectError and its `Failed to
    reach API` are the same one line (`as_unreachable`), where they were internal errors; another server's is not."""
    import httpx

    from chunkeval.flows.temporary_server import as_unreachable

    url = f"http://127.0.0.1:{free_port()}/api"
    monkeypatch.setenv("PREFECT_API_URL", url)
    with pytest.raises(httpx.ConnectError) as down, httpx.Client() as client:
        client.get(f"{url}/flows/filter")
    assert as_unreachable(down.value).exit_code == 4 and url in str(as_unreachable(down.value))
    assert as_unreachable(RuntimeError(f"Failed to reach API at {url}/")) is not None
    with pytest.raises(httpx.ConnectError) as other, httpx.Client() as client:
        client.get(f"http://127.0.0.1:{free_port()}/v1/embeddings")
    assert as_unreachable(other.value) is None


def test_a_home_whose_warehouse_folder_is_a_symlink_loop_is_one_line_exit_2(ws, capsys):
    """The home's own folders are checked with it: a warehouse folder that is a symlink loop is the same one line
    (its name said), not an OSError where the folder is first made."""
    home = ws["t"] / "h"
    home.mkdir()
    (home / "warehouse").symlink_to(home / "warehouse")
    os.environ["CHUNKEVAL_HOME"] = str(home)
    code = call([str(a) for a in sweep(ws["t"])])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert "$CHUNKEVAL_HOME (warehouse) cannot be used: a symbolic link on its way points back round" in err, err
    assert not (ws["t"] / "out.csv").exists()
