"""Embedding throughput against the CPU's arithmetic peak: how far each backend is from what the cores can do.

    python bench/embedding_peak.py [--data ../shared/datasets/chroma_general] [--corpus state_of_the_union]
                                   [--backends torch,onnx,openvino] [--repeats 3]

The texts are those the 125-configuration sweep of `bench/sweep_bench.py` embeds (every distinct chunk of its 25
fixed_token chunkings of the corpus, and its questions); on a machine without the shared data, the demo's.

- FLOPs per text: all-MiniLM-L6-v2 is a BERT encoder (its `config.json`: L layers, hidden H, feed-forward F). A text
  of n word pieces (after truncation at 256) costs, per layer, 2·n·(4H² + 2HF) for the Q, K, V and output projections
  and the feed-forward, and 2·2·n²·H for the attention scores and their weighted sum: multiply and add counted as
  two FLOPs. Layer norms, GELU, softmax, the embedding lookup and the pooling are left out (under 1 % here). The
  "useful" count uses each text's own n; the "executed" count the padded width of the batch it ran in (chunkeval
  sorts texts by length before it batches, so the two differ little).
- Peak: the theoretical one, cores × FMA units per core × fp32 lanes × 2 × clock (the flags of `/proc/cpuinfo`
  give the lanes: 16 with AVX-512, 8 with AVX2; `--fma-units` and `--ghz` state what the flags cannot: two
  AVX-512 FMA units on Xeon Scalable cores, the clock `/proc/cpuinfo` reports), and the measured one: the best of a
  large fp32 matrix product (torch, every core), and of products of the model's own shapes (a batch of 16 texts of
  160 word pieces through the feed-forward).
- Per backend, in its own process (model loaded and warmed up first): texts per second on the texts (chunkeval's
  `Embedder`, no cache, its batch for the device), the FLOPs per second that makes, and its share of each peak.

Figures go to stdout as a Markdown table (JSON lines to stderr as they come).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from sweep_bench import GRID  # noqa: E402  (the sweep whose texts are measured)


def workload(data: str, corpus: str) -> list[str]:
    """The distinct texts the sweep embeds (chunks of its 25 chunkings, then its questions); the demo's without the data."""
    from chunkeval.engine.chunking import chunk_corpora
    from chunkeval.engine.pipeline.experiment import Experiment
    from chunkeval.engine.pipeline.sweep import load_inputs
    from chunkeval.paths import DEMO_DIR

    if Path(data).is_dir():
        source = {"corpus_dir": f"{data}/corpora", "questions": f"{data}/questions_df.csv", "corpus": [corpus]}
    else:
        source = {"corpus_dir": str(DEMO_DIR / "corpora"), "questions": str(DEMO_DIR / "questions.csv")}
    exp = Experiment.from_dict({"name": "peak", "backend": "torch", **source, **GRID})
    inputs = load_inputs(exp)
    chunks = (t for spec in exp.grid() for t in chunk_corpora(inputs.corpora, spec).texts(inputs.corpora))
    return list(dict.fromkeys([*chunks, *inputs.gold.questions]))


def model_shape() -> dict:
    from chunkeval.engine.embedding.registry import resolve_model

    folder = resolve_model("all-MiniLM-L6-v2")
    config = json.loads((folder / "config.json").read_text())
    limit = json.loads((folder / "sentence_bert_config.json").read_text())["max_seq_length"]
    return {
        "folder": str(folder),
        "layers": config["num_hidden_layers"],
        "hidden": config["hidden_size"],
        "ffn": config["intermediate_size"],
        "limit": limit,
    }


def flops(lengths, shape: dict) -> float:
    """FLOPs of the encoder over texts of these lengths (word pieces each; see the module's docstring)."""
    import numpy as np

    n = np.asarray(lengths, dtype=np.float64)
    h, f = shape["hidden"], shape["ffn"]
    return float(shape["layers"] * (2 * n * (4 * h * h + 2 * h * f) + 4 * n * n * h).sum())


def lengths(texts: list[str], shape: dict, batch: int) -> tuple[list[int], list[int]]:
    """(word pieces of each text the model runs, its padded width in chunkeval's length-sorted batches): texts the
    model reads alike (the same word pieces after truncation) run once, as chunkeval embeds them."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(Path(shape["folder"]) / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(shape["limit"])
    reads = dict.fromkeys(tuple(e.ids) for e in tok.encode_batch(texts, add_special_tokens=True))
    own = [len(r) for r in reads]
    ordered = sorted(own, reverse=True)
    padded = [max(ordered[lo : lo + batch]) for lo in range(0, len(ordered), batch) for _ in ordered[lo : lo + batch]]
    return own, padded


def peaks(shape: dict, ghz: float, fma_units: int) -> dict:
    import torch

    flags = Path("/proc/cpuinfo").read_text().split("flags", 1)[1].split("\n", 1)[0].split()
    lanes = 16 if "avx512f" in flags else 8 if "avx2" in flags else 4
    cores = os.cpu_count() or 1
    out = {"cores": cores, "lanes": lanes, "fma_units": fma_units, "ghz": ghz}
    out["theoretical_gflops"] = cores * fma_units * lanes * 2 * ghz
    torch.set_num_threads(cores)

    def best(a, b, repeats: int = 5) -> float:
        torch.matmul(a, b)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            torch.matmul(a, b)
            times.append(time.perf_counter() - start)
        m, k = a.shape[-2], a.shape[-1]
        return 2 * m * k * b.shape[-1] * (a.shape[0] if a.dim() == 3 else 1) / min(times) / 1e9

    big = torch.randn(2048, 2048)
    out["sgemm_gflops"] = best(big, big)
    x = torch.randn(16 * 160, shape["hidden"])  # a batch of 16 texts of 160 word pieces
    out["ffn_gflops"] = best(x, torch.randn(shape["hidden"], shape["ffn"]), 20)
    return out


def measure(backend: str, texts: list[str], repeats: int) -> dict:
    from chunkeval.engine.embedding import Embedder

    embedder = Embedder(cache_dir=None, backend=backend)
    embedder.embed(texts[:32])  # loaded and warmed up
    best = float("inf")
    for _ in range(repeats):
        fresh = Embedder(cache_dir=None, backend=backend, _st=embedder._st, batch_size=embedder.batch_size)
        start = time.perf_counter()
        fresh.embed(texts)
        best = min(best, time.perf_counter() - start)
        time.sleep(1.0)  # the thread pool of one timing stops spinning before the next
    return {"backend": backend, "texts": len(texts), "seconds": best, "batch": embedder.batch_size}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "datasets" / "chroma_general"))
    ap.add_argument("--corpus", default="state_of_the_union")
    ap.add_argument("--backends", default="torch,onnx,openvino")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ghz", type=float, help="the cores' clock (default: the MHz /proc/cpuinfo reports)")
    ap.add_argument("--fma-units", type=int, default=2, help="FMA units per core (2 on Xeon Scalable, AVX-512)")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    texts = workload(args.data, args.corpus)
    if args.one:
        print(json.dumps(measure(args.one, texts, args.repeats)))
        return
    ghz = args.ghz or float(Path("/proc/cpuinfo").read_text().split("cpu MHz", 1)[1].split(":", 1)[1].split()[0]) / 1000
    shape = model_shape()
    peak = peaks(shape, ghz, args.fma_units)
    print(json.dumps(peak), file=sys.stderr)
    results = []
    for backend in args.backends.split(","):
        out = subprocess.run(
            [sys.executable, __file__, "--one", backend, "--data", args.data, "--corpus", args.corpus]
            + ["--repeats", str(args.repeats)],
            capture_output=True,
            text=True,
        )
        if out.returncode:
            print(f"{backend}: skipped ({(out.stderr.strip().splitlines() or ['failed'])[-1]})", file=sys.stderr)
            continue
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(json.dumps(results[-1]), file=sys.stderr)
    own, padded = lengths(texts, shape, results[0]["batch"] if results else 16)
    useful, executed = flops(own, shape), flops(padded, shape)
    print(
        f"{len(texts)} texts, {len(own)} of them run by the model (the others read alike), {sum(own) / len(own):.0f} "
        f"word pieces on average (largest {max(own)}): {useful / len(own) / 1e9:.2f} GFLOP per text useful, "
        f"{executed / len(own) / 1e9:.2f} executed (padded batches)\n"
        f"peak: theoretical {peak['theoretical_gflops']:.0f} GFLOP/s ({peak['cores']} cores × {peak['fma_units']} FMA "
        f"× {peak['lanes']} fp32 lanes × 2 × {peak['ghz']:.2f} GHz); measured: sgemm 2048² {peak['sgemm_gflops']:.0f} "
        f"GFLOP/s, the feed-forward's product at batch 16 × 160 {peak['ffn_gflops']:.0f} GFLOP/s\n"
    )
    print(
        "| backend | texts run/s | GFLOP/s (useful) | GFLOP/s (executed) | of the theoretical peak | of sgemm | of the "
        "feed-forward product |\n|---|---:|---:|---:|---:|---:|---:|"
    )
    for r in results:
        rate, done = useful / r["seconds"] / 1e9, executed / r["seconds"] / 1e9
        print(
            f"| {r['backend']} | {len(own) / r['seconds']:.1f} | {rate:.0f} | {done:.0f} | "
            f"{done / peak['theoretical_gflops']:.0%} | {done / peak['sgemm_gflops']:.0%} | {done / peak['ffn_gflops']:.0%} |"
        )


if __name__ == "__main__":
    main()
