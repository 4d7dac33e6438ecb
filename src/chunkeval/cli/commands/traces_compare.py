"""`chunkeval traces compare`: production and a grid's configurations on the same judged production queries,
paired, through the one verdict; with `--race` and `--budget`, judged question by question until the answer is
known (docs/traces.md, "Replay, judge and decide")."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pyarrow as pa

from chunkeval import paths
from chunkeval.analysis import production as P
from chunkeval.analysis.regression import DEFAULT_THRESHOLD, REGRESSION, verdict_line
from chunkeval.cli.commands.gold_judge import _texts as run_texts
from chunkeval.cli.options import number_in, whole_number
from chunkeval.cli.session import WarehouseAccess
from chunkeval.engine.gold import judge as gj
from chunkeval.engine.gold.chat import Chat
from chunkeval.engine.gold.production import judge_race
from chunkeval.engine.inputs.readers import read_csv_rows
from chunkeval.engine.inputs.trace_sample import read_production
from chunkeval.errors import InputError
from chunkeval.stats.racing import DELTA, Racer, race
from chunkeval.visible import visible
from chunkeval.vocabulary import CONFIG_KEYS, config_label

BATCH = 10
RACE_METRICS = P.METRICS


def add_parser(tsub) -> None:
    c = tsub.add_parser(
        "compare",
        help="production against every configuration of a run on the judged sample, paired, through the one verdict",
        description="Score production and every configuration of a recorded run over the sampled production "
        "questions (`traces sample`, `chunkeval run --questions`) on the judged pool: from --judged (what "
        "`gold judge --production` wrote) or judged here, question by question, by --endpoint and --chat-model "
        "(cached: what `gold judge` asked before costs nothing). Each configuration is compared with production, "
        "paired by question, through the one verdict both ways (a configuration that beats production; one that "
        "falls short of it). With --race, questions are judged in a seeded random order in batches and the "
        "configurations raced with anytime-valid tests, judging no further what is dropped and stopping once "
        "decided; --budget caps the judge requests (or tokens). The result is recorded (production_results).",
    )
    c.add_argument("--questions", required=True, help="the sampled questions (`traces sample --out`)")
    c.add_argument("--run", required=True, help="a completed run of the grid over those questions")
    c.add_argument("--production", required=True, help="what production retrieved (<out>.production.jsonl)")
    c.add_argument("--judged", help="the judged pool (`gold judge --production --out`): judge nothing here")
    c.add_argument("--endpoint", help="judge here: an endpoint of endpoints.yaml, or a base URL (docs/served.md)")
    c.add_argument("--chat-model", help="the model name the endpoint knows")
    c.add_argument("--corpus-dir", help="read documents here where the run kept no copy of its texts")
    c.add_argument("--k", type=whole_number, default=10, help="the cutoff of every list (default 10)")
    c.add_argument("--min-grade", type=int, default=gj.MIN_GRADE, help="the lowest relevant grade (default 2)")
    c.add_argument("--metric", default="ndcg_at_k", choices=RACE_METRICS, help="what the race decides on")
    c.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD, help="the verdict's smallest change")
    c.add_argument("--alpha", type=float, default=0.05, help="the verdict's and the race's level (default 0.05)")
    c.add_argument("--delta", type=float, default=DELTA, help=f"the race's tolerance (default {DELTA})")
    c.add_argument("--race", action="store_true", help="stop judging once the race is decided")
    c.add_argument("--budget", type=float, help="the most judge requests (or tokens, --budget-unit) to spend")
    c.add_argument("--budget-unit", default="requests", choices=("requests", "tokens"))
    c.add_argument("--seed", type=whole_number, default=0, help="the order questions are judged in (default 0)")
    c.add_argument("--batch", type=whole_number, default=BATCH, help=f"questions per look (default {BATCH})")
    c.add_argument("--experiment", help="record the result under this experiment (default: the run's)")
    c.add_argument("--timeout", type=float, default=120.0, help="seconds per judge request")
    c.add_argument("--max-retries", type=int, default=6, help="tries again after 429, 5xx or a dropped connection")
    c.set_defaults(func=compare)


def read_judged(path: str, questions: dict[str, str]) -> dict[tuple, int]:
    """The grades of a judged pool (`gold judge --out`): (query_id, corpus_id, start, end) → grade, 0 to 3."""
    out = {}
    for row, rec in read_csv_rows(Path(path), ("query_id", "corpus_id", "start", "end", "grade")):
        try:
            start, end, grade = int(rec["start"]), int(rec["end"]), int(rec["grade"])
        except ValueError:
            raise InputError("start, end and grade are whole numbers", path, row) from None
        if grade not in gj.GRADES or not 0 <= start < end:
            raise InputError(f"grade {grade} of span {start}-{end}: a grade is 0 to 3 of a span start < end", path, row)
        if rec["query_id"] in questions:
            out[(rec["query_id"], rec["corpus_id"], start, end)] = grade
    return out


def _lists(wh, args, questions) -> tuple[dict, dict, list[str]]:
    retrieved = wh.retrieved(args.run, list(questions)).to_pylist()
    if not retrieved:
        raise InputError(f"run {args.run} retrieved nothing for any question of {args.questions}")
    keys = [k for k in CONFIG_KEYS if retrieved and k in retrieved[0] and k != "k"]
    production, texts = read_production(args.production, questions)
    if not production:
        raise InputError(f"{args.production} holds nothing production retrieved for the questions of {args.questions}")
    lists = P.items(retrieved, keys) | P.items(production, [])
    return lists, texts, keys


def _texts(wh, args, lists, production_texts, k) -> dict[str, str]:
    docs = {it[0] for by_q in lists.values() for its in by_q.values() for it in its[:k]} - set(production_texts)
    return run_texts(wh, args.run, docs, args.corpus_dir) | production_texts


def compare(args: argparse.Namespace, warehouse: WarehouseAccess) -> int:
    number_in(args.min_grade, 1, 3, "--min-grade")
    number_in(args.k, 1, 1000, "--k")
    number_in(args.batch, 1, 100_000, "--batch")
    number_in(args.timeout, 0.001, 86_400, "--timeout")  # seconds: a NaN, 0 or a negative never reaches a request
    if not 0 <= args.delta < 1:  # before anything is read or judged (NaN too)
        raise InputError(f"--delta takes a number from 0 to below 1, got {args.delta:g}")
    if args.budget is not None:
        number_in(args.budget, 1, 1e15, "--budget")
    if args.judged and (args.endpoint or args.chat_model):
        raise InputError("--judged reads grades already made: leave out --endpoint and --chat-model")
    if not args.judged and not (args.endpoint and args.chat_model):
        raise InputError("give the judged pool (--judged) or a judge (--endpoint and --chat-model)")
    if args.judged and args.budget is not None:
        raise InputError("--budget caps what is judged here: it takes --endpoint and --chat-model, not --judged")
    questions = gj.read_questions(Path(args.questions))
    wh = warehouse()
    run = wh.run(args.run)
    lists, production_texts, keys = _lists(wh, args, questions)
    configs = [c for c in lists if c != ((P.PRODUCTION, True),)]
    order = [q for q in questions if any(q in lists[c] for c in lists)]
    rng = np.random.default_rng(args.seed)
    order = [order[i] for i in rng.permutation(len(order))]
    judged_by, spent, said_race, raced = "model", None, None, None
    if args.judged:
        grades = read_judged(args.judged, questions)
        model = "as judged in " + Path(args.judged).name
        done = order
    else:
        chat = Chat(args.endpoint, args.chat_model, cache_dir=paths.home() / "cache" / "chat", timeout=args.timeout,
                    max_retries=args.max_retries)  # fmt: skip
        chat.client()
        texts = _texts(wh, args, lists, production_texts, args.k)
        try:
            racer = Racer(len(configs), len(order), args.alpha, args.delta, reference=True)
            got = judge_race(lists, questions, texts, chat, order, args.k, args.min_grade, args.metric, args.race,
                             args.budget, args.budget_unit, racer, args.batch)  # fmt: skip
        finally:
            chat.close()
        grades, done, said_race, raced, spent = got["grades"], got["questions"], got["race"], got["raced"], got["spent"]
        model = args.chat_model
        canary = gj.canary_report(got["canaries"], got["canaries_asked"], args.min_grade)
        print(f"judged {len(grades):,} passage(s) of {len(done)} question(s) with {visible(model)}: "
              f"{chat.requests} request(s) made, {chat.cached} from the cache, {chat.sent_tokens + chat.received_tokens:,} "
              f"token(s); {len(got['unusable'])} unusable answer(s), left unjudged")  # fmt: skip
        if canary["graded"]:
            print(f"canaries: {canary['graded_relevant']} of {canary['graded']} graded relevant ({canary['rate']:.0%})"
                  + (": the judge may be grading everything high (docs/gold.md)" if canary["warning"] else ""))  # fmt: skip
    if not grades and args.budget is not None:
        raise InputError(f"--budget {args.budget:g} {args.budget_unit} pays for no batch of {args.batch} question(s): "
                         "nothing to compare")  # fmt: skip
    if not grades:
        raise InputError("no passage of these questions is judged: nothing to compare")
    gain = P.gains(grades, args.min_grade)
    kept, empty = P.measurable(done, gain)
    if len(kept) < 2:
        raise InputError(f"{len(kept)} question(s) with a relevant judged passage: a paired comparison needs 2")
    tables = []
    for c in lists:
        mine = [q for q in kept if raced is None or c not in raced or q in set(raced[c])]
        tables.append(P.per_query({c: lists[c]}, mine, gain, args.k))

    prod_table = tables[list(lists).index(((P.PRODUCTION, True),))]
    config_table = pa.concat_tables([t for c, t in zip(lists, tables) if c in configs], promote_options="default")
    said = P.compare(config_table, prod_table, args.run, P.METRICS, args.threshold, args.alpha)
    rows = P.summary(prod_table) + sorted(P.summary(config_table), key=lambda s: -s[args.metric])
    print(f"{len(kept)} judged question(s) compared ({len(empty)} with no relevant passage left out), top {args.k}, "
          f"relevant at grade {args.min_grade}+, judged by {visible(model)}:")  # fmt: skip
    for s in rows[:11]:
        print(f"  {s['label'][:60]:<60} " + " ".join(f"{m} {s[m]:.3f}" for m in P.METRICS)
              + (f" (judged {s['judged_share']:.0%} of its top {args.k})" if s["judged_share"] is not None else ""))  # fmt: skip
    if len(rows) > 11:
        print(f"  … and {len(rows) - 11} configuration(s) more")
    beaten, behind = said["beaten"], said["behind"]
    print("offline beats production? " + _line(beaten, "configuration(s) beat production"))
    print("production beats offline? " + _line(behind, "configuration(s) fall short of production"))
    if said_race is not None:
        _say_race(said_race, configs, keys, args, spent)
    elif args.race:  # a race over grades already made: what it would have judged
        _say_replay(prod_table, config_table, configs, keys, args)
    experiment = args.experiment or run["experiment"]
    details = {"run_id": args.run, "questions": str(Path(args.questions).resolve()), "k": args.k,
               "min_grade": args.min_grade, "judge": model, "compared": len(kept), "left_out": len(empty),
               "beaten": beaten["verdict"], "behind": behind["verdict"], "verdict_lines": [verdict_line(beaten),
               verdict_line(behind)], "per_query": {m: dict(zip(prod_table.column("query_id").to_pylist(),
               prod_table.column(m).to_pylist())) for m in P.METRICS},
               "race": None if said_race is None else {"stopped": said_race.stopped, "share": said_race.share,
               "verdict": (said_race.reference or {}).get("verdict")}}  # fmt: skip
    records = [
        {"source": "production" if s["label"] == P.PRODUCTION else "offline", "label": s["label"], "metric": m,
         "value": s[m], "n_queries": s["n"], "judged_by": judged_by}
        for s in rows for m in P.METRICS
    ]  # fmt: skip
    result_id = wh.record_production(experiment, records, (None, None), details)
    print(f"recorded {result_id} under experiment {visible(experiment)} (production_results; `chunkeval trend`)")
    return 0


def _line(v: dict, what: str) -> str:
    if v["verdict"] == REGRESSION:
        worst = v["regressions"][0]
        who = config_label(worst)
        return (f"YES: {len({tuple(r.get(k) for k in CONFIG_KEYS) for r in v['regressions']})} {what} "
                f"({len(v['regressions'])} check(s); largest: {worst['metric']} {-worst['change']:+.3f} for {who}, "
                f"adjusted p {worst['p_adjusted']:.2g})")  # fmt: skip
    return verdict_line(v)


def _say_race(res, configs, keys, args, spent) -> None:
    label = lambda i: config_label(dict(configs[i]) | {"k": args.k})  # noqa: E731
    ref = res.reference or {}
    who = (
        f"winner {label(res.winner)}"
        if res.winner is not None
        else f"{len(res.tied)} tied (leader {label(res.leader)})"
    )
    bound = "unbounded" if res.bound is None else f"{res.bound:g}"
    print(f"race ({args.metric}, alpha {args.alpha:g}, delta {args.delta:g}): stopped: {res.stopped} after "
          f"{res.questions} question(s); {who}; best − leader ≤ {bound}; {ref.get('verdict', 'undecided')}; "
          f"{res.share:.0%} of the (question × configuration) cells judged; spent {spent:,.0f} {args.budget_unit}")  # fmt: skip


def _say_replay(prod_table, config_table, configs, keys, args) -> None:
    """With --judged and --race: the race over the grades as they are, in the seeded order."""
    qs = prod_table.column("query_id").to_pylist()
    values = np.zeros((len(qs), len(configs)))
    at = {q: i for i, q in enumerate(qs)}
    names = [dict(c) for c in configs]
    for r in config_table.to_pylist():
        c = next(i for i, n in enumerate(names) if all(r.get(k) == v for k, v in n.items()))
        values[at[r["query_id"]], c] = r[args.metric]
    order = np.random.default_rng(args.seed).permutation(len(qs))
    res = race(values, order, args.alpha, args.delta, args.batch, reference=prod_table.column(args.metric).to_numpy(),
               stop_when_decided=True)  # fmt: skip
    _say_race(res, configs, keys, args, float(res.cells))
