"""`duplicates: positional | credit`: the worked example of docs/metrics.md, a brute-force oracle over
random corpora full of repeated words, the shared data set's repeated passages, and the warehouse's
rule that runs scored differently are never compared."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from chunkeval.cli import main
from chunkeval.engine.chunking import ChunkerSpec, Chunks
from chunkeval.engine.embedding.embedders import Embedders
from chunkeval.engine.inputs.duplicates import find_copies
from chunkeval.engine.inputs.span_gold import SpanGold
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.engine.pipeline.sweep import run_sweep
from chunkeval.engine.scoring.configuration import score_chunking
from chunkeval.errors import InputError
from chunkeval.run_result import RunResult
from chunkeval.warehouse import Warehouse

SPEC = ChunkerSpec("fixed_token", 3, 0)
SHARED = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "chroma_general"
COLUMNS = (
    "span_recall",
    "span_precision",
    "span_iou",
    "precision_omega",
    "recall_at_k",
    "precision_at_k",
    "mrr",
    "n_relevant",
    "covered_all",
    "omega_union",
)


def _score(gold, chunks, topk, ks, corpora, credit):
    table = score_chunking(gold, SPEC, chunks, topk, ks, copies=find_copies(gold, corpora) if credit else None)
    return table.select(["k", *COLUMNS]).to_pylist()


def test_the_worked_example_of_the_docs():
    text = "alpha beta. gamma. alpha beta. delta."
    gold = SpanGold(["q1"], ["which?"], ["c"], np.array([0]), np.array([19]), np.array([30]))  # the second copy
    chunks = Chunks(
        ("c",), np.zeros(4, np.int64), np.array([0, 12, 19, 31]), np.array([12, 19, 31, 37]), np.array([3, 2, 3, 2])
    )
    topk = np.array([[0, 3]])  # the first copy's chunk, then "delta."
    positional = _score(gold, chunks, topk, (1, 2), {"c": text}, credit=False)
    credit = _score(gold, chunks, topk, (1, 2), {"c": text}, credit=True)
    assert [r["span_recall"] for r in positional] == [0.0, 0.0]
    assert [r["mrr"] for r in positional] == [0.0, 0.0]
    assert positional[0]["precision_omega"] == pytest.approx(11 / 12)
    # credit: the copy at [0, 11) is the one the top chunks cover most
    assert credit[0]["span_recall"] == 1.0 and credit[0]["span_precision"] == pytest.approx(11 / 12)
    assert credit[1]["span_precision"] == pytest.approx(11 / 18)  # 12 + 6 characters retrieved at k = 2
    assert credit[0]["n_relevant"] == 2 and credit[0]["recall_at_k"] == 0.5 and credit[0]["mrr"] == 1.0
    assert (credit[0]["covered_all"], credit[0]["omega_union"]) == (22, 24)
    assert credit[0]["precision_omega"] == pytest.approx(22 / 24)


def _oracle(text, refs_of, chunks, topk, k):
    """Plain Python over sets of characters: the definitions of docs/metrics.md, one query at a time."""
    rows = []
    for q, refs in enumerate(refs_of):
        top = [c for c in topk[q][:k] if c >= 0]
        held = set().union(*(range(chunks[c][0], chunks[c][1]) for c in top)) if top else set()
        chosen, uncovered, length = set(), 0, 0  # as with positional: lengths and misses count each reference
        copies_of = []
        for s, e in refs:
            piece = text[s:e]
            spots = (
                [(a, a + len(piece)) for a in range(len(text)) if text.startswith(piece, a)]
                if piece.strip()
                else [(s, e)]
            )
            copies_of.append(spots)
            best = max(spots, key=lambda x: (len(held & set(range(*x))), x == (s, e), -x[0]))
            chosen |= set(range(*best))
            uncovered += len(set(range(*best)) - held)
            length += e - s
        covered = len(chosen & held)
        retrieved = sum(chunks[c][1] - chunks[c][0] for c in top)
        every = set().union(*(range(a, b) for spots in copies_of for a, b in spots))
        relevant = [
            i for i, (a, b) in enumerate(chunks) if any(a < e2 and b > s2 for spots in copies_of for s2, e2 in spots)
        ]
        union = set().union(*(range(*chunks[i]) for i in relevant)) if relevant else set()
        hits = sum(1 for c in top if c in relevant)
        rows.append(
            {
                "span_recall": covered / length,
                "span_precision": covered / retrieved if retrieved else 0.0,
                "span_iou": covered / (retrieved + uncovered) if retrieved + uncovered else 0.0,
                "precision_omega": len(every & union) / len(union) if union else 0.0,
                "recall_at_k": hits / len(relevant) if relevant else 0.0,
            }
        )
    return rows


@pytest.mark.parametrize("seed", range(12))
def test_credit_equals_a_brute_force_oracle(seed):
    rng = np.random.default_rng(seed)
    words = ["ab ", "cd ", "ab cd ", "e "]
    text = "".join(rng.choice(words, size=40))
    cuts = np.unique(np.r_[0, np.sort(rng.choice(np.arange(1, len(text)), size=12, replace=False)), len(text)])
    chunks = list(zip(cuts[:-1].tolist(), cuts[1:].tolist()))
    n_q = 4
    refs_of = []
    for _ in range(n_q):
        refs = []
        for _ in range(int(rng.integers(1, 3))):
            s = int(rng.integers(0, len(text) - 6))
            refs.append((s, s + int(rng.integers(2, 6))))
        refs_of.append(refs)
    gold = SpanGold(
        [f"q{i}" for i in range(n_q)],
        ["?"] * n_q,
        ["c"] * n_q,
        np.array([q for q, refs in enumerate(refs_of) for _ in refs]),
        np.array([s for refs in refs_of for s, _ in refs]),
        np.array([e for refs in refs_of for _, e in refs]),
    )
    table = Chunks(
        ("c",),
        np.zeros(len(chunks), np.int64),
        cuts[:-1].astype(np.int64),
        cuts[1:].astype(np.int64),
        np.ones(len(chunks), np.int64),
    )
    topk = np.stack([rng.permutation(len(chunks))[:4] for _ in range(n_q)])
    topk[0, 3] = -1  # a short list
    for k in (1, 2, 4):
        ours = [r for r in _score(gold, table, topk, (k,), {"c": text}, credit=True)]
        for mine, want in zip(ours, _oracle(text, refs_of, chunks, topk, k), strict=True):
            for name, value in want.items():
                assert mine[name] == pytest.approx(value, abs=1e-12), (seed, k, name)


def test_without_repeated_text_credit_changes_nothing():
    text = "one two three four five six seven eight nine ten"
    gold = SpanGold(["q"], ["?"], ["c"], np.array([0, 0]), np.array([4, 24]), np.array([13, 33]))
    chunks = Chunks(("c",), np.zeros(3, np.int64), np.array([0, 14, 30]), np.array([14, 30, 49]), np.ones(3, np.int64))
    topk = np.array([[1, 0, 2]])
    assert _score(gold, chunks, topk, (1, 2, 3), {"c": text}, False) == _score(
        gold, chunks, topk, (1, 2, 3), {"c": text}, True
    )


@pytest.mark.skipif(not (SHARED / "questions_df.csv").is_file(), reason=f"the shared data set is absent ({SHARED})")
def test_the_finance_corpus_repeated_passages_get_credit(tmp_path):
    exp = Experiment(
        name="fin",
        corpus_dir=str(SHARED / "corpora"),
        questions=str(SHARED / "questions_df.csv"),
        corpus=("finance",),
        chunker=("fixed_token",),
        chunk_sizes=(200,),
        k=(5,),
        retriever=("bm25",),
    )
    runs = {
        mode: run_sweep(exp.with_overrides(duplicates=mode), Embedders(tmp_path / "cache")).per_query
        for mode in ("positional", "credit")
    }
    pos, cred = (np.asarray(runs[m]["span_recall"]) for m in ("positional", "credit"))
    assert (cred >= pos - 1e-12).all() and (cred > pos).sum() > 0
    copies = find_copies(*_finance_gold(exp))
    repeated = {int(q) for q in copies.gold_set(_finance_gold(exp)[0]).ref_query[~copies.gold]}
    unchanged = [i for i in range(len(pos)) if i not in repeated]
    for m in (
        "span_recall",
        "span_precision",
        "recall_at_k",
        "precision_omega",
    ):  # a query without copies keeps its numbers
        a, b = np.asarray(runs["positional"][m]), np.asarray(runs["credit"][m])
        assert np.array_equal(a[unchanged], b[unchanged]), m


def _finance_gold(exp):
    from chunkeval.engine.pipeline.sweep import load_inputs

    inputs = load_inputs(exp)
    return inputs.gold, inputs.corpora


def test_runs_scored_differently_are_never_compared(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CHUNKEVAL_HOME", str(tmp_path))
    exp = Experiment(name="dup", chunker=("fixed_token",), chunk_sizes=(100,), k=(3,), retriever=("bm25",))
    wh = Warehouse.at_home()
    ids = {}
    for mode in ("positional", "credit", "positional"):
        result = run_sweep(exp.with_overrides(duplicates=mode), Embedders(tmp_path / "cache"))
        run_id = wh.begin_run("dup", {}, "manual", exp.with_overrides(duplicates=mode).to_dict())
        wh.complete_run(
            run_id,
            RunResult(
                result.per_query, result.summary, texts_embedded=0, references=result.references, models=result.models
            ),
        )
        ids.setdefault(mode, []).append(run_id)
    assert wh.duplicates(ids["credit"][0]) == "credit"
    # the newest run is positional: its reference is the first run, not the credit run between them
    assert wh.reference_run("dup", ids["positional"][1]) == ids["positional"][0]
    assert wh.reference_run("dup", ids["credit"][0]) is None
    assert wh.regressions("dup", ["span_recall"], 0.0) == []  # the same numbers: nothing fell
    with pytest.raises(InputError, match="never compared"):
        wh.regressions("dup", ["span_recall"], 0.0, baseline=ids["credit"][0])
    assert main(["compare", "--run", ids["positional"][0], "--run", ids["credit"][0], "--metric", "span_recall"]) == 2
    assert "never compared" in capsys.readouterr().err
    assert (
        main(["compare", "--run", ids["positional"][0], "--run", ids["positional"][1], "--metric", "span_recall"]) == 0
    )
