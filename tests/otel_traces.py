"""Production traces made the way a team's application makes them, for the tests of `chunkeval traces import`.

A small retriever over the demo corpus (paragraphs scored by shared words) answers questions inside spans of the
real OpenTelemetry SDK (`opentelemetry-sdk`), named with the OpenInference semantic conventions package
(`openinference-semantic-conventions`: span kind RETRIEVER and RERANKER, `input.value`,
`retrieval.documents.{i}.document.*`, `reranker.*`) or with the OpenTelemetry GenAI retrieval attributes
(`gen_ai.operation.name=retrieval`, `gen_ai.retrieval.query.text`, `gen_ai.retrieval.documents`). The SDK's own
OTLP/HTTP exporter (`opentelemetry-exporter-otlp-proto-http`) sends them to `Collector`, which stands for an
OpenTelemetry collector with an OTLP receiver and a file exporter: it decodes each export request and writes it as
one line of OTLP JSON, trace and span ids in hex, as the collector's file exporter writes them. Nothing here is
chunkeval's.

    with Collector(path) as endpoint:
        make_traces(endpoint, questions, ...)
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

DEMO_CORPORA = Path(__file__).resolve().parent / "data" / "tiny_demo" / "corpora"


def _hex_ids(obj):
    """OTLP JSON as the collector writes it: trace, span and parent span ids as hex (protobuf's JSON writes bytes
    as base64)."""
    import base64

    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if k in ("traceId", "spanId", "parentSpanId") and isinstance(v, str):
                out[k] = base64.b64decode(v).hex()
            else:
                out[k] = _hex_ids(v)
        return out
    if isinstance(obj, list):
        return [_hex_ids(v) for v in obj]
    return obj


class Collector:
    """An OTLP/HTTP receiver on 127.0.0.1 that appends each export request to `path` as one line of OTLP JSON."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.requests = 0
        self._lock = threading.Lock()

    def __enter__(self) -> str:
        from google.protobuf.json_format import MessageToDict
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                line = json.dumps(_hex_ids(MessageToDict(request)), separators=(",", ":"))
                with collector._lock, open(collector.path, "a", encoding="utf-8") as f:
                    f.write(line + "\n")
                    collector.requests += 1
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def paragraphs() -> list[tuple[str, int, int, str]]:
    """(document, start, end, text) of every paragraph of the demo corpus: what the small retriever returns."""
    out = []
    for path in sorted(DEMO_CORPORA.glob("*.md")):
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"[^\n]+(?:\n[^\n]+)*", text):
            if len(m.group().strip()) > 40:
                out.append((path.stem, m.start(), m.end(), m.group()))
    return out


def retrieve(question: str, k: int = 3) -> list[tuple[str, int, int, str, float]]:
    """The small retriever: the k paragraphs sharing the most words with the question (ties by position)."""
    words = set(re.findall(r"\w+", question.lower()))
    scored = []
    for doc, start, end, text in paragraphs():
        shared = len(words & set(re.findall(r"\w+", text.lower())))
        scored.append((doc, start, end, text, shared / (1 + len(words))))
    scored.sort(key=lambda r: -r[4])
    return scored[:k]


def make_traces(
    endpoint: str,
    questions: Iterable[str],
    sessions: int = 3,
    k: int = 3,
    genai_every: int = 0,
    reranker_every: int = 0,
    start_ns: int = 1_767_225_600 * 10**9,  # 2026-01-01 00:00 UTC
    step_ns: int = 3_600 * 10**9,
    edit=None,
) -> int:
    """Answer each question inside a RETRIEVER span (every `genai_every`-th as a GenAI retrieval span instead,
    every `reranker_every`-th followed by a RERANKER span), in `sessions` sessions, one hour apart from `start_ns`;
    export through the SDK's OTLP/HTTP exporter to `endpoint`. `edit(doc, text) -> (id, content)` may change what
    a document looks like in production (another id, content edited). The number of spans made."""
    from openinference.semconv.trace import (
        DocumentAttributes,
        OpenInferenceSpanKindValues,
        RerankerAttributes,
        SpanAttributes,
    )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": "demo-rag"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint), max_export_batch_size=16))
    tracer = provider.get_tracer("demo-rag")
    made = 0
    for n, question in enumerate(questions):
        t0 = start_ns + n * step_ns
        found = retrieve(question, k)
        docs = []
        for doc, start, end, text, score in found:
            doc_id, content = edit(doc, start, end, text) if edit else (f"{doc}:{start}-{end}", text)
            docs.append((doc_id, content, score, {"source": f"{doc}.md", "start": start}))
        session = f"session-{n % sessions}"
        with tracer.start_as_current_span("query", start_time=t0) as root:
            root.set_attribute(SpanAttributes.OPENINFERENCE_SPAN_KIND, OpenInferenceSpanKindValues.CHAIN.value)
            root.set_attribute(SpanAttributes.SESSION_ID, session)
            genai = genai_every and n % genai_every == genai_every - 1
            with tracer.start_as_current_span("retrieve", start_time=t0 + 1000) as span:
                made += 1
                if genai:
                    span.set_attribute("gen_ai.operation.name", "retrieval")
                    span.set_attribute("gen_ai.retrieval.query.text", question)
                    span.set_attribute("gen_ai.conversation.id", session)
                    span.set_attribute(
                        "gen_ai.retrieval.documents",
                        json.dumps([{"id": d, "score": s, "content": c} for d, c, s, _ in docs]),
                    )
                else:
                    span.set_attribute(
                        SpanAttributes.OPENINFERENCE_SPAN_KIND, OpenInferenceSpanKindValues.RETRIEVER.value
                    )
                    span.set_attribute(SpanAttributes.INPUT_VALUE, question)
                    span.set_attribute(SpanAttributes.SESSION_ID, session)
                    for i, (doc_id, content, score, meta) in enumerate(docs):
                        prefix = f"{SpanAttributes.RETRIEVAL_DOCUMENTS}.{i}."
                        span.set_attribute(prefix + DocumentAttributes.DOCUMENT_ID, doc_id)
                        span.set_attribute(prefix + DocumentAttributes.DOCUMENT_CONTENT, content)
                        span.set_attribute(prefix + DocumentAttributes.DOCUMENT_SCORE, float(score))
                        span.set_attribute(prefix + DocumentAttributes.DOCUMENT_METADATA, json.dumps(meta))
            if reranker_every and n % reranker_every == reranker_every - 1:
                with tracer.start_as_current_span("rerank", start_time=t0 + 2000) as span:
                    made += 1
                    span.set_attribute(
                        SpanAttributes.OPENINFERENCE_SPAN_KIND, OpenInferenceSpanKindValues.RERANKER.value
                    )
                    span.set_attribute(RerankerAttributes.RERANKER_QUERY, question)
                    span.set_attribute(SpanAttributes.SESSION_ID, session)
                    for i, (doc_id, content, _score, _) in enumerate(docs):
                        prefix = f"{RerankerAttributes.RERANKER_INPUT_DOCUMENTS}.{i}."
                        span.set_attribute(prefix + DocumentAttributes.DOCUMENT_ID, doc_id)
                        span.set_attribute(prefix + DocumentAttributes.DOCUMENT_CONTENT, content)
                    for i, (doc_id, content, _score, _) in enumerate(reversed(docs)):
                        prefix = f"{RerankerAttributes.RERANKER_OUTPUT_DOCUMENTS}.{i}."
                        span.set_attribute(prefix + DocumentAttributes.DOCUMENT_ID, doc_id)
                        span.set_attribute(prefix + DocumentAttributes.DOCUMENT_CONTENT, content)
                        span.set_attribute(prefix + DocumentAttributes.DOCUMENT_SCORE, float(len(docs) - i))
    provider.force_flush()
    provider.shutdown()
    return made
