"""A stand-in for a chat model, for the tests of `chunkeval gold generate`. It is NOT a model: it speaks the
OpenAI chat-completions API on 127.0.0.1 and REPLAYS answers written by hand for the demo corpus, picked by the
`Document:` line of the request. What it replays covers every check of generation: good questions with exact
excerpts, an excerpt with altered whitespace, an excerpt that does not occur, a near-duplicate question, an
off-topic excerpt, text repeated in its document, and malformed JSON (for the document `notes`); the first
request of a server is answered 429 with Retry-After.

    with ChatServer() as server:  # server.url is a base URL (…/v1); server.requests counts what it answered
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def q(question: str, kind: str, *excerpts: str) -> dict:
    return {"question": question, "type": kind, "excerpts": list(excerpts)}


FRESNEL = "The great change came with the Fresnel lens, designed by the French physicist Augustin-Jean Fresnel in 1822."
ANSWERS = {
    "lighthouses": [
        q("Who designed the lens that changed the range of lighthouses?", "fact", FRESNEL),
        q("Who was the designer of the lens that changed lighthouse range?", "fact", FRESNEL),  # a near-duplicate
        q("What was the work of a lighthouse keeper like?", "section", "Keeping a light was a trade of routine."),
    ],
    "honeybees": [
        q("How long does a summer worker bee live?", "number", "A summer worker lives about six weeks"),
        q(  # white space altered: placed approximately
            "How does the waggle dance show the direction of the food?",
            "fact",
            "The angle of the straight run  relative to vertical shows the direction of the food\nrelative to the sun",
        ),
        q(
            "When did Karl von Frisch show that bees see ultraviolet?",
            "number",
            "Bees see ultraviolet, as shown in 1915.",
        ),
    ],
    "sourdough": [
        q(
            "What do the yeasts and the bacteria of a sourdough starter each produce?",
            "list",
            "The yeasts produce carbon dioxide, which raises the dough",
            "the bacteria produce lactic and acetic acids",
        ),
        q(
            "How many keepers served together on a rock lighthouse?", "fact", "The bulk fermentation follows."
        ),  # off-topic
        q("What is the internal temperature of a finished sourdough loaf?", "number", "about 96 °C"),
    ],
}
MALFORMED = '{"questions": [{"question": "What do the notes say?", "excerpts": ["The notes'  # cut short: not JSON
NOTES = "# Notes\n\nThe notes of the beekeeping club list the meetings of the year and who brings the honey.\n"


class ChatServer:
    """The stand-in on a free port. `mode`: `replay` (the answers above), `garbage` (every answer is text that is
    not JSON), `no-429` (replay without the first 429)."""

    def __init__(self, mode: str = "replay"):
        self.mode = mode
        self.requests = 0  # requests answered 200
        self.calls = 0  # every request received
        self._lock = threading.Lock()

    def answer(self, body: dict) -> tuple[int, dict, dict]:
        with self._lock:
            self.calls += 1
            first = self.calls == 1
        if first and self.mode == "replay":
            return 429, {"Retry-After": "1"}, {"error": {"message": "Rate limit reached, retry after 1 s"}}
        user = next(m["content"] for m in body["messages"] if m["role"] == "user")
        doc = re.search(r"^Document: (.*)$", user, flags=re.M)[1]
        if self.mode == "garbage":
            content = "I am sorry, I cannot help with that."
        elif doc in ANSWERS:
            content = json.dumps({"questions": ANSWERS[doc]}, ensure_ascii=False)
        else:
            content = MALFORMED
        with self._lock:
            self.requests += 1
        usage = {"prompt_tokens": len(user) // 4, "completion_tokens": len(content) // 4}
        reply = {"object": "chat.completion", "model": body["model"], "usage": usage}
        return 200, {}, reply | {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]}

    def __enter__(self) -> ChatServer:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status, headers, reply = outer.answer(body)
                data = json.dumps(reply).encode()
                self.send_response(status)
                for k, v in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
