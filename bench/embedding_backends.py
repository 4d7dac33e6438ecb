"""Embedding backends: throughput against torch, and what each changes on the shared general evaluation.

    python bench/embedding_backends.py [--data ../shared/datasets/chroma_general] [--phases speed,quality]
                                       [--backends torch,onnx,onnx-int8,openvino,openvino-int8] [--texts 384]

A backend's name is `backend[-int8][-bf16|-fp16]`: `torch-bf16` is torch under bf16 autocast,
`openvino-bf16` OpenVINO with its bf16 inference precision (`--precision`, docs/backends.md); every one
is compared with `torch` (fp32).

- speed: per backend, in its own process, the model loaded and one warm-up batch run, then `--texts`
  texts of 220 tokens (fixed_token chunks of the shared corpora, each distinct) embedded with
  `Embedder(cache_dir=None)`, chunkeval's batch for the device (16 on a CPU; `--batch-size B` sets one): texts per second, best of `--repeats`. No cache, no dedupe effect
  (every text differs in what the model reads).
- quality: per backend, `run_sweep` of the general evaluation's 8 configurations of fixed and
  recursive chunks (Chroma's grid: 800/400, 400/200, 400/0, 200/0 tokens, dense, k = 5) through an
  embedding cache in a temporary home; for each configuration the macro means of span recall, span
  precision and recall_at_k, and their largest difference from torch fp32; the worst cosine between a
  backend's vector and torch's over every text embedded.
Figures go to stdout as a Markdown table (and JSON lines to stderr as they come).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = [
    ("fixed_token", 800, 400),
    ("fixed_token", 400, 200),
    ("fixed_token", 400, 0),
    ("fixed_token", 200, 0),
    ("recursive_token", 800, 400),
    ("recursive_token", 400, 200),
    ("recursive_token", 400, 0),
    ("recursive_token", 200, 0),
]
METRICS = ("span_recall", "span_precision", "recall_at_k")


def split(name: str) -> tuple[str, str, str]:
    """(backend, quantize, precision) of a name such as `onnx-int8` or `torch-bf16`."""
    backend, *rest = name.split("-")
    quantize = next((r for r in rest if r == "int8"), "none")
    precision = next((r for r in rest if r in ("bf16", "fp16")), "fp32")
    return backend, quantize, precision


def sample_texts(data: str, model: str, count: int) -> list[str]:
    """Distinct texts of 220 tokens: fixed_token chunks of the shared corpora where they are at hand,
    else (on a machine without them) random whole words of the model's vocabulary, 218 word pieces each."""
    if Path(data).is_dir():
        from chunkeval.engine.chunking import ChunkerSpec, chunk_corpora
        from chunkeval.engine.pipeline.experiment import Experiment
        from chunkeval.engine.pipeline.sweep import load_inputs

        exp = Experiment.from_dict(
            {"name": "bench", "corpus_dir": f"{data}/corpora", "questions": f"{data}/questions_df.csv"}
        )
        inputs = load_inputs(exp)
        return list(
            dict.fromkeys(chunk_corpora(inputs.corpora, ChunkerSpec("fixed_token", 220, 0)).texts(inputs.corpora))
        )
    import random

    from tokenizers import Tokenizer

    from chunkeval.engine.embedding import resolve_model

    folder = resolve_model(model)
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    words = [w for w in (folder / "vocab.txt").read_text(encoding="utf-8").split() if w.isalpha() and w.isascii()]
    rng = random.Random(0)
    texts = []
    for _ in range(count):
        pieces = tokenizer.encode(" ".join(rng.choices(words, k=240)), add_special_tokens=False)
        texts.append(tokenizer.decode(pieces.ids[:218]))
    return texts


def speed(
    name: str,
    data: str,
    n: int,
    repeats: int,
    device: str = "cpu",
    model: str = "all-MiniLM-L6-v2",
    batch_size: int | None = None,
) -> dict:
    from chunkeval.engine.embedding import Embedder

    backend, quantize, precision = split(name)
    need = 32 + repeats * n  # a warm-up batch, then the samples
    texts = sample_texts(data, model, need)
    if len(texts) < need:  # the shared corpora hold 1,493 distinct 220-token chunks
        sys.exit(f"only {len(texts)} distinct texts for 32 + {repeats} × {n}: lower --texts or --repeats")
    embedder = Embedder(
        model,
        cache_dir=None,
        backend=backend,
        quantize=quantize,
        precision=precision,
        device=device,
        batch_size=batch_size,
    )
    embedder.embed(texts[:32])  # load and warm up
    best = None
    for r in range(repeats):
        sample = texts[32 + r * n : 32 + (r + 1) * n]
        start = time.perf_counter()
        embedder.embed(sample)
        rate = len(sample) / (time.perf_counter() - start)
        best = rate if best is None else max(best, rate)
    return {
        "phase": "speed",
        "backend": name,
        "device": device,
        "batch_size": embedder.batch_size,
        "texts": n,
        "texts_per_second": best,
    }


def quality(name: str, data: str, batch_size: int | None = None) -> dict:
    import numpy as np

    from chunkeval.engine.embedding.embedders import Embedders
    from chunkeval.engine.pipeline.experiment import Experiment
    from chunkeval.engine.pipeline.sweep import run_sweep
    from chunkeval.paths import cache_dir

    backend, quantize, precision = split(name)
    rows = {}
    embedders = Embedders(
        cache_dir(), batch_size, device="cpu", backend=backend, quantize=quantize, precision=precision
    )
    start = time.perf_counter()
    for chunker, size, overlap in CONFIGS:
        exp = Experiment.from_dict(
            {
                "name": "bench",
                "corpus_dir": f"{data}/corpora",
                "questions": f"{data}/questions_df.csv",
                "chunker": chunker,
                "chunk_sizes": size,
                "overlaps": overlap,
                "k": 5,
                "backend": backend,
                "quantize": quantize,
                "precision": precision,
            }
        )
        summary = run_sweep(exp, embedders).summary.to_pylist()[0]
        rows[f"{chunker} {size}/{overlap}"] = {m: summary[f"{m}_mean"] for m in METRICS}
    seconds = time.perf_counter() - start
    embedder = embedders["all-MiniLM-L6-v2"]
    cache = embedder.cache
    cache.refresh()
    hashes = sorted(cache._index)
    vectors = cache.get(cache.rows(hashes))[0]
    np.save(Path(os.environ["CHUNKEVAL_HOME"]) / f"vectors-{name}.npy", vectors)
    (Path(os.environ["CHUNKEVAL_HOME"]) / f"hashes-{name}.json").write_text(json.dumps(hashes))
    return {
        "phase": "quality",
        "backend": name,
        "seconds": seconds,
        "texts_embedded": embedders.texts_embedded,
        "configs": rows,
    }


def worst_cosine(home: Path, name: str) -> float | None:
    import numpy as np

    try:
        ref = dict(zip(json.loads((home / "hashes-torch.json").read_text()), np.load(home / "vectors-torch.npy")))
        mine = dict(zip(json.loads((home / f"hashes-{name}.json").read_text()), np.load(home / f"vectors-{name}.npy")))
    except OSError:
        return None
    common = sorted(ref.keys() & mine.keys())
    return float(min((ref[h] * mine[h]).sum() for h in common)) if common else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "datasets" / "chroma_general"))
    ap.add_argument("--phases", default="speed,quality")
    ap.add_argument("--backends", default="torch,onnx,onnx-int8,openvino,openvino-int8")
    ap.add_argument("--texts", type=int, default=384)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="cpu", help="speed phase: cpu, cuda or auto")
    ap.add_argument(
        "--batch-size",
        type=int,
        default=0,
        help="texts per batch (0, the default: chunkeval's own choice for the device, 16 on a CPU)",
    )
    ap.add_argument("--model", default="all-MiniLM-L6-v2")
    ap.add_argument("--run", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        phase, name = args.run
        out = (
            speed(name, args.data, args.texts, args.repeats, args.device, args.model, args.batch_size or None)
            if phase == "speed"
            else quality(name, args.data, args.batch_size or None)
        )
        print(json.dumps(out))
        return
    if not Path(args.data).is_dir():
        sys.exit(f"no data set at {args.data} (the shared general evaluation)")
    names = args.backends.split(",")
    results = {}
    with tempfile.TemporaryDirectory() as home:
        env = dict(os.environ, CHUNKEVAL_HOME=home, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
        for phase in args.phases.split(","):
            for name in names:
                cmd = [
                    sys.executable,
                    __file__,
                    "--run",
                    phase,
                    name,
                    "--data",
                    args.data,
                    "--texts",
                    str(args.texts),
                    "--repeats",
                    str(args.repeats),
                    "--device",
                    args.device,
                    "--model",
                    args.model,
                    "--batch-size",
                    str(args.batch_size),
                ]
                done = subprocess.run(cmd, env=env, capture_output=True, text=True)
                if done.returncode:
                    sys.exit(
                        f"{phase} {name} failed: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}"
                    )
                out = done.stdout
                results[phase, name] = json.loads(out.strip().splitlines()[-1])
                print(json.dumps(results[phase, name]), file=sys.stderr, flush=True)
        cosines = {n: worst_cosine(Path(home), n) for n in names}
    torch_speed = results.get(("speed", "torch"), {}).get("texts_per_second")
    if any(p == "speed" for p, _ in results):
        print("| backend | texts/s | × torch |\n|---|---:|---:|")
        for name in names:
            r = results["speed", name]
            print(
                f"| {name} | {r['texts_per_second']:.1f} | {r['texts_per_second'] / torch_speed:.2f} |"
                if torch_speed
                else f"| {name} | {r['texts_per_second']:.1f} | |"
            )
    if any(p == "quality" for p, _ in results) and ("quality", "torch") in results:
        ref = results["quality", "torch"]["configs"]
        print(
            "\n| backend | largest |Δ| span recall | span precision | recall_at_k (k = 5) | worst cosine vs torch | "
            "texts embedded | seconds |\n|---|---:|---:|---:|---:|---:|---:|"
        )
        for name in names:
            r = results["quality", name]
            deltas = [max(abs(r["configs"][c][m] - ref[c][m]) for c in ref) for m in METRICS]
            cos = cosines.get(name)
            print(
                f"| {name} | {deltas[0]:.2e} | {deltas[1]:.2e} | {deltas[2]:.2e} | {'' if cos is None else f'{cos:.5f}'} | "
                f"{r['texts_embedded']} | {r['seconds']:.0f} |"
            )
        print(
            "\n| configuration | " + " | ".join(f"{m} (torch)" for m in METRICS) + " |\n|---|" + "---:|" * len(METRICS)
        )
        for c, values in ref.items():
            print(f"| {c} | " + " | ".join(f"{values[m]:.4f}" for m in METRICS) + " |")
        others = [n for n in names if n != "torch"]
        if others:  # the signed change of each configuration, in points (× 100)
            print(
                "\n| configuration | "
                + " | ".join(f"{n}: Δ {m}" for n in others for m in METRICS)
                + " |\n|---|"
                + "---:|" * (len(others) * len(METRICS))
            )
            for c in ref:
                cells = [100 * (results["quality", n]["configs"][c][m] - ref[c][m]) for n in others for m in METRICS]
                print(f"| {c} | " + " | ".join(f"{d:+.2f}" for d in cells) + " |")


if __name__ == "__main__":
    main()
