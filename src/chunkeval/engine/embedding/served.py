"""Served embedding models: a model behind an OpenAI-compatible `/embeddings` endpoint.

A served model is named on the model axis as `openai:MODEL` (OpenAI's endpoint, key from
`OPENAI_API_KEY`) or `openai:MODEL@BASE_URL` (any compatible server), or by a name of the experiment's
`models:` mapping, which gives every setting (`KEYS`), its server as a base URL or as an `endpoint:` of the
user's `endpoints.yaml`. Which key goes to which host is the user's binding (`chunkeval.engine.settings.endpoints`),
never the experiment file's; the key itself is read from the environment when a request is made and is
never part of a setting.

A served model's identity (what keys its vectors) is its model name, `dimensions`, prefixes and input
limit, plus a generation that `chunkeval.engine.embedding.probes` moves on when the model behind the
name answers differently.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import asdict, dataclass, fields

from chunkeval.engine.settings.endpoints import ENV_NAME, OPENAI_BASE_URL, check_base_url, endpoint_key, named
from chunkeval.errors import InputError
from chunkeval.limits import short

PREFIX = "openai:"
_AT_URL = re.compile(r"@(?=https?://)")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class ServedModel:
    """One served model and how chunkeval talks to it (the keys of a `models:` entry)."""

    name: str  # the name on the model axis (rows, reports)
    model: str  # the name the server knows it by
    base_url: str = OPENAI_BASE_URL
    api: str = "openai"
    api_key_env: str | None = None  # None: OPENAI_API_KEY, required only by OpenAI's own endpoint
    batch_size: int = 64  # inputs per request
    max_batch_tokens: int = 100_000  # cl100k tokens per request
    concurrency: int = 2  # requests in flight
    max_input_tokens: int | None = None  # longer inputs are cut (cl100k tokens) and counted as truncated
    dimensions: int | None = None  # sent to the server when given
    query_prefix: str = ""
    document_prefix: str = ""
    price_per_million_tokens: float | None = None
    max_retries: int = 6
    probe_interval: float = 86400.0  # seconds between the watch's probes
    timeout: float = 60.0  # seconds per request, the whole answer included
    endpoint_name: str | None = None  # an endpoint of the user's endpoints.yaml (`endpoint:`), else base_url

    @property
    def endpoint(self) -> str:
        return self.base_url.rstrip("/") + "/embeddings"

    def identity(self) -> dict:
        """What makes vectors of this model comparable: not the endpoint, the concurrency or the price."""
        return {
            "api": self.api,
            "model": self.model,
            "dimensions": self.dimensions,
            "query_prefix": self.query_prefix,
            "document_prefix": self.document_prefix,
            "max_input_tokens": self.max_input_tokens,
        }

    def identity_hash(self) -> str:
        return hashlib.sha256(json.dumps(self.identity(), sort_keys=True).encode()).hexdigest()

    def prompts(self) -> dict[str, str]:
        return {k: v for k, v in (("query", self.query_prefix), ("document", self.document_prefix)) if v}

    def api_key(self) -> str | None:
        """The key from the environment, only where the user bound its variable to this model's host (or the
        host is loopback): `endpoints.endpoint_key`. None where none is needed; a variable asked for that is
        unset, or not bound to the host, is an error."""
        if self.endpoint_name is not None:
            return endpoint_key(self.endpoint_name, None, f"model {self.name}")[1]
        return endpoint_key(self.base_url, self.api_key_env, f"model {self.name}")[1]

    def settings(self) -> dict:
        """The `models:` entry of this model (what an experiment's settings record; never a key)."""
        data = {k: v for k, v in asdict(self).items() if k != "name"}
        defaults = {f.name: f.default for f in fields(self)}
        out = {k: v for k, v in data.items() if k in ("api", "model", "base_url") or v != defaults[k]}
        if self.endpoint_name is not None:  # the server is the user's endpoint, looked up again when read
            out.pop("base_url")
            out["endpoint"] = out.pop("endpoint_name")
        return out


def is_spec(model: str) -> bool:
    return model.startswith(PREFIX)


def parse_spec(spec: str, source: str | None = None) -> ServedModel:
    """`openai:MODEL` or `openai:MODEL@BASE_URL`: split at the `@` before `http://` or `https://`."""
    if not is_spec(spec):
        raise InputError(f"a served model is named openai:MODEL[@BASE_URL], got {short(spec)}", source)
    rest = spec[len(PREFIX) :]
    found = _AT_URL.search(rest)
    model, url = (rest[: found.start()], rest[found.end() :]) if found else (rest, None)
    if not model.strip() or model != model.strip() or "://" in model:
        raise InputError(
            f"model {short(spec)}: write openai:MODEL or openai:MODEL@http(s)://HOST[:PORT][/PATH]", source
        )
    base = OPENAI_BASE_URL if url is None else check_base_url(url, f"model {short(spec)}", source)
    return ServedModel(name=spec, model=model, base_url=base)


def _whole(value, key: str, name: str, source, least: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"models: {name}: {key} must be a whole number, got {short(value)}", source)
    if value < least:
        raise InputError(f"models: {name}: {key} must be at least {least}, got {value}", source)
    return value


def _number(value, key: str, name: str, source) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise InputError(f"models: {name}: {key} must be a number of 0 or more, got {short(value)}", source)
    return float(value)


def parse_duration(value, what: str, source=None) -> float:
    """Seconds from `3600`, `90s`, `30m`, `24h` or `2d`."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    match = _DURATION.match(str(value)) if isinstance(value, str) else None
    if not match or float(match[1]) <= 0:
        raise InputError(f"{what} must be a duration like 3600, 30m or 24h, got {short(value)}", source)
    return float(match[1]) * _SECONDS[match[2]]


def parse_entry(name: str, entry, source: str | None = None) -> ServedModel:
    """One entry of a `models:` mapping, every key checked."""
    if not isinstance(entry, dict):
        raise InputError(f"models: {name} must be a mapping of settings (api, base_url, model, …)", source)
    known = [f.name for f in fields(ServedModel) if f.name not in ("name", "endpoint_name")] + ["endpoint"]
    unknown = sorted(str(k) for k in set(entry) - set(known))
    if unknown:
        raise InputError(f"models: {name}: unknown key(s) {', '.join(unknown)}; known: {', '.join(known)}", source)
    if entry.get("api", "openai") != "openai":
        raise InputError(f"models: {name}: api must be openai, got {short(entry.get('api'))}", source)
    if "endpoint" in entry and ("base_url" in entry or "api_key_env" in entry):
        raise InputError(
            f"models: {name}: endpoint names the server and its key; give it without base_url and api_key_env",
            source,
        )
    values: dict = {"name": name, "model": entry.get("model", name)}
    for key, value in entry.items():
        if key in ("batch_size", "max_batch_tokens", "concurrency", "max_input_tokens", "dimensions"):
            values[key] = _whole(value, key, name, source)
        elif key == "max_retries":
            values[key] = _whole(value, key, name, source, least=0)
        elif key in ("price_per_million_tokens", "timeout"):
            values[key] = _number(value, key, name, source)
        elif key == "probe_interval":
            values[key] = parse_duration(value, f"models: {name}: probe_interval", source)
        elif key == "base_url":
            values[key] = check_base_url(str(value), f"models: {name}", source)
        elif key == "endpoint":
            if not isinstance(value, str):
                raise InputError(f"models: {name}: endpoint names an endpoint of endpoints.yaml", source)
            values["endpoint_name"] = value
            values["base_url"] = named(value, f"models: {name}", source).base_url
        elif key == "api_key_env":
            if not isinstance(value, str) or not ENV_NAME.fullmatch(value):
                raise InputError(
                    f"models: {name}: api_key_env names an environment variable (not the key), got a value "
                    f"of {len(str(value))} characters",
                    source,
                )
            values[key] = value
        elif key != "api":
            if not isinstance(value, str):
                raise InputError(f"models: {name}: {key} must be text, got {short(value)}", source)
            values[key] = value
    if values.get("timeout") == 0:
        raise InputError(f"models: {name}: timeout must be more than 0", source)
    if not str(values["model"]).strip():
        raise InputError(f"models: {name}: model must name the server's model", source)
    return ServedModel(**values)


def parse_models(mapping, source: str | None = None) -> tuple[ServedModel, ...]:
    """The `models:` mapping of an experiment: name → settings."""
    if isinstance(mapping, (list, tuple)) and all(isinstance(m, ServedModel) for m in mapping):
        return tuple(mapping)
    if not isinstance(mapping, dict):
        raise InputError("models: must map model names to their settings", source)
    out = []
    for name, entry in mapping.items():
        name = str(name).strip()
        if not name or "," in name or is_spec(name):
            raise InputError(f"models: {short(name)} is not a name for a model (no commas, not openai:…)", source)
        out.append(parse_entry(name, entry, source))
    return tuple(out)


def lookup(model: str, defined: tuple[ServedModel, ...] = ()) -> ServedModel | None:
    """The served model `model` names (a `models:` name or an `openai:` spec), None for a local model."""
    for served in defined:
        if served.name == model:
            return served
    return parse_spec(model) if is_spec(model) else None
