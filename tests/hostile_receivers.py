"""Destinations of alarms that answer as a hostile or broken server would, on 127.0.0.1, for the tests of
`chunkeval alerts test` and of the automations `chunkeval serve` creates (issue 55): an HTTP receiver whose path
chooses the answer, and SMTP servers each with one way of answering. Each is bounded itself (a trickle ends when
its client hangs up; nothing here is held past the test) and records what it was sent.

HTTP answers, by the path's first segment:
- `gigabyte`: declares 1 GB of body and writes it as fast as the client reads;
- `gzip`: a gzip body of about 0.5 MiB that inflates to 512 MiB (`Content-Encoding: gzip`);
- `trickle-body`: a status and headers, then the body a byte every 0.2 s, for ever;
- `trickle-head`: the status line itself a byte every 0.2 s;
- `silent`: reads the request and answers nothing;
- `echo`: 400, quoting the request line (path and query, URL-decoded too), its headers and its body;
- `terminal`: 500 with ANSI escapes, a carriage return and a NUL in the body;
- `redirect`: 302 to a URL on this receiver that records a second request (never to be followed);
- anything else: 200 `ok`.

SMTP ways (`smtp_receiver(way)`): `endless` (a greeting of continuation lines that never ends), `trickle` (a
greeting a byte every 0.2 s), `auth-echo` (refuses authentication, quoting the AUTH line it was sent), `ok`.
"""

from __future__ import annotations

import contextlib
import gzip
import socket
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from urllib.parse import unquote

TRICKLE = 0.2  # seconds between two bytes of a trickle


@cache
def gzip_bomb() -> bytes:
    """64 MiB of zeros, gzip-compressed (about 64 KiB), made once per session: written eight times over (a gzip
    stream of members inflates to their sum), 0.5 MiB that inflate to 512 MiB."""
    return gzip.compress(bytes(64 << 20), compresslevel=9)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def _serve(handler) -> tuple[_Server, threading.Thread]:
    server = _Server(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, thread


def _read_request(sock: socket.socket) -> bytes:
    """A request's head and body (by its Content-Length), or what came before the client stopped."""
    data = b""
    sock.settimeout(10)
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip() or 0)
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def _trickle(sock: socket.socket, data: bytes) -> None:
    for i in range(len(data)):
        sock.sendall(data[i : i + 1])
        time.sleep(TRICKLE)


@contextlib.contextmanager
def http_receiver() -> Iterator[tuple[str, list[bytes], dict[str, int]]]:
    """(its base URL, the raw requests it received, the bytes of body it managed to write by way: what a client
    that stops reading leaves unsent)."""
    received: list[bytes] = []
    sent: dict[str, int] = {}

    class Handler(socketserver.BaseRequestHandler):
        def handle(self):
            sock = self.request
            request = _read_request(sock)
            received.append(request)
            line = request.split(b"\r\n", 1)[0]
            path = line.split(b" ")[1].decode() if line.count(b" ") >= 2 else "/"
            way = path.lstrip("/").split("/")[0].split("?")[0]
            try:
                self.answer(sock, way, request)
            except OSError:  # the client hung up: what a bounded client does
                pass

        def answer(self, sock, way, request):
            if way == "gigabyte":
                sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1000000000\r\n\r\n")
                block = b"A" * 65536
                for _ in range(1_000_000_000 // len(block)):
                    sock.sendall(block)
                    sent[way] = sent.get(way, 0) + len(block)
            elif way == "gzip":
                bomb = gzip_bomb() * 8
                sock.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Encoding: gzip\r\n"
                    + f"Content-Length: {len(bomb)}\r\n\r\n".encode()
                    + bomb
                )
            elif way == "trickle-body":
                sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100000\r\n\r\n")
                _trickle(sock, b"x" * 100000)
            elif way == "trickle-head":
                _trickle(sock, b"HTTP/1.1 200 OK\r\n" + b"X-Slow: " + b"y" * 100000)
            elif way == "silent":
                time.sleep(120)
            elif way == "echo":
                text = request.decode("utf-8", "replace")
                quoted = f"bad request: {text} (decoded: {unquote(text)})".encode()
                sock.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: %d\r\n\r\n%s" % (len(quoted), quoted))
            elif way == "terminal":
                body = b"\x1b[2J\x1b[31mowned\rnot\x00here\x07"
                sock.sendall(b"HTTP/1.1 500 Oops\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            elif way == "redirect":
                sock.sendall(b"HTTP/1.1 302 Found\r\nLocation: /followed\r\nContent-Length: 0\r\n\r\n")
            else:
                sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    server, _ = _serve(Handler)
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received, sent
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def smtp_receiver(way: str) -> Iterator[tuple[int, list[bytes]]]:
    """(its port, the lines it was sent) of an SMTP server that answers `way` (module docstring)."""
    received: list[bytes] = []

    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            try:
                self.talk()
            except OSError:
                pass

        def say(self, text: str):
            self.wfile.write(text.encode() + b"\r\n")
            self.wfile.flush()

        def talk(self):
            if way == "endless":
                line = b"220-" + b"e" * 1000 + b"\r\n"
                while True:
                    self.wfile.write(line * 64)
            if way == "trickle":
                _trickle(self.connection, b"220 " + b"t" * 100000 + b"\r\n")
                return
            self.say("220 hostile.example ESMTP")
            while True:
                line = self.rfile.readline(65536)
                if not line:
                    return
                received.append(line)
                verb = line.split(b" ")[0].strip().upper()
                if verb == b"EHLO":
                    self.say("250-hostile.example\r\n250 AUTH PLAIN LOGIN")
                elif verb == b"AUTH":
                    quoted = line.decode("ascii", "replace").strip()
                    self.say(f"535 5.7.8 Authentication credentials invalid: you sent {quoted}")
                elif verb == b"QUIT":
                    self.say("221 bye")
                    return
                elif verb == b"DATA":
                    self.say("354 go on")
                    while self.rfile.readline(65536) not in (b".\r\n", b""):
                        pass
                    self.say("250 accepted")
                else:
                    self.say("250 ok")

    server, _ = _serve(Handler)
    try:
        yield server.server_address[1], received
    finally:
        server.shutdown()
        server.server_close()


# the chunkeval command, run so that it writes its own peak RSS (VmHWM) when it exits: `VmHWM` is its own memory
# since exec, where a child's `ru_maxrss` (os.wait4) starts from the parent it was forked from (a test worker that
# has held 1.7 GB reports 1.7 GB for a child that never held 100 MiB)
_MEASURED = """import atexit, sys
PEAK = sys.argv[1]
def _peak():
    with open('/proc/self/status') as f, open(PEAK, 'w') as out:
        out.write(next(line.split()[1] for line in f if line.startswith('VmHWM:')))
atexit.register(_peak)
sys.argv = ['chunkeval', *sys.argv[2:]]
from chunkeval.cli import main
sys.exit(main())
"""


def run_measured(args: list[str], env: dict, peak_file: Path) -> tuple[int, str, float, float]:
    """`chunkeval ARGS` as a whole process: (exit status, stdout + stderr, wall seconds, its own peak RSS in MiB)."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", _MEASURED, str(peak_file), *map(str, args)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300,
    )  # fmt: skip
    seconds = time.monotonic() - started
    return done.returncode, done.stdout.decode("utf-8", "replace"), seconds, int(peak_file.read_text()) / 1024
