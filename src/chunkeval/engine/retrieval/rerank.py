"""The reranking stage: the first stage's top `candidates` chunks re-scored by a model, the best kept.

A reranker is `none`, an embedding model of the model axis (local, built or served: the cosine of the
query's and the chunk's vectors, a cheap retriever reranked by a better bi-encoder), or a local
sentence-transformers CrossEncoder folder (a config.json whose architecture is `…ForSequenceClassification`:
the model scores each (question, chunk) pair). Reranked chunks are ordered by score, ties to the lower
chunk index, the tie rule of dense retrieval. A bi-encoder's scores are taken from the same blocked
matrix product dense retrieval computes (`retrievers.dense.score_blocks`), so with `candidates` at
least the number of chunks, reranking by a model gives exactly dense retrieval by it.

A CrossEncoder's scores are cached as embeddings are, in `$CHUNKEVAL_HOME/cache/rerank/<fingerprint>/`,
one value per (question, chunk text): a rerun scores only the pairs it has not seen.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np

from chunkeval.engine.embedding import check_model, pick_device
from chunkeval.engine.embedding.cache import EmbeddingCache, text_hash
from chunkeval.engine.embedding.served import lookup
from chunkeval.engine.retrieval.retrievers.dense import score_blocks
from chunkeval.engine.settings.plugins import ExtensionPoint, resolve
from chunkeval.errors import InputError
from chunkeval.files import hash_folder
from chunkeval.vocabulary import NO_RERANKER

log = logging.getLogger("chunkeval")


def is_cross_encoder(name: str) -> bool:
    """Whether `name` is a local folder of a sequence-classification (cross-encoder) model."""
    folder = Path(name).expanduser()
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    architectures = config.get("architectures") if isinstance(config, dict) else None
    return isinstance(architectures, list) and any(str(a).endswith("ForSequenceClassification") for a in architectures)


def _model(name: str) -> str | None:
    """`name` where it is a model a reranker can be (a CrossEncoder folder, an embedding model), else None."""
    if is_cross_encoder(name):
        return name
    try:
        check_model(name)
    except InputError:
        return None
    return name


RERANKER = ExtensionPoint(
    "reranker",
    {NO_RERANKER: NO_RERANKER},
    choices="none, an embedding model (bundled, built, a local folder or a served model), or a local "
    "CrossEncoder folder",
    other=_model,  # no plug-ins: one's own reranker is a retriever with `candidates` (docs/retrievers.md)
)


def check_reranker(name: str, served: tuple = (), source: str | None = None) -> None:
    """One line for a reranker that is no model, before any work."""
    if lookup(name, served) is None:
        resolve(RERANKER, name, source)


def order(first: np.ndarray, scores: np.ndarray, keep: int) -> tuple[np.ndarray, np.ndarray]:
    """The candidates `first` (n_queries x C chunk indices, -1 padding) ordered by `scores` (same shape),
    best first, ties to the lower chunk index; the best `keep` of them (-1 padding), with their scores
    (float64, NaN in the padding)."""
    valid = first >= 0
    key_score = np.where(valid, scores, -np.inf)
    key_index = np.where(valid, first, np.iinfo(np.int64).max)
    ranked = np.lexsort((key_index, -key_score), axis=-1)  # by score down, then chunk index up
    out = np.take_along_axis(np.where(valid, first, -1), ranked, axis=1)[:, :keep]
    kept = np.take_along_axis(key_score.astype(np.float64), ranked, axis=1)[:, :keep]
    if out.shape[1] < keep:
        out = np.pad(out, ((0, 0), (0, keep - out.shape[1])), constant_values=-1)
        kept = np.pad(kept, ((0, 0), (0, keep - kept.shape[1])), constant_values=np.nan)
    return out, np.where(out >= 0, kept, np.nan)


def bi_encoder_scores(query_vectors: np.ndarray, chunk_vectors: np.ndarray, first: np.ndarray) -> np.ndarray:
    """Cosine scores of the candidates, from dense retrieval's own matrix products."""
    scores = np.full(first.shape, -np.inf, dtype=np.float32)
    safe = np.where(first >= 0, first, 0)
    for lo, sims in score_blocks(query_vectors, chunk_vectors):
        rows = slice(lo, lo + len(sims))
        scores[rows] = np.take_along_axis(sims, safe[rows], axis=1)
    return np.where(first >= 0, scores, -np.inf)


class CrossEncoderScorer:
    """(question, chunk) pairs scored by a CrossEncoder folder through a cache of scores."""

    def __init__(self, folder: str, cache_root: Path | None, device: str | None = None):
        self.folder = Path(folder).expanduser().resolve()
        self.fingerprint = hash_folder(self.folder, frozenset({"README.md", ".gitattributes"}))
        self.cache = EmbeddingCache(cache_root, self.fingerprint) if cache_root is not None else None
        self.device = device
        self._model = None
        self.pairs_scored = 0

    def _load(self):
        if self._model is None:
            from sentence_transformers import CrossEncoder

            try:
                self._model = CrossEncoder(str(self.folder), device=pick_device(self.device))
            except (OSError, ValueError, KeyError, TypeError, RuntimeError) as exc:
                reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                raise InputError(f"reranker {self.folder} cannot be loaded as a CrossEncoder ({reason})") from None
        return self._model

    def scores(self, queries: list[str], chunk_texts: list[str], first: np.ndarray) -> np.ndarray:
        pairs = [(q, int(c)) for q, row in zip(queries, first) for c in row if c >= 0]
        keys = [text_hash(q + "\x1f" + chunk_texts[c]) for q, c in pairs]
        unique = dict(zip(keys, pairs))
        if self.cache is not None:
            self.cache.refresh()
            missing = [h for h, r in zip(unique, self.cache.rows(list(unique))) if r < 0]
        else:
            missing = list(unique)
        found: dict[str, float] = {}
        if missing:
            log.info("reranking %d new pair(s) with %s", len(missing), self.folder)
            model = self._load()
            for lo in range(0, len(missing), 1024):  # cached as it goes: a killed run keeps what it scored
                part = missing[lo : lo + 1024]
                values = np.asarray(
                    model.predict([(unique[h][0], chunk_texts[unique[h][1]]) for h in part], show_progress_bar=False),
                    dtype=np.float32,
                ).reshape(-1)
                self.pairs_scored += len(part)
                found.update(zip(part, values.tolist()))
                if self.cache is not None:
                    self.cache.add(part, values.reshape(-1, 1), np.zeros(len(part), dtype=bool))
        if self.cache is not None:
            have = [h for h in unique if h not in found]
            vectors, _ = self.cache.get(self.cache.rows(have))
            found.update(zip(have, vectors[:, 0].tolist() if len(have) else []))
        scores = np.full(first.shape, -np.inf, dtype=np.float32)
        flat = iter(found[h] for h in keys)
        for r, row in enumerate(first):
            for j, c in enumerate(row):
                if c >= 0:
                    scores[r, j] = next(flat)
        return scores


def check_reranking(exp, source: str | None = None) -> None:
    """An experiment's rerankers are models, its candidates at least 1 where a reranker needs them, and at
    least one (candidates, k) has candidates ≥ k."""
    if not exp.reranker:
        raise InputError("an experiment needs at least one reranker (none: no reranking)", source)
    for reranker in exp.reranker:
        check_reranker(reranker, exp.models, source)
    if any(c < 1 for c in exp.candidates):
        raise InputError(f"candidates must be at least 1, got {min(exp.candidates)}", source)
    if not exp.reranks():
        return
    if not exp.candidates:
        raise InputError("a reranker needs candidates: how many first-stage chunks it re-scores", source)
    if max(exp.candidates) < min(exp.k):
        raise InputError(
            f"candidates {', '.join(map(str, exp.candidates))} below every k ({', '.join(map(str, exp.k))}): "
            "a reranker keeps at most its candidates, so no combination is left",
            source,
        )
