"""Sentence embeddings through a content-addressed Parquet cache.

A vector is stored under (model fingerprint, BLAKE2b-128 of the UTF-8 text). The fingerprint is a
SHA-256 over the content of the model's files (weights and configuration), not its name, so a
changed model never reuses old vectors. The cache is a folder per model of immutable Parquet part
files, each written under a temporary name and renamed: concurrent runs each add their own part and
a reader never sees half a file. A call whose texts are all cached never loads the model.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from chunkeval import progress
from chunkeval.engine.embedding import late, probes
from chunkeval.engine.embedding import served as served_models
from chunkeval.engine.embedding.backends import READ_WINDOW, check_backend, is_transformer, load_runner
from chunkeval.engine.embedding.cache import EmbeddingCache, text_hash
from chunkeval.engine.embedding.client import Client, cut_texts
from chunkeval.engine.embedding.precision import check_device as check_precision_device
from chunkeval.engine.embedding.precision import tell
from chunkeval.engine.embedding.registry import (
    check_model_runs_on,
    embedder_fingerprint,
    model_fingerprint,
    model_prompts,
    prompt_for,
    resolve_model,
)
from chunkeval.engine.embedding.resolution import choose_backend, say_pending
from chunkeval.errors import InputError
from chunkeval.limits import short

log = logging.getLogger("chunkeval")

from chunkeval.vocabulary import DEFAULT_MODEL  # noqa: E402 (re-exported)

DEVICES = ("auto", "cpu", "cuda")
MAX_BATCH_SIZE = 65_536  # texts per embedding batch (docs/limits.md): past it a batch only risks memory


def check_batch_size(batch_size: int | None, what: str = "--batch-size") -> int | None:
    """Texts per embedding batch: 1 to `MAX_BATCH_SIZE` (docs/limits.md), or None for the device's own choice."""
    if batch_size is None:
        return None
    if isinstance(batch_size, bool) or not isinstance(batch_size, int):
        raise InputError(f"{what} must be a whole number, got {short(batch_size)}")
    if batch_size < 1:
        raise InputError(f"{what} must be at least 1, got {batch_size}")
    if batch_size > MAX_BATCH_SIZE:
        raise InputError(f"{what} must be at most {MAX_BATCH_SIZE} (docs/limits.md), got {short(batch_size)}")
    return batch_size


def check_device(device: str | None, what: str = "--device") -> str:
    """`auto` (a GPU when torch sees one, else the CPU), `cpu`, `cuda` or `cuda:N`; `cuda` on a machine
    whose torch sees no GPU is an error before any work."""
    device = device or "auto"
    if not isinstance(device, str) or (
        device not in DEVICES and not (device.startswith("cuda:") and device[5:].isdigit())
    ):
        raise InputError(f"{what} must be auto, cpu, cuda or cuda:N, got {short(device)}")
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise InputError(f"{what} {device}: torch sees no CUDA GPU on this machine (use auto or cpu)")
    return device


def pick_device(device: str | None) -> str:
    """The device `auto` means here."""
    if device not in (None, "auto"):
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


STATIC_BATCH = 1024  # texts a batch of a static model, on any device (`fitting_batch`)
PART_SECONDS = 1.0  # a cache part embedded faster than this makes the next part twice as large (`Embedder`),
MAX_PART = 65536  # up to this many texts


def fitting_batch(device: str, batch_size: int | None, static: bool = False) -> int:
    """The batch size: the one given, else for a static model (a table lookup per word piece) `STATIC_BATCH`
    on any device, else 16 on a CPU and, on a GPU, as many ~256-word-piece texts as a quarter of its free
    memory holds at about 8 MiB each (activations with headroom), 32 to 1,024.

    A static model spends its time in the tokenizer, which works on a batch in parallel: at 16 texts a batch
    its overhead per batch was a fifth of the time on 100-token chunks (`bench/scale.py`); its vectors are the
    same at every batch size.

    16 on a CPU because smaller batches keep a layer's activations in cache: on two CPUs (an AMD EPYC
    and an Intel Xeon, both AVX-512) torch embedded 13-14 % more texts per second at 16 than at 32, and about as many at 8
    (`bench/embedding_backends.py --phases speed --batch-size B`, docs/performance.md)."""
    if batch_size is not None:
        return batch_size
    if static:
        return STATIC_BATCH
    if not device.startswith("cuda"):
        return 16
    import torch

    free, _ = torch.cuda.mem_get_info(torch.device(device))
    return int(min(1024, max(32, free // 4 // (8 * 2**20))))


def read_alike(reads: list) -> tuple[np.ndarray, np.ndarray]:
    """Texts the model reads alike (chunks of 300 and 500 tokens from one start) are embedded once: per text, the
    first text read as it is (`which`), and those first texts in their order (`once`)."""
    first: dict = {}
    which = np.fromiter((first.setdefault(r, n) for n, r in enumerate(reads)), dtype=np.int64, count=len(reads))
    return which, np.fromiter(first.values(), dtype=np.int64, count=len(first))


@dataclass
class Embedder:
    """Embeds texts with a sentence-transformers model through an `EmbeddingCache`.

    Vectors are L2-normalized float32. Input is truncated where the model's authors set it
    (`max_seq_length`, 256 word pieces for all-MiniLM-L6-v2); `truncated` says which texts lost their end.
    """

    model: str = DEFAULT_MODEL
    cache_dir: Path | None = None
    batch_size: int | None = None  # None: chosen for the device (`fitting_batch`)
    device: str | None = None  # auto (None), cpu, cuda or cuda:N
    backend: str = "torch"  # torch, onnx or openvino (chunkeval.engine.embedding.backends)
    quantize: str = "none"  # none or int8 (onnx and openvino)
    precision: str = "fp32"  # fp32, bf16 or fp16: how the model runs (chunkeval.engine.embedding.precision)
    flush_every: int = 512  # texts of the first cache part file of an embedding call
    part_seconds: float = PART_SECONDS  # a part embedded faster makes the next twice as large (0: all flush_every)
    texts_embedded: int = 0  # texts this embedder added to the cache
    texts_shared: int = 0  # of those, texts whose model input equalled an earlier one's: not run through the model
    _st: object = field(default=None, repr=False)

    embed_seconds: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _loading: threading.Lock = field(default_factory=threading.Lock, repr=False)  # one load, however many ask
    _told: str | None = field(default=None, repr=False)  # the device the model loaded on, until its notices are said
    served: served_models.ServedModel | None = None  # a model behind an /embeddings endpoint (`openai:` or `models:`)
    tokens: int = 0  # tokens sent to a served model (its server's count, else cl100k's)
    late_tokens: int = 0  # tokens of the windows run for late chunking (`embed_late`)

    def __post_init__(self):
        check_backend(self.backend, self.quantize, precision=self.precision)
        if self.served is None and served_models.is_spec(self.model):
            self.served = served_models.parse_spec(self.model)
        if self.served is not None:  # the generation its probes recorded (the run probed it first)
            self.generation = probes.generation(self.served)  # moved on each time the model changed behind its name
            self.fingerprint = probes.fingerprint(self.served, self.generation)
            self.prompts = self.served.prompts()
            self.cache = EmbeddingCache(self.cache_dir, self.fingerprint) if self.cache_dir else None
            return
        check_model_runs_on(self.model, "torch", None, self.precision)  # a static model runs in fp32 only
        # the one decision: an experiment resolves auto first (`resolution`); an embedder alone, per model
        self.backend = choose_backend(self.backend, [self.model], self.quantize, self.precision, self.device).backend
        self.fingerprint = embedder_fingerprint(self.model, self.backend, self.quantize, self.precision)
        self.prompts = model_prompts(self.model)
        self.cache = EmbeddingCache(self.cache_dir, self.fingerprint) if self.cache_dir else None

    def __getstate__(self) -> dict:
        """What travels to another process (a Dask worker): the settings and counters, not the loaded
        model, the lock or the cache's vectors; the copy reads the cache folder again."""
        return {k: v for k, v in self.__dict__.items() if k not in ("_st", "_lock", "_loading", "cache")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, _st=None, _lock=threading.Lock(), _loading=threading.Lock())
        self.cache = EmbeddingCache(self.cache_dir, self.fingerprint) if self.cache_dir else None

    def runs(self) -> tuple[str, str, str]:
        """(backend, quantize, precision): how this embedder runs its model."""
        return self.backend, self.quantize, self.precision

    def counters(self) -> tuple[int, int, float, int]:
        """(texts embedded, of those shared, seconds, tokens sent): what `Embedders.count` adds up across processes."""
        return self.texts_embedded, self.texts_shared, self.embed_seconds, self.tokens

    @property
    def cost(self) -> float | None:
        """What the tokens sent cost, where the served model has a price."""
        price = self.served.price_per_million_tokens if self.served is not None else None
        return None if price is None else self.tokens * price / 1e6

    def missing(self, texts: list[str], kind: str = "document") -> list[str]:
        """The distinct texts among `texts` whose vectors the cache lacks (all of them without a cache)."""
        prompt = prompt_for(self.prompts, kind)
        unique = dict(zip((text_hash(prompt + t) for t in texts), texts))  # first occurrences, in order
        if self.cache is None:
            return list(unique.values())
        self.cache.refresh()
        hashes = list(unique)
        return [unique[h] for h, r in zip(hashes, self.cache.rows(hashes)) if r < 0]

    @property
    def texts_per_second(self) -> float | None:
        """The model's throughput in this run: texts it ran per second (a text given the vector of one
        the model read alike is not counted; None when the model ran nothing)."""
        ran = self.texts_embedded - self.texts_shared
        return ran / self.embed_seconds if ran > 0 and self.embed_seconds > 0 else None

    def _load(self):
        if self._st is None:
            with self._loading:  # a load begun in a thread (`load_if_cold`) is waited for, not begun again
                return self._load_once()
        return self._st

    def _load_once(self):
        if self._st is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            through_st = self.backend == "torch" or not is_transformer(resolve_model(self.model))
            if through_st and not log.isEnabledFor(logging.INFO):  # its loading bars only with -v (an exported
                # model runs without transformers: importing it for nothing costs about a second)
                from transformers.utils import logging as hf_logging

                hf_logging.disable_progress_bar()
            log.info(
                "loading embedding model %s (backend %s, quantize %s, precision %s)",
                self.model,
                self.backend,
                self.quantize,
                self.precision,
            )
            device = pick_device(self.device) if self.backend == "torch" else "cpu"
            check_precision_device(self.precision, self.backend, device)
            try:
                runner = load_runner(
                    self.model,
                    resolve_model(self.model),
                    model_fingerprint(self.model),
                    self.backend,
                    self.quantize,
                    device,
                    self.precision,
                )
                # the batch is set before the runner is published: a caller that finds `_st` set (without the
                # load's lock) encodes at once, and once met a batch size still None (CI, the load in a thread)
                self.batch_size = fitting_batch(device, self.batch_size, not is_transformer(resolve_model(self.model)))
                self._st = runner
                log.info("embedding on %s, %d texts per batch", device, self.batch_size)
            except (OSError, ValueError, KeyError, TypeError, RuntimeError) as exc:
                reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                raise InputError(
                    f"model {self.model!r} cannot be loaded as a sentence-transformers model ({reason})"
                ) from None
            self._told = device
        return self._st

    def _embedding(self):
        """The loaded model, about to embed the run's texts: the notices of its backend are said now (a pinned
        backend; the precision advice where the machine has it), once. A model loaded only to learn its width, or
        ahead in a thread, says nothing: a command that then stops on bad input prints its one line alone."""
        runner = self._load()
        device, self._told = self._told, None
        if device is not None:
            say_pending()
            if is_transformer(resolve_model(self.model)):  # a static model has one precision: no advice
                tell(self.precision, self.backend, self.quantize, device)
        return runner

    def load_if_cold(self) -> None:
        """Start loading the model in a thread when its cache holds no vector yet (a first run embeds every text:
        its model is needed for sure, and loads while the documents are chunked); a served model, a warm cache or a
        loaded model start nothing, so a warm run still loads no model. A load that fails here fails again,
        with its message, where the vectors are asked for."""
        if self.served is not None or self._st is not None or (self.cache is not None and self.cache.width()):
            return

        def load() -> None:
            try:
                self._load()
            except Exception:  # noqa: BLE001 (said where `embed` loads it again)
                pass

        threading.Thread(target=load, name=f"load {self.model}", daemon=True).start()

    @property
    def model_loaded(self) -> bool:
        return self._st is not None

    def width(self) -> int:
        """The width of the model's vectors: the cache's, else that of one text encoded (nothing is cached)."""
        known = self.cache.width() if self.cache is not None else None
        if known:
            return int(known)
        return int(self._load().encode(["width"], "", 1, False).shape[1])

    def _encode(self, texts: list[str], prompt: str = "") -> tuple[np.ndarray, np.ndarray]:
        runner = self._embedding()
        started = time.perf_counter()
        reads, truncated = runner.reads([prompt + t for t in texts])
        which, once = read_alike(reads)
        vectors = runner.encode(
            [texts[i] for i in once], prompt, self.batch_size, len(once) >= 256 and log.isEnabledFor(logging.INFO)
        )
        slot = np.empty(len(texts), dtype=np.int64)
        slot[once] = np.arange(len(once))
        self.texts_embedded += len(texts)
        self.texts_shared += len(texts) - len(once)
        self.embed_seconds += time.perf_counter() - started
        return vectors[slot[which]], truncated

    def embed(self, texts: list[str], kind: str = "document") -> tuple[np.ndarray, np.ndarray]:
        """(vectors, truncated) for `texts` (chunks, or `kind="query"` for questions); each distinct text
        is embedded at most once. Where the model has a prompt for the kind, the prompt is part of what
        is embedded and of the cache key."""
        with self._lock:  # tasks of one flow share an embedder (semantic chunkers of one model, in threads)
            return self._embed(texts, prompt_for(self.prompts, kind))

    def _embed(self, texts: list[str], prompt: str) -> tuple[np.ndarray, np.ndarray]:
        hashes = [text_hash(prompt + t) for t in texts]
        unique = list(dict.fromkeys(hashes))
        first_text = dict(zip(hashes, texts))
        if self.served is not None:
            return self._embed_served(hashes, unique, first_text, prompt)
        if self.cache is None:
            vectors, truncated = self._encode([first_text[h] for h in unique], prompt)
            pos = {h: i for i, h in enumerate(unique)}
            rows = np.fromiter((pos[h] for h in hashes), dtype=np.int64, count=len(hashes))
            return vectors[rows], truncated[rows]
        self.cache.refresh()
        missing = [h for h, r in zip(unique, self.cache.rows(unique)) if r < 0]
        if missing:
            log.info("embedding %d new text(s) of %d", len(missing), len(unique))
        if missing:
            self._embed_parts(missing, [first_text[h] for h in missing], prompt)
        return self.cache.get(self.cache.rows(hashes))

    def _embed_parts(self, hashes: list[str], texts: list[str], prompt: str) -> None:
        """Embed `texts` into the cache, part file by part file (a killed run keeps what it has embedded). What
        the model reads is found for a window of up to `READ_WINDOW` texts at once (all of a sweep's, as a rule):
        texts it reads alike are embedded once across the window's parts, and the parts follow their length (like
        lengths share a batch, as in one call); a window bounds the word pieces held for a million texts."""
        runner = self._embedding()
        size, done = self.flush_every, 0
        for start in range(0, len(texts), READ_WINDOW):
            window = range(start, min(start + READ_WINDOW, len(texts)))
            started = time.perf_counter()
            reads, truncated = runner.reads([prompt + texts[n] for n in window])
            which, once = read_alike(reads)
            once = once[np.argsort([-len(reads[n]) for n in once], kind="stable")]  # the longest first
            self.embed_seconds += time.perf_counter() - started
            lo = 0
            while lo < len(once):
                progress.step("embedding", done, len(texts))
                part = once[lo : lo + size]
                started = time.perf_counter()
                show = len(part) >= 256 and log.isEnabledFor(logging.INFO)
                vectors = runner.encode([texts[start + n] for n in part], prompt, self.batch_size, show)
                self.embed_seconds += time.perf_counter() - started  # the model's time, not the cache's
                at = np.full(len(reads), -1, dtype=np.int64)
                at[part] = np.arange(len(part))
                rows = np.flatnonzero(at[which] >= 0)  # the part's texts and every text read as one of them
                self.cache.add([hashes[start + m] for m in rows], vectors[at[which[rows]]], truncated[rows])
                elapsed = time.perf_counter() - started
                self.texts_embedded += len(rows)
                self.texts_shared += len(rows) - len(part)
                lo, done = lo + len(part), done + len(rows)
                if elapsed < self.part_seconds:  # a fast model: fewer, larger parts (a million chunks of a
                    size = min(2 * size, MAX_PART)  # static model made 2,000 parts of 512 texts)
        progress.step("embedding", len(texts), len(texts))

    def embed_late(self, documents: list[str], spans: list, size: int) -> tuple[np.ndarray, np.ndarray]:
        """(vectors, truncated) of chunks read late in windows of `size` tokens (`chunkeval.engine.embedding.late`):
        `spans` holds each document's chunk (starts, ends). Cached under each chunk's window text and span; a
        call whose chunks are all cached loads no model. No chunk is truncated: a long one is read in pieces."""
        with self._lock:
            folder = None if self.served is not None else resolve_model(self.model)
            why = late.refusal(self.model, folder, size)
            if why:
                raise InputError(why)
            tokenizer = late.tokenizer_of(folder)
            prompt = prompt_for(self.prompts, "document")
            plan = late.plan(tokenizer, documents, spans, size, prompt)
            unique = list(dict.fromkeys(plan.keys))
            if self.cache is not None:
                self.cache.refresh()
                unique = [h for h, r in zip(unique, self.cache.rows(unique)) if r < 0]
            first = {h: n for n, h in reversed(list(enumerate(plan.keys)))}
            vectors = np.zeros((0, 0), dtype=np.float32)
            if unique:
                log.info("embedding %d chunk(s) late, in windows of %d tokens", len(unique), size)
                runner = self._embedding()
                started = time.perf_counter()
                wanted = [first[h] for h in unique]
                vectors, tokens = late.vectors_of(runner, tokenizer, plan, wanted, size, prompt, self.batch_size)
                self.embed_seconds += time.perf_counter() - started
                self.texts_embedded += len(wanted)
                self.late_tokens += tokens
                if self.cache is not None:
                    self.cache.add(unique, vectors, np.zeros(len(unique), dtype=bool))
            truncated = np.zeros(len(plan.keys), dtype=bool)
            if self.cache is not None:
                return self.cache.get(self.cache.rows(plan.keys))[0], truncated
            at = {h: n for n, h in enumerate(unique)}
            return vectors[[at[h] for h in plan.keys]], truncated

    def _embed_served(self, hashes: list[str], unique: list[str], first_text: dict, prompt: str):
        """What the cache lacks, sent to the served model; each response's vectors cached as it arrives
        (in part files of up to `flush_every` texts, and whatever has arrived when a request fails)."""
        if self.cache is not None:
            self.cache.refresh()
            missing = [h for h, r in zip(unique, self.cache.rows(unique)) if r < 0]
        else:
            missing = unique
        got: dict[str, tuple[np.ndarray, bool]] = {}
        if missing:
            log.info("embedding %d new text(s) of %d with %s", len(missing), len(unique), self.served.endpoint)
            inputs, cut = cut_texts([prompt + first_text[h] for h in missing], self.served.max_input_tokens)
            held: list[tuple[list[int], np.ndarray]] = []

            def flush() -> None:
                if held and self.cache is not None:
                    rows = [i for positions, _ in held for i in positions]
                    self.cache.add([missing[i] for i in rows], np.concatenate([v for _, v in held]), cut[rows])
                held.clear()

            def arrived(positions: list[int], vectors: np.ndarray, tokens: int) -> None:
                held.append((positions, vectors))
                for i, v in zip(positions, vectors):
                    got[missing[i]] = (v, bool(cut[i]))
                self.texts_embedded += len(positions)
                self.tokens += tokens
                progress.step("embedding", len(got), len(missing))
                if sum(len(p) for p, _ in held) >= self.flush_every:
                    flush()

            client = Client(self.served)
            started = time.perf_counter()
            try:
                client.embed(inputs, arrived, self.cache.width() if self.cache is not None else None)
            finally:
                self.embed_seconds += time.perf_counter() - started
                client.close()
                flush()
        if self.cache is None:
            vectors = np.stack([got[h][0] for h in hashes]) if hashes else np.zeros((0, 0), dtype=np.float32)
            return vectors, np.fromiter((got[h][1] for h in hashes), dtype=bool, count=len(hashes))
        return self.cache.get(self.cache.rows(hashes))
