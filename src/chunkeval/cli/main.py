"""The `chunkeval` command. Bad input ends with one line on stderr and exit status 2."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import sys
from pathlib import Path

from chunkeval._version import __version__
from chunkeval.engine.experiment import Experiment, parse_ints, split_list
from chunkeval.errors import InputError
from chunkeval.paths import DEPLOYMENTS_FILE, cache_dir

log = logging.getLogger("chunkeval")


# --------------------------------------------------------------------------- experiment flags


def add_experiment_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "experiment_file",
        nargs="?",
        metavar="experiment.yaml",
        help="an experiment file; flags given as well override its settings",
    )
    g = p.add_argument_group("experiment settings")
    g.add_argument("--corpus-dir", help="folder of <corpus_id>.md|.txt files (default: the demo corpora)")
    g.add_argument(
        "--questions", help="span gold set: CSV with question, references, corpus_id (default: the demo questions)"
    )
    g.add_argument(
        "--corpus",
        action="extend",
        nargs="+",
        metavar="ID",
        help="only these corpora (default: every corpus in the folder)",
    )
    g.add_argument(
        "--chunker",
        help="comma-separated chunkers: fixed_token, fixed_char, recursive_token, cluster_semantic, "
        "semantic_breakpoint, or module:function (a chunker or a text splitter)",
    )
    g.add_argument(
        "--chunk-sizes", help="comma-separated chunk sizes (tokens; characters for fixed_char), e.g. 100,200"
    )
    g.add_argument(
        "--overlaps",
        help="comma-separated overlaps: a number of tokens, or a share of the chunk size like 10%% (rounded down)",
    )
    g.add_argument("--k", help="comma-separated retrieval depths, e.g. 1,3,5")
    g.add_argument(
        "--model",
        help="comma-separated embedding models: all-MiniLM-L6-v2 (default, bundled), minilm-static "
        "(built locally on first use), or local sentence-transformers folders",
    )
    g.add_argument("--retriever", help="comma-separated retrievers: dense (default), bm25, hybrid, or module:function")
    g.add_argument("--rrf-k", type=int, help="the constant of hybrid's reciprocal rank fusion (default 60)")
    g.add_argument(
        "--own-corpus",
        action="store_true",
        default=None,
        help="retrieve each question from its own corpus only (default: from all corpora pooled, as Chroma does)",
    )
    g.add_argument(
        "--skip-empty-gold",
        action="store_true",
        default=None,
        help="leave questions without references out of the averages (default: they score recall 0)",
    )
    g.add_argument(
        "--duplicates",
        choices=("positional", "credit"),
        help="a reference whose text occurs more than once in its corpus: only its gold position counts "
        "(positional, the default) or the copy the retrieved chunks cover most (credit); docs/metrics.md",
    )
    g.add_argument(
        "--backend",
        choices=("torch", "onnx", "openvino"),
        help="who runs the embedding model: torch (default, sentence-transformers), onnx (onnxruntime) or openvino; "
        "exported once into $CHUNKEVAL_HOME/backends (docs/backends.md)",
    )
    g.add_argument(
        "--precision",
        choices=("fp32", "bf16", "fp16"),
        help="how the model runs: fp32 (default), bf16 (torch or openvino; fast on CPUs with AMX or AVX-512 BF16, "
        "and GPUs) or fp16 (GPU); vectors are cached apart per precision (docs/backends.md)",
    )
    g.add_argument(
        "--quantize",
        choices=("none", "int8"),
        help="int8: quantised weights for backend onnx or openvino (faster, vectors drift; docs/backends.md)",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        help="texts per embedding batch (default 16 on a CPU; on a GPU, what a quarter of its free memory holds)",
    )
    p.add_argument(
        "--device",
        default="auto",
        help="where to embed: auto (a GPU when torch sees one, else the CPU), cpu, cuda or cuda:N",
    )


SETTING_FLAGS = (
    "corpus_dir",
    "questions",
    "corpus",
    "chunker",
    "chunk_sizes",
    "overlaps",
    "k",
    "model",
    "retriever",
    "rrf_k",
    "own_corpus",
    "skip_empty_gold",
    "duplicates",
    "backend",
    "quantize",
    "precision",
)


def experiment_from_args(
    args: argparse.Namespace, default: Experiment | None = None, name: str | None = None
) -> Experiment:
    if args.batch_size is not None and args.batch_size < 1:
        raise InputError(f"--batch-size must be at least 1, got {args.batch_size}")
    from chunkeval.engine.embedding import check_device

    check_device(args.device)
    exp = Experiment.from_yaml(Path(args.experiment_file)) if args.experiment_file else (default or Experiment())
    return exp.with_overrides(
        name=name,
        corpus_dir=args.corpus_dir,
        questions=args.questions,
        corpus=tuple(split_list(args.corpus)),
        chunker=tuple(split_list(args.chunker)),
        chunk_sizes=parse_ints(args.chunk_sizes, "--chunk-sizes"),
        overlaps=tuple(split_list(args.overlaps)),
        k=parse_ints(args.k, "--k"),
        model=tuple(split_list(args.model)),
        retriever=tuple(split_list(args.retriever)),
        rrf_k=args.rrf_k,
        own_corpus=args.own_corpus,
        skip_empty_gold=args.skip_empty_gold,
        duplicates=args.duplicates,
        backend=args.backend,
        quantize=args.quantize,
        precision=args.precision,
    ).checked_for_device(args.device)


# --------------------------------------------------------------------------- commands


def cmd_sweep(args: argparse.Namespace) -> int:
    from chunkeval.analysis.comparisons import TIE_NOTE, ties
    from chunkeval.engine.sweep import CONFIG_KEYS, Embedders, run_sweep
    from chunkeval.files import check_writable_dir, write_tables
    from chunkeval.report.terminal import TERMINAL_METRICS, beside, check_table_path, format_models, format_summary

    out = check_table_path(args.out)
    exp = experiment_from_args(args)
    check_writable_dir(cache_dir(), "the embedding cache ($CHUNKEVAL_HOME)")
    result = run_sweep(exp, Embedders(cache_dir(), args.batch_size, device=args.device))
    write_tables(
        {out: result.summary, beside(out, "per_query"): result.per_query, beside(out, "by_corpus"): result.by_corpus}
    )
    for note in result.notes:
        print(f"note: {note}")
    print(format_summary(result.summary, CONFIG_KEYS, tied=ties(result.per_query, TERMINAL_METRICS)))
    print(TIE_NOTE.format(alpha=0.05))
    truncated = sum(result.summary["truncated_chunks"].to_pylist()) // max(len(exp.k), 1)
    print(
        f"\n{result.texts_embedded} text(s) embedded; {truncated} chunk(s) longer than the model's input were "
        f"embedded from their beginning; results in {out} and {beside(out, 'per_query').name}, {beside(out, 'by_corpus').name}"
    )
    if result.models.num_rows:
        print(format_models(result.models))
    return 0


def _clean(value):
    return None if isinstance(value, float) and math.isnan(value) else value


def cmd_evaluate_run(args: argparse.Namespace) -> int:
    from chunkeval.engine.inputs import load_gold_and_run
    from chunkeval.engine.metrics import RANK_METRICS, score_run
    from chunkeval.report.terminal import format_macro_micro, format_rows

    if args.k < 1:
        raise InputError(f"--k must be at least 1, got {args.k}")
    gold, run = load_gold_and_run(Path(args.gold), Path(args.run), args.format)
    per_query, summary = score_run(gold, run, args.k, args.skip_empty_gold)
    rec = summary.to_pylist()[0]
    if args.json:
        doc = {
            "k": args.k,
            "n_queries": rec["n_queries"],
            "macro": {m: _clean(rec[f"{m}_mean"]) for m in RANK_METRICS},
            "macro_std": {m: _clean(rec[f"{m}_std"]) for m in RANK_METRICS},
            "micro": {m: _clean(rec[f"{m}_micro"]) for m in RANK_METRICS if f"{m}_micro" in rec},
            "ci": {m: [_clean(rec[f"{m}_ci_low"]), _clean(rec[f"{m}_ci_high"])] for m in RANK_METRICS},
        }
        if args.per_query:
            doc["per_query"] = [{k: _clean(v) for k, v in row.items()} for row in per_query.to_pylist()]
        json.dump(doc, sys.stdout, indent=2)
        print()
        return 0
    print(f"{rec['n_queries']} queries, k = {args.k}\n")
    print(format_macro_micro(summary, list(RANK_METRICS)))
    if args.per_query:
        cols = ["query_id", "tp", "fp", "fn"] + list(RANK_METRICS)
        rows = [
            [str(r[c]) if not isinstance(r[c], float) else f"{r[c]:.3f}" for c in cols] for r in per_query.to_pylist()
        ]
        print("\n" + format_rows(cols, rows))
    return 0


_SESSIONS: list = []  # the open ExitStack of a command that only reads: its warehouse keeps one connection


def _warehouse(must_exist: bool = True):
    """The warehouse under $CHUNKEVAL_HOME. Commands that only read it never create it."""
    from chunkeval.warehouse import Warehouse

    wh = Warehouse.at_home(must_exist)
    if _SESSIONS and wh.exists():
        _SESSIONS[-1].enter_context(wh.session())
    return wh


def named_experiment(name: str, defining: bool) -> Experiment:
    """The experiment NAME: `demo`, `$CHUNKEVAL_HOME/experiments/NAME.yaml`, or the settings of its last
    recorded run. An unknown name with settings on the command line (`defining`) is a new experiment."""
    from chunkeval.paths import home

    if name == "demo":
        return Experiment.demo()
    path = home() / "experiments" / f"{name}.yaml"
    if path.is_file():
        return Experiment.from_yaml(path).with_overrides(name=name)
    wh = _warehouse(must_exist=False)
    runs = wh.runs(name, limit=1) if wh.exists() else []
    if runs:
        return Experiment.from_dict(json.loads(runs[0]["settings"]))
    if defining:
        return Experiment(name=name)
    raise InputError(
        f"no experiment named {name!r}: not demo, not {path}, and no recorded run; "
        "give its settings (--corpus-dir, --questions, --chunker, …) to define it"
    )


def preflight(exp: Experiment) -> None:
    """Everything a run reads, checked before Prefect starts or a catalogue row is written."""
    from chunkeval.engine.experiment import input_fingerprints
    from chunkeval.engine.sweep import load_inputs
    from chunkeval.files import check_writable_dir
    from chunkeval.paths import home

    check_writable_dir(home(), "the cache and warehouse ($CHUNKEVAL_HOME)")
    input_fingerprints(exp)
    load_inputs(exp)


def cmd_run(args: argparse.Namespace) -> int:
    from chunkeval.report.terminal import format_summary
    from chunkeval.vocabulary import CONFIG_KEYS

    defining = any(getattr(args, f) not in (None, [], ()) for f in SETTING_FLAGS)
    if args.experiment_file:
        exp = experiment_from_args(args, name=args.experiment)
    else:
        exp = experiment_from_args(args, named_experiment(args.experiment or "demo", defining), name=args.experiment)
    from chunkeval.engine.runners import check_task_runner, cluster_workers, parse_task_runner

    runner = check_task_runner(parse_task_runner(args.task_runner))
    preflight(exp)
    shards = cluster_workers(runner) if runner.distributed else 0
    from chunkeval.progress import quiet_prefect, show_progress

    quiet_prefect(args.verbose)
    from chunkeval.flows.evaluate import with_task_runner

    log.propagate = False  # Prefect's console handler sits on the root logger: say each thing once
    try:
        with show_progress():
            result = with_task_runner(runner)(
                experiment=exp.to_dict(),
                if_changed=args.if_changed,
                trigger="manual",
                batch_size=args.batch_size,
                device=args.device,
                shards=shards,
            )
    finally:
        log.propagate = True
    if result["status"] == "skipped":
        print(
            f"experiment {exp.name}: corpus, gold set and model unchanged; run {result['run_id']} recorded as skipped"
        )
        return 0
    from chunkeval.analysis.comparisons import TIE_NOTE, ties
    from chunkeval.report.terminal import TERMINAL_METRICS

    wh = _warehouse()
    summary = wh.summary(result["run_id"])
    print(
        f"experiment {exp.name}: run {result['run_id']} completed, {summary.num_rows} configuration(s), "
        f"{result['texts_embedded']} text(s) embedded\n"
    )
    print(format_summary(summary, CONFIG_KEYS, tied=ties(wh.query_results(result["run_id"]), TERMINAL_METRICS)))
    print(TIE_NOTE.format(alpha=0.05))
    print(f"\nreport: {result['report']}")
    return 0


def _iso(value) -> str | None:
    return None if value is None else value.isoformat(timespec="seconds") + "Z"


def cmd_runs(args: argparse.Namespace) -> int:
    from chunkeval.report.terminal import format_rows

    wh = _warehouse(must_exist=False)
    if not wh.exists():
        print("no runs recorded")
        return 0
    if args.experiment:
        wh.check_experiment(args.experiment)
    rows = wh.runs(args.experiment)
    fields = (
        "run_id",
        "experiment",
        "status",
        "trigger",
        "started_at",
        "finished_at",
        "corpus_fingerprint",
        "gold_fingerprint",
        "model_fingerprint",
        "texts_embedded",
        "flow_run_id",
        "chunkeval_version",
        "error",
    )
    docs = [
        {**{f: (_iso(r[f]) if f.endswith("_at") else r[f]) for f in fields}, "skipped": r["status"] == "skipped"}
        for r in rows
    ]
    if args.json:
        json.dump(docs, sys.stdout, indent=2)
        print()
        return 0
    cols = [
        "run_id",
        "experiment",
        "status",
        "trigger",
        "started_at",
        "finished_at",
        "texts_embedded",
        "corpus",
        "model",
    ]
    table = [
        [
            d["run_id"],
            d["experiment"],
            d["status"],
            d["trigger"],
            d["started_at"] or "",
            d["finished_at"] or "",
            str(d["texts_embedded"] or 0),
            (d["corpus_fingerprint"] or "")[:12],
            (d["model_fingerprint"] or "")[:12],
        ]
        for d in docs
    ]
    print(format_rows(cols, table) if table else "no runs recorded")
    return 0


def cmd_runs_delete(args: argparse.Namespace) -> int:
    wh = _warehouse()
    for run_id in wh.delete_runs(args.run_ids):
        print(f"deleted run {run_id}")
    return 0


def cmd_runs_prune(args: argparse.Namespace) -> int:
    from chunkeval.warehouse import parse_age

    age = parse_age(args.older_than, "--older-than") if args.older_than else None
    wh = _warehouse()
    deleted, kept = wh.prune(args.prune_experiment, args.keep_last, age)
    print(f"deleted {len(deleted)} run(s) of experiment {args.prune_experiment}")
    if kept:
        print(f"kept run {kept}: it is the pinned baseline (pin another with `chunkeval baseline` to let it go)")
    return 0


def _config_filter(values: list[str] | None) -> dict:
    from chunkeval.vocabulary import CONFIG_KEYS

    out = {}
    for item in split_list(values):
        key, sep, value = item.partition("=")
        if not sep:
            raise InputError(f"--config takes key=value pairs ({', '.join(CONFIG_KEYS)}), got {item!r}")
        key = key.strip()
        if key not in CONFIG_KEYS:
            raise InputError(f"--config keys are {', '.join(CONFIG_KEYS)}; got {key!r}")
        out[key] = (
            value.strip() if key in ("model", "retriever", "chunker") else parse_ints(value, f"--config {key}")[0]
        )
    return out


def cmd_trend(args: argparse.Namespace) -> int:
    from chunkeval.report.terminal import format_rows, regression_message
    from chunkeval.stats.aggregate import METRICS

    if args.metric not in METRICS:
        raise InputError(f"unknown metric {args.metric!r}; choose one of {', '.join(METRICS)}")
    if args.last is not None and args.last < 1:
        raise InputError(f"--last must be at least 1, got {args.last}")
    if args.threshold < 0:
        raise InputError(f"--threshold must be 0 or more, got {args.threshold}")
    from chunkeval.analysis.comparisons import check_alpha

    check_alpha(args.alpha)
    wh = _warehouse()
    wh.check_experiment(args.experiment)
    if args.baseline:
        wh.run(args.baseline)
    config = _config_filter(args.config)
    rows = wh.trend(args.experiment, args.metric, config, args.last)
    if config and not rows and wh.last_completed(args.experiment):
        raise InputError(
            f"no configuration of experiment {args.experiment!r} matches --config "
            + ",".join(f"{k}={v}" for k, v in config.items())
        )
    if args.json:
        json.dump([{**r, "started_at": _iso(r["started_at"])} for r in rows], sys.stdout, indent=2)
        print()
    elif rows:
        keys = ["model", "retriever", "chunker", "chunk_size", "chunk_overlap", "k"]
        if len({r["duplicates"] for r in rows}) > 1:  # changes are only against runs scored the same way
            keys.insert(0, "duplicates")
        cols = ["run_id", "started_at", *keys, args.metric, "change"]
        print(
            format_rows(
                cols,
                [
                    [
                        r["run_id"],
                        _iso(r["started_at"]),
                        *(str(r[k]) for k in keys),
                        f"{r['value']:.3f}",
                        "" if r["change"] is None else f"{r['change']:+.3f}",
                    ]
                    for r in rows
                ],
            )
        )
    else:
        print(f"no completed run of experiment {args.experiment!r} with {args.metric}")
    if args.fail_on_regression:
        falls = wh.regressions(args.experiment, [args.metric], args.threshold, args.baseline, args.alpha)
        falls = [f for f in falls if all(f[k] == v for k, v in config.items())]
        for f in falls:
            print(regression_message(f), file=sys.stderr)
        if falls:
            return 1
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from chunkeval.report.terminal import format_summary
    from chunkeval.stats.aggregate import METRICS
    from chunkeval.vocabulary import CONFIG_KEYS

    if args.threshold < 0:
        raise InputError(f"--threshold must be 0 or more, got {args.threshold}")
    if args.html:
        from chunkeval.report.terminal import check_output_path

        check_output_path(Path(args.html))
    if not args.run and not args.experiment:
        raise InputError("give --run ID or --experiment NAME")
    if args.since is not None:
        from chunkeval.warehouse import parse_age

        age = parse_age(args.since, "--since")
        if args.run or args.html or not args.experiment:
            raise InputError(
                "--since prints the rollup of an experiment's period: give --experiment NAME, without --run or --html"
            )
    wh = _warehouse()
    if args.experiment:
        wh.check_experiment(args.experiment)
    if args.since is not None:
        rollup, run_ids = wh.rollup(args.experiment, age)
        print(
            f"experiment {args.experiment}: {len(run_ids)} completed run(s) started within {args.since} "
            f"({run_ids[-1]} to {run_ids[0]}); macro = mean over every query row of those runs, micro = sums over them\n"
        )
        keys = (["duplicates"] if len(set(rollup["duplicates"].to_pylist())) > 1 else []) + CONFIG_KEYS + ["n_runs"]
        print("macro (mean ± sample std over query rows)")
        print(format_summary(rollup, keys, metrics=METRICS))
        print("\nmicro (counts summed over the period's query rows before dividing)")
        print(
            format_summary(
                rollup, keys, metrics=[m for m in METRICS if f"{m}_micro" in rollup.column_names], micro=True
            )
        )
        return 0
    if args.run:
        run = wh.run(args.run)
        if args.experiment and run["experiment"] != args.experiment:
            raise InputError(f"run {args.run!r} belongs to experiment {run['experiment']!r}, not {args.experiment!r}")
    else:
        run = wh.last_completed(args.experiment)
        if run is None:
            raise InputError(f"experiment {args.experiment!r} has no completed run")
    if run["status"] != "completed":
        raise InputError(f"run {run['run_id']} is {run['status']}: only completed runs have results")
    if args.html:
        from chunkeval.report.html import write_report

        out = Path(args.html)
        write_report(
            wh, args.experiment or run["experiment"], out, run["run_id"], args.threshold, _config_filter(args.config)
        )
        print(f"report of run {run['run_id']} written to {out}")
        return 0
    summary = wh.summary(run["run_id"])
    print(
        f"run {run['run_id']} of experiment {run['experiment']} ({run['trigger']}), "
        f"{_iso(run['started_at'])} to {_iso(run['finished_at'])}\n"
    )
    from chunkeval.analysis.comparisons import TIE_NOTE, ties

    print("macro (mean ± sample std over queries)")
    print(format_summary(summary, CONFIG_KEYS, metrics=METRICS, tied=ties(wh.query_results(run["run_id"]), METRICS)))
    print(TIE_NOTE.format(alpha=0.05))
    if (
        f"{METRICS[0]}_ci_low" in summary.column_names
        and summary.num_rows
        and summary[f"{METRICS[0]}_ci_low"].null_count == 0
    ):
        print("\nmacro mean [95 % bootstrap interval: queries resampled 10,000 times]")
        print(format_summary(summary, CONFIG_KEYS, metrics=METRICS, intervals=True))
    else:
        print("\n(this run was recorded before chunkeval kept intervals: none are shown)")
    print("\nmicro (counts summed over queries before dividing)")
    print(
        format_summary(
            summary, CONFIG_KEYS, metrics=[m for m in METRICS if f"{m}_micro" in summary.column_names], micro=True
        )
    )
    return 0


def cmd_baseline(args: argparse.Namespace) -> int:
    wh = _warehouse()
    wh.check_experiment(args.experiment)
    wh.pin_baseline(args.experiment, args.run)
    print(f"run {args.run} is now the baseline of experiment {args.experiment}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from chunkeval.analysis import comparisons as C
    from chunkeval.engine.metrics import METRICS, RANK_METRICS
    from chunkeval.report.terminal import format_rows

    C.check_alpha(args.alpha)
    if args.metric not in METRICS:
        raise InputError(f"unknown metric {args.metric!r}; choose one of {', '.join(METRICS)}")
    if args.gold or args.run_file:
        if not args.gold or len(args.run_file or []) != 2 or args.run:
            raise InputError("compare ranked-list files with --gold G --run-file A --run-file B (and no --run)")
        if args.metric not in RANK_METRICS:
            raise InputError(f"run files have set and rank metrics only: choose one of {', '.join(RANK_METRICS)}")
        if args.k < 1:
            raise InputError(f"--k must be at least 1, got {args.k}")
        from chunkeval.engine.inputs import load_gold_and_run
        from chunkeval.engine.metrics import score_run

        tables = []
        for path in args.run_file:
            gold, run = load_gold_and_run(Path(args.gold), Path(path), args.format)
            tables.append(score_run(gold, run, args.k)[0])
        values = [dict(zip(t["query_id"].to_pylist(), t[args.metric].to_pylist())) for t in tables]
        results = C.adjust(
            [
                C.compare(
                    values[0],
                    values[1],
                    {"run_file": args.run_file[0], "k": args.k},
                    {"run_file": args.run_file[1], "k": args.k},
                    args.metric,
                )
            ],
            args.alpha,
        )
    else:
        results = _warehouse().compare(
            args.metric, args.run or [], args.experiment, _config_filter(args.config), args.all_pairs, args.alpha
        )
    if args.json:
        json.dump([{k: _clean(v) for k, v in r.items()} for r in results], sys.stdout, indent=2, default=str)
        print()
        return 0
    label = lambda side: side.get("run_file") or "/".join(str(v) for k, v in side.items() if k != "run_id")  # noqa: E731
    rows = [
        [
            label(r["a"]),
            label(r["b"]),
            str(r["n_queries"]),
            f"{r['mean_a']:.3f}",
            f"{r['mean_b']:.3f}",
            f"{r['mean_diff']:+.3f} [{r['ci_low']:+.3f}, {r['ci_high']:+.3f}]",
            f"{r['p_ttest']:.4f}",
            f"{r['p_permutation']:.4f}",
            f"{r['p_adjusted']:.4f}",
            "yes" if r["significant"] else "no",
        ]
        for r in results
    ]
    print(
        f"{args.metric}: paired by query; differences a − b with 95 % bootstrap intervals; Holm over {len(results)} comparison(s)"
    )
    print(
        format_rows(
            [
                "a",
                "b",
                "queries",
                "mean a",
                "mean b",
                "difference",
                "p t-test",
                "p randomisation",
                "p Holm",
                f"significant (α={args.alpha})",
            ],
            rows,
        )
    )
    unmatched = sum(r["n_unmatched"] for r in results)
    if unmatched:
        print(f"\n{unmatched} query row(s) present on one side only were left out of the pairing")
    return 0


def cmd_gold_check(args: argparse.Namespace) -> int:
    from chunkeval.engine.gold_check import check_gold
    from chunkeval.engine.sweep import load_inputs
    from chunkeval.report.terminal import format_rows

    if args.chunk_size is not None and args.chunk_size < 1:
        raise InputError(f"--chunk-size must be at least 1, got {args.chunk_size}")
    exp = Experiment(corpus_dir=args.corpus_dir, questions=args.questions, corpus=tuple(split_list(args.corpus)))
    inputs = load_inputs(exp)
    report = check_gold(inputs.gold, inputs.corpora, args.chunk_size)
    if args.json:
        json.dump(report.to_dict(), sys.stdout, indent=2)
        print()
        return 0
    where = lambda r: f"{r['corpus_id']} [{r['start']}, {r['end']})"  # noqa: E731
    sections = [
        (
            "ambiguous reference(s): the text occurs more than once in its corpus",
            report.ambiguous_references,
            ["query", "reference", "occurrences"],
            lambda r: [r["query_id"], where(r), str(len(r["occurrences"]))],
        ),
        (
            "overlapping reference(s) of one question",
            report.overlapping_references,
            ["query", "reference", "overlaps"],
            lambda r: [r["query_id"], where(r), f"[{r['overlaps']['start']}, {r['overlaps']['end']})"],
        ),
        ("empty reference(s)", report.empty_references, ["query", "reference"], lambda r: [r["query_id"], where(r)]),
        (
            f"reference(s) longer than {args.chunk_size} tokens",
            report.long_references,
            ["query", "reference", "tokens"],
            lambda r: [r["query_id"], where(r), str(r["tokens"])],
        ),
        (
            "repeated question(s)",
            report.repeated_questions,
            ["queries", "corpus", "question"],
            lambda r: [", ".join(r["query_ids"]), r["corpus_id"], r["question"][:70]],
        ),
    ]
    print(f"{inputs.gold.n_queries} question(s), {len(inputs.gold.ref_start)} reference(s) in {args.questions}")
    for title, items, header, row in sections:
        if title.startswith("reference(s) longer") and args.chunk_size is None:
            continue
        print(f"\n{len(items)} {title}")
        if items:
            print(format_rows(header, [row(r) for r in items[: args.limit]]))
            if len(items) > args.limit:
                print(f"… and {len(items) - args.limit} more (--json lists them all)")
    return 0


def cmd_warehouse_repair(args: argparse.Namespace) -> int:
    from chunkeval.warehouse import Warehouse

    wh = Warehouse.at_home()
    if not wh.exists() and not wh.results.is_dir():
        raise InputError("no warehouse here: nothing to repair", wh.db_path)
    done = wh.repair()
    if not done["damaged"]:
        print(
            f"{wh.db_path} is readable: nothing to rebuild ({done['runs']} run(s); "
            f"{done['manifests_written']} manifest(s) written for runs that had none)"
        )
    else:
        aside = f"the damaged file was moved to {done['moved_to']}; " if done["moved_to"] else ""
        print(
            f"{wh.db_path} rebuilt from the run manifests: {aside}{done['runs']} run(s) and {done['pins']} pinned baseline(s) restored"
        )
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from chunkeval.flows.serve import serve_all

    serve_all(Path(args.prefect_file))
    return 0


# --------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="chunkeval",
        description="Measure how well chunking, an embedding model and a retrieval depth k find the text that answers each question.",
    )
    parser.add_argument("--version", action="version", version=f"chunkeval {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress (model loading, texts embedded)")
    sub = parser.add_subparsers(dest="command", metavar="command")

    p = sub.add_parser(
        "run",
        help="run an experiment as a Prefect flow, record it in the warehouse, print its summary",
        description="Run the evaluate flow for an experiment (the demo experiment when none is given): chunk, "
        "embed (through the cache), retrieve, score every setting, and record the run in the warehouse.",
    )
    add_experiment_flags(p)
    p.add_argument(
        "--experiment",
        metavar="NAME",
        help="the experiment's name: demo, $CHUNKEVAL_HOME/experiments/NAME.yaml, or the settings of NAME's last "
        "recorded run, changed by any settings given; an unknown NAME with settings defines a new experiment",
    )
    p.add_argument(
        "--if-changed",
        action="store_true",
        help="record a skipped run, embedding nothing, when corpus, gold set and model are those of the last completed run",
    )
    p.add_argument(
        "--task-runner",
        default="local",
        metavar="RUNNER",
        help="where the chunking and embedding tasks run: local (default, this process), dask (a local Dask cluster, "
        "one worker per core), dask:N (of N workers) or dask=tcp://HOST:PORT (an existing cluster's scheduler); "
        "needs pip install 'chunkeval[dask]'",
    )
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("runs", help="list the recorded runs, newest first (`runs delete`, `runs prune` remove them)")
    p.add_argument("--experiment", metavar="NAME", help="only this experiment's runs")
    p.add_argument("--json", action="store_true", help="print a JSON list of run objects")
    p.set_defaults(func=cmd_runs)
    rsub = p.add_subparsers(dest="runs_command", metavar="command")
    d = rsub.add_parser("delete", help="remove runs with their files (never the pinned baseline)")
    d.add_argument("run_ids", nargs="+", metavar="RUN_ID")
    d.set_defaults(func=cmd_runs_delete)
    d = rsub.add_parser("prune", help="remove an experiment's old runs with their files, keeping the pinned baseline")
    d.add_argument("--experiment", metavar="NAME", required=True, dest="prune_experiment")
    d.add_argument("--keep-last", type=int, metavar="K", help="keep the newest K runs")
    d.add_argument("--older-than", metavar="AGE", help="remove runs started more than AGE ago: 36h, 90d, 12w")
    d.set_defaults(func=cmd_runs_prune)

    p = sub.add_parser(
        "trend",
        help="a metric per completed run and configuration, oldest first, with the change",
        description="A metric (macro mean) per completed run and configuration, oldest first, with the change "
        "against the previous completed run.",
    )
    p.add_argument("--experiment", metavar="NAME", required=True, help="the experiment")
    p.add_argument("--metric", required=True, help="a metric name, e.g. span_recall, recall_at_k, mrr")
    p.add_argument(
        "--config",
        action="append",
        metavar="KEY=VALUE",
        help="only configurations with these settings, e.g. chunk_size=200,k=5 (keys: chunker, chunk_size, chunk_overlap, k)",
    )
    p.add_argument("--last", type=int, metavar="N", help="only the last N completed runs")
    p.add_argument(
        "--json", action="store_true", help="print JSON rows (run_id, started_at, configuration, value, change)"
    )
    p.add_argument(
        "--fail-on-regression",
        action="store_true",
        help="exit 1 when the metric fell in the newest run, against the baseline or the previous run, by more than "
        "--threshold and significantly (paired t-test over the queries, Holm over the configurations, --alpha)",
    )
    p.add_argument(
        "--threshold", type=float, default=0.02, help="the smallest fall that matters (absolute, default 0.02)"
    )
    p.add_argument("--alpha", type=float, default=0.05, help="significance level after Holm (default 0.05)")
    p.add_argument(
        "--baseline",
        metavar="RUN_ID",
        help="compare with this run (default: the pinned baseline, else the previous run)",
    )
    p.set_defaults(func=cmd_trend)

    p = sub.add_parser(
        "report",
        help="the macro/micro table of a run, or its HTML page",
        description="Print a run's macro/micro table, or with --html write the experiment's self-contained HTML report.",
    )
    p.add_argument("--run", metavar="ID", help="the run (default: the experiment's last completed run)")
    p.add_argument("--experiment", metavar="NAME", help="the experiment")
    p.add_argument("--html", metavar="FILE", help="write the HTML report (readable offline) to FILE")
    p.add_argument(
        "--config",
        action="append",
        metavar="KEY=VALUE",
        help="the configuration of the failure analysis, e.g. chunker=fixed_token,chunk_size=200,chunk_overlap=0,k=5 "
        "(default: the best by span F1)",
    )
    p.add_argument(
        "--threshold", type=float, default=0.02, help="the fall marked as a regression in the trend (default 0.02)"
    )
    p.add_argument(
        "--since",
        metavar="AGE",
        help="with --experiment: the rollup of the runs started within AGE (7d, 36h, 2w): "
        "macro over every query row of those runs, micro summed over them",
    )
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("baseline", help="pin a completed run as the baseline that regressions are measured against")
    p.add_argument("--experiment", metavar="NAME", required=True)
    p.add_argument("--run", metavar="ID", required=True)
    p.set_defaults(func=cmd_baseline)

    p = sub.add_parser(
        "compare",
        help="paired significance tests between configurations, runs or run files",
        description="Compare configurations query by query: within a run (each against the best, or --all-pairs), "
        "two runs of one experiment (the configurations they share), or two ranked-list files "
        "(--gold G --run-file A --run-file B). Paired t-test, paired randomisation test (10,000 sign "
        "flips, seeded), the bootstrap interval of the mean difference, Holm over the call's comparisons.",
    )
    p.add_argument("--run", action="append", metavar="ID", help="a completed run (give two to compare runs)")
    p.add_argument(
        "--experiment", metavar="NAME", help="the experiment (its last completed run when no --run is given)"
    )
    p.add_argument("--metric", required=True, help="the per-query metric, e.g. span_recall, recall_at_k, mrr")
    p.add_argument("--config", action="append", metavar="KEY=VALUE", help="only configurations with these settings")
    p.add_argument("--all-pairs", action="store_true", help="every pair of configurations, not each against the best")
    p.add_argument("--alpha", type=float, default=0.05, help="significance level after Holm (default 0.05)")
    p.add_argument("--gold", help="a gold file, to compare two --run-file")
    p.add_argument("--run-file", action="append", metavar="FILE", help="a ranked-list file of a retriever (twice)")
    p.add_argument("--format", default="auto", choices=["auto", "chunk-ids", "strings", "trec"], help="run-file format")
    p.add_argument("--k", type=int, default=10, help="cutoff of the *_at_k metrics for run files (default 10)")
    p.add_argument("--json", action="store_true", help="print a JSON list of comparisons")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("gold", help="`gold check`: what in a gold set makes its numbers unfair")
    gsub = p.add_subparsers(dest="gold_command", metavar="command", required=True)
    g = gsub.add_parser(
        "check",
        help="ambiguous, overlapping, empty and long references, and repeated questions",
        description="Check a span gold set: references whose text occurs more than once in their corpus "
        "(ambiguous), references overlapping another of the same question, empty references, "
        "references longer than --chunk-size tokens, and questions asked twice.",
    )
    g.add_argument("--corpus-dir", required=True, help="folder of <corpus_id>.md|.txt files")
    g.add_argument("--questions", required=True, help="span gold set (CSV with question, references, corpus_id)")
    g.add_argument("--corpus", action="extend", nargs="+", metavar="ID", help="only these corpora")
    g.add_argument("--chunk-size", type=int, help="report references longer than this many cl100k tokens")
    g.add_argument("--limit", type=int, default=20, help="rows shown per finding (default 20; --json lists all)")
    g.add_argument("--json", action="store_true", help="print an object with the five lists")
    g.set_defaults(func=cmd_gold_check)

    p = sub.add_parser("warehouse", help="look after the warehouse: `warehouse repair` rebuilds a damaged catalogue")
    wsub = p.add_subparsers(dest="warehouse_command", metavar="command", required=True)
    w = wsub.add_parser(
        "repair",
        help="move a damaged chunkeval.duckdb aside and rebuild it from the run manifests and pins",
        description="Rebuild the catalogue of runs from each run's manifest.json and the pinned baselines' files. "
        "A readable catalogue is kept; only manifests missing for older runs are written.",
    )
    w.set_defaults(func=cmd_warehouse_repair)

    p = sub.add_parser(
        "serve",
        help="serve every deployment of chunkeval's deployments file (or --prefect-file) from this process",
        description="Serve the nightly, on-change, poll and weekly deployments from one process (no work pool). "
        "Needs a Prefect server (PREFECT_API_URL).",
    )
    p.add_argument(
        "--prefect-file",
        default=str(DEPLOYMENTS_FILE),
        help="the deployments file (default: the one chunkeval ships, deployments/prefect.yaml in a checkout)",
    )
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser(
        "sweep",
        help="score a grid of chunking settings and k on a span gold set, write the results",
        description="Score every (chunker, chunk size, overlap, k) on a span gold set. Writes the summary to --out, "
        "the per-query table to <out>.per_query and the per-corpus summary to <out>.by_corpus.",
    )
    add_experiment_flags(p)
    p.add_argument("--out", required=True, help="summary file, .csv or .parquet")
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser(
        "evaluate-run",
        help="score a run file of a retriever that runs elsewhere against a gold set",
        description="Set and rank metrics of a ranked run file against chunk-id, string-list or TREC gold.",
    )
    p.add_argument("--gold", required=True, help="gold set: chunk-id CSV/JSONL, string-list JSONL or TREC qrels")
    p.add_argument("--run", required=True, help="run file in the matching format")
    p.add_argument(
        "--format",
        default="auto",
        choices=["auto", "chunk-ids", "strings", "trec"],
        help="input format (default auto: strings when the gold JSONL has 'reference', else chunk-ids; TREC must be named)",
    )
    p.add_argument(
        "--k", type=int, default=10, help="cutoff of the *_at_k metrics (default 10); mrr and map use the whole list"
    )
    p.add_argument("--json", action="store_true", help="print a JSON object with 'macro' and 'micro' maps")
    p.add_argument("--per-query", action="store_true", help="include every query's metrics")
    p.add_argument(
        "--skip-empty-gold", action="store_true", help="leave queries without relevant items out of the averages"
    )
    p.set_defaults(func=cmd_evaluate_run)
    return parser


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever `sys.stderr` is at the time of the message."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value):
        pass


def configure_logging(verbose: bool) -> None:
    """chunkeval's own messages as `chunkeval: WARNING: …` lines on stderr; other libraries' loggers
    (Prefect's among them) keep their own handlers."""
    if not any(isinstance(h, _StderrHandler) for h in log.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("chunkeval: %(levelname)s: %(message)s"))
        log.addHandler(handler)
    log.setLevel(logging.INFO if verbose else logging.WARNING)


class _Parser(argparse.ArgumentParser):
    """Usage mistakes end like every other bad input: one line, exit status 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


# commands that only read the warehouse (or change it in one short step): one connection for the whole command
READ_COMMANDS = {
    "cmd_runs",
    "cmd_trend",
    "cmd_report",
    "cmd_compare",
    "cmd_baseline",
    "cmd_runs_delete",
    "cmd_runs_prune",
}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.verbose)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        if args.func.__name__ not in READ_COMMANDS:
            return args.func(args)
        with contextlib.ExitStack() as stack:
            _SESSIONS.append(stack)
            try:
                return args.func(args)
            finally:
                _SESSIONS.pop()
    except InputError as exc:
        print(f"chunkeval: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("chunkeval: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
