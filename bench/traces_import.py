"""How fast `chunkeval traces import` reads OTLP JSON, and how much memory a million spans take (issue 43,
docs/performance.md "Importing traces").

Writes `--spans` OpenInference RETRIEVER spans (3 documents each, ~300-character contents, 200 distinct queries,
sessions and days spread) as OTLP JSON lines of 512 spans each, the shape an OpenTelemetry collector's file exporter
writes (the tests make the same shape with the real SDK and its exporter: tests/otel_traces.py), then reads them
with `read_traces` in a child process and reports spans per second and the child's peak resident memory (its
`ru_maxrss`), reading only (no warehouse) and then importing into a fresh warehouse as `traces import` does
(`import_files`: read, each distinct document placed once, recorded). A file of JSON lines is read in pieces of
`PIECE_BYTES`, so memory holds one piece's parsed JSON and what is kept, not the whole file.

    python bench/traces_import.py --out /tmp/traces-bench --spans 1000000
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

BATCH = 512


def write(path: Path, spans: int, batch: int = BATCH) -> None:
    words = "the lantern keeper wound the clockwork every four hours through the winter night".split()
    with open(path, "w", encoding="utf-8") as f:
        for first in range(0, spans, batch):
            out = []
            for n in range(first, min(spans, first + batch)):
                attrs = [
                    {"key": "openinference.span.kind", "value": {"stringValue": "RETRIEVER"}},
                    {"key": "input.value", "value": {"stringValue": f"question {n % 200}: " + " ".join(words[: 5 + n % 7])}},
                    {"key": "session.id", "value": {"stringValue": f"s{n % 97}"}},
                ]  # fmt: skip
                for i in range(3):
                    p = f"retrieval.documents.{i}.document."
                    attrs += [
                        {"key": p + "id", "value": {"stringValue": f"doc{(n * 7 + i) % 5000}"}},
                        {"key": p + "content", "value": {"stringValue": f"passage {(n * 7 + i) % 5000} " + " ".join(words) * 3}},
                        {"key": p + "score", "value": {"doubleValue": 1.0 / (i + 1)}},
                    ]  # fmt: skip
                out.append({"traceId": f"{n:032x}", "spanId": f"{n + 1:016x}", "name": "retrieve", "kind": 1,
                            "startTimeUnixNano": str(1_767_225_600_000_000_000 + n * 60_000_000_000),
                            "attributes": attrs})  # fmt: skip
            f.write(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": out}]}]}, separators=(",", ":")) + "\n")


CHILD = """
import resource, sys, time
from pathlib import Path
from chunkeval.engine.inputs.traces import read_traces
from chunkeval.errors import InputError
t0 = time.perf_counter()
try:
    if sys.argv[2] == "import":
        from chunkeval.cli.commands.traces import import_files
        from chunkeval.warehouse import Warehouse
        got = import_files([Path(sys.argv[1])], "auto", False, None, None, lambda: Warehouse(Path(sys.argv[3])))["traces"]
    else:
        got = read_traces(Path(sys.argv[1]))
except InputError as refused:
    print("REFUSED", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, refused)
    sys.exit(0)
read_s = time.perf_counter() - t0
print("RESULT", got.kept, read_s, time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--spans", type=int, default=1_000_000)
    ap.add_argument("--per-line", type=int, default=BATCH, help="spans a line (a collector's batch: 512)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"spans-{args.spans}-{args.per_line}.jsonl"
    if not path.is_file():
        t0 = time.perf_counter()
        write(path, args.spans, args.per_line)
        print(
            f"wrote {path} ({path.stat().st_size / 2**20:,.0f} MiB) in {time.perf_counter() - t0:.0f} s",
            file=sys.stderr,
        )
    for mode in ("read", "import"):
        home = args.out / f"wh-{time.time_ns()}"
        done = subprocess.run([sys.executable, "-c", CHILD, str(path), mode, str(home)], capture_output=True, text=True)
        if done.returncode:
            print(done.stderr[-2000:], file=sys.stderr)
            return 1
        if "REFUSED" in done.stdout:  # a line past LINE_BYTES: what it said, and the peak until then
            rss_kb, said = done.stdout.split("REFUSED", 1)[1].strip().split(" ", 1)
            print(json.dumps({"mode": mode, "refused": said, "peak_rss_mib": round(int(rss_kb) / 1024)}))
            continue
        kept, read_s, total_s, rss_kb = done.stdout.split()[-4:]
        print(json.dumps({"mode": mode, "spans": int(kept), "file_mib": round(path.stat().st_size / 2**20),
                          "read_seconds": round(float(read_s), 1), "seconds": round(float(total_s), 1),
                          "spans_per_second": round(int(kept) / float(read_s)), "peak_rss_mib": round(int(rss_kb) / 1024)}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
