"""The embedders of a sweep: one `Embedder` per model, made when first asked for, all on one backend and
precision, with the experiment's served-model definitions (`chunkeval.engine.embedding.served`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from chunkeval.engine.embedding import Embedder, probes
from chunkeval.engine.embedding import served as served_models
from chunkeval.engine.embedding.resolution import resolved
from chunkeval.engine.embedding.served import ServedModel

if TYPE_CHECKING:
    from chunkeval.engine.pipeline.experiment import Experiment


class Embedders:
    """One `Embedder` per model, made when first asked for: a grid that needs no vectors makes none.
    Every model runs on one backend in one precision (`for_experiment` picks the experiment's)."""

    def __init__(
        self,
        cache_dir: Path | None = None,
        batch_size: int | None = None,  # None: chosen for the device and model (`fitting_batch`)
        given: tuple[Embedder, ...] = (),
        device: str | None = None,
        backend: str = "torch",
        quantize: str = "none",
        precision: str = "fp32",
    ):
        self.cache_dir = cache_dir
        self.batch_size = batch_size
        self.device = device
        self.backend, self.quantize, self.precision = backend, quantize, precision
        self._by_model = {e.model: e for e in given if e.runs() == (backend, quantize, precision)}
        self.served: tuple[ServedModel, ...] = ()  # the experiment's `models:` definitions

    @classmethod
    def of(cls, embedders: Embedders | Embedder) -> Embedders:
        if isinstance(embedders, Embedders):
            return embedders
        return cls(
            embedders.cache_dir,
            embedders.batch_size,
            (embedders,),
            embedders.device,
            embedders.backend,
            embedders.quantize,
            embedders.precision,
        )

    def for_experiment(self, exp: Experiment) -> Embedders:
        """These embedders where they run the experiment's backend and precision, else new ones that do
        (same cache and device). Backend `auto` is the one it resolves to (`chunkeval.engine.embedding.auto`)."""
        if exp.backend == "auto":
            exp = resolved(exp, self.device)
        if (self.backend, self.quantize, self.precision) == (exp.backend, exp.quantize, exp.precision):
            self.served = exp.models
            return self
        embedders = Embedders(
            self.cache_dir,
            self.batch_size,
            tuple(self._by_model.values()),
            self.device,
            exp.backend,
            exp.quantize,
            exp.precision,
        )
        embedders.served = exp.models
        return embedders

    def __getitem__(self, model: str) -> Embedder:
        if model not in self._by_model:
            self._by_model[model] = Embedder(
                model,
                self.cache_dir,
                self.batch_size,
                self.device,
                self.backend,
                self.quantize,
                self.precision,
                served=served_models.lookup(model, self.served),
            )
        return self._by_model[model]

    def count(self, model: str, counters: tuple) -> None:
        """Add what another process embedded for `model` (a Dask worker's shard or chunking) to its counters."""
        embedder = self[model]
        embedder.texts_embedded += counters[0]
        embedder.texts_shared += counters[1]
        embedder.embed_seconds += counters[2]
        embedder.tokens += counters[3] if len(counters) > 3 else 0

    def counters(self) -> dict[str, tuple[int, int, float, int]]:
        return {model: e.counters() for model, e in self._by_model.items()}

    def embed_function(self, model: str):
        """`texts -> vectors` of one model, through its cache: what a semantic chunker is given."""
        return lambda texts: self[model].embed(list(texts))[0]

    @property
    def texts_embedded(self) -> int:
        return sum(e.texts_embedded for e in self._by_model.values())

    @property
    def model_loaded(self) -> bool:
        return any(e.model_loaded for e in self._by_model.values())

    def table(self) -> pa.Table:
        """Per model used: its fingerprint, texts embedded, of those the texts whose model input (after
        truncation) equalled an earlier text's and so shared its vector, seconds spent and throughput."""
        used = list(self._by_model.values())
        return pa.table(
            {
                "model": pa.array([e.model for e in used], pa.string()),
                "model_fingerprint": pa.array([e.fingerprint for e in used], pa.string()),
                "backend": pa.array([e.served.api if e.served else e.backend for e in used], pa.string()),
                "quantize": pa.array([e.quantize for e in used], pa.string()),
                "precision": pa.array([e.precision for e in used], pa.string()),
                "texts_embedded": pa.array([e.texts_embedded for e in used], pa.int64()),
                "texts_shared": pa.array([e.texts_shared for e in used], pa.int64()),
                "embed_seconds": pa.array([e.embed_seconds for e in used], pa.float64()),
                "texts_per_second": pa.array([e.texts_per_second for e in used], pa.float64()),
                "tokens": pa.array([e.tokens if e.served else None for e in used], pa.int64()),
                "cost": pa.array([e.cost for e in used], pa.float64()),
                "generation": pa.array([e.generation if e.served else None for e in used], pa.int64()),
            }
        )


def probe_models(exp: Experiment, mode: str = "run") -> list[str]:
    """Probe the served models of a grid that embeds (`chunkeval.engine.embedding.probes`): the vectors
    of a model that changed behind its name go to a new cache generation. Returns the lines that say so."""
    seen = len(probes.CHANGED)
    if exp.needs_model():
        for model in dict.fromkeys([*exp.model, *exp.embedding_rerankers()]):
            served = served_models.lookup(model, exp.models)
            if served is not None:
                probes.check(served, mode)
    return probes.CHANGED[seen:]


def embed_shard(
    model: str,
    kind: str,
    texts: list[str],
    cache_dir: Path,
    batch_size: int | None,
    device: str | None,
    backend: str,
    quantize: str,
    precision: str = "fp32",
    served: ServedModel | None = None,
) -> dict:
    """Embed one shard into the cache at `cache_dir` (this process loads the model, or sends its texts to
    the served model) and return its counters for `Embedders.count`."""
    embedder = Embedder(model, cache_dir, batch_size, device, backend, quantize, precision, served=served)
    embedder.embed(texts, kind)
    return {"model": model, "counters": embedder.counters()}
