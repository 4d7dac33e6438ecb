"""A chat model behind an OpenAI-compatible `/chat/completions` endpoint (a hosted API, vLLM, Ollama, a
llama.cpp server): what `chunkeval gold generate` asks for questions (docs/gold.md).

Requests go through the served embedding client's machinery (`embedding.client.Client`): the key only to a
host the user bound it to (`endpoints.yaml`), retries on 429, 5xx and dropped connections with the server's
`Retry-After`, a total deadline per request and a cap on the answer's size. Every usable answer is kept in a
response cache keyed by a hash of the whole request (endpoint, model, messages, temperature, seed), so that a
run interrupted and started again pays for no request twice; an answer that is not usable is not kept.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from chunkeval.engine.embedding.client import Client, count_tokens
from chunkeval.engine.embedding.served import ServedModel
from chunkeval.engine.settings.endpoints import check_base_url, named
from chunkeval.files import write_text
from chunkeval.limits import MAX_INT, json_loads

ANSWER_BYTES = 4 << 20  # the most bytes read of one chat answer


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

    def cached_answer(self, messages: list[dict]) -> str | None:
        path = self._path(self.key(messages))
        if path is None or not path.is_file():
            return None
        try:
            return json.loads(path.read_text(encoding="utf-8"))["content"]
        except (OSError, ValueError, KeyError, TypeError):
            return None  # a damaged entry is asked again

    def keep(self, messages: list[dict], content: str) -> None:
        """Keep a usable answer in the cache (written whole, under a temporary name first)."""
        path = self._path(self.key(messages))
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_text(path, json.dumps({"model": self.model, "content": content}, ensure_ascii=False))

    def ask(self, messages: list[dict]) -> tuple[str, bool]:
        """(the answer's text, whether it came from the cache). A server's failure is one line (`ServedError`)."""
        found = self.cached_answer(messages)
        if found is not None:
            self.cached += 1
            return found, True
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
        self.received_tokens += _tokens(usage.get("completion_tokens"), lambda: count_tokens([content])[0])
        return content, False


def _tokens(reported, counted) -> int:
    """The server's count where it is believable, else cl100k's."""
    ok = isinstance(reported, int) and not isinstance(reported, bool) and 0 <= reported <= MAX_INT
    return reported if ok else counted()


def prompt_tokens(messages: list[dict]) -> int:
    """cl100k tokens of a request's messages (an estimate of what a server counts)."""
    return sum(count_tokens([m["content"] for m in messages])) + 4 * len(messages)
