"""`chunkeval gold generate` and `gold accept` (issue 34, docs/gold.md).

No chat model runs on these machines: `chat_server.ChatServer` is a stand-in that REPLAYS answers written by hand
for the demo corpus; it is not a model. Each of its answers exercises one check, so the counts of kept and rejected
questions below are exact. With CHUNKEVAL_TEST_CHAT_URL set (a base URL, or an endpoint name of endpoints.yaml
whose key variable is set) and CHUNKEVAL_TEST_CHAT_MODEL, `test_what_holds_for_any_model` runs against that
endpoint too, asserting only what holds for any model.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from chat_server import ANSWERS, NOTES, ChatServer
from chunkeval.cli import main
from chunkeval.engine.gold import generate as gg
from prefect_server import BIN

DEMO = Path(__file__).resolve().parent / "data" / "tiny_demo" / "corpora"


def corpus(folder: Path) -> Path:
    """The demo corpus and a document `notes`, whose answer the stand-in replays as prose without JSON."""
    shutil.copytree(DEMO, folder)
    (folder / "notes.md").write_text(NOTES, encoding="utf-8")
    return folder


def generate(corpus_dir: Path, out: Path, endpoint: str, *extra: str, model: str = "stand-in") -> dict:
    argv = ["gold", "generate", "--corpus-dir", str(corpus_dir), "--out", str(out), "--endpoint", endpoint]
    assert main([*argv, "--chat-model", model, *extra]) == 0
    return json.loads(out.with_name(f"{out.stem}.provenance.json").read_text())


def rows(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """One generation against the stand-in: 4 documents, one passage each, 3 questions asked of each."""
    t = tmp_path_factory.mktemp("generated")
    said = io.StringIO()  # stderr, off a terminal
    with ChatServer() as server, contextlib.redirect_stderr(said):
        prov = generate(corpus(t / "corpora"), t / "gen.csv", server.url, "--questions", "12", "--per-passage", "3")
        calls = server.calls
        again = generate(t / "corpora", t / "again.csv", server.url, "--questions", "12", "--per-passage", "3")
        resumed_calls = server.calls - calls
    return {"t": t, "prov": prov, "calls": calls, "again": again, "resumed_calls": resumed_calls} | {
        "stderr": said.getvalue()
    }


def test_generation_shows_its_progress(generated):
    """docs/gold.md promises a progress bar over the requests (issue 42): off a terminal, a line as the requests
    begin and one when the last is answered (and one at least every 10 s between, test_models.py)."""
    lines = [line for line in generated["stderr"].splitlines() if line.startswith("asking the chat model")]
    assert len(lines) >= 2 and lines[0].split("]")[1].split()[0] == "0/4", generated["stderr"]
    assert lines[-1].split("]")[1].split()[0] == "4/4" and "WARNING" not in generated["stderr"]


def test_every_check_is_applied_to_the_replayed_answers(generated):
    prov = generated["prov"]
    counts = prov["counts"]
    assert counts["proposed"] == sum(len(a) for a in ANSWERS.values()) == 9
    assert counts["kept"] == 6 and counts["rejected"] == 3 and counts["unusable_answers"] == 1  # notes' prose
    assert counts["rejected_by_reason"] == {
        "excerpt not found": 1,  # honeybees' excerpt that does not occur (an answer in a model's habits, read)
        "excerpt far from the question": 1,  # sourdough's off-topic excerpt
        "near-duplicate": 1,  # lighthouses' second question
        "no question or excerpt": 0,
        "past a bound": 0,
    }
    rejected = {r["reason"]: r for r in prov["rejected"]}
    assert rejected["near-duplicate"]["nearest_similarity"] >= prov["settings"]["dedup_similarity"]
    assert rejected["excerpt far from the question"]["excerpt_similarity"] < prov["settings"]["excerpt_similarity"]
    assert generated["calls"] == 5  # the first answered 429 with Retry-After, then retried
    review = rows(generated["t"] / "gen.review.csv")
    flags = {r["question"]: r["flag"] for r in review}
    assert "repeated elsewhere" in flags["What was the work of a lighthouse keeper like?"]
    assert "placed approximately" in flags["How does the waggle dance show the direction of the food?"]
    assert sum(1 for r in review if r["accept"] == "yes") == counts["kept"] - counts["flagged"] == 4
    page = (generated["t"] / "gen.review.html").read_text()
    assert page.count("<mark>") == 7 and "<script" not in page  # 6 questions, one of them with 2 excerpts


def test_a_resumed_run_pays_for_no_answer_twice(generated):
    again = generated["again"]
    assert again["requests"] == {"made": 0, "from_cache": 4, "unusable": 1}  # the unusable answer is cached too
    assert generated["resumed_calls"] == 0
    assert again["counts"] == generated["prov"]["counts"]
    assert rows(generated["t"] / "again.csv") == rows(generated["t"] / "gen.csv")


def check_any_model(t: Path, out: Path, prov: dict) -> None:
    """What holds for any model: kept questions' references hold the corpus text at their offsets, no two kept
    questions are above the dedup threshold, the provenance is complete, the counts add up."""
    from chunkeval.engine.embedding import Embedder
    from chunkeval.engine.inputs.corpus import load_corpora
    from chunkeval.paths import cache_dir

    texts = load_corpora(t / "corpora")
    kept = rows(out)
    assert {r["type"] for r in kept} <= set(gg.QUESTION_TYPES)
    assert len({r["query_id"] for r in kept}) == len(kept)
    for r in kept:
        for ref in json.loads(r["references"]):
            assert texts[r["corpus_id"]][ref["start_index"] : ref["end_index"]] == ref["content"]
    if len(kept) > 1:
        vectors = Embedder(cache_dir=cache_dir()).embed([r["question"] for r in kept], "query")[0]
        sims = vectors @ vectors.T
        assert max(sims[i, j] for i in range(len(kept)) for j in range(i)) < prov["settings"]["dedup_similarity"]
    for key in ("model", "prompt_version", "seed", "date", "counts", "tokens", "settings", "endpoint"):
        assert prov[key] not in (None, ""), key
    c = prov["counts"]
    assert c["proposed"] == c["kept"] + c["rejected"] == c["kept"] + sum(c["rejected_by_reason"].values())
    assert c["kept"] == len(kept) and prov["tokens"]["sent"] > 0


ENDPOINTS = ["stand-in"] + (["real"] if os.environ.get("CHUNKEVAL_TEST_CHAT_URL") else [])


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_what_holds_for_any_model(endpoint, generated, tmp_path):
    if endpoint == "stand-in":
        check_any_model(generated["t"], generated["t"] / "gen.csv", generated["prov"])
        return
    model = os.environ.get("CHUNKEVAL_TEST_CHAT_MODEL", "")
    corpus(tmp_path / "corpora")
    prov = generate(tmp_path / "corpora", tmp_path / "gen.csv", os.environ["CHUNKEVAL_TEST_CHAT_URL"], model=model)
    check_any_model(tmp_path, tmp_path / "gen.csv", prov)


def test_accept_keeps_the_rows_the_review_accepts(generated, tmp_path):
    t = generated["t"]
    review = rows(t / "gen.review.csv")
    review[0]["accept"] = "no"
    with open(tmp_path / "review.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(review[0]))
        writer.writeheader()
        writer.writerows(review)
    args = ["--questions", t / "gen.csv", "--review", tmp_path / "review.csv", "--out", tmp_path / "gold.csv"]
    assert main(["gold", "accept", *map(str, args)]) == 0
    wanted = [r["query_id"] for r in review if r["accept"] == "yes"]
    assert [r["query_id"] for r in rows(tmp_path / "gold.csv")] == wanted and len(wanted) == 3


def test_sampling_follows_length_and_seed():
    texts = {"long": "word " * 2000, "short": "word " * 200}
    pool = gg.passages(texts, passage_chars=100_000)
    assert [p.document for p in pool] == ["long", "short"]
    draws = [gg.sample(pool, 1, seed)[0].document for seed in range(200)]
    assert 0.8 < draws.count("long") / len(draws) < 0.98  # 10 of 11 of the text is in "long"
    assert gg.sample(pool, 5, 7) == gg.sample(pool, 5, 7)
    cut = gg.passages({"d": "\n\n".join(c * 50 for c in "abcdefghij")}, passage_chars=120)
    assert all(p.end - p.start <= 120 for p in cut) and len(cut) == 5
    # issue 41: a paragraph longer than --passage-chars is cut at sentence ends, a passage repeated is asked once
    line = " ".join(f"Sentence number {i} of a document without blank lines." for i in range(400))
    long = gg.passages({"wiki": line}, passage_chars=500)
    text = line
    assert len(long) > 40 and all(0 < p.end - p.start <= 500 for p in long)
    assert all(text[p.end - 1] == "." and not text[p.start].isspace() for p in long)
    assert gg.passages({"d": "\n\n".join(["x" * 50] * 10)}, passage_chars=120) == [gg.Passage("d", 0, 102)]
    assert len(gg.sample(pool, 5, 7)) == 2  # distinct passages only: the same passage twice is the same request


def test_the_generated_gold_set_runs_end_to_end(generated, prefect_server, shared_home, tmp_path):
    t = generated["t"]
    env = {**os.environ, **prefect_server, "CHUNKEVAL_HOME": str(shared_home)}
    argv = [str(BIN / "chunkeval"), "run", "--corpus-dir", str(t / "corpora"), "--questions", str(t / "gen.csv")]
    grid = ["--chunk-sizes", "100", "--overlaps", "0", "--k", "3", "--retriever", "bm25", "--slice-by", "type"]
    grid += ["--experiment", f"generated-{tmp_path.name}"]
    proc = subprocess.run([*argv, *grid], env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    import re

    import pyarrow.parquet as pq

    run_id = re.search(r"run (\S+) completed", proc.stdout)[1]
    per_query = pq.read_table(shared_home / "warehouse" / "results" / run_id / "per_query.parquet").to_pylist()
    assert {r["query_id"] for r in per_query} == {r["query_id"] for r in rows(t / "gen.csv")}  # every kept question
    assert "gold set generated by a model (stand-in, prompt gold-generate/2)" in proc.stdout
    # the reviewed gold set (`gold accept`) is a gold-set change: the next run records it, and the trend marks it G
    accepted = ["--questions", t / "gen.csv", "--review", t / "gen.review.csv", "--out", tmp_path / "gold.csv"]
    assert main(["gold", "accept", *map(str, accepted)]) == 0
    argv[-1] = str(tmp_path / "gold.csv")
    proc = subprocess.run([*argv, *grid], env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "; reviewed and accepted" in proc.stdout
    second = re.search(r"run (\S+) completed", proc.stdout)[1]
    trend = subprocess.run(
        [str(BIN / "chunkeval"), "trend", *grid[-2:], "--metric", "recall_at_k"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert trend.returncode == 0, trend.stderr
    assert f"{second} G" in trend.stdout and "(G: the gold set changed" in trend.stdout


def test_a_gold_set_sized_for_the_fall_to_see(tmp_path, capsys):
    """`gold generate --for-fall X` (issue 52) asks for the questions the gate needs to see a fall of X
    (`questions_for_fall`, here 0.5 over one check: 10), says whether those kept reach it and, where they fall short,
    what to ask for next (the answers paid for come from the cache); `--budget` refuses, before any request, a
    target that needs more requests. Against the stand-in chat server, which replays written answers."""
    from chunkeval.stats.power import questions_for_fall

    with ChatServer() as server:
        prov = generate(corpus(tmp_path / "corpora"), tmp_path / "g.csv", server.url, "--for-fall", "0.5",
                        "--per-passage", "3")  # fmt: skip
        out = capsys.readouterr().out
        need = questions_for_fall(0.5, 0.0, 1)
        assert f"--for-fall 0.5 over 1 check(s): {need} questions" in out
        kept = len(rows(tmp_path / "g.csv"))
        assert f"for a fall of 0.5: {kept} kept of the {need} needed" in out
        assert ("ask again with --questions" in out) == (kept < need)
        assert prov["settings"]["for_fall"] == 0.5 and prov["settings"]["questions"] == need
        calls = server.calls
        args = ["gold", "generate", "--corpus-dir", str(tmp_path / "corpora"), "--out", str(tmp_path / "h.csv"),
                "--endpoint", server.url, "--chat-model", "m", "--for-fall", "0.5", "--budget", "1"]  # fmt: skip
        assert main(args) == 2 and server.calls == calls  # refused before any request
        assert "more than --budget 1" in capsys.readouterr().err
        assert main([*args[:-4], "--questions", "5", "--for-fall", "0.5"]) == 2
