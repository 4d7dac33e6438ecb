"""A real OpenAI-compatible embedding server for the served-model tests: infinity-emb 0.0.78 in a venv of
its own (it pins numpy < 2, sentence-transformers < 4, transformers <= 5.0), built once and reused, and
a small proxy in front of it that can drop connections, kill the server, and answer what a failing
server answers (429, 5xx, HTML, bad vectors) for the retry and bad-input tests.

The venv lives at $CHUNKEVAL_INFINITY_VENV, by default ~/.cache/chunkeval/infinity-0.0.78 (CI caches
that folder between steps); it is built whole in a folder beside it and renamed, under a lock.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from prefect_server import free_port, wait_for
from venvs import built_once

INFINITY = "infinity-emb[server,torch]==0.0.78"
TORCH = "torch==2.13.0"  # installed first: infinity's torch>=2.2.1 would otherwise pull the CUDA wheels


def venv_dir() -> Path:
    default = Path.home() / ".cache" / "chunkeval" / "infinity-0.0.78"
    return Path(os.environ.get("CHUNKEVAL_INFINITY_VENV") or default)


def ensure_venv() -> Path:
    """The infinity venv's `infinity_emb`, built on first use (minutes, once per machine or CI cache)."""
    exe = venv_dir() / "bin" / "infinity_emb"

    def build(python: Path) -> None:
        pip = [str(python), "-m", "pip", "install", "-q"]
        subprocess.run([*pip, TORCH], check=True)
        subprocess.run([*pip, INFINITY], check=True)  # its executable, last: the venv is complete

    return built_once(venv_dir(), lambda: exe if exe.is_file() else None, build)


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


class Infinity:
    """`infinity_emb v2` serving one model folder offline on 127.0.0.1 (started and stopped at will)."""

    def __init__(self, folder: Path, log: Path, port: int | None = None, name: str = "minilm", extra=()):
        self.folder, self.log, self.name, self.extra = folder, log, name, tuple(extra)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def launch(self) -> Infinity:
        """Start the server (no warm-up: a few seconds sooner) without waiting for it."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env.update(HF_HUB_OFFLINE="1", INFINITY_ANONYMOUS_USAGE_STATS="0", DO_NOT_TRACK="1")
        argv = [str(ensure_venv()), "v2", "--model-id", str(self.folder), "--served-model-name", self.name]
        argv += ["--host", "127.0.0.1", "--port", str(self.port), "--no-model-warmup", *self.extra]
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def wait(self) -> Infinity:
        wait_for(lambda: healthy(self.url), 180, f"infinity serving {self.folder}", self.proc)
        return self

    def start(self) -> Infinity:
        return self.launch().wait()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
        self.proc = None


class Proxy:
    """An HTTP server on 127.0.0.1 in front of `upstream` (or of nothing). `faults` is a list of what the
    next requests meet, one each: an HTTP status (`429`, `503`: answered by the proxy, with Retry-After
    for 429), `drop` (the connection closed with no answer), `kill` (the upstream server killed, then the
    connection dropped), `slow` (the answer held back `slow_seconds` before it is forwarded). `mode` answers
    every request: `html`, `401`, `404`, `nan`, `short`, `wide`; the hostile ones: `drip` (a good answer, one
    byte a second), `huge` (300 MB of body, no length given), `usage` (`prompt_tokens` 1e30), `subnormal`,
    `1e308`, `zero` (such vectors), `quote` (a 401 whose message quotes the request's key after 170
    characters); `payload` answers `proxy.payload` (bytes) as it is. `mutate` (a function of the bytes) changes
    every good answer of upstream on its way back.
    It records each request's Authorization header and input count."""

    def __init__(self, upstream: Infinity | None = None, mode: str | None = None, retry_after: str = "1"):
        self.upstream, self.mode, self.retry_after = upstream, mode, retry_after
        self.slow_seconds = 2.0
        self.faults: list[str] = []
        self.payload = b""
        self.mutate = None  # bytes -> bytes, applied to each answer forwarded from upstream (the fuzz test's)
        self.seen: list[tuple[str | None, int]] = []
        self.lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                if proxy.mode == "html":  # a login page or a proxy's, whatever is asked
                    return self._answer(200, b"<html><body>Sign in</body></html>", {}, "text/html")
                self._answer(200, b'{"ok": true}')

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                request = json.loads(body or b"{}")
                with proxy.lock:
                    proxy.seen.append((self.headers.get("Authorization"), len(request.get("input", []))))
                    fault = proxy.faults.pop(0) if proxy.faults else proxy.mode
                if fault == "slow":
                    time.sleep(proxy.slow_seconds)
                    fault = None
                if fault == "kill":
                    proxy.upstream.kill()
                    fault = "drop"
                if fault == "drop":
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if fault is not None and fault.isdigit():
                    headers = {"Retry-After": proxy.retry_after} if fault == "429" else {}
                    message = {"401": "Incorrect API key provided", "404": "The model does not exist"}
                    text = message.get(fault, "the server is busy")
                    return self._answer(int(fault), json.dumps({"error": {"message": text}}).encode(), headers)
                if fault in HOSTILE:
                    return HOSTILE[fault](self, request, proxy)
                if fault == "html":
                    return self._answer(200, b"<html><body>Sign in</body></html>", {}, "text/html")
                if fault in ("nan", "short", "wide"):
                    n = len(request["input"]) - (fault == "short")
                    width = 385 if fault == "wide" else 384
                    rows = [{"index": i, "embedding": [0.1] * width} for i in range(n)]
                    text = json.dumps({"data": rows})
                    return self._answer(200, text.replace("0.1]", "NaN]").encode() if fault == "nan" else text.encode())
                try:
                    request = urllib.request.Request(
                        proxy.upstream.url + self.path, body, {"Content-Type": "application/json"}, method="POST"
                    )
                    with urllib.request.urlopen(request, timeout=120) as r:
                        status, payload = r.status, r.read()
                except urllib.error.HTTPError as exc:
                    status, payload = exc.code, exc.read()
                except OSError:  # the server is gone: the connection is dropped, as the server's would be
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if proxy.mutate is not None and status == 200:
                    payload = proxy.mutate(payload)
                self._answer(status, payload)

            def _answer(self, status, payload, headers=None, kind="application/json"):
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(payload)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Proxy:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def _vectors(request: dict, value: float, usage: int | None = None) -> bytes:
    rows = [{"index": i, "embedding": [value] + [0.0] * 7} for i in range(len(request.get("input", [])))]
    return json.dumps({"data": rows, "usage": {"prompt_tokens": usage if usage is not None else 3}}).encode()


def _drip(handler, request, proxy) -> None:
    payload = _vectors(request, 0.5)
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(payload)))
    handler.end_headers()
    with contextlib.suppress(OSError):  # the client gave up
        for byte in payload[:120]:
            handler.wfile.write(bytes([byte]))
            handler.wfile.flush()
            time.sleep(1)


def _huge(handler, request, proxy) -> None:
    handler.close_connection = True
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Connection", "close")
    handler.end_headers()
    chunk = b" " * (1 << 20)
    with contextlib.suppress(OSError):  # the client stopped reading
        for _ in range(300):
            handler.wfile.write(chunk)


HOSTILE = {
    "drip": _drip,
    "huge": _huge,
    "usage": lambda h, r, p: h._answer(200, _vectors(r, 0.5, 10**30)),
    "subnormal": lambda h, r, p: h._answer(200, _vectors(r, 1e-320)),
    "1e308": lambda h, r, p: h._answer(200, _vectors(r, 1e308)),
    "zero": lambda h, r, p: h._answer(200, _vectors(r, 0.0)),
    "quote": lambda h, r, p: h._answer(
        401,
        json.dumps(
            {"error": {"message": "Incorrect API key provided. " + "x" * 142 + f" {h.headers.get('Authorization')}"}}
        ).encode(),
    ),
    "payload": lambda h, r, p: h._answer(200, p.payload),
}


def perturbed_minilm(source: Path, out: Path, scale: float = 0.05) -> Path:
    """A copy of MiniLM whose last layer's weights carry noise: another model of the same width."""
    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(source, out, dirs_exist_ok=True)
    weights = load_file(str(source / "model.safetensors"))
    generator = torch.Generator().manual_seed(18)
    for name, tensor in weights.items():
        if ".layer.5." in name and tensor.dtype.is_floating_point:
            noise = torch.randn(tensor.shape, generator=generator, dtype=tensor.dtype)
            weights[name] = tensor + scale * tensor.std() * noise
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def wait_until(check, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.1)


if __name__ == "__main__":  # .ci/run builds the venv before the suite (a no-op where it is cached)
    print(ensure_venv())
