"""The index axis of an experiment: its settings resolved and checked against the grid's retrievers, and
the notes a run prints about it (docs/indexes.md)."""

from __future__ import annotations

from chunkeval.engine.retrieval.indexes.spec import parse_indexes
from chunkeval.engine.retrieval.retrievers import needs_embeddings
from chunkeval.engine.retrieval.retrievers.hybrid import FUSE_DEPTH
from chunkeval.errors import InputError


def resolve_axis(index: tuple[str, ...], retrievers: tuple[str, ...], source=None) -> tuple[str, ...]:
    """The index settings with the library's defaults filled in; an error where no retriever reads vectors."""
    if not index:
        raise InputError("an experiment needs at least one index (exact is chunkeval's exact search)", source)
    specs = parse_indexes(index, source)
    if any(s.approximate for s in specs) and not any(needs_embeddings(r) for r in retrievers):
        raise InputError(
            f"index {', '.join(s.key for s in specs if s.approximate)} given, but no retriever of the grid reads "
            f"vectors ({', '.join(retrievers)}): use dense or hybrid",
            source,
        )
    return tuple(s.text for s in specs)


def axis_notes(specs, retrievers: tuple[str, ...], ks: tuple[int, ...]) -> list[str]:
    """Where an index searches deeper than its ef_search asks (faiss and hnswlib raise ef to the depth)."""
    depths = {"dense": max(ks), "hybrid": max(FUSE_DEPTH, max(ks))}
    notes = []
    for spec in specs:
        ef = spec.get("ef_search")
        for retriever in retrievers:
            depth = depths.get(retriever)
            if ef is not None and depth is not None and needs_embeddings(retriever) and ef < depth:
                notes.append(
                    f"index {spec.key}: {retriever} searches {depth} deep, above ef_search {ef}: the search runs "
                    f"with ef {depth} (as faiss and hnswlib do)"
                )
    return notes
