"""Plug-ins run only when asked: a module:function named in an experiment file loads only if the file lists
its module under `plugins:` (or --plugin gives it), or an installed package declares it as an entry point;
the standard library is never a plug-in; nothing is imported before the settings are checked."""

from __future__ import annotations

import sys

import pytest

from chunkeval.engine.chunking import resolve_chunker
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.engine.retrieval.indexes.spec import parse_index
from chunkeval.engine.retrieval.rerank import check_reranker
from chunkeval.engine.retrieval.retrievers import check_retriever
from chunkeval.errors import InputError

GRID = "chunk_sizes: [100]\nk: [1]\nretriever: [bm25]\n"


def write_experiment(tmp_path, text: str, name: str = "exp.yaml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_file_must_list_the_module_of_its_plugin(tmp_path):
    path = write_experiment(tmp_path, GRID + "chunker: [plugins_for_tests:paragraphs]\n")
    with pytest.raises(InputError) as err:
        Experiment.from_yaml(path)
    assert str(err.value) == (
        f"{path}: chunker 'plugins_for_tests:paragraphs' runs code from 'plugins_for_tests', which is not listed "
        "under plugins: (list it there, or give --plugin plugins_for_tests, if you trust it)"
    )
    listed = write_experiment(
        tmp_path, GRID + "chunker: [plugins_for_tests:paragraphs]\nplugins: [plugins_for_tests]\n", "listed.yaml"
    )
    assert Experiment.from_yaml(listed).chunker == ("plugins_for_tests:paragraphs",)
    assert Experiment.from_yaml(path, allow=("plugins_for_tests",)).plugins == ()  # --plugin allows it too


def test_nothing_is_imported_from_a_file_that_does_not_list_it(tmp_path, monkeypatch):
    marker = tmp_path / "imported"
    (tmp_path / "loud_plugin.py").write_text(f"open({str(marker)!r}, 'w').close()\ndef fn(*a): pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    grid = GRID.replace("retriever: [bm25]\n", "")  # a key given twice is refused before plug-ins are looked at
    path = write_experiment(tmp_path, grid + "chunker: [loud_plugin:fn]\nretriever: [loud_plugin:fn]\n")
    with pytest.raises(InputError, match="not listed under plugins"):
        Experiment.from_yaml(path)
    assert not marker.exists() and "loud_plugin" not in sys.modules


@pytest.mark.parametrize("spec", ["pty:spawn", "os.path:join", "this:s"])
def test_the_standard_library_is_never_a_plugin(tmp_path, spec, capsys):
    path = write_experiment(tmp_path, GRID + f"chunker: ['{spec}']\nplugins: ['{spec.split(':')[0]}']\n")
    with pytest.raises(InputError, match="is the standard library's, never a plug-in"):
        Experiment.from_yaml(path)
    with pytest.raises(InputError, match="never a plug-in"):  # asked for from Python: still no
        Experiment().with_overrides(chunker=(spec,))
    assert capsys.readouterr().out == ""  # `this` would print the Zen of Python when imported


def test_an_installed_entry_point_names_a_chunker(tmp_path, monkeypatch):
    dist = tmp_path / "chunkeval_paragraphs-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: chunkeval-paragraphs\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[chunkeval.chunkers]\nparagraphs = plugins_for_tests:paragraphs\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    path = write_experiment(tmp_path, GRID + "chunker: [paragraphs]\n")  # no plugins: an installed package
    exp = Experiment.from_yaml(path)
    starts, ends = resolve_chunker("paragraphs")("One.\n\nTwo two.\n\nThree.", 100, 0)
    assert exp.chunker == ("paragraphs",) and len(starts) == len(ends) >= 1


def not_a_chunker(request):
    """A retriever's signature: one argument, where a chunker takes three."""


NOT_CALLABLE = 3


@pytest.mark.parametrize(
    "resolve, name, line",
    [
        (resolve_chunker, "fixed_tokn", "unknown chunker 'fixed_tokn'; did you mean fixed_token or fixed_char? (or"),
        (resolve_chunker, "zzz", "unknown chunker 'zzz'; choose fixed_token, fixed_char, none, recursive_token, …"),
        (resolve_chunker, "nosuchpkg.mod:f", "chunker 'nosuchpkg.mod:f': cannot import 'nosuchpkg.mod' ("),
        (resolve_chunker, f"{__name__}:missing", f"chunker '{__name__}:missing': '{__name__}' has no 'missing'"),
        (resolve_chunker, f"{__name__}:NOT_CALLABLE", f"chunker '{__name__}:NOT_CALLABLE': 'NOT_CALLABLE' is not"),
        (resolve_chunker, f"{__name__}:not_a_chunker", "must take (text, chunk_size, chunk_overlap): too many"),
        (check_retriever, "bm26", "unknown retriever 'bm26'; did you mean bm25? (or module:function for your own)"),
        (check_retriever, "zzz", "unknown retriever 'zzz'; choose dense, bm25, hybrid, or module:function for"),
        (check_retriever, f"{__name__}:paragraphs", "retriever '" + __name__ + ":paragraphs' must take (request)"),
        (parse_index, "hnws", "unknown index kind 'hnws'; did you mean hnsw?"),
        (parse_index, "zzz", "unknown index kind 'zzz'; choose exact, hnsw, ivf, chroma"),
        (check_reranker, "cohere", "unknown reranker 'cohere'; choose none, an embedding model (bundled"),
    ],
)
def test_every_extension_point_refuses_a_name_in_one_wording(resolve, name, line):
    """One resolver (`plugins.resolve`) for chunkers, retrievers, index kinds and rerankers: unknown (with the
    closest names), cannot import, not a function, and a plug-in that cannot take the point's arguments."""
    with pytest.raises(InputError) as err:
        resolve(name)
    assert line in str(err.value) and "\n" not in str(err.value)


def paragraphs(text, chunk_size, chunk_overlap):
    return text.split("\n\n")


def test_an_entry_point_is_checked_like_an_imported_plugin(tmp_path, monkeypatch):
    dist = tmp_path / "chunkeval_wrong-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: chunkeval-wrong\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[chunkeval.retrievers]\nwrong = {__name__}:paragraphs\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(InputError, match=r"retriever 'wrong' must take \(request\)"):
        check_retriever("wrong")
