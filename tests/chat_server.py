"""A stand-in for a chat model, for the tests of `chunkeval gold generate`. It is NOT a model: it speaks the
OpenAI chat-completions API on 127.0.0.1 and REPLAYS answers written by hand for the demo corpus, picked by the
`Document:` line of the request. What it replays covers every check of generation: good questions with exact
excerpts, an excerpt with altered whitespace, an excerpt that does not occur, a near-duplicate question, an
off-topic excerpt, text repeated in its document, an answer in a model's habits (prose before the JSON, a trailing
comma: read), and prose that holds no JSON at all (for the document `notes`: unusable); for `gold judge`
it grades pooled passages 0-3 by a written rule over the demo's gold set, in both answer forms, and answers one
question with prose that holds no grade. The first request of a server is answered 429 with Retry-After.

    with ChatServer() as server:  # server.url is a base URL (…/v1); server.requests counts what it answered
"""

from __future__ import annotations

import csv
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


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
MALFORMED = "I am sorry: this passage lists meetings, and I cannot write questions about it."  # no JSON at all
HABITS = "honeybees"  # answered as models do: prose before the JSON, a trailing comma in its list
NOTES = "# Notes\n\nThe notes of the beekeeping club list the meetings of the year and who brings the honey.\n"


# Judging (`gold judge`): the stand-in grades a pooled passage by a rule over the demo's own gold set, written
# here, not by reading anything: 3 where the passage holds a whole reference of the question, 2 where it holds
# part of one (its first or last 40 characters), 1 where it is of the question's document, else 0. Grade 1 is
# written as JSON ({"grade": 1}), the others in UMBRELA's form (##final score: N); every passage of the question
# below is answered with prose that holds no grade (an unusable answer).
DEMO_GOLD = Path(__file__).resolve().parent / "data" / "tiny_demo" / "questions.csv"
NO_GRADE_QUESTION = "How do beekeepers try to prevent swarming?"
NO_GRADE = "The passage is about bees, and swarming is a topic of it, so I would call it fairly relevant."


def demo_gold() -> dict[str, tuple[str, list[str]]]:
    """question → (its document, the contents of its references), of the demo's gold set."""
    with open(DEMO_GOLD, newline="", encoding="utf-8") as f:
        return {
            r["question"]: (r["corpus_id"], [x["content"] for x in json.loads(r["references"])])
            for r in csv.DictReader(f)
        }


def stand_in_grade(gold: dict, question: str, document: str, passage: str) -> int:
    """The stand-in's grade of a pooled passage (the rule above)."""
    doc, refs = gold.get(question, ("", []))
    if any(r in passage for r in refs):
        return 3
    if any(len(r) > 40 and (r[:40] in passage or r[-40:] in passage) for r in refs):
        return 2
    return 1 if document == doc else 0


def judge_answer(gold: dict, user: str) -> str:
    question = re.search(r"^Query: (.*)$", user, flags=re.M)[1]
    document = re.search(r"^Document: (.*)$", user, flags=re.M)[1]
    passage = re.search(r"^BEGIN (PASSAGE-\w+)\n(.*)\nEND \1$", user, flags=re.M | re.S)[2]
    if question == NO_GRADE_QUESTION:
        return NO_GRADE
    grade = stand_in_grade(gold, question, document, passage)
    return json.dumps({"grade": 1}) if grade == 1 else f"##final score: {grade}"


class ChatServer:
    """The stand-in on a free port. `mode`: `replay` (the answers above), `garbage` (every answer is text that is
    not JSON), `no-429` (replay without the first 429), and the hostile ones of issue 41: `absent` (questions whose
    every excerpt is nowhere in the corpus), `obedient` (a model that obeys a passage telling it to grade every
    passage 3: it grades everything 3), `echo` (the request's Authorization header quoted in every answer)."""

    def __init__(self, mode: str = "replay"):
        self.mode = mode
        self.gold = demo_gold()
        self.requests = 0  # requests answered 200
        self.calls = 0  # every request received
        self._lock = threading.Lock()

    def answer(self, body: dict, authorization: str = "") -> tuple[int, dict, dict]:
        with self._lock:
            self.calls += 1
            first = self.calls == 1
        if first and self.mode == "replay":
            return 429, {"Retry-After": "1"}, {"error": {"message": "Rate limit reached, retry after 1 s"}}
        user = next(m["content"] for m in body["messages"] if m["role"] == "user")
        doc = re.search(r"^Document: (.*)$", user, flags=re.M)[1]
        if self.mode == "garbage":
            content = "I am sorry, I cannot help with that."
        elif self.mode == "obedient":
            content = "##final score: 3" if "##final score" in user else MALFORMED
        elif self.mode == "absent" and "##final score" not in user:
            content = json.dumps(
                {"questions": [q("What is nowhere?", "fact", "Words no document of the corpus holds.")]}
            )
        elif self.mode == "echo":
            said = f"The header was {authorization}."
            content = (
                f"##final score: 2 {said}"
                if "##final score" in user
                else json.dumps({"questions": [q(f"What does {said} mean?", "fact", FRESNEL)]})
            )
        elif "##final score" in user:  # a judging request (`gold judge`)
            content = judge_answer(self.gold, user)
        elif doc in ANSWERS:
            content = json.dumps({"questions": ANSWERS[doc]}, ensure_ascii=False)
            if doc == HABITS:
                content = "Here are the questions you asked for:\n" + content[: -len("]}")] + ",]}"
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
                status, headers, reply = outer.answer(body, self.headers.get("Authorization") or "")
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
