"""The rules of an experiment (`chunkeval.engine.pipeline.experiment.Experiment`) that span several settings:
what document gold excludes, what racing needs, and the notes a reader of the results must know about how they
were computed."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

from chunkeval.engine.chunking import needs_embeddings
from chunkeval.engine.inputs.provenance import note as gold_note
from chunkeval.engine.retrieval.indexes.axis import axis_notes
from chunkeval.engine.retrieval.vectors import axis_notes as vector_notes
from chunkeval.errors import InputError
from chunkeval.limits import MAX_INT, short
from chunkeval.stats.racing import check_level
from chunkeval.vocabulary import DOC_METRICS, RANK_METRICS, RUN_SETTINGS, SPAN_METRICS


def parse_overlap(value: str, chunk_size: int) -> int:
    """`25` is 25 tokens; `10%` is that share of the chunk size, rounded down (10% of 250 → 25)."""
    if isinstance(value, (bool, float)):
        raise InputError(f"overlap must be a whole number or a percentage like 10%, got {short(value)}")
    text = str(value).strip()
    try:
        if text.endswith("%"):
            share = Fraction(text[:-1])
            if not 0 <= share <= 100:
                raise InputError(f"an overlap share must be between 0% and 100%, got {short(value)}")
            return int(share * chunk_size / 100)
        if abs(int(text)) > MAX_INT:
            raise InputError(f"overlap must be at most {MAX_INT}, got {short(value)}")
        return int(text)
    except (ValueError, ZeroDivisionError):
        raise InputError(f"overlap must be a whole number or a percentage like 10%, got {short(value)}") from None


def overlap_notes(exp) -> list[str]:
    """What the grid does differently from what it lists (chunkers that take no overlap)."""
    if all(parse_overlap(o, s) == 0 for o in exp.overlaps for s in exp.chunk_sizes):
        return []
    return [
        f"{c} takes no overlap: it runs once per chunk size, at overlap 0" for c in exp.chunker if needs_embeddings(c)
    ]


RACE_METRICS = SPAN_METRICS + RANK_METRICS + DOC_METRICS  # per question, from 0 to 1
RACE_KEYS = ("race_metric", "race_alpha", "race_delta", "race_batch", "race_seed", "budget")


def check_race(exp, source) -> None:
    """A race's settings: given only with race; its metric one the gold set scores; α in (0, 1), δ below 1; and
    not with `duplicates: credit` (whose copies are found over the whole gold set, not a batch of it)."""
    if not exp.race:
        given = [key for key in RACE_KEYS if getattr(exp, key) != getattr(type(exp), key)]
        if given:
            raise InputError(f"{given[0]} is a setting of a race: give race (--race) with it", source)
        return
    try:
        check_level(exp.race_alpha, exp.race_delta)
    except InputError as exc:
        raise InputError(f"race_{exc.message}", source) from None
    if (exp.race_metric in DOC_METRICS) != exp.doc_gold:
        gold = "document gold (beir or qrels)" if exp.race_metric in DOC_METRICS else "span gold"
        raise InputError(f"race_metric {exp.race_metric} is scored under {gold} only", source)
    if exp.duplicates == "credit":
        raise InputError(
            "race cannot be used with duplicates: credit (copies are found over the whole gold set)", source
        )


# --------------------------------------------------------------------------- document gold in the settings


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


# --------------------------------------------------------------------------- notes on how results were computed


def experiment_notes(exp) -> list[str]:
    """The notes of an experiment (`chunkeval.engine.pipeline.experiment.Experiment`), in the order they are printed."""
    notes = overlap_notes(exp)
    if exp.relevance != RUN_SETTINGS["relevance"]:
        notes.append(f"relevance: {exp.relevance} (set and rank metrics count the chunks this rule makes relevant)")
    if exp.duplicates == "credit":
        notes.append(
            "duplicates: credit (a reference's identical copies in its corpus count as found; docs/metrics.md)"
        )
    if exp.quantize == "int8" and exp.needs_model():
        notes.append(
            f"quantize: int8 ({exp.backend}): vectors differ from the model's own; docs/backends.md says by how much"
        )
    if exp.reranks():
        below = sorted({(c, k) for c in exp.candidates for k in exp.k if c < k})
        if below:
            notes.append(
                "reranked configurations are not scored where candidates < k: "
                + ", ".join(f"candidates {c} at k {k}" for c, k in below)
            )
    if exp.precision != "fp32" and exp.needs_model():
        notes.append(
            f"precision: {exp.precision} ({exp.backend}): vectors differ from fp32's in the last digits and are "
            "cached apart; docs/backends.md says by how much"
        )
    if exp.doc_gold:
        notes.append(
            "document gold: a chunk counts with its document's grade, so chunk-level rank and set metrics "
            "penalise small chunks; doc_* metrics rank documents by their best chunk (MaxP; docs/metrics.md)"
        )
    notes += gold_note(exp)
    return notes + axis_notes(exp.index_specs(), exp.retriever, exp.k) + vector_notes(exp)


def clamped_k_note(ks, chunkings) -> list[str]:
    """One line for a run where a k exceeds the chunks of a chunking (`chunkeval.engine.pipeline.records.Chunking`): such a
    k ranks every chunk (nothing is allocated past them), and its metrics keep their definition at that k."""
    if not chunkings:
        return []
    fewest = min(chunkings, key=lambda c: len(c.chunks))
    beyond = sorted(k for k in set(ks) if k > len(fewest.chunks))
    if not beyond:
        return []
    spec = fewest.spec
    return [
        f"k {', '.join(map(str, beyond))} exceed{'s' if len(beyond) == 1 else ''} the chunks there are (fewest: "
        f"{len(fewest.chunks)}, {spec.chunker} {spec.chunk_size}/{spec.chunk_overlap}): clamped, every chunk is "
        "ranked; metrics keep their definition at the requested k (precision@k still divides by k)"
    ]
