"""Document gold (a BEIR folder, or queries with qrels) in an experiment's settings: it excludes span gold and
the settings only span gold has (docs/formats.md)."""

from __future__ import annotations

from dataclasses import replace

from chunkeval.errors import InputError
from chunkeval.vocabulary import RUN_SETTINGS


def checked_doc_gold(exp, source):
    """Document gold (beir, or queries with qrels) excludes span gold and the settings only span gold has;
    the span gold file of the defaults is dropped."""
    if exp.queries and not exp.qrels:
        raise InputError("queries are judged by qrels: give qrels with queries", source)
    if exp.split != type(exp).split and not exp.beir:
        raise InputError(f"split names the qrels of a BEIR folder: give it with beir (got split {exp.split!r})", source)
    if not exp.doc_gold:
        return exp
    if exp.beir and (exp.queries or exp.qrels):
        raise InputError("beir names its own queries and qrels: give beir, or queries and qrels", source)
    if exp.qrels and not exp.queries:
        raise InputError("qrels judge the queries of a queries file: give queries with qrels", source)
    given = "beir" if exp.beir else "qrels"
    if exp.questions and exp.questions != type(exp).questions:
        raise InputError(
            f"questions (span gold) and {given} (document gold) cannot be scored in one experiment", source
        )
    for key, value in (("corpus", exp.corpus), ("own_corpus", exp.own_corpus)):
        if value:
            raise InputError(f"{key} is a setting of span gold; it cannot be used with {given}", source)
    for key in RUN_SETTINGS:
        if getattr(exp, key) != RUN_SETTINGS[key]:
            raise InputError(f"{key} is a setting of span gold; it cannot be used with {given}", source)
    if not exp.split or any(c in exp.split for c in "/\\") or exp.split.startswith("."):
        raise InputError(f"split must be a qrels file name without folder or suffix, got {exp.split!r}", source)
    changes = {"questions": ""}
    if exp.beir:
        changes["corpus_dir"] = ""
    return replace(exp, **changes)
