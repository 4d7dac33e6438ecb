"""Which key may go to which host: endpoints the user binds in their own settings, never an experiment file.

`endpoints.yaml` maps endpoint names to a base URL and the environment variable that holds its key:

    team:
      base_url: https://embed.example.com/v1
      api_key_env: TEAM_EMBED_KEY

It is read from `$CHUNKEVAL_HOME/endpoints.yaml` and, beneath it in precedence (a name in both is the
home's), from `$XDG_CONFIG_HOME/chunkeval/endpoints.yaml` (default `~/.config/chunkeval`). Built in, beneath
both: `openai` (`https://api.openai.com/v1`, `OPENAI_API_KEY`). A key variable is bound to the origin
(scheme, host, port) of each base URL it is listed with: a key is sent to no other origin, except loopback
hosts, which need no binding: the literal addresses 127.0.0.0/8 and ::1, and the name `localhost` itself,
resolved at connection time and connected to only where it resolves to loopback (no other name:
`evil.localhost` is whatever a resolver answers).

`resolve_endpoint(name_or_url)` gives `(base_url, headers)` for any client of an OpenAI-compatible API
(embeddings, chat completions); `mask` hides keys in any text that may quote a server.

An entry with a `kind` is a destination of alarms instead (`destinations()`, docs/loop.md "Who is told"): its
URL may hold a secret path or query (a Slack webhook's), so it lives here, never in an experiment file, and is
shown masked (`Destination.shown`):

    team-alerts:
      base_url: https://hooks.slack.com/services/T000/B000/XXXX
      kind: slack                 # webhook (a JSON body), slack, teams, or email
    oncall-mail:
      base_url: smtp://mail.example.com:587     # smtp:// (starttls: true to upgrade) or smtps://
      kind: email
      to: [oncall@example.com]
      from: chunkeval@example.com
      username: chunkeval          # optional, with password_env naming the variable that holds the password
      password_env: SMTP_PASSWORD
"""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from chunkeval.errors import InputError
from chunkeval.limits import read_text, short, yaml_load
from chunkeval.paths import home

FILE = "endpoints.yaml"
OPENAI = "openai"
OPENAI_BASE_URL = "https://api.openai.com/v1"
OPENAI_KEY_ENV = "OPENAI_API_KEY"
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ENDPOINT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
MAX_FILE_BYTES = 1 << 20  # an endpoints file is a few lines


@dataclass(frozen=True)
class Endpoint:
    name: str
    base_url: str
    api_key_env: str | None  # None: a server that takes no key
    source: str  # the file that defines it, or "built in"


ALERT_KINDS = ("webhook", "slack", "teams", "email")
EMAIL = re.compile(r"[^@\s<>,;\"']+@[^@\s<>,;\"']+")
_DESTINATION_KEYS = {"base_url", "kind", "api_key_env", "to", "from", "username", "password_env", "starttls"}


@dataclass(frozen=True)
class Destination:
    """Where alarms go: a webhook (JSON body), Slack, Teams, or email over SMTP (`kind`), with what reaching it
    takes. `url` may hold secrets: print `shown()`, never it."""

    name: str
    kind: str
    url: str
    source: str
    api_key_env: str | None = None  # webhook kinds: the variable of a bearer token sent with each message
    to: tuple[str, ...] = ()  # email
    sender: str = ""  # email: the From address
    username: str | None = None  # email: SMTP login
    password_env: str | None = None
    starttls: bool = False

    def shown(self) -> str:
        """The URL with its path and query hidden (a webhook's secret lives there): `https://hooks.slack.com/***`."""
        scheme, host, port = origin(self.url)
        hidden = "/***" if urlsplit(self.url).path.strip("/") or urlsplit(self.url).query else ""
        return f"{scheme}://{host}:{port}{hidden}"


def _destination(name: str, entry: dict, path: Path) -> Destination:
    where = f"destination {name}"
    unknown = sorted(set(map(str, entry)) - _DESTINATION_KEYS)
    if unknown:
        raise InputError(
            f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(_DESTINATION_KEYS))}", path
        )
    kind = entry["kind"]
    if kind not in ALERT_KINDS:
        raise InputError(f"{where}: kind must be {', '.join(ALERT_KINDS)}, got {short(kind)}", path)
    url = str(entry.get("base_url", ""))
    for key in ("api_key_env", "password_env"):
        env = entry.get(key)
        if env is not None and (not isinstance(env, str) or not ENV_NAME.fullmatch(env)):
            raise InputError(f"{where}: {key} names an environment variable, not a secret", path)
    if any(c.isspace() or ord(c) < 32 for c in url):
        raise InputError(f"{where}: base_url holds white space", path)
    fault = url_fault(url)
    if fault:
        raise InputError(f"{where}: base_url is not a URL: {fault}", path)
    parts = urlsplit(url)
    if kind != "email":
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.password:
            raise InputError(f"{where}: a {kind} destination's base_url is http:// or https:// with a host", path)
        if set(entry) & {"to", "from", "username", "password_env", "starttls"}:
            raise InputError(f"{where}: to, from, username, password_env and starttls are an email's", path)
        return Destination(name, kind, url, str(path), entry.get("api_key_env"))
    if parts.scheme not in ("smtp", "smtps") or not parts.hostname or parts.path.strip("/") or parts.query:
        raise InputError(f"{where}: an email destination's base_url is smtp://HOST:PORT or smtps://HOST:PORT", path)
    to = entry.get("to")
    to = [to] if isinstance(to, str) else to
    if not isinstance(to, list) or not to or not all(isinstance(a, str) and EMAIL.fullmatch(a) for a in to):
        raise InputError(f"{where}: to is a list of email addresses, got {short(entry.get('to'))}", path)
    sender = entry.get("from", "chunkeval@localhost")
    if not isinstance(sender, str) or not EMAIL.fullmatch(sender):
        raise InputError(f"{where}: from is an email address, got {short(sender)}", path)
    username = entry.get("username")
    if username is not None and (not isinstance(username, str) or not username or "\n" in username):
        raise InputError(f"{where}: username is one line of text", path)
    if entry.get("api_key_env") is not None:
        raise InputError(f"{where}: an email destination takes username and password_env, not api_key_env", path)
    starttls = entry.get("starttls", False)
    if not isinstance(starttls, bool):
        raise InputError(f"{where}: starttls is true or false", path)
    return Destination(
        name, kind, url, str(path), None, tuple(to), sender, username, entry.get("password_env"), starttls
    )


def files() -> list[Path]:
    """The endpoints files, highest precedence first (whether they exist or not)."""
    config = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config").expanduser()
    return [home() / FILE, config / "chunkeval" / FILE]


def url_fault(url: str) -> str | None:
    """What is wrong with `url` as a URL, naming the part (its port, its host) and never quoting the value: a
    URL may hold a secret (a webhook's token is its path), and a message that shows it lands in CI logs. None
    where it parses."""
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # urlsplit's own words name the part: an unclosed '[', an invalid IPv6 host
        return "its host is not valid (an unclosed '[' or a bad IPv6 address)" if "IPv6" in str(exc) else str(exc)
    try:
        parts.port  # noqa: B018 (a port that is no number, or past 65535, raises here)
    except ValueError:
        return "its port is not a number from 0 to 65535"
    return None


def shown_origin(url: str) -> str:
    """`url` as a message may show it: its scheme, host and port, and `/…` for whatever follows (never a path, a
    query or a user, where a secret may be)."""
    parts = urlsplit(url)
    rest = "/…" if parts.path.strip("/") or parts.query or parts.fragment else ""
    netloc = parts.netloc.rpartition("@")[2]
    return short(f"{parts.scheme}://{netloc}{rest}" if parts.scheme else "(no scheme)")


def check_base_url(url: str, what: str, source: str | None = None) -> str:
    """An http(s) URL with a host and no credentials, query or fragment, without its trailing `/`."""
    fault = url_fault(url)
    if fault:
        raise InputError(f"{what}: base URL is not a URL: {fault}", source)
    parts = urlsplit(url)
    port = parts.port
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(f"{what}: base URL {shown_origin(url)} must be http:// or https:// with a host", source)
    if parts.username or parts.password or parts.query or parts.fragment or (port is not None and port < 1):
        raise InputError(
            f"{what}: base URL {shown_origin(url)} must hold no user, password, query or fragment "
            "(a key goes in the variable api_key_env names)",
            source,
        )
    if any(c.isspace() or ord(c) < 32 for c in url):
        raise InputError(f"{what}: base URL {shown_origin(url)} holds white space", source)
    return url.rstrip("/")


def _read(path: Path) -> dict[str, Endpoint | Destination]:
    if not os.path.lexists(path):
        return {}
    data = yaml_load(read_text(path, MAX_FILE_BYTES, "endpoints file"), path)  # never a FIFO, never unbounded
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InputError("endpoints.yaml maps endpoint names to {base_url, api_key_env}", path)
    out = {}
    for name, entry in data.items():
        if not isinstance(name, str) or not ENDPOINT_NAME.fullmatch(name):
            raise InputError(f"endpoint name {short(name)} must be one word of letters, digits, '.', '_', '-'", path)
        if isinstance(entry, dict) and "kind" in entry:  # a destination of alarms
            out[name] = _destination(name, entry, path)
            continue
        if not isinstance(entry, dict) or "base_url" not in entry or set(entry) - {"base_url", "api_key_env"}:
            raise InputError(
                f"endpoint {name}: give base_url and api_key_env (an endpoint), or kind (a destination of alarms)",
                path,
            )
        env = entry.get("api_key_env")
        if env is not None and (not isinstance(env, str) or not ENV_NAME.fullmatch(env)):
            raise InputError(f"endpoint {name}: api_key_env names an environment variable, not a key", path)
        url = check_base_url(str(entry["base_url"]), f"endpoint {name}", str(path))
        out[name] = Endpoint(name, url, env, str(path))
    return out


def _entries() -> dict[str, Endpoint | Destination]:
    found: dict[str, Endpoint | Destination] = {OPENAI: Endpoint(OPENAI, OPENAI_BASE_URL, OPENAI_KEY_ENV, "built in")}
    for path in reversed(files()):
        found.update(_read(path))
    return found


def endpoints() -> dict[str, Endpoint]:
    """Every endpoint the user defines, the home's over the config folder's over the built-in one."""
    return {n: e for n, e in _entries().items() if isinstance(e, Endpoint)}


def destinations() -> dict[str, Destination]:
    """Every destination of alarms the user defines (entries with a `kind`), the home's over the config folder's."""
    return {n: e for n, e in _entries().items() if isinstance(e, Destination)}


def destination(name: str, what: str = "alerts", source=None) -> Destination:
    """The destination of that name; one line naming the files and the destinations defined when there is none."""
    found = destinations()
    if name not in found:
        where = " or ".join(str(p) for p in files())
        defined = ", ".join(sorted(found)) or "none"
        raise InputError(
            f"{what}: no destination {short(name)} in {where} (destinations, entries with a kind: {defined}); "
            "add `NAME: {base_url: URL, kind: webhook}` there (docs/loop.md)",
            source,
        )
    return found[name]


def origin(url: str) -> tuple[str, str, int]:
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port or (443 if parts.scheme == "https" else 80)


LOOPBACK_NAME = "localhost"  # the one name that counts as loopback, and only once resolved to loopback


def loopback_address(host: str) -> bool:
    """Whether `host` is a literal loopback address: 127.0.0.0/8, ::1 (or ::ffff:127.x.y.z)."""
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def is_loopback(url: str) -> bool:
    """Whether `url`'s host is loopback: a literal loopback address, or the name `localhost` itself, which a
    client then resolves at connection time and connects to only where every address is loopback
    (`loopback_addresses`). No other name counts (`evil.localhost` is whatever a resolver answers)."""
    host = origin(url)[1].strip("[]")
    return host == LOOPBACK_NAME or loopback_address(host)


def loopback_addresses(host: str, port: int) -> list[str]:
    """The addresses `localhost` resolves to now, each checked to be loopback: what a request that carries a
    key unbound by the user (the loopback exemption) connects to. One line, no connection, where the resolver
    answers anything else."""
    import socket

    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise InputError(f"{host} does not resolve ({exc.strerror or exc}): no key is sent") from None
    addresses = list(dict.fromkeys(info[4][0] for info in found))
    stray = [a for a in addresses if not loopback_address(a)]
    if not addresses or stray:
        raise InputError(
            f"{host} resolves to {short(stray[0] if stray else 'nothing')}, not a loopback address: no key is sent "
            "to it (bind the endpoint in endpoints.yaml, docs/served.md)"
        )
    return addresses


def named(name: str, what: str, source=None) -> Endpoint:
    """The endpoint of that name; one line listing the defined ones when there is none."""
    found = endpoints()
    if name not in found:
        where = " or ".join(str(p) for p in files())
        raise InputError(f"{what}: no endpoint {short(name)} in {where} (defined: {', '.join(sorted(found))})", source)
    return found[name]


def bound_env(url: str) -> str | None:
    """The key variable the user bound to `url`'s origin (the highest-precedence endpoint there)."""
    for endpoint in reversed(list(endpoints().values())):
        if origin(endpoint.base_url) == origin(url) and endpoint.api_key_env:
            return endpoint.api_key_env
    return None


def key_env_for(url: str, asked: str | None, what: str, source=None) -> str | None:
    """The variable whose key may go to `url`: `asked` (an experiment's `api_key_env`) when the user bound it
    to that origin or the host is loopback, else one line saying how to bind it; with nothing asked, the
    variable bound to the origin (on loopback, else none: the request goes without a key)."""
    allowed = {e.api_key_env for e in endpoints().values() if e.api_key_env and origin(e.base_url) == origin(url)}
    if asked is None:
        return bound_env(url)
    if asked in allowed or is_loopback(url):
        return asked
    scheme, host, port = origin(url)
    raise InputError(
        f"{what}: the key in {asked} is not bound to {scheme}://{host}:{port}; a key goes only to hosts you bind "
        f"it to: add `NAME: {{base_url: {url}, api_key_env: {asked}}}` to {files()[0]} and write `endpoint: NAME`",
        source,
    )


def read_key(env: str, what: str, source=None, required: bool = True) -> str | None:
    """The key in variable `env`, stripped of surrounding white space (a CR from a CRLF .env file); a key
    with white space or control characters inside is refused (naming the variable, never the key)."""
    key = (os.environ.get(env) or "").strip()
    if not key:
        if required:
            raise InputError(f"{what}: the API key variable {env} is not set", source)
        return None
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 or ord(c) > 126 for c in key):
        raise InputError(f"{what}: the API key in {env} holds white space, control or non-ASCII characters", source)
    return key


def endpoint_key(name_or_url: str, api_key_env: str | None = None, what: str = "endpoint") -> tuple[str, str | None]:
    """`(base_url, key or None)` for an endpoint name of `endpoints.yaml` or a base URL. The key is read only
    from a variable bound to that origin, or on a loopback host (where, with no variable asked, the
    OpenAI SDK's `OPENAI_API_KEY` goes when set). `api_key_env` is what an experiment file asked for (kept
    working for bound and loopback hosts); an asked variable, or a bound one, must be set."""
    if "://" in name_or_url:
        url = check_base_url(name_or_url, what)
        env = key_env_for(url, api_key_env, what)
        required = api_key_env is not None or url == OPENAI_BASE_URL
        if env is None and is_loopback(url):
            env, required = OPENAI_KEY_ENV, False
    else:
        endpoint = named(name_or_url, what)
        url, env, required = endpoint.base_url, endpoint.api_key_env, True
    return url, (read_key(env, what, required=required) if env else None)


def resolve_endpoint(name_or_url: str, api_key_env: str | None = None, what: str = "endpoint") -> tuple[str, dict]:
    """`(base_url, headers)` for a request to an endpoint name of `endpoints.yaml` or a base URL, for any
    client of an OpenAI-compatible API: the headers hold `Authorization: Bearer KEY` only where
    `endpoint_key` allows a key."""
    url, key = endpoint_key(name_or_url, api_key_env, what)
    return url, ({"Authorization": f"Bearer {key}"} if key else {})


def known_keys(*more: str | None) -> list[str]:
    """Every key chunkeval could send: the values of the variables every endpoint names (`endpoints.yaml`, the
    built-in `openai`), and `more` (a client's own). What an answer is searched for (`quotes_a_key`) and masked of
    (`mask`) before anything is printed, written or cached; an endpoints file that does not read gives none of its
    own (the command that needs it says why)."""
    names = {OPENAI_KEY_ENV}
    try:
        names |= {e.api_key_env for e in endpoints().values() if e.api_key_env}
    except InputError:
        pass
    found = [(os.environ.get(n) or "").strip() for n in sorted(names)] + [(k or "").strip() for k in more]
    return sorted({k for k in found if len(k) >= MIN_KEY_CHARS}, key=len, reverse=True)


MIN_KEY_CHARS = 8  # a shorter value is no key worth looking for (and would mask ordinary words)


def quotes_a_key(text: str, keys: list[str]) -> bool:
    """Whether `text` holds one of `keys`: as it is, in other letter case, or with white space put inside it."""
    if not keys:
        return False
    folded = "".join(text.split()).casefold()
    return any(k in text or k.casefold() in folded for k in keys)


def mask(text: str, *keys: str | None) -> str:
    """`text` with every key (and its stripped form, in any letter case) replaced by `***`: done before any cut,
    so that no part of a key survives a truncation."""
    for key in keys:
        for form in {key, (key or "").strip()}:
            if form and len(form) >= 4:
                text = re.sub(re.escape(form), "***", text, flags=re.I)
    return text
