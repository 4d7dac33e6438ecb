"""Where the alarms of the tests and of bench/month.py arrive: a webhook receiver (HTTP on 127.0.0.1, recording
every request it is sent: path, headers, body, time; a path under /refuse answers 500) and a real SMTP server
(aiosmtpd on 127.0.0.1, recording every message). Nothing here is chunkeval's: these stand for a team's Slack,
Teams, webhook endpoint and mail server."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from email import message_from_bytes
from email.policy import default
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    """One message a receiver got."""

    at: float  # time.time() when it arrived
    path: str  # the request's path (webhooks), or the recipients (email)
    headers: dict
    body: str
    subject: str = ""

    def json(self):
        return json.loads(self.body)


@dataclass
class Inbox:
    messages: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, message: Received) -> None:
        with self.lock:
            self.messages.append(message)

    def at(self, path: str) -> list[Received]:
        with self.lock:
            return [m for m in self.messages if m.path == path]

    def wait(self, check, timeout: float, what: str):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = check()
            if found:
                return found
            time.sleep(0.25)
        with self.lock:
            got = [(m.path, m.body[:200]) for m in self.messages]
        raise AssertionError(f"timed out after {timeout} s waiting for {what}; received: {got}")


@contextlib.contextmanager
def webhook_receiver() -> Iterator[tuple[str, Inbox]]:
    """(its base URL, what it received)."""
    inbox = Inbox()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length).decode("utf-8", "replace")
            inbox.add(Received(time.time(), self.path, dict(self.headers), body))
            refuse = self.path.startswith("/refuse")
            self.send_response(500 if refuse else 200)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(b"no thanks" if refuse else b"ok")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", inbox
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def smtp_server() -> Iterator[tuple[int, Inbox]]:
    """A real SMTP server (aiosmtpd) on 127.0.0.1: (its port, what it received)."""
    from aiosmtpd.controller import Controller

    from prefect_server import free_port

    inbox = Inbox()

    class Handler:
        async def handle_DATA(self, server, session, envelope):  # noqa: N802 (aiosmtpd's name)
            message = message_from_bytes(envelope.content, policy=default)
            body = message.get_body(preferencelist=("plain",))
            inbox.add(
                Received(
                    time.time(),
                    ",".join(envelope.rcpt_tos),
                    {"From": envelope.mail_from},
                    body.get_content() if body else "",
                    str(message["Subject"] or ""),
                )
            )
            return "250 Message accepted for delivery"

    port = free_port()
    controller = Controller(Handler(), hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield port, inbox
    finally:
        controller.stop()
