"""The client of an OpenAI-compatible `/embeddings` endpoint (a `served.ServedModel`).

Texts are sent in batches of at most `batch_size` inputs and `max_batch_tokens` cl100k tokens,
`concurrency` requests in flight. A request that meets 429, a 5xx, a timeout or a dropped connection is
sent again after an exponential backoff with jitter (or the server's `Retry-After`, when longer), at most
`max_retries` times. A request, its whole answer included, has `timeout` seconds (a server that drips its
answer cannot hold a run longer), and an answer is read only up to `max_body_bytes(n)` (1 MiB and 256 KiB
per input). Every response is checked before its vectors are handed on: one vector per input, indices
0..n-1, one width (`dimensions` when given, the recorded width when known), numbers that are finite, not
subnormal and at most `MAX_COMPONENT` in magnitude, no zero vector; usage figures outside 0..2³¹−1 are
not believed (the tokens are counted instead).
Vectors are handed to `on_batch` as each response arrives, so that the caller caches them at once: a
run that fails later loses none of them. The API key goes into the Authorization header only, and only
to a host the user bound it to (`chunkeval.engine.settings.endpoints`); error messages never hold it (masked before
any cut).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from email.utils import parsedate_to_datetime

import numpy as np

from chunkeval.engine.chunking.tokens import get_encoding
from chunkeval.engine.embedding.served import ServedModel
from chunkeval.engine.settings.endpoints import LOOPBACK_NAME, known_keys, loopback_addresses, mask
from chunkeval.errors import InputError
from chunkeval.limits import MAX_INT, json_loads

log = logging.getLogger("chunkeval")

RETRY_STATUS = frozenset({408, 409, 429}) | frozenset(range(500, 600))
BACKOFF = 0.5  # seconds before the first retry; doubled each time, with jitter
MAX_WAIT = 60.0  # the longest wait between two tries (Retry-After included)
MAX_COMPONENT = 1e6  # the largest magnitude of a vector's component (docs/served.md)
BODY_BYTES, BODY_BYTES_PER_INPUT = 1 << 20, 256 << 10  # an answer's size: 1 MiB, and 256 KiB per input
_deadline = threading.local()  # when the request this thread is making must be over (time.monotonic)


def max_body_bytes(n: int) -> int:
    """The most bytes read of an answer to a request of `n` inputs (3,072 floats in JSON take about 60 KiB)."""
    return BODY_BYTES + n * BODY_BYTES_PER_INPUT


class _DeadlineStream:
    """A connection whose every read and write waits no longer than the request's deadline allows, so that a
    server dripping its headers or body one byte at a time cannot outlive it."""

    def __init__(self, stream):
        self.stream = stream

    def _timeout(self, timeout):
        import httpcore

        end = getattr(_deadline, "value", None)
        if end is None:
            return timeout
        left = end - time.monotonic()
        if left <= 0:
            raise httpcore.ReadTimeout("the request's deadline passed")
        return left if timeout is None else min(timeout, left)

    def read(self, max_bytes, timeout=None):
        return self.stream.read(max_bytes, self._timeout(timeout))

    def write(self, buffer, timeout=None):
        return self.stream.write(buffer, self._timeout(timeout))

    def start_tls(self, ssl_context, server_hostname=None, timeout=None):
        return _DeadlineStream(self.stream.start_tls(ssl_context, server_hostname, self._timeout(timeout)))

    def __getattr__(self, name):  # close, get_extra_info
        return getattr(self.stream, name)


class _DeadlineBackend:
    """Connections within the request's deadline; with `keyed`, a connection to the name `localhost` (a key's
    loopback exemption) goes only to the loopback address it resolves to now, checked (`loopback_addresses`)."""

    def __init__(self, backend, keyed: bool = False):
        self.backend, self.keyed = backend, keyed

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        timeout = _DeadlineStream(None)._timeout(timeout)
        if self.keyed and str(host).lower() == LOOPBACK_NAME:
            host = loopback_addresses(LOOPBACK_NAME, port)[0]
        return _DeadlineStream(self.backend.connect_tcp(host, port, timeout, local_address, socket_options))

    def __getattr__(self, name):  # connect_unix_socket, sleep
        return getattr(self.backend, name)


class ServedError(InputError):
    """A served model that failed: one line naming the endpoint, the status and the server's message."""


def count_tokens(texts: list[str]) -> list[int]:
    return [len(t) for t in get_encoding().encode_ordinary_batch(texts)]


def cut_texts(texts: list[str], limit: int | None) -> tuple[list[str], np.ndarray]:
    """Texts cut to their first `limit` cl100k tokens, and which were cut."""
    if limit is None:
        return list(texts), np.zeros(len(texts), dtype=bool)
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
        self.url = served.endpoint  # where requests go (a chat client posts to /chat/completions)
        self.key = served.api_key()
        headers = {"Content-Type": "application/json"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        limits = httpx.Limits(max_connections=served.concurrency + 1, max_keepalive_connections=served.concurrency)
        transport = httpx.HTTPTransport(limits=limits)
        pool = transport._pool  # httpx takes no network backend: the deadline wraps its connections
        pool._network_backend = _DeadlineBackend(pool._network_backend, keyed=bool(self.key))
        self.http = httpx.Client(headers=headers, timeout=served.timeout, transport=transport)
        self.retries = 0
        self.width: int | None = None  # of the vectors so far (the cache's, or the first answer's)
        self._lock = threading.Lock()

    def close(self) -> None:
        self.http.close()

    def masked(self, text: str) -> str:
        """`text` (a server's words) with this client's key and every key the user defines masked."""
        return mask(text, *known_keys(self.key))

    def _fail(self, what: str) -> ServedError:
        text = " ".join(self.masked(what).split())  # masked first: a cut never leaves part of a key
        return ServedError(f"{self.served.name}: {self.url}: {text[:300]}")

    def _post(self, body: dict, n: int):
        """(status, headers, bytes) of one request, within the deadline and the size cap."""
        cap = max_body_bytes(n)
        _deadline.value = time.monotonic() + self.served.timeout
        try:
            with self.http.stream("POST", self.url, json=body) as response:
                size = response.headers.get("content-length", "")
                if size.isdigit() and int(size) > cap:
                    raise self._fail(f"answered {int(size):,} bytes, more than the {cap:,} read for {n} input(s)")
                chunks, got = [], 0
                for chunk in response.iter_bytes():
                    got += len(chunk)
                    if got > cap:
                        raise self._fail(f"answered more than the {cap:,} bytes read for {n} input(s)")
                    chunks.append(chunk)
                return response.status_code, response.headers, b"".join(chunks)
        finally:
            _deadline.value = None

    def request(self, texts: list[str]) -> tuple[np.ndarray, int | None]:
        """(vectors, tokens the server reports or None) for one batch, retried as the module says."""
        body = {"model": self.served.model, "input": texts, "encoding_format": "float"}
        if self.served.dimensions is not None:
            body["dimensions"] = self.served.dimensions
        headers, raw = self.send(body, len(texts))
        return self._check(headers, raw, len(texts))

    def send(self, body: dict, n: int = 1):
        """(headers, bytes) of the first 200 answer to a POST of `body` to `self.url` (an answer of `n`
        inputs' size at most), retried as the module says; any other answer is one line naming the status."""
        import httpx

        for attempt in range(self.served.max_retries + 1):
            last = attempt == self.served.max_retries
            try:
                status, headers, raw = self._post(body, n)
            except (httpx.TimeoutException, httpx.TransportError, httpx.DecodingError) as exc:
                if last:
                    raise self._fail(f"no answer after {attempt + 1} tries ({type(exc).__name__}: {exc})") from None
                self._wait(attempt, None, type(exc).__name__)
                continue
            if status in RETRY_STATUS and not last:
                self._wait(attempt, headers.get("retry-after"), str(status))
                continue
            if status != 200:
                tries = f" after {attempt + 1} tries" if attempt else ""
                hint = ""
                if status in (401, 403) and not self.key:
                    hint = " (no key was sent: bind one to this host in endpoints.yaml, docs/served.md)"
                said = " ".join(self.masked(server_message(headers, raw)).split())[:200]  # masked, then cut
                raise self._fail(f"HTTP {status}{tries}: {said}{hint}")
            return headers, raw
        raise AssertionError("unreachable")

    def _wait(self, attempt: int, retry_after: str | None, why: str) -> None:
        delay = min(MAX_WAIT, BACKOFF * 2**attempt) * (0.5 + random.random() / 2)
        asked = retry_after_seconds(retry_after)
        if asked is not None:
            delay = max(delay, min(MAX_WAIT, asked))
        with self._lock:
            self.retries += 1
        log.info("%s: %s; trying again in %.1f s", self.url, why, delay)
        time.sleep(delay)

    def _check(self, headers, raw: bytes, n: int) -> tuple[np.ndarray, int | None]:
        """The response's vectors in input order, every promise checked."""
        kind = headers.get("content-type", "")
        try:
            data = json_loads(raw.decode("utf-8"))
        except (ValueError, RecursionError):
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
        if any(isinstance(x, bool) or not isinstance(x, (int, float)) for r in rows for x in r):
            raise self._fail("answered embeddings that are not numbers")
        try:
            vectors = np.asarray(rows, dtype=np.float64)
        except (TypeError, ValueError, OverflowError):
            raise self._fail("answered embeddings that are not numbers (or beyond a float's range)") from None
        if got == 0 or not np.all(np.isfinite(vectors)):
            raise self._fail("answered vectors with numbers that are not finite (NaN or infinity)")
        size = np.abs(vectors)
        if np.any((size > 0) & (size < np.finfo(np.float64).tiny)):
            raise self._fail("answered vectors with subnormal numbers (below 2.2e-308 in magnitude)")
        if np.any(size > MAX_COMPONENT):
            raise self._fail(f"answered vectors with a component beyond {MAX_COMPONENT:g} in magnitude")
        ordered = np.empty_like(vectors)
        ordered[index] = vectors
        norms = np.linalg.norm(ordered, axis=1, keepdims=True)
        if np.any(norms == 0):
            raise self._fail("answered a zero vector (no direction to compare by cosine)")
        ordered = ordered / norms  # cosine, as local models
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        tokens = usage.get("prompt_tokens", usage.get("total_tokens"))
        believed = isinstance(tokens, int) and not isinstance(tokens, bool) and 0 <= tokens <= MAX_INT
        return ordered.astype(np.float32), tokens if believed else None

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


def server_message(headers, raw: bytes) -> str:
    """What the server said about a failure: its JSON error message, else its text (whole: the caller masks
    keys in it before cutting it short)."""
    text = raw.decode("utf-8", "replace")
    try:
        data = json_loads(text)
    except (ValueError, RecursionError):
        kind = headers.get("content-type", "").split(";")[0]
        return f"{kind or 'a body'} that is not JSON" if "html" in kind else text or "no message"
    if isinstance(data, dict):
        error = data.get("error", data.get("detail", data.get("message")))
        if isinstance(error, dict):
            error = error.get("message", error)
        if error is not None:
            return str(error)
    return str(data)


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
