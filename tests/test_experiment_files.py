"""Experiment files: a YAML list is a list (an item holding a comma stays one value); a single string is
split on commas like a flag."""

from __future__ import annotations

import csv
import shutil

import pytest

from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.errors import InputError
from chunkeval.paths import DEMO_DIR
from chunkeval.vocabulary import split_flags, split_list


def test_list_items_are_taken_whole_and_strings_are_split():
    assert split_list(["a,b", " c "]) == ["a,b", "c"]
    assert split_list("a, b , c") == ["a", "b", "c"]
    for left_out in ("a, b,,c", "a,b,", ",a", "a, ,b"):  # a value left out is a mistake, never read as a, b, c
        with pytest.raises(InputError, match=r"^--k: an empty item in '.*' \(two commas together, or one at an end\)"):
            split_flags(left_out, "--k")
    with pytest.raises(InputError, match="^k: list items must not be empty"):
        split_list([1, " ", 5], "k")
    assert split_list("") == [] and split_flags([]) == []
    assert split_list([1, 5]) == ["1", "5"]
    assert split_list(None) == []
    assert split_flags(["a,b", "c"]) == ["a", "b", "c"]  # flags: every value given is split


def test_a_corpus_whose_name_holds_a_comma_is_read_from_a_yaml_list(tmp_path):
    corpora = tmp_path / "corpora"
    corpora.mkdir()
    shutil.copy(DEMO_DIR / "corpora" / "honeybees.md", corpora / "bees, wild.md")
    with open(DEMO_DIR / "questions.csv", encoding="utf-8", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["corpus_id"] == "honeybees"]
    with open(tmp_path / "questions.csv", "w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows({**r, "corpus_id": "bees, wild"} for r in rows)
    (tmp_path / "exp.yaml").write_text(
        'name: commas\ncorpus_dir: corpora\nquestions: questions.csv\ncorpus: ["bees, wild"]\n'
        "chunker: [fixed_token]\nchunk_sizes: [100, 200]\nk: [1, 5]\nretriever: [bm25]\n",
        encoding="utf-8",
    )
    exp = Experiment.from_yaml(tmp_path / "exp.yaml")
    assert exp.corpus == ("bees, wild",) and exp.chunk_sizes == (100, 200) and exp.k == (1, 5)
    from chunkeval.engine.pipeline.sweep import load_inputs

    inputs = load_inputs(exp)
    assert list(inputs.corpora) == ["bees, wild"] and inputs.gold.n_queries > 0


def test_a_mapping_inside_a_list_is_one_line_naming_the_file(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("chunker: [{kind: fixed_token}]\n", encoding="utf-8")
    with pytest.raises(InputError) as err:
        Experiment.from_yaml(path)
    assert str(err.value) == f"{path}: chunker: list items must be single values, got {{'kind': 'fixed_token'}}"
