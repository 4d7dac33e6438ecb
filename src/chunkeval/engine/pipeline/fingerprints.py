"""The fingerprints of a run's inputs: its corpora, its gold set, and its models (a served model's after
probing it; the index libraries' versions where the grid searches an approximate index). `--if-changed` and
the on-change deployment compare them with the last completed run's."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

from chunkeval.engine.embedding import embedder_fingerprint, probes
from chunkeval.engine.embedding.served import lookup
from chunkeval.engine.inputs.corpus import folder_fingerprint
from chunkeval.engine.inputs.document_gold import doc_gold_fingerprints
from chunkeval.engine.retrieval.indexes import library_versions
from chunkeval.engine.retrieval.rerank import is_cross_encoder
from chunkeval.errors import InputError
from chunkeval.files import hash_file, hash_folder

if TYPE_CHECKING:
    from chunkeval.engine.pipeline.experiment import Experiment


def models_fingerprint(exp: Experiment, probe: str = "run") -> str:
    """The model fingerprint of a run: the one model's, a hash over several, or `none` when nothing embeds.
    A served model's is its identity and generation, after probing it as `probe` says (`run`, `interval`
    or `none`: `chunkeval.engine.embedding.probes`)."""
    first = list(exp.model) if exp.first_stage_embeds() else []
    names = first + [r for r in exp.embedding_rerankers() if r not in first]
    prints = []
    for m in names:
        served = lookup(m, exp.models)
        prints.append(
            probes.check(served, probe) if served else embedder_fingerprint(m, exp.backend, exp.quantize, exp.precision)
        )
    prints += [hash_folder(Path(r).expanduser(), frozenset({"README.md"})) for r in exp.reranker if is_cross_encoder(r)]
    if not prints:
        return "none"
    versions = library_versions(exp.index_specs())  # an index library's new version may answer differently
    if versions:
        return hashlib.sha256(json.dumps([prints, versions]).encode()).hexdigest()
    return prints[0] if len(prints) == 1 else hashlib.sha256(json.dumps(prints).encode()).hexdigest()


def input_fingerprints(exp: Experiment, probe: str = "run") -> dict[str, str]:
    """SHA-256 of the experiment's corpora (each document file's bytes by its document id, with the extractor of
    each HTML and PDF file: `chunkeval.engine.inputs.corpus.folder_fingerprint`), its gold file and its models."""
    if exp.doc_gold:
        gold = doc_gold_fingerprints(exp.beir, exp.split, exp.corpus_dir, exp.queries, exp.qrels, exp.html)
        return {**gold, "model": models_fingerprint(exp, probe)}
    corpus = folder_fingerprint(Path(exp.corpus_dir), exp.html, exp.corpus)
    if not Path(exp.questions).is_file():
        raise InputError("file not found", exp.questions)
    return {
        "corpus": corpus,
        "gold": hash_file(Path(exp.questions)).hexdigest(),
        "model": models_fingerprint(exp, probe),
    }
