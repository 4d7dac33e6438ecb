"""A chat model behind an OpenAI-compatible `/chat/completions` endpoint (a hosted API, vLLM, Ollama, a
llama.cpp server): what `chunkeval gold generate` asks for questions and `gold judge` for grades (docs/gold.md).

Requests go through the served embedding client's machinery (`embedding.client.Client`): the key only to a
host the user bound it to (`endpoints.yaml`), retries on 429, 5xx and dropped connections with the server's
`Retry-After`, a total deadline per request and a cap on the answer's size.

What a model answers is untrusted text. Every answer is masked of every known key (`endpoints.known_keys`) before
anything is printed, written or cached, and an answer that quotes a key is refused as an answer (`Answer.refused`),
its text kept nowhere. Every answer, usable or not, is kept in a response cache keyed by a hash of the whole
request (endpoint, model, messages, temperature, seed), so that a rerun pays for no request twice and counts the
same unusable answers; a cache entry is a record checked against its own fields when read (its version, its
request's key, its model, text of a bounded length; a regular file), and one that does not hold is asked again
and written anew.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from chunkeval.engine.embedding.client import Client, count_tokens
from chunkeval.engine.embedding.served import ServedModel
from chunkeval.engine.gold.answers import ANSWER_CHARS
from chunkeval.engine.settings.endpoints import check_base_url, known_keys, mask, named, quotes_a_key
from chunkeval.errors import InputError
from chunkeval.files import write_text
from chunkeval.limits import MAX_INT, json_loads, read_bytes

ANSWER_BYTES = 4 << 20  # the most bytes read of one chat answer
CACHE_VERSION = 2  # of a cache entry's record: {version, key, model, content, refused}
ENTRY_BYTES = 6 * (ANSWER_CHARS + 1) + 4096  # the most bytes read of one cache entry (the longest answer, escaped)
REFUSED_KEY = "the answer quotes an API key: refused, and kept nowhere"


@dataclass(frozen=True)
class Answer:
    """A model's answer: its text, masked of every known key (empty where refused), whether it came from the
    cache, and why it was refused as an answer (None where it was not)."""

    text: str
    cached: bool
    refused: str | None = None


@dataclass
class Chat:
    """One chat model at one endpoint (a name of `endpoints.yaml` or a base URL), with its response cache."""

    endpoint: str
    model: str
    cache_dir: Path | None = None
    temperature: float = 0.0
    seed: int = 0
    timeout: float = 120.0  # seconds per request, the whole answer included
    max_retries: int = 6
    sent_tokens: int = 0  # prompt tokens of the requests made (the server's count, else cl100k's)
    received_tokens: int = 0  # completion tokens of the answers received
    requests: int = 0  # requests made (not answered from the cache)
    cached: int = 0  # requests answered from the cache
    _client: Client | None = field(default=None, repr=False)
    _keys: list[str] | None = field(default=None, repr=False)

    def _served(self) -> ServedModel:
        if "://" in self.endpoint:
            base, name = check_base_url(self.endpoint, "--endpoint"), None
        else:
            base, name = named(self.endpoint, "--endpoint").base_url, self.endpoint
        return ServedModel(
            name=self.model,
            model=self.model,
            base_url=base,
            endpoint_name=name,
            concurrency=1,
            timeout=self.timeout,
            max_retries=self.max_retries,
        )

    @property
    def url(self) -> str:
        return self._served().base_url + "/chat/completions"

    def client(self) -> Client:
        """The HTTP client (made on first use; reads the key bound to the endpoint's host)."""
        if self._client is None:
            self._client = Client(self._served())
            self._client.url = self.url
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    def body(self, messages: list[dict]) -> dict:
        return {"model": self.model, "messages": messages, "temperature": self.temperature, "seed": self.seed}

    def key(self, messages: list[dict]) -> str:
        """The cache key: a hash of the endpoint's URL and the whole request."""
        whole = {"url": self.url, **self.body(messages)}
        return hashlib.sha256(json.dumps(whole, sort_keys=True, ensure_ascii=False).encode()).hexdigest()

    def _path(self, key: str) -> Path | None:
        return None if self.cache_dir is None else Path(self.cache_dir) / key[:2] / f"{key}.json"

    def _entry(self, key: str) -> Answer | None:
        """The cache's answer to the request of `key`, or None where there is none or its record does not hold
        (then the request is made again and the entry written anew)."""
        path = self._path(key)
        if path is None or not os.path.lexists(path):
            return None
        try:
            record = json_loads(read_bytes(path, ENTRY_BYTES, "chat cache entry").decode("utf-8"))
        except (InputError, ValueError, RecursionError):
            return None
        if not isinstance(record, dict) or record.get("version") != CACHE_VERSION or record.get("key") != key:
            return None
        content, refused = record.get("content"), record.get("refused")
        if record.get("model") != self.model or not isinstance(content, str) or len(content) > ANSWER_CHARS + 1:
            return None
        if refused is not None and (refused != REFUSED_KEY or content):
            return None
        if refused is None and quotes_a_key(content, self.keys()):
            return None  # written before the key was known: asked again
        return Answer(content, True, refused)

    def _keep(self, key: str, answer: Answer) -> None:
        """Keep an answer in the cache (written whole, under a temporary name first); an entry that is not a
        regular file (a FIFO, a folder) is removed first, since only chunkeval writes here."""
        path = self._path(key)
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink() or (path.exists() and not path.is_file()):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        record = {"version": CACHE_VERSION, "key": key, "model": self.model}
        write_text(path, json.dumps(record | {"content": answer.text, "refused": answer.refused}, ensure_ascii=False))

    def keys(self) -> list[str]:
        """Every key this chat must never print, write or cache (its own, and every one the user defines)."""
        if self._keys is None:
            self._keys = known_keys(self.client().key)
        return self._keys

    def ask(self, messages: list[dict]) -> Answer:
        """The model's answer to `messages` (from the cache where it holds it). A server's failure is one line
        (`ServedError`)."""
        key = self.key(messages)
        found = self._entry(key)
        if found is not None:
            self.cached += 1
            return found
        client = self.client()
        headers, raw = client.send(self.body(messages), n=ANSWER_BYTES // (256 << 10))
        self.requests += 1
        try:
            data = json_loads(raw.decode("utf-8"))
            content = data["choices"][0]["message"]["content"]
        except (ValueError, RecursionError, KeyError, IndexError, TypeError):
            raise client._fail(
                "answered something that is not a chat completion (choices[0].message.content)"
            ) from None
        if not isinstance(content, str):
            raise client._fail("answered a chat completion without text")
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        self.sent_tokens += _tokens(usage.get("prompt_tokens"), lambda: prompt_tokens(messages))
        self.received_tokens += _tokens(
            usage.get("completion_tokens"), lambda: count_tokens([content[:ANSWER_CHARS]])[0]
        )
        keys = self.keys()
        if quotes_a_key(content, keys):
            answer = Answer("", False, REFUSED_KEY)
        else:
            answer = Answer(mask(content, *keys)[: ANSWER_CHARS + 1], False)  # one more: read as too long
        self._keep(key, answer)
        return answer


def _tokens(reported, counted) -> int:
    """The server's count where it is believable, else cl100k's."""
    ok = isinstance(reported, int) and not isinstance(reported, bool) and 0 <= reported <= MAX_INT
    return reported if ok else counted()


def prompt_tokens(messages: list[dict]) -> int:
    """cl100k tokens of a request's messages (an estimate of what a server counts)."""
    return sum(count_tokens([m["content"] for m in messages])) + 4 * len(messages)
