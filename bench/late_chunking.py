"""What late chunking changes (issue 44), beside contextual chunk headers and small-to-big retrieval.

    python bench/late_chunking.py [--work DIR] [--size 200] [--window 512] [--no-beir]

Four sweeps over one embedding cache, each timed (the later ones embed only what is new to them), at the same
chunking (fixed_token, `--size` tokens, overlap 0), dense retrieval with all-MiniLM-L6-v2, k 5:
the chunks alone (with `expand: none,window:n=1`, which embeds nothing more), `context: title`, `context:
headings`, and
`late: window:size=N`. Against the chunks alone, paired per question (`chunkeval.stats.compare_paired`: the mean
difference with its 95 % bootstrap interval, the paired t-test, the randomisation test; Holm over each table's
rows, as bench/context_headers.py does): span_recall and recall_at_k on the shared set
(../shared/datasets/chroma_general, skipped where absent), doc_ndcg_at_k on its BEIR-format version
(`bench/ties_beir.beir_folder`; expand is span gold's, so it is left out there). Beside each: the model tokens
embedded for the chunks (a text's word pieces up to the model's 256; late: the windows') and the seconds.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "datasets" / "chroma_general"
MODEL = "all-MiniLM-L6-v2"


def chunk_tokens(embedders, result_texts: list[str]) -> int:
    """Word pieces the model reads of these texts (each cut at its 256)."""
    from chunkeval.engine.embedding import late
    from chunkeval.engine.embedding.registry import resolve_model

    tokenizer = late.tokenizer_of(resolve_model(MODEL))
    return sum(min(len(e.ids), 256) for e in tokenizer.encode_batch(result_texts, add_special_tokens=True))


def sweeps(base: dict, variants: dict, cache: Path):
    """Per variant (name → settings over `base`): its result, seconds and chunk tokens embedded."""
    from chunkeval.engine.embedding.embedders import Embedders
    from chunkeval.engine.pipeline.experiment import Experiment
    from chunkeval.engine.pipeline.sweep import chunk_corpora, load_inputs, run_sweep

    out = {}
    for name, changes in variants.items():
        exp = Experiment(name="late-bench", **base, **changes).validate()
        embedders = Embedders(cache)
        started = time.perf_counter()
        result = run_sweep(exp, embedders)
        seconds = time.perf_counter() - started
        embedder = embedders[MODEL]
        if changes.get("late"):
            tokens = embedder.late_tokens
        else:  # the texts this sweep embedded: its chunks (headed under a context)
            inputs = load_inputs(exp, quiet=True)
            spec = exp.grid()[0]
            chunks = chunk_corpora(inputs.corpora, spec)
            texts = chunks.texts(inputs.corpora)
            if changes.get("context"):
                from chunkeval.engine.inputs.headings import chunk_headers, with_headers

                headers = chunk_headers(
                    chunks.corpus_names, chunks.corpus, chunks.start, inputs.outlines or {}, changes["context"][0]
                )
                texts = with_headers(texts, headers)
            tokens = chunk_tokens(embedders, texts)
        out[name] = (result, seconds, tokens)
    return out


def compare(results: dict, metrics: list[str], baseline=("chunks alone", None)):
    import numpy as np

    from chunkeval.stats import holm
    from chunkeval.stats.tests import compare_paired

    base_result = results[baseline[0]][0]
    rows = []
    for name, (result, seconds, tokens) in results.items():
        for metric in metrics:
            for expand in ("none", "window:n=1") if name == baseline[0] else ("none",):
                if name == baseline[0] and expand == "none":
                    continue
                if expand not in set(result.per_query["expand"].to_pylist()):
                    continue

                def values(table, e, metric=metric):  # each variant's sweep holds its one chunking
                    return {r["query_id"]: r[metric] for r in table.to_pylist() if r["expand"] == e}

                base = values(base_result.per_query, "none")
                mine = values(result.per_query, expand)
                queries = sorted(set(base) & set(mine))
                a = np.array([mine[q] for q in queries], dtype=float)
                b = np.array([base[q] for q in queries], dtype=float)
                label = "expand window:n=1" if expand != "none" else name
                cost = (results[baseline[0]][1], results[baseline[0]][2]) if expand != "none" else (seconds, tokens)
                rows.append({"what": label, "metric": metric, "seconds": cost[0], "tokens": cost[1],
                             **compare_paired(a, b)})  # fmt: skip
    for row, p in zip(rows, holm([r["p_permutation"] for r in rows]) if rows else []):
        row["p_adjusted"] = float(p)
    return rows


def print_rows(rows, base_seconds: float, base_tokens: int) -> None:
    print(f"chunks alone: {base_tokens:,} chunk tokens embedded, {base_seconds:.0f} s (queries included)")
    print("| against the chunks alone | metric | alone | with it | difference (95 % CI) | p t-test | p randomisation "
          "| p Holm | chunk tokens embedded | seconds |")  # fmt: skip
    print("| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(
            f"| {r['what']} | {r['metric']} | {r['mean_b']:.4f} | {r['mean_a']:.4f} | {r['mean_diff']:+.4f} "
            f"({r['ci_low']:+.4f} … {r['ci_high']:+.4f}) | {r['p_ttest']:.3g} | {r['p_permutation']:.3g} | "
            f"{r['p_adjusted']:.3g} | {r['tokens']:,} | {r['seconds']:.0f} |"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--window", type=int, default=512)
    parser.add_argument("--no-beir", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    work = args.work or Path(tempfile.mkdtemp(prefix="chunkeval-late-"))
    os.environ.setdefault("CHUNKEVAL_HOME", str(work / "home"))
    if not (SHARED / "questions_df.csv").is_file():
        print(f"skipped: the shared data set is absent (expected at {SHARED})")
        return 0
    grid = {"chunker": ("fixed_token",), "chunk_sizes": (args.size,), "overlaps": ("0",), "k": (5,),
            "model": (MODEL,), "retriever": ("dense",)}  # fmt: skip
    late = {"late": (f"window:size={args.window}",)}
    span = {"corpus_dir": str(SHARED / "corpora"), "questions": str(SHARED / "questions_df.csv"), **grid}
    variants = {
        "chunks alone": {"expand": ("none", "window:n=1")},
        "context title": {"context": ("title",)},
        "context headings": {"context": ("headings",)},
        f"late window:size={args.window}": late,
    }
    results = sweeps(span, variants, work / "cache")
    base = results["chunks alone"]
    print(f"shared set, fixed_token {args.size}, dense {MODEL}, k 5:")
    print_rows(compare(results, ["span_recall", "recall_at_k"]), base[1], base[2])
    if args.no_beir:
        return 0
    sys.path.insert(0, str(ROOT / "bench"))
    from ties_beir import beir_folder

    folder = work / "beir"
    if not (folder / "corpus.jsonl").is_file():
        beir_folder(folder)
    beir = {"beir": str(folder), **grid}
    variants = {
        "chunks alone": {},
        "context title": {"context": ("title",)},
        "context headings": {"context": ("headings",)},
        f"late window:size={args.window}": late,
    }
    results = sweeps(beir, variants, work / "cache")
    base = results["chunks alone"]
    print(f"BEIR-format shared set, fixed_token {args.size}, dense {MODEL}, MaxP, k 5:")
    print_rows(compare(results, ["doc_ndcg_at_k"]), base[1], base[2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
