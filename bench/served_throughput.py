"""Served embedding throughput: all-MiniLM-L6-v2 in process against the same model behind infinity-emb.

    python bench/served_throughput.py [--data ../shared/datasets/chroma_general] [--texts 1024]
                                      [--server-batch 32] [--repeats 2]

The texts are `--texts` distinct fixed_token chunks of 220 tokens of the shared corpora (as in
bench/embedding_backends.py), embedded without a cache. The served ways run in rounds (`--repeats`):
each round runs every way once, in turn, so that the share of the server's own throughput a client
reaches is measured within a round, against load that changes between rounds. Best times are shown,
with each round's share:

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

    local = Embedder(cache_dir=None)
    local.embed(texts[:16])
    rows = [("in process (torch, batch 16)", best(args.repeats, lambda: local.embed(texts), "in process"), [])]

    extra = ("--batch-size", str(args.server_batch))
    server = Infinity(bundled_folder(), Path("/tmp") / "served_throughput.log", extra=extra).start()
    url = server.url + "/embeddings"
    batches = [texts[i : i + args.server_batch] for i in range(0, len(texts), args.server_batch)]
    try:
        with httpx.Client(timeout=120) as http:

            def client(concurrency: int):
                entry = {"base_url": server.url, "batch_size": args.server_batch, "concurrency": concurrency}
                served = parse_entry("minilm", entry)
                return lambda: Embedder("minilm", None, served=served).embed(texts)

            def single():
                for text in texts:
                    http.post(url, json={"model": "minilm", "input": [text]}).raise_for_status()

            def flooded():
                with ThreadPoolExecutor(8) as pool:
                    for r in pool.map(lambda b: http.post(url, json={"model": "minilm", "input": b}), batches):
                        r.raise_for_status()

            ways = {
                "infinity, chunkeval's client, concurrency 1": client(1),
                "infinity, chunkeval's client, concurrency 4": client(4),
                "infinity, a plain loop of single requests": single,
                f"infinity's own, batches of {args.server_batch}, 8 in flight": flooded,
            }
            for batch in batches[:2]:  # the server warmed up
                http.post(url, json={"model": "minilm", "input": batch}).raise_for_status()
            # one round runs every way once, in turn, so that a change of the machine's load between
            # rounds moves every way alike; the ratio to the server's own is taken within each round
            timings = {name: [] for name in ways}
            for round_ in range(args.repeats):
                for name, run in ways.items():
                    started = time.perf_counter()
                    run()
                    timings[name].append(time.perf_counter() - started)
                    print(f"round {round_ + 1}, {name}: {timings[name][-1]:.2f} s", file=sys.stderr, flush=True)
    finally:
        server.kill()
    own = timings[list(ways)[-1]]
    rows += [(name, min(times), [o / t for o, t in zip(own, times)]) for name, times in timings.items()]
    print(
        f"| way ({len(texts)} texts of 220 tokens) | seconds (best) | texts/s (best) | share of the server's own, per round |"
    )
    print("| --- | ---: | ---: | --- |")
    for name, seconds, shares in rows:
        cells = ", ".join(f"{100 * x:.0f} %" for x in shares) if shares else ""
        print(f"| {name} | {seconds:.1f} | {len(texts) / seconds:.1f} | {cells} |")


if __name__ == "__main__":
    main()
