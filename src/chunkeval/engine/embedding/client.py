"""The client of an OpenAI-compatible `/embeddings` endpoint (a `served.ServedModel`).

Texts are sent in batches of at most `batch_size` inputs and `max_batch_tokens` cl100k tokens,
`concurrency` requests in flight. A request that meets 429, a 5xx, a timeout or a dropped connection is
sent again after an exponential backoff with jitter (or the server's `Retry-After`, when longer), at most
`max_retries` times. Every response is checked before its vectors are handed on: one vector per input,
indices 0..n-1, one width (`dimensions` when given, the recorded width when known), finite numbers.
Vectors are handed to `on_batch` as each response arrives, so that the caller caches them at once: a
run that fails later loses none of them. The API key goes into the Authorization header only; error
messages never hold it.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from email.utils import parsedate_to_datetime

import numpy as np

from chunkeval.engine.embedding.served import ServedModel
from chunkeval.errors import InputError

log = logging.getLogger("chunkeval")

RETRY_STATUS = frozenset({408, 409, 429}) | frozenset(range(500, 600))
BACKOFF = 0.5  # seconds before the first retry; doubled each time, with jitter
MAX_WAIT = 60.0  # the longest wait between two tries (Retry-After included)


class ServedError(InputError):
    """A served model that failed: one line naming the endpoint, the status and the server's message."""


def count_tokens(texts: list[str]) -> list[int]:
    from chunkeval.engine.chunking.tokens import get_encoding

    return [len(t) for t in get_encoding().encode_ordinary_batch(texts)]


def cut_texts(texts: list[str], limit: int | None) -> tuple[list[str], np.ndarray]:
    """Texts cut to their first `limit` cl100k tokens, and which were cut."""
    if limit is None:
        return list(texts), np.zeros(len(texts), dtype=bool)
    from chunkeval.engine.chunking.tokens import get_encoding

    enc = get_encoding()
    ids = enc.encode_ordinary_batch(texts)
    cut = np.fromiter((len(i) > limit for i in ids), dtype=bool, count=len(texts))
    return [enc.decode(i[:limit]) if c else t for t, i, c in zip(texts, ids, cut)], cut


def plan_batches(tokens: list[int], batch_size: int, max_batch_tokens: int) -> list[list[int]]:
    """Consecutive positions, each batch within both limits (a text over the token limit goes alone)."""
    batches, current, used = [], [], 0
    for i, n in enumerate(tokens):
        if current and (len(current) >= batch_size or used + n > max_batch_tokens):
            batches.append(current)
            current, used = [], 0
        current.append(i)
        used += n
    if current:
        batches.append(current)
    return batches


class Client:
    """Requests to one served model; thread-safe (one connection pool for every request in flight)."""

    def __init__(self, served: ServedModel):
        import httpx

        self.served = served
        self.key = served.api_key()
        headers = {"Content-Type": "application/json"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        self.http = httpx.Client(
            headers=headers,
            timeout=served.timeout,
            limits=httpx.Limits(max_connections=served.concurrency + 1, max_keepalive_connections=served.concurrency),
        )
        self.retries = 0
        self.width: int | None = None  # of the vectors so far (the cache's, or the first answer's)
        self._lock = threading.Lock()

    def close(self) -> None:
        self.http.close()

    def _fail(self, what: str) -> ServedError:
        text = " ".join(what.split())
        if self.key:
            text = text.replace(self.key, "***")
        return ServedError(f"{self.served.name}: {self.served.endpoint}: {text[:300]}")

    def request(self, texts: list[str]) -> tuple[np.ndarray, int | None]:
        """(vectors, tokens the server reports or None) for one batch, retried as the module says."""
        import httpx

        body = {"model": self.served.model, "input": texts, "encoding_format": "float"}
        if self.served.dimensions is not None:
            body["dimensions"] = self.served.dimensions
        for attempt in range(self.served.max_retries + 1):
            last = attempt == self.served.max_retries
            try:
                response = self.http.post(self.served.endpoint, json=body)
            except (httpx.TimeoutException, httpx.TransportError) as exc:
                if last:
                    raise self._fail(f"no answer after {attempt + 1} tries ({type(exc).__name__}: {exc})") from None
                self._wait(attempt, None, type(exc).__name__)
                continue
            if response.status_code in RETRY_STATUS and not last:
                self._wait(attempt, response.headers.get("retry-after"), str(response.status_code))
                continue
            if response.status_code != 200:
                tries = f" after {attempt + 1} tries" if attempt else ""
                raise self._fail(f"HTTP {response.status_code}{tries}: {server_message(response)}")
            return self._check(response, len(texts))
        raise AssertionError("unreachable")

    def _wait(self, attempt: int, retry_after: str | None, why: str) -> None:
        delay = min(MAX_WAIT, BACKOFF * 2**attempt) * (0.5 + random.random() / 2)
        asked = retry_after_seconds(retry_after)
        if asked is not None:
            delay = max(delay, min(MAX_WAIT, asked))
        with self._lock:
            self.retries += 1
        log.info("%s: %s; trying again in %.1f s", self.served.endpoint, why, delay)
        time.sleep(delay)

    def _check(self, response, n: int) -> tuple[np.ndarray, int | None]:
        """The response's vectors in input order, every promise checked."""
        kind = response.headers.get("content-type", "")
        try:
            data = json.loads(response.text)
        except ValueError:
            raise self._fail(f"answered {kind.split(';')[0] or 'something'} that is not JSON") from None
        items = data.get("data") if isinstance(data, dict) else None
        if not isinstance(items, list):
            raise self._fail("answered JSON without a data list of embeddings")
        if len(items) != n:
            raise self._fail(f"answered {len(items)} vector(s) for {n} input(s)")
        try:
            index = [item["index"] for item in items]
            rows = [item["embedding"] for item in items]
        except (TypeError, KeyError):
            raise self._fail("answered data items without index and embedding") from None
        if sorted(i for i in index if isinstance(i, int) and not isinstance(i, bool)) != list(range(n)):
            raise self._fail(f"answered indices that are not 0 to {n - 1}")
        widths = {len(r) if isinstance(r, list) else -1 for r in rows}
        if len(widths) != 1 or -1 in widths:
            raise self._fail("answered embeddings that are not lists of one width (base64 is not read)")
        got = widths.pop()
        with self._lock:
            want = self.served.dimensions or self.width
            if want is not None and got != want:
                raise self._fail(f"answered vectors of width {got}, not {want}")
            self.width = got
        try:
            vectors = np.asarray(rows, dtype=np.float64)
        except (TypeError, ValueError):
            raise self._fail("answered embeddings that are not numbers") from None
        if got == 0 or not np.all(np.isfinite(vectors)):
            raise self._fail("answered vectors with numbers that are not finite (NaN or infinity)")
        ordered = np.empty_like(vectors)
        ordered[index] = vectors
        norms = np.linalg.norm(ordered, axis=1, keepdims=True)
        ordered = np.where(norms > 0, ordered / np.where(norms > 0, norms, 1), 0)  # cosine, as local models
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        tokens = usage.get("prompt_tokens", usage.get("total_tokens"))
        return ordered.astype(np.float32), tokens if isinstance(tokens, int) and tokens >= 0 else None

    def embed(
        self,
        texts: list[str],
        on_batch: Callable[[list[int], np.ndarray, int], None],
        width: int | None = None,
    ) -> None:
        """Embed `texts`, calling `on_batch(positions, vectors, tokens)` in this thread as each batch
        arrives. On a failure, the batches already in flight are waited for and handed on, then the
        first error is raised."""
        self.width = self.width or width
        tokens = count_tokens(texts)
        batches = plan_batches(tokens, self.served.batch_size, self.served.max_batch_tokens)
        pool = ThreadPoolExecutor(self.served.concurrency, thread_name_prefix="chunkeval-served")
        error = None
        try:
            pending = {pool.submit(self.request, [texts[i] for i in b]): b for b in batches}
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    batch = pending.pop(future)
                    if future.exception() is not None:
                        error = error or future.exception()
                        continue
                    vectors, used = future.result()
                    on_batch(batch, vectors, used if used is not None else sum(tokens[i] for i in batch))
                if error is not None:
                    for future in pending:
                        future.cancel()
                    pending = {f: b for f, b in pending.items() if not f.cancelled()}
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        if error is not None:
            raise error


def server_message(response) -> str:
    """What the server said about a failure: its JSON error message, else the start of its text."""
    try:
        data = response.json()
    except ValueError:
        kind = response.headers.get("content-type", "").split(";")[0]
        return f"{kind or 'a body'} that is not JSON" if "html" in kind else response.text[:200] or "no message"
    if isinstance(data, dict):
        error = data.get("error", data.get("detail", data.get("message")))
        if isinstance(error, dict):
            error = error.get("message", error)
        if error is not None:
            return str(error)[:200]
    return str(data)[:200]


def retry_after_seconds(value: str | None) -> float | None:
    """Seconds from a Retry-After header (a number of seconds or an HTTP date)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError, IndexError):
        return None
