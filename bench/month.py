"""A month of nights through the real scheduler (issue 29): the loop chunkeval exists for, played end to end.

    python bench/month.py [--data demo|shared] [--nights 30] [--work DIR]

A real `prefect server start` (its scheduler's loop shortened to 2 s) and `chunkeval serve` serving a `nightly`
deployment of one experiment (bm25 and dense retrieval, one model). Each night the script changes the world as a
month of real use would (documents edited inside and outside references, added and removed; the gold set updated
once with `chunkeval gold update`; the model swapped once; on one night, a change that really hurts retrieval),
then lets the night come: it moves the schedule's anchor to a few seconds from now, and the server's scheduler,
not the script, creates the flow run that the served deployment runs. After each run it asks the gate
(`chunkeval trend --fail-on-regression`) for the verdict, and prints a timeline: each night's run, its trigger, the
change, the gold set's summary line and the verdict.

What must hold, and what tests/test_month.py checks on six nights of the demo: every night completes, the only
alarm is the harmful night, and the gold update and the model swap are marked in `trend` (`G`, `M`) and in the HTML
trend (a dashed line).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "datasets" / "chroma_general"
BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT / "tests"))
from prefect_server import prefect_server, wait_for  # noqa: E402  (the tests' real server, shared by the bench)

DENSE = "minilm-static"
SWAPPED = "all-MiniLM-L6-v2"
HARM_MARK = "<!-- month: distractors -->"
LEAD = 6  # seconds from a night's schedule change to its run: three loops of the scheduler

# the six nights of the CI test, and a month: night -> the changes made before it
SIX_NIGHTS = {
    1: [],
    2: ["edit-inside", "add-document"],
    3: ["gold-update", "edit-outside"],
    4: ["model-swap"],
    5: ["harm"],
    6: ["undo-harm", "remove-document"],
}
MONTH = {
    1: [],
    2: ["edit-outside"],
    4: ["edit-inside"],
    5: ["add-document"],
    7: ["insert-paragraph"],
    9: ["gold-update"],
    11: ["remove-document"],
    13: ["model-swap"],
    16: ["edit-outside", "add-document"],
    18: ["harm"],
    19: ["undo-harm"],
    22: ["delete-reference"],
    24: ["edit-inside"],
    27: ["remove-document"],
}


@dataclass
class World:
    """The experiment's files in a work folder, which the nights change."""

    work: Path
    corpus: Path
    questions: Path
    experiment: Path
    env: dict
    added: list[Path] = field(default_factory=list)

    def gold(self) -> list[dict]:
        import csv

        with self.questions.open(newline="", encoding="utf-8") as fh:
            return list(csv.DictReader(fh))

    def references(self) -> list[tuple[Path, str]]:
        """(document, reference text) of every reference of the gold set."""
        out = []
        for row in self.gold():
            doc = next(self.corpus.glob(f"{row['corpus_id']}.*"))
            out += [(doc, ref["content"]) for ref in json.loads(row["references"])]
        return out

    def chunkeval(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(BIN / "chunkeval"), *args], env=self.env, capture_output=True, text=True)


def _documents_with_references(world: World) -> list[Path]:
    return sorted({doc for doc, _ in world.references()})


def edit_outside(world: World, night: int) -> str:
    """A sentence outside every reference reworded (the references after it move)."""
    refs = world.references()
    for doc in _documents_with_references(world):
        text = doc.read_text(encoding="utf-8")
        spans = [(text.find(r), text.find(r) + len(r)) for d, r in refs if d == doc and r in text]
        for m in re.finditer(r"\b(is|was|are|were)\b", text):
            if not any(a <= m.start() < b for a, b in spans):
                doc.write_text(text[: m.start()] + m.group(0) + " indeed" + text[m.end() :], encoding="utf-8")
                return f"reworded a sentence of {doc.name} outside the references"
    raise RuntimeError("no word to change outside the references")


def edit_inside(world: World, night: int) -> str:
    """A comma put into a sentence that a reference quotes: the reference no longer occurs as written."""
    doc, ref = world.references()[night % len(world.references())]
    text = doc.read_text(encoding="utf-8")
    at = text.find(ref)
    space = ref.find(" ", len(ref) // 2)
    doc.write_text(text[: at + space] + "," + text[at + space :], encoding="utf-8")
    return f"put a comma into a referenced sentence of {doc.name}"


def insert_paragraph(world: World, night: int) -> str:
    doc = _documents_with_references(world)[0]
    text = doc.read_text(encoding="utf-8")
    head, _, rest = text.partition("\n")
    para = "\n\nA note added in the month's review: this page was checked against its sources once more.\n"
    doc.write_text(head + para + rest, encoding="utf-8")
    return f"inserted a paragraph above the references of {doc.name}"


def delete_reference(world: World, night: int) -> str:
    """A referenced passage deleted: its question cannot be placed and retires."""
    doc, ref = world.references()[-1]
    text = doc.read_text(encoding="utf-8")
    doc.write_text(text.replace(ref, ""), encoding="utf-8")
    return f"deleted a referenced passage of {doc.name}"


def add_document(world: World, night: int) -> str:
    path = world.corpus / f"notes{night}.md"
    path.write_text(
        f"# Notes of night {night}\n\nMaintenance notes: the tower lamps were cleaned, the hives inspected, "
        "and a new starter was fed with rye flour.\n",
        encoding="utf-8",
    )
    world.added.append(path)
    return f"added {path.name}"


def remove_document(world: World, night: int) -> str:
    path = world.added.pop(0)
    path.unlink()
    return f"removed {path.name}"


def gold_update(world: World, night: int) -> str:
    """`chunkeval gold update`: the corrected gold set to a new file, reviewed and accepted (it replaces the old)."""
    out = world.work / f"questions-night{night}.csv"
    done = world.chunkeval(
        "gold", "update", "--corpus-dir", str(world.corpus), "--questions", str(world.questions), "--out", str(out)
    )
    if done.returncode != 0:
        raise RuntimeError(f"gold update failed: {done.stderr.strip()}")
    shutil.copyfile(out, world.questions)
    return "gold set updated (gold update, accepted)"


def model_swap(world: World, night: int) -> str:
    spec = yaml.safe_load(world.experiment.read_text())
    spec["model"] = [SWAPPED]
    world.experiment.write_text(yaml.safe_dump(spec))
    return f"model swapped: {DENSE} -> {SWAPPED}"


def harm(world: World, night: int) -> str:
    """Distractors: each document gets, above its text, paragraphs that repeat its questions without answering
    them, which both retrievers rank above the answers (a badly scraped FAQ page does this)."""
    by_doc: dict[str, list[str]] = {}
    for row in world.gold():
        by_doc.setdefault(row["corpus_id"], []).append(row["question"])
    for corpus_id, questions in by_doc.items():
        doc = next(world.corpus.glob(f"{corpus_id}.*"))
        faq = "".join(f"\n\nAsked often: {q} {q} See the other pages for this." for q in questions * 3)
        doc.write_text(f"{HARM_MARK}{faq}\n{HARM_MARK}\n\n" + doc.read_text(encoding="utf-8"), encoding="utf-8")
    return "distractors added above every document's text (harmful)"


def undo_harm(world: World, night: int) -> str:
    for doc in world.corpus.iterdir():
        text = doc.read_text(encoding="utf-8")
        if HARM_MARK in text:
            doc.write_text(text.split(f"{HARM_MARK}\n\n", 1)[1].split(HARM_MARK, 1)[-1], encoding="utf-8")
    return "distractors removed"


CHANGES: dict[str, Callable[[World, int], str]] = {
    "edit-outside": edit_outside,
    "edit-inside": edit_inside,
    "insert-paragraph": insert_paragraph,
    "delete-reference": delete_reference,
    "add-document": add_document,
    "remove-document": remove_document,
    "gold-update": gold_update,
    "model-swap": model_swap,
    "harm": harm,
    "undo-harm": undo_harm,
}
HARMFUL = {"harm"}


def set_up(data: str, work: Path) -> tuple[Path, Path]:
    """The corpus and gold set copied into `work` (the shared set: its state_of_the_union corpus)."""
    corpus, questions = work / "corpora", work / "questions.csv"
    if data == "demo":
        from chunkeval.paths import DEMO_DIR

        shutil.copytree(DEMO_DIR / "corpora", corpus)
        shutil.copyfile(DEMO_DIR / "questions.csv", questions)
    else:
        import csv

        if not (SHARED / "questions_df.csv").is_file():
            raise SystemExit(f"the shared data set is absent: expected it at {SHARED}")
        corpus.mkdir()
        keep = "state_of_the_union"
        shutil.copyfile(SHARED / "corpora" / f"{keep}.md", corpus / f"{keep}.md")
        with (SHARED / "questions_df.csv").open(newline="", encoding="utf-8") as fh:
            rows = [r for r in csv.DictReader(fh) if r["corpus_id"] == keep]
        with questions.open("w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=["question", "references", "corpus_id"])
            writer.writeheader()
            writer.writerows({k: r[k] for k in ("question", "references", "corpus_id")} for r in rows)
    return corpus, questions


@dataclass
class Night:
    night: int
    changes: list[str]
    run_id: str = ""
    trigger: str = ""
    status: str = ""
    gold: str = ""
    verdict: str = ""
    gate: int = -1
    seconds: float = 0.0

    def line(self) -> str:
        return (
            f"night {self.night:2d}  {self.trigger:<8} {self.status:<9} gate {self.gate}  {self.seconds:5.1f} s  "
            f"{'; '.join(self.changes) or 'no change'}\n          gold: {self.gold}\n          verdict: {self.verdict}"
        )


def _fire(client, deployment_id, schedule_id) -> None:
    """Night falls: the schedule's anchor moves to a few seconds from now, and the server's scheduler creates the
    run (it schedules only times still ahead when its loop, every 2 s here, comes round: hence the lead)."""
    from prefect.client.schemas.schedules import IntervalSchedule

    anchor = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=LEAD)
    client.update_deployment_schedule(
        deployment_id, schedule_id, schedule=IntervalSchedule(interval=dt.timedelta(days=1), anchor_date=anchor)
    )


def play(
    data: str, plan: dict[int, list[str]], nights: int, work: Path, say=print, timeout: float = 600
) -> list[Night]:
    """Play `nights` nights of `plan` (night -> changes) in `work`; returns the timeline."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from chunkeval.warehouse import Warehouse

    work.mkdir(parents=True, exist_ok=True)
    corpus, questions = set_up(data, work)
    name = f"month-{data}"
    experiment = work / "experiment.yaml"
    experiment.write_text(
        yaml.safe_dump(
            {
                "name": name,
                "corpus_dir": str(corpus),
                "questions": str(questions),
                "chunker": ["fixed_token"],
                "chunk_sizes": [100],
                "overlaps": [0],
                "k": [3],
                "model": [DENSE],
                "retriever": ["bm25", "dense"],
            }
        )
    )
    # each day's time 12 h from now: no night falls until the script says
    far = (dt.datetime.now(dt.UTC) - dt.timedelta(hours=12)).isoformat()
    spec = {
        "deployments": [
            {
                "name": "nightly",
                "entrypoint": "chunkeval.flows.evaluate:evaluate",
                "parameters": {"experiment": str(experiment), "trigger": "schedule"},
                "schedules": [{"interval": 86400, "anchor_date": far}],
            }
        ]
    }
    (work / "prefect.yaml").write_text(yaml.safe_dump(spec))
    home = work / "home"
    timeline: list[Night] = []
    settings = {"PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "2"}
    with prefect_server(work / "prefect", **settings) as server:
        env = {**server, "CHUNKEVAL_HOME": str(home), "PREFECT_RUNNER_POLL_FREQUENCY": "2"}
        if os.environ.get("CHUNKEVAL_MODELS"):  # a models folder built already (the tests lend theirs)
            (home / "models").parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.environ["CHUNKEVAL_MODELS"], home / "models")
        world = World(work, corpus, questions, experiment, env)
        log = open(work / "serve.log", "wb")
        serve = subprocess.Popen(
            [str(BIN / "chunkeval"), "serve", "--prefect-file", str(work / "prefect.yaml")],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        old = os.environ.get("CHUNKEVAL_HOME")
        os.environ["CHUNKEVAL_HOME"] = str(home)
        try:
            with (
                temporary_settings(updates={PREFECT_API_URL: env["PREFECT_API_URL"]}),
                get_client(sync_client=True) as client,
            ):
                deployment = wait_for(
                    lambda: _deployment(client, "evaluate/nightly"), 120, "the served nightly deployment", serve
                )
                (schedule,) = deployment.schedules
                wh = Warehouse(home / "warehouse")
                for n in range(1, nights + 1):
                    night = Night(n, [CHANGES[c](world, n) for c in plan.get(n, [])])
                    known = {r["run_id"] for r in wh.runs(name)} if wh.exists() else set()
                    start = time.monotonic()
                    _fire(client, deployment.id, schedule.id)
                    run = wait_for(
                        lambda known=known: _new_run(wh, name, known),
                        timeout,
                        f"night {n}'s run in the warehouse",
                        serve,
                    )
                    night.seconds = time.monotonic() - start
                    night.run_id, night.trigger, night.status = run["run_id"], run["trigger"], run["status"]
                    flow_run = client.read_flow_run(run["flow_run_id"])
                    if not flow_run.auto_scheduled:
                        raise RuntimeError(f"night {n}'s flow run was not created by the scheduler")
                    night.gold = _gold_line(wh, run)
                    gate = world.chunkeval("trend", "--experiment", name, "--fail-on-regression")
                    night.gate = gate.returncode
                    night.verdict = _verdict(gate)
                    timeline.append(night)
                    say(night.line())
        finally:
            if old is None:
                os.environ.pop("CHUNKEVAL_HOME", None)
            else:
                os.environ["CHUNKEVAL_HOME"] = old
            os.killpg(serve.pid, signal.SIGTERM)
            serve.wait(30)
            log.close()
    return timeline


def _deployment(client, name: str):
    from prefect.exceptions import ObjectNotFound

    try:
        return client.read_deployment_by_name(name)
    except ObjectNotFound:
        return None


def _new_run(wh, name: str, known: set[str]):
    """The night's run once it has ended (completed or failed), else None."""
    if not wh.exists():
        return None
    runs = [r for r in wh.runs(name) if r["run_id"] not in known and r["status"] != "running"]
    return runs[0] if runs else None


def _gold_line(wh, run: dict) -> str:
    """How the run's gold set met the corpus, from the gold check it recorded: the counts of its one summary line."""
    from chunkeval.engine.inputs.anchoring import anchoring_counts

    check = wh.gold_check(run["run_id"]) or {}
    if not check.get("anchoring"):
        return "(no anchoring recorded)"
    counts = anchoring_counts(check["anchoring"])
    approx = [a["similarity"] for a in check["anchoring"] if a["status"] == "approximate"]
    return (
        f"{sum(counts.values())} questions: {counts['exact']} exact, {counts['reanchored']} re-anchored, "
        f"{counts['approximate']} approximate"
        + (f" (lowest {min(approx):g})" if approx else "")
        + f", {counts['retired']} retired"
    )


def _verdict(gate: subprocess.CompletedProcess) -> str:
    """The gate's verdict in a few words: its exit status's meaning, and its own line where it alarms."""
    meaning = {0: "no regression", 1: "REGRESSION", 2: "bad input", 3: "nothing comparable", 4: "fault"}
    head = meaning.get(gate.returncode, f"exit {gate.returncode}")
    lines = [x.strip() for x in (gate.stdout + gate.stderr).splitlines() if x.strip()]
    return lines[0] if gate.returncode and lines else head


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", choices=["demo", "shared"], default="demo")
    parser.add_argument("--nights", type=int, default=30)
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    work = args.work or Path(tempfile.mkdtemp(prefix="chunkeval-month-"))
    plan = MONTH if args.nights > len(SIX_NIGHTS) else SIX_NIGHTS
    started = time.monotonic()
    timeline = play(args.data, plan, args.nights, work)
    alarms = [n.night for n in timeline if n.gate == 1]
    harmful = [n.night for n in timeline if HARMFUL & set(plan.get(n.night, []))]
    print(
        f"\n{len(timeline)} nights in {time.monotonic() - started:.0f} s: "
        f"{sum(n.status == 'completed' for n in timeline)} completed; alarms on nights {alarms or 'none'}; "
        f"harmful nights {harmful}"
    )
    return 0 if alarms == harmful and all(n.status == "completed" for n in timeline) else 1


if __name__ == "__main__":
    sys.exit(main())
