"""One exchange with a destination of alarms, bounded: what it answers is untrusted input, as a model's is.

A webhook's POST (`post`) and an email over SMTP (`send_mail`) each run under one `Exchange`: a deadline on the
whole exchange (connect, TLS, every read and write: `DEADLINE` seconds, however the answer trickles), a bound on
every byte the destination sends (`EXCHANGE_BYTES`: status line, headers, SMTP replies), of which at most
`BODY_BYTES` of an HTTP answer's body are read (a declared gigabyte is never read), and no decompression (the
request asks for `identity`; an encoded answer is named, not inflated). What is shown of an answer passes
`Redaction`, which knows every secret of the destination in the forms a server may echo it (plain, URL-encoded,
URL-decoded, base64, and base64 at any offset of a longer value such as SMTP's `AUTH PLAIN`), and is then cut and
escaped to one line. Only the standard library: the Prefect server imports this (chunkeval's notification blocks,
`chunkeval.flows.email_block`). Limits and figures: docs/limits.md, "Alarm destinations".
"""

from __future__ import annotations

import base64
import http.client
import re
import smtplib
import socket
import ssl
import threading
import time
import urllib.request
from email.message import EmailMessage
from urllib.parse import quote, quote_plus, unquote, unquote_plus, urlsplit

from chunkeval.visible import visible

DEADLINE = 20.0  # seconds one whole exchange may take, however its answer trickles
READ_TIMEOUT = 10.0  # seconds of silence that end it sooner
EXCHANGE_BYTES = 256 * 1024  # every byte a destination may send in one exchange
BODY_BYTES = 16 * 1024  # of an HTTP answer's body, at most, read
SHOWN_CHARS = 300  # of an answer, at most, shown
MIN_SECRET_CHARS = 4  # a shorter value is masked nowhere (it would mask ordinary words)


class Overrun(Exception):
    """A destination that went past a bound of the exchange (its deadline, or the bytes it may send)."""


class Exchange:
    """The bounds of one exchange: a watchdog shuts every socket down at the deadline (a blocked read returns),
    and each read is counted against `EXCHANGE_BYTES`."""

    def __init__(self, seconds: float = DEADLINE, limit: int = EXCHANGE_BYTES):
        self.seconds, self.limit, self.received = seconds, limit, 0
        self.end = time.monotonic() + seconds
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._timer.cancel()

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._sockets:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def left(self) -> float:
        """Seconds a read or write may wait now (never past the deadline)."""
        remaining = self.end - time.monotonic()
        if remaining <= 0 or self.expired:
            raise Overrun(f"no whole answer within {self.seconds:g} s")
        return min(remaining, READ_TIMEOUT)

    def connect(self, address: tuple, timeout=None, source_address=None) -> socket.socket:
        """`socket.create_connection`, watched (the signature http.client and smtplib call it with)."""
        sock = socket.create_connection(address, self.left(), source_address)
        with self._lock:
            self._sockets.append(sock)
            if self.expired:
                sock.shutdown(socket.SHUT_RDWR)
        return sock

    def count(self, n: int) -> None:
        """`n` more bytes received: past `limit`, the exchange ends."""
        self.received += n
        if self.received > self.limit:
            raise Overrun(f"it sent more than {self.limit // 1024} KiB")

    def said(self, exc: BaseException) -> str:
        """Why an exchange ended without an answer, in a few words."""
        if self.expired:
            return f"no whole answer within {self.seconds:g} s"
        if isinstance(exc, Overrun):
            return str(exc)
        if isinstance(exc, TimeoutError):
            return f"no answer for {READ_TIMEOUT:g} s"
        return f"{type(exc).__name__}: {exc}"


class _Counted:
    """A socket's file whose every read is counted against its exchange (and waits no longer than it may)."""

    def __init__(self, file, sock, exchange: Exchange):
        self._file, self._sock, self._exchange = file, sock, exchange

    def _wait(self):
        self._sock.settimeout(self._exchange.left())

    def _got(self, data):
        self._exchange.count(len(data or b""))
        return data

    def readline(self, limit=-1):
        self._wait()
        return self._got(self._file.readline(limit))

    def read(self, n=-1):
        self._wait()
        return self._got(self._file.read(n if n is not None and n >= 0 else self._exchange.limit + 1))

    def read1(self, n=-1):
        self._wait()
        return self._got(self._file.read1(n if n >= 0 else 8192))

    def readinto(self, buffer):
        self._wait()
        n = self._file.readinto(buffer)
        self._exchange.count(n or 0)
        return n

    def __getattr__(self, name):
        return getattr(self._file, name)


class _CountedSocket:
    """A connected socket whose files are `_Counted` (what http.client reads a response from)."""

    def __init__(self, sock, exchange: Exchange):
        self._sock, self._exchange = sock, exchange

    def makefile(self, *args, **kwargs):
        return _Counted(self._sock.makefile(*args, **kwargs), self._sock, self._exchange)

    def sendall(self, data):
        self._sock.settimeout(self._exchange.left())
        return self._sock.sendall(data)

    def __getattr__(self, name):
        return getattr(self._sock, name)


# --------------------------------------------------------------------------- HTTP


def _connection(url: str, exchange: Exchange) -> tuple[http.client.HTTPConnection, str]:
    """A connection to `url`'s origin (through the proxy the environment names for it, as before: HTTPS_PROXY,
    HTTP_PROXY, NO_PROXY) and the request target to send it."""
    parts = urlsplit(url)
    secure = parts.scheme == "https"
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    proxy = None if urllib.request.proxy_bypass(parts.hostname or "") else urllib.request.getproxies().get(parts.scheme)
    host, port = parts.hostname, parts.port or (443 if secure else 80)
    if proxy:
        via = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        host, port = via.hostname, via.port or 8080
    cls = http.client.HTTPSConnection if secure else http.client.HTTPConnection
    kwargs = {"context": ssl.create_default_context()} if secure else {}
    conn = cls(host, port, timeout=READ_TIMEOUT, **kwargs)
    conn._create_connection = exchange.connect  # the watchdog sees the socket before TLS or a tunnel
    if proxy and secure:
        conn.set_tunnel(parts.hostname, parts.port or 443)
    elif proxy:
        target = url
    return conn, target


def post(url: str, body: bytes, headers: dict, exchange: Exchange) -> tuple[int, str]:
    """POST `body` to `url` within `exchange`'s bounds: (status, the first `BODY_BYTES` of the answer's body as
    text, or a word on a body that was not read). Redirects are not followed."""
    conn, target = _connection(url, exchange)
    try:
        conn.connect()
        conn.sock = _CountedSocket(conn.sock, exchange)
        conn.request("POST", target, body=body, headers={**headers, "Accept-Encoding": "identity"})
        response = conn.getresponse()
        encoding = (response.getheader("Content-Encoding") or "identity").strip().lower()
        if encoding != "identity":
            text = f"(an answer encoded {encoding[:20]}: not read)"
        else:
            text = response.read(BODY_BYTES).decode("utf-8", "replace")
        if exchange.expired:
            text = f"(its answer cut at the {exchange.seconds:g} s deadline) {text}"
        return response.status, text
    finally:
        conn.close()


# --------------------------------------------------------------------------- SMTP


class _Bounded(smtplib.SMTP):
    """smtplib's client with every reply read through its exchange: a greeting that never ends, or trickles,
    ends at the exchange's bounds (smtplib alone bounds a line, not a reply, and waits per read)."""

    def __init__(self, exchange: Exchange, *args, **kwargs):
        self._exchange = exchange
        super().__init__(*args, **kwargs)

    def _get_socket(self, host, port, timeout):
        return self._exchange.connect((host, port))

    def getreply(self):
        if self.file is None and self.sock is not None:
            self.file = _Counted(self.sock.makefile("rb"), self.sock, self._exchange)
        return super().getreply()

    def send(self, s):
        if self.sock is not None:
            self.sock.settimeout(self._exchange.left())
        return super().send(s)


class _BoundedSSL(smtplib.SMTP_SSL, _Bounded):
    """The same over SMTPS (the watched socket is the plain one under TLS)."""

    def __init__(self, exchange: Exchange, *args, **kwargs):
        self._exchange = exchange
        smtplib.SMTP_SSL.__init__(self, *args, **kwargs)


def send_mail(
    host: str, port: int, security: str, sender: str, to: list[str], subject: str, body: str,
    username: str | None, password: str | None, exchange: Exchange,
) -> dict:  # fmt: skip
    """Send one email within `exchange`'s bounds (`security`: none, starttls or ssl); the recipients refused."""
    message = EmailMessage()
    message["Subject"], message["From"], message["To"] = subject, sender, ", ".join(to)
    message.set_content(body)
    context = ssl.create_default_context()
    if security == "ssl":
        server = _BoundedSSL(exchange, host, port, timeout=READ_TIMEOUT, context=context)
    else:
        server = _Bounded(exchange, host, port, timeout=READ_TIMEOUT)
    with server:
        if security == "starttls":
            server.starttls(context=context)
        if username:
            server.login(username, password or "")
        return server.send_message(message)


# --------------------------------------------------------------------------- what is shown of an answer


def _base64_forms(value: bytes) -> set[str]:
    """`value` in base64, alone and at each of the three offsets it may sit at inside a longer encoded value
    (the characters that encode only its own bytes)."""
    forms = {base64.b64encode(value).decode().rstrip("=")}
    for skip in range(3):
        inner = value[skip:]
        inner = inner[: len(inner) - len(inner) % 3]
        if len(inner) >= 6:
            forms.add(base64.b64encode(inner).decode())
    return forms


class Redaction:
    """Every secret of a destination, and what it looks like echoed: `apply` masks each as `***`.

    `secrets` are whole values (a token, a password, a user name, a URL's path and query); a URL's path segments
    and query values are secrets of their own (a webhook's token is one segment of its path)."""

    def __init__(self, *secrets: str | None, urls: tuple[str, ...] = (), logins: tuple[tuple, ...] = ()):
        values = {s for s in secrets if s}
        for url in urls:
            parts = urlsplit(url)
            values |= {url, parts.path, parts.query, *parts.path.split("/")}
            values |= {v for pair in parts.query.split("&") for v in pair.split("=", 1)}
            values |= {parts.username or "", parts.password or ""}
        forms: set[str] = set()
        for value in {v.strip() for v in values} - {""}:
            for form in {value, quote(value, safe=""), quote(value), quote_plus(value), unquote(value)}:
                forms.add(form)
                forms.add(unquote_plus(form))
            forms |= _base64_forms(value.encode())
        for user, password in logins:  # SMTP AUTH PLAIN's and LOGIN's encodings of a login
            forms |= _base64_forms(f"\0{user or ''}\0{password or ''}".encode())
        kept = sorted((f for f in forms if len(f) >= MIN_SECRET_CHARS), key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, kept)), re.I) if kept else None

    def apply(self, text: str) -> str:
        return self._pattern.sub("***", text) if self._pattern else text

    def shown(self, text: str) -> str:
        """`text` masked, then as one line of printable text cut at `SHOWN_CHARS` (masked before the cut: no part
        of a secret survives a truncation)."""
        line = visible(" ".join(self.apply(str(text)).split()))
        return line if len(line) <= SHOWN_CHARS else line[: SHOWN_CHARS - 1] + "…"
