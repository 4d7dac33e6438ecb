"""What a reader of a run's results must know about how they were computed: the notes a sweep prints and a
run records, one line each, from the experiment's settings."""

from __future__ import annotations

from chunkeval.vocabulary import RUN_SETTINGS


def experiment_notes(exp) -> list[str]:
    """The notes of an experiment (`chunkeval.engine.experiment.Experiment`), in the order they are printed."""
    notes = exp.overlap_notes()
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
    from chunkeval.engine.indexes.axis import axis_notes
    from chunkeval.engine.vectors import axis_notes as vector_notes

    return notes + axis_notes(exp.index_specs(), exp.retriever, exp.k) + vector_notes(exp)


def clamped_k_note(ks, chunkings) -> list[str]:
    """One line for a run where a k exceeds the chunks of a chunking (`chunkeval.engine.grid.Chunking`): such a
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
