"""Served embedding throughput: all-MiniLM-L6-v2 in process against the same model behind infinity-emb.

    python bench/served_throughput.py [--data ../shared/datasets/chroma_general] [--texts 1024]
                                      [--server-batch 32] [--repeats 2]

The texts are `--texts` distinct fixed_token chunks of 220 tokens of the shared corpora (as in
bench/embedding_backends.py). Each way is warmed up with one batch, then timed over every text (best
of `--repeats`), without a cache:

- in process: `Embedder(cache_dir=None)`, chunkeval's CPU batch (16);
- chunkeval's client at concurrency 1 and 4 (`Embedder` with a served model: batches of
  `--server-batch` inputs, every response checked);
- a plain loop of single requests (one text per POST, one at a time, httpx);
- the server's own throughput at its maximum batch: POSTs of `--server-batch` texts, 8 in flight,
  nothing checked (what the server can do, the ceiling of any client).

The server is infinity-emb 0.0.78 serving the bundled MiniLM folder on 127.0.0.1 with
`--batch-size --server-batch`, from the venv the tests build (tests/served_server.py). It shares the
machine's cores with this process. A Markdown table goes to stdout.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def best(repeats: int, run, name: str = "") -> float:
    """The shortest of `repeats` timings of `run()` (seconds), each said on stderr as it comes."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
        print(f"{name}: {times[-1]:.2f} s", file=sys.stderr, flush=True)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "datasets" / "chroma_general"))
    parser.add_argument("--texts", type=int, default=512)
    parser.add_argument("--server-batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    import httpx

    from chunkeval.engine.embedding import Embedder
    from chunkeval.engine.embedding.folders import bundled_folder
    from chunkeval.engine.embedding.served import parse_entry
    from embedding_backends import sample_texts
    from served_server import Infinity

    texts = sample_texts(args.data, "all-MiniLM-L6-v2", args.texts)[: args.texts]  # distinct chunks of the corpora
    rows = []

    local = Embedder(cache_dir=None)
    local.embed(texts[:16])
    rows.append(
        ("in process (torch, batch 16)", best(args.repeats, lambda: local.embed(texts), "in process"))
    )  # no cache: all again

    extra = ("--batch-size", str(args.server_batch))
    server = Infinity(bundled_folder(), Path("/tmp") / "served_throughput.log", extra=extra).start()
    try:
        for concurrency in (1, 4):
            served = parse_entry(
                "minilm", {"base_url": server.url, "batch_size": args.server_batch, "concurrency": concurrency}
            )
            Embedder("minilm", None, served=served).embed(texts[: args.server_batch])
            seconds = best(
                args.repeats, lambda s=served: Embedder("minilm", None, served=s).embed(texts), f"c{concurrency}"
            )
            rows.append((f"infinity, chunkeval's client, concurrency {concurrency}", seconds))
        with httpx.Client(timeout=120) as http:
            url = server.url + "/embeddings"

            def single():
                for text in texts:
                    http.post(url, json={"model": "minilm", "input": [text]}).raise_for_status()

            rows.append(("infinity, a plain loop of single requests", best(args.repeats, single, "single")))
            batches = [texts[i : i + args.server_batch] for i in range(0, len(texts), args.server_batch)]

            def flooded():
                with ThreadPoolExecutor(8) as pool:
                    for r in pool.map(lambda b: http.post(url, json={"model": "minilm", "input": b}), batches):
                        r.raise_for_status()

            rows.append(
                (f"infinity's own, batches of {args.server_batch}, 8 in flight", best(args.repeats, flooded, "server"))
            )
    finally:
        server.kill()
    print(f"| way ({len(texts)} texts of 220 tokens) | seconds | texts/s |")
    print("| --- | ---: | ---: |")
    for name, seconds in rows:
        print(f"| {name} | {seconds:.1f} | {len(texts) / seconds:.1f} |")


if __name__ == "__main__":
    main()
