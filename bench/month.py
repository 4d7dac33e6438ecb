"""A month of nights through the real scheduler (issue 29): the loop chunkeval exists for, played end to end.

    python bench/month.py [--data demo|shared] [--nights 30] [--work DIR]

A real `prefect server start` (its scheduler's loop shortened to 2 s) and `chunkeval serve` serving a `nightly`
deployment of one experiment (bm25 and dense retrieval, one model). Each night the script changes the world as a
month of real use would (documents edited inside and outside references, added and removed; the gold set updated
once with `chunkeval gold update`; the model swapped once; on one night, a change that really hurts retrieval),
then lets the night come: it moves the schedule's anchor a few seconds ahead, checks that the server's scheduler,
not the script, created the flow run at that time (else moves it again, further ahead, saying what the scheduler
did), and the served deployment runs it. The experiment's alarms go to a webhook receiver on 127.0.0.1 through the
Prefect server's automations (`alerts:`, docs/loop.md). After each run it asks the gate
(`chunkeval trend --fail-on-regression`) for the verdict, counts the messages that arrived, and prints a timeline:
each night's run, its trigger, the change, the gold set's summary line, the verdict and the alarms.

What must hold, and what tests/test_month.py checks on five nights of the demo: every night completes (a quoted
document deleted, another renamed, one saved in another encoding included), one run a night, the only alarm is the
harmful night's, one regression message arrives at the receiver on that night and none on the others, and the gold
update and the model swap are marked in `trend` (`G`, `M`) and in the HTML trend (a dashed line).
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
from alarm_receivers import webhook_receiver  # noqa: E402  (where the alarms arrive)
from prefect_server import prefect_server, wait_for  # noqa: E402  (the tests' real server, shared by the bench)

DENSE = "minilm-static"
SWAPPED = "all-MiniLM-L6-v2"
HARM_MARK = "<!-- month: distractors -->"
LEAD = 6  # seconds from a night's schedule change to its run: three loops of the scheduler (doubled while missed)
FIRES = 5  # anchors tried before a night gives up (6, 12, 24, 48, 96 s ahead)
RUN_TIMEOUT = 300  # seconds a night's run may take, once the scheduler has made it

# the five nights of the CI test, and a month: night -> the changes made before it
FIVE_NIGHTS = {
    1: [],
    2: ["edit-inside", "add-document", "encoding-change"],
    3: ["gold-update", "edit-outside", "rename-document"],
    4: ["model-swap", "remove-document", "delete-quoted-document"],
    5: ["harm"],
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
    23: ["encoding-change"],
    24: ["edit-inside"],
    25: ["rename-document"],
    27: ["remove-document"],
    29: ["delete-quoted-document"],
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
        """(document, reference text) of every reference of the gold set that its corpus still holds: in the
        document its corpus_id names, else (renamed) the one that holds its text, as a run places it."""
        out = []
        for row in self.gold():
            for ref in json.loads(row["references"]):
                doc = next(self.corpus.glob(f"{row['corpus_id']}.*"), None) or self.holding(ref["content"])
                if doc is not None:
                    out.append((doc, ref["content"]))
        return out

    def holding(self, content: str) -> Path | None:
        return next((d for d in sorted(self.corpus.iterdir()) if content in read(d)), None)

    def chunkeval(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(BIN / "chunkeval"), *args], env=self.env, capture_output=True, text=True)


def read(doc: Path) -> str:
    """A document's text in whatever encoding it was saved (as a run reads it); an edit saves it as UTF-8 again."""
    from chunkeval.engine.inputs.extract import decode_text

    return decode_text(doc.read_bytes())[0]


def _documents_with_references(world: World) -> list[Path]:
    return sorted({doc for doc, _ in world.references()})


def edit_outside(world: World, night: int) -> str:
    """A sentence outside every reference reworded (the references after it move)."""
    refs = world.references()
    for doc in _documents_with_references(world):
        text = read(doc)
        spans = [(text.find(r), text.find(r) + len(r)) for d, r in refs if d == doc and r in text]
        for m in re.finditer(r"\b(is|was|are|were)\b", text):
            if not any(a <= m.start() < b for a, b in spans):
                doc.write_text(text[: m.start()] + m.group(0) + " indeed" + text[m.end() :], encoding="utf-8")
                return f"reworded a sentence of {doc.name} outside the references"
    raise RuntimeError("no word to change outside the references")


def edit_inside(world: World, night: int) -> str:
    """A comma put into a sentence that a reference quotes: the reference no longer occurs as written."""
    doc, ref = world.references()[night % len(world.references())]
    text = read(doc)
    at = text.find(ref)
    space = ref.find(" ", len(ref) // 2)
    doc.write_text(text[: at + space] + "," + text[at + space :], encoding="utf-8")
    return f"put a comma into a referenced sentence of {doc.name}"


def insert_paragraph(world: World, night: int) -> str:
    doc = _documents_with_references(world)[0]
    text = read(doc)
    head, _, rest = text.partition("\n")
    para = "\n\nA note added in the month's review: this page was checked against its sources once more.\n"
    doc.write_text(head + para + rest, encoding="utf-8")
    return f"inserted a paragraph above the references of {doc.name}"


def delete_reference(world: World, night: int) -> str:
    """A referenced passage deleted: its question cannot be placed and retires."""
    doc, ref = world.references()[-1]
    text = read(doc)
    doc.write_text(text.replace(ref, ""), encoding="utf-8")
    return f"deleted a referenced passage of {doc.name}"


def delete_quoted_document(world: World, night: int) -> str:
    """A document that gold questions quote deleted: its questions retire, named by id, and the night goes on."""
    doc = _documents_with_references(world)[-1]
    doc.unlink()
    return f"deleted {doc.name}, which the gold set quotes"


def rename_document(world: World, night: int) -> str:
    """A quoted document renamed: its questions follow it to the new name (moved, re-anchored)."""
    doc = _documents_with_references(world)[0]
    new = doc.with_name(f"{doc.stem}-renamed{doc.suffix}")
    doc.rename(new)
    return f"renamed {doc.name} to {new.name}"


def encoding_change(world: World, night: int) -> str:
    """A quoted document saved by an editor in UTF-16: the same text, other bytes."""
    doc = _documents_with_references(world)[0]
    doc.write_bytes(read(doc).encode("utf-16"))
    return f"saved {doc.name} as UTF-16"


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
    by_doc: dict[Path, list[str]] = {}
    for row in world.gold():
        first = json.loads(row["references"])[0]["content"]
        doc = next(world.corpus.glob(f"{row['corpus_id']}.*"), None) or world.holding(first)
        if doc is not None:
            by_doc.setdefault(doc, []).append(row["question"])
    for doc, questions in by_doc.items():
        faq = "".join(f"\n\nAsked often: {q} {q} See the other pages for this." for q in questions * 3)
        doc.write_text(f"{HARM_MARK}{faq}\n{HARM_MARK}\n\n" + read(doc), encoding="utf-8")
    return "distractors added above every document's text (harmful)"


def undo_harm(world: World, night: int) -> str:
    for doc in world.corpus.iterdir():
        text = read(doc)
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
    "delete-quoted-document": delete_quoted_document,
    "rename-document": rename_document,
    "encoding-change": encoding_change,
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
    runs: int = 0  # runs the night recorded (one: a change never starts two)
    alarms: list[str] = field(default_factory=list)  # the kinds of the messages that reached the receiver
    delay: float | None = None  # seconds from the run's end to its regression message at the receiver

    def line(self) -> str:
        told = ", ".join(self.alarms) or "none"
        if self.delay is not None:
            told += f" ({self.delay:.1f} s after the run ended)"
        return (
            f"night {self.night:2d}  {self.trigger:<8} {self.status:<9} gate {self.gate}  {self.seconds:5.1f} s  "
            f"{'; '.join(self.changes) or 'no change'}\n          gold: {self.gold}\n          verdict: {self.verdict}"
            f"\n          alarms: {told}"
        )


def _scheduled_at(client, deployment_id) -> list:
    """The deployment's flow runs of the latest expected starts, in any state: the served runner claims a run
    (Pending) up to its prefetch window before its time, so a run the scheduler made may be scheduled no longer."""
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId
    from prefect.client.schemas.sorting import FlowRunSort

    return client.read_flow_runs(
        deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id])),
        sort=FlowRunSort.EXPECTED_START_TIME_DESC,
        limit=5,
    )


def fire(client, deployment_id, schedule_id, say=print):
    """Night falls, through the scheduler, in a way that cannot be missed: the schedule's anchor moves `LEAD`
    seconds ahead, and the server's scheduler (not this script) must create a run at that time. Its loop schedules
    only times still ahead when it comes round: on a busy machine it may come too late, and then its next run is
    tomorrow's. So this watches what the scheduler made, until as long past the anchor as it was ahead (a run made a
    second late at the anchor's time, then left behind by a moved anchor, ran as a second run of the night); where
    none came, it says what the scheduler did and moves the anchor again, twice as far ahead, `FIRES` times at most.
    Returns the flow run."""
    from prefect.client.schemas.schedules import IntervalSchedule

    lead = LEAD
    for _ in range(FIRES):
        anchor = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=lead)
        client.update_deployment_schedule(
            deployment_id, schedule_id, schedule=IntervalSchedule(interval=dt.timedelta(days=1), anchor_date=anchor)
        )
        seen = []  # watched until `lead` s past the anchor: a run the loop made a little late still serves the night
        while dt.datetime.now(dt.UTC) < anchor + dt.timedelta(seconds=lead):
            seen = _scheduled_at(client, deployment_id)
            hit = [r for r in seen if r.auto_scheduled and abs((r.expected_start_time - anchor).total_seconds()) < 1]
            if hit:
                return hit[0]
            time.sleep(0.5)
        times = ", ".join(f"{r.expected_start_time:%H:%M:%S} ({r.state_name})" for r in seen) or "none"
        say(f"          the scheduler made no run at {anchor:%H:%M:%S} ({lead} s ahead; its latest runs: {times}): "
            f"its loop came round too late; the anchor moves {2 * lead} s ahead")  # fmt: skip
        lead *= 2
    raise RuntimeError(f"the scheduler made no run at any of {FIRES} anchors up to {lead // 2} s ahead")


def _ended(client, flow_run_id, serve) -> object:
    """The flow run once it has ended, within `RUN_TIMEOUT`; else an error that says what state it is in."""
    deadline = time.monotonic() + RUN_TIMEOUT
    run = None
    while time.monotonic() < deadline:
        run = client.read_flow_run(flow_run_id)
        if run.state is not None and run.state.is_final():
            return run
        if serve.poll() is not None:
            raise RuntimeError(
                f"chunkeval serve ended ({serve.returncode}) while flow run {flow_run_id} was {run.state_name}"
            )
        time.sleep(0.5)
    raise RuntimeError(f"flow run {flow_run_id} still {run.state_name if run else '?'} after {RUN_TIMEOUT} s")


def play(data: str, plan: dict[int, list[str]], nights: int, work: Path, say=print) -> list[Night]:
    """Play `nights` nights of `plan` (night -> changes) in `work`; returns the timeline."""
    with webhook_receiver() as (hook, inbox):
        return _play(data, plan, nights, work, say, hook, inbox)


def _play(data, plan, nights, work, say, hook: str, inbox) -> list[Night]:
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
                "alerts": [{"to": "month-hook", "events": ["regression", "failed", "nothing_comparable"]}],
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
    home.mkdir(parents=True, exist_ok=True)
    # the team's destination, bound in the user's own endpoints.yaml (never in the experiment file)
    (home / "endpoints.yaml").write_text(
        yaml.safe_dump({"month-hook": {"base_url": f"{hook}/month", "kind": "webhook"}})
    )
    timeline: list[Night] = []
    settings = {"PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "2"}
    with prefect_server(work / "prefect", **settings) as server:
        env = {**server, "CHUNKEVAL_HOME": str(home), "PREFECT_RUNNER_POLL_FREQUENCY": "2"}
        if os.environ.get("CHUNKEVAL_MODELS"):  # a models folder built already (the tests lend theirs)
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
        said = lambda: (work / "serve.log").read_text(errors="replace")  # noqa: E731
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
                wait_for(lambda: "automation 'chunkeval alerts" in said(), 120, "the alarms' automation", serve)
                (schedule,) = deployment.schedules
                wh = Warehouse(home / "warehouse")
                for n in range(1, nights + 1):
                    night = Night(n, [CHANGES[c](world, n) for c in plan.get(n, [])])
                    known = {r["run_id"] for r in wh.runs(name)} if wh.exists() else set()
                    heard = len(inbox.at("/month"))
                    start = time.monotonic()
                    flow_run = fire(client, deployment.id, schedule.id, say)
                    _ended(client, flow_run.id, serve)
                    runs = wait_for(lambda known=known: _new_runs(wh, name, known), 60, f"night {n}'s run", serve)
                    night.seconds = time.monotonic() - start
                    run = runs[0]
                    night.runs = len(runs)
                    night.run_id, night.trigger, night.status = run["run_id"], run["trigger"], run["status"]
                    if str(run["flow_run_id"]) != str(flow_run.id):
                        raise RuntimeError(f"night {n}'s run is not the flow run the scheduler made")
                    night.gold = _gold_line(wh, run)
                    gate = world.chunkeval("trend", "--experiment", name, "--fail-on-regression")
                    night.gate = gate.returncode
                    night.verdict = _verdict(gate)
                    if gate.returncode == 1:  # an alarm is due: it must reach the receiver
                        inbox.wait(lambda h=heard: len(inbox.at("/month")) > h, 60, f"night {n}'s regression message")
                    else:  # none is due: a late one would show on the next night, and be counted there
                        time.sleep(1)
                    told = inbox.at("/month")[heard:]
                    night.alarms = [m.json()["kind"] for m in told]
                    regression = [m for m in told if m.json()["kind"] == "regression"]
                    if regression and run["finished_at"] is not None:
                        ended = run["finished_at"].replace(tzinfo=dt.UTC).timestamp()
                        night.delay = regression[0].at - ended
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


def _new_runs(wh, name: str, known: set[str]):
    """The night's runs once they have ended (completed or failed), else None: one, where a change never starts two."""
    if not wh.exists():
        return None
    runs = [r for r in wh.runs(name) if r["run_id"] not in known]
    return runs if runs and all(r["status"] != "running" for r in runs) else None


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
    lines = [x for x in (gate.stdout + gate.stderr).splitlines() if x.strip()]
    if not (gate.returncode and lines):
        return head
    folded = [lines[0].strip()]  # the verdict line, folded at 120 columns: its continuations are indented
    for line in lines[1:]:
        if not line.startswith("  "):
            break
        folded.append(line.strip())
    return " ".join(folded)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", choices=["demo", "shared"], default="demo")
    parser.add_argument("--nights", type=int, default=30)
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    work = args.work or Path(tempfile.mkdtemp(prefix="chunkeval-month-"))
    plan = MONTH if args.nights > len(FIVE_NIGHTS) else FIVE_NIGHTS
    started = time.monotonic()
    timeline = play(args.data, plan, args.nights, work)
    alarms = [n.night for n in timeline if n.gate == 1]
    told = [n.night for n in timeline if n.alarms]
    harmful = [n.night for n in timeline if HARMFUL & set(plan.get(n.night, []))]
    delays = [f"{n.delay:.1f} s" for n in timeline if n.delay is not None]
    print(
        f"\n{len(timeline)} nights in {time.monotonic() - started:.0f} s: "
        f"{sum(n.status == 'completed' for n in timeline)} completed, {sum(n.runs for n in timeline)} runs; gate alarms "
        f"on nights {alarms or 'none'}; messages on nights {told or 'none'} "
        f"({sum(n.alarms.count('regression') for n in timeline)} regression); harmful nights {harmful}; "
        f"run end to message: {', '.join(delays) or '–'}"
    )
    ok = alarms == harmful == told and all(n.status == "completed" and n.runs == 1 for n in timeline)
    return 0 if ok and all(n.alarms in ([], ["regression"]) for n in timeline) else 1


if __name__ == "__main__":
    sys.exit(main())
