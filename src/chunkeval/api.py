"""chunkeval from Python, for notebooks: no Prefect, no warehouse, the same engine as `chunkeval sweep`.

    import chunkeval

    res = chunkeval.evaluate("corpora/", "questions.csv", chunker=["fixed_token", "cluster_semantic"],
                          chunk_sizes=[200, 400], k=[1, 5], retriever=["dense", "bm25", "hybrid"])
    res                              # the summary as a table (HTML in Jupyter)
    res.to_pandas()                  # or res.to_polars("per_query"), res.by_corpus, res.models

    scores = chunkeval.score({"q1": ["c3", "c7"]}, {"q1": ["c7", "c1", "c3"]}, k=3)
    scores.summary.to_pandas()

    chunkeval.compare(res, metric="span_recall")            # each configuration against the best, paired
    chunkeval.compare(res_before, res_after, metric="mrr")  # the configurations two results share
    chunkeval.compare("RUN_ID", "RUN_ID2", metric="mrr")    # two recorded runs ($CHUNKEVAL_HOME's warehouse)
    chunkeval.regressions("nightly")                         # the alert rule on the newest recorded run

Inputs go through the same checks as files do: a mistake raises `chunkeval.errors.InputError` with
the one line the command would print.
"""

from __future__ import annotations

import json
import logging
import math
import tempfile
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from inspect import Parameter, signature
from pathlib import Path

import numpy as np
import pyarrow as pa

from chunkeval.analysis import comparisons as C
from chunkeval.analysis.comparisons import check_alpha, check_threshold
from chunkeval.analysis.regression import NOTHING_COMPARABLE, REGRESSION_METRICS, verdict_line
from chunkeval.cli.options import config_filter
from chunkeval.engine.embedding import check_batch_size, check_device
from chunkeval.engine.gold.check import check_gold as check
from chunkeval.engine.inputs.run_files import Qrels, RankedLists
from chunkeval.engine.pipeline.experiment import SETTINGS, Experiment
from chunkeval.engine.pipeline.grid import Consent
from chunkeval.engine.pipeline.prepare import prepare
from chunkeval.engine.pipeline.sweep import load_inputs, run_steps
from chunkeval.engine.scoring.metrics import score_run
from chunkeval.engine.settings.table import MAX_CHUNK_SIZE, check_k
from chunkeval.errors import InputError, NothingComparable
from chunkeval.limits import short
from chunkeval.report.inspect import MARK, format_inspect, inspect_doc
from chunkeval.report.notebook import comparisons_html, comparisons_text, results_html, results_text
from chunkeval.vocabulary import check_metric, check_metrics, split_list, unknown_name
from chunkeval.warehouse import Warehouse


@dataclass(frozen=True)
class Results:
    """Arrow tables of a sweep or a scoring: `summary` (one row per configuration, macro mean, std and
    micro of every metric), `per_query`, and for sweeps `by_corpus`, `models` (throughput) and, with
    `slice_by`, `by_slice` (the summary per configuration and slice of the gold set); with `race`, `race` (what
    the race decided: docs/statistics.md, "Racing")."""

    summary: pa.Table
    per_query: pa.Table
    by_corpus: pa.Table | None = None
    models: pa.Table | None = None
    texts_embedded: int = 0
    by_slice: pa.Table | None = None
    race: dict | None = None  # with race=True: what the race decided; per_query holds the cells it evaluated

    def table(self, name: str = "summary") -> pa.Table:
        if not isinstance(name, str):
            raise InputError(f"a table is named by text (summary, per_query, …), got {short(name)}")
        if name not in self._tables():
            raise InputError(unknown_name("table", name, self._tables()).replace("unknown table", "no table", 1))
        return getattr(self, name)

    def _tables(self) -> list[str]:
        names = ("summary", "per_query", "by_corpus", "by_slice", "models")
        return [n for n in names if isinstance(getattr(self, n), pa.Table)]

    def __repr__(self) -> str:
        return results_text(self.summary, self.per_query, self._tables())

    def _repr_html_(self) -> str:
        return results_html(self.summary, self.per_query, self._tables())

    def to_pandas(self, name: str = "summary"):
        table = self.table(name)
        optional("pandas", "Results.to_pandas")
        return table.to_pandas()

    def to_polars(self, name: str = "summary"):
        table = self.table(name)
        return optional("polars", "Results.to_polars").from_arrow(table)


def _yes_or_no(value, what: str) -> bool:
    """A keyword that is True or False (`yes`, `all_pairs`, `skip_empty_gold`): "no", 1 or None are refused, never
    read as Python's truth of the value ("no" is true there)."""
    if not isinstance(value, (bool, np.bool_)):
        raise InputError(f"{what} must be True or False, got {short(value)}")
    return bool(value)


def _item(qid, item, what: str) -> str:
    """An item of a gold or run list, held in memory: a chunk id or a text (a whole number is read as its digits);
    None, a float or anything else is refused, never written as 'None' and matched as such."""
    if isinstance(item, bool) or not isinstance(item, (str, int, np.integer)):
        raise InputError(f"{what} of query {short(qid)}: an item is a chunk id or a text, got {short(item)}")
    return str(item)


def _grade(qid, item, grade) -> float:
    """A grade of gold held in memory: a finite number (above 0 is relevant; nDCG's gain)."""
    try:
        value = float(grade)
    except (TypeError, ValueError):
        value = math.nan
    if isinstance(grade, (bool, np.bool_, str)) or not math.isfinite(value):
        raise InputError(f"gold of query {short(qid)}: the grade of {short(item)} must be a finite number, got "
                         f"{short(grade)}")  # fmt: skip
    return value


@contextmanager
def _scratch():
    """A scratch folder for inputs given as Python objects (a corpus as a mapping, questions as a list), written as
    the files a run reads; an error about those files names the argument (`questions: question 2: …`), never the
    temporary file it was written to."""
    with tempfile.TemporaryDirectory(prefix="chunkeval-") as folder:
        try:
            yield Path(folder)
        except InputError as error:
            said = str(error)
            for written, name in (
                (f"{folder}/questions.csv: row ", "questions: question "),
                (f"{folder}/questions.csv", "questions"),
                (f"{folder}/corpora/", "corpus_dir: "),
                (f"{folder}/corpora", "corpus_dir"),
            ):
                said = said.replace(written, name)
            if said == str(error):
                raise
            error.args = (said,)  # and its fields, which a caller may read: the argument, never the deleted file
            error.message, error.path, error.row = said, None, None
            raise error.with_traceback(None) from None


def _listed(value, what: str) -> list[str] | None:
    """A list argument as the API takes it: a list, or one string (a name, or names separated by commas), never
    read letter by letter; None stays None."""
    return None if value is None else split_list(value, what)


def _config(config) -> dict:
    """A `config` argument: a mapping of configuration keys, or a string as --config takes it ("k=5,chunker=...")."""
    if isinstance(config, str):
        return config_filter([config], "config")
    if config is not None and not isinstance(config, Mapping):
        raise InputError(f"config must be a mapping or a string of key=value pairs, got {type(config).__name__}")
    pairs = []  # each read as --config reads it: its key known, its value a name or a whole number
    for key, value in (config or {}).items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, (str, int))):
            raise InputError(f"config {short(key)}: a value is a name or a whole number, got {short(value)}")
        pairs.append(f"{key}={'none' if value is None else value}")
    return config_filter(pairs, "config") if pairs else {}


class MissingLibrary(InputError, ImportError):
    """An optional library that a call needs is not installed: one line saying what to install."""


def optional(module: str, what: str):
    """The optional library `module`, or `MissingLibrary` naming what to install."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingLibrary(f"{what} needs {module}, which is not installed: pip install {module}") from None


class Comparisons(list):
    """`compare`'s list of comparisons (each a dict, as `chunkeval compare --json` prints it), shown as a
    table in a terminal and in Jupyter."""

    def __repr__(self) -> str:
        return comparisons_text(self)

    def _repr_html_(self) -> str:
        return comparisons_html(self)


def _corpus_folder(corpora: str | Path | Mapping[str, str], scratch: Path) -> str:
    if not isinstance(corpora, (str, Path, Mapping)):  # never read as a path: `None: corpus folder not found`
        raise InputError(
            f"corpus_dir must be a folder's path or a mapping corpus_id → text, got {type(corpora).__name__}"
        )
    if isinstance(corpora, Mapping):
        folder = scratch / "corpora"
        folder.mkdir()
        for corpus_id, text in corpora.items():
            if (
                not isinstance(corpus_id, str)
                or not corpus_id
                or corpus_id.startswith(".")
                or any(c in corpus_id for c in "/\\\x00")
            ):  # it names the corpus's file here: never a path, never hidden
                raise InputError(f"corpus id {short(corpus_id)} must be a file name: no '/', no leading '.'")
            if not isinstance(text, str):
                raise InputError(f"corpus {corpus_id!r} must be a string of text")
            (folder / f"{corpus_id}.md").write_text(text, encoding="utf-8", newline="")
        return str(folder)
    return str(corpora)


def _questions_file(questions: str | Path | Sequence[Mapping], scratch: Path) -> str:
    if isinstance(questions, (str, Path)):
        return str(questions)
    import csv

    if not isinstance(questions, Sequence) or isinstance(questions, (bytes, Mapping)):
        raise InputError(f"questions must be a file's path or a list of mappings, got {type(questions).__name__}")
    path = scratch / "questions.csv"
    own = ["query_id", "question", "references", "corpus_id"]
    # other keys are columns a run can slice by (`slice_by`); a list (tags) is written as JSON
    extra = list(dict.fromkeys(k for q in questions if isinstance(q, Mapping) for k in q if k not in own))
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=own + extra)
        writer.writeheader()
        for i, q in enumerate(questions, start=1):
            if not isinstance(q, Mapping) or not {"question", "references", "corpus_id"} <= q.keys():
                raise InputError(f"question {i} must be a mapping with question, references and corpus_id")
            if not isinstance(q["references"], (list, tuple)):
                raise InputError(f"question {i}: references must be a list, got {type(q['references']).__name__}")
            cells = {k: json.dumps(q[k]) if isinstance(q.get(k), list) else q.get(k, "") for k in extra}
            writer.writerow(
                {
                    "query_id": q.get("query_id") or f"{q['corpus_id']}:{i}",
                    "question": q["question"],
                    "references": json.dumps(list(q["references"])),
                    "corpus_id": q["corpus_id"],
                    **cells,
                }
            )
    return str(path)


def evaluate(
    corpus_dir: str | Path | Mapping[str, str] | None = None,
    questions: str | Path | Sequence[Mapping] | None = None,
    *,
    experiment: str | Path | Mapping | None = None,
    cache_dir: str | Path | None = None,
    batch_size: int | None = None,
    device: str = "auto",
    yes: bool = False,
    **settings,
) -> Results:
    """Run a sweep and return its tables.

    `corpus_dir` is a corpus folder (docs/formats.md: .md, .txt, .html, .pdf and .jsonl files, subfolders) or a
    mapping corpus_id → text; `questions` a span gold
    CSV (Chroma's format) or a list of {question, references: [{content, start_index, end_index}],
    corpus_id[, query_id]}. `experiment` is an experiment file or mapping to start from. Every other keyword
    is an experiment setting (listed below, from the settings table; docs/settings.md), given as a value or
    a list, checked as a file's are. Embeddings are cached in `cache_dir` (default:
    `$CHUNKEVAL_HOME/cache/embeddings`). A grid of more than 500 configurations (each at each k) runs with
    `yes=True` or the setting `max_configurations` (its estimate logged first), else it is refused with the
    estimate, before anything is embedded (docs/settings.md, "Large grids").
    """
    check_batch_size(batch_size, "batch_size")
    check_device(device, "device")
    yes = _yes_or_no(yes, "yes")
    with _scratch() as scratch:
        if experiment is not None and not isinstance(experiment, (str, Path, Mapping)):
            raise InputError(f"experiment must be a file's path, a name or a mapping, got {type(experiment).__name__}")
        base = (
            Experiment.resolve(dict(experiment) if isinstance(experiment, Mapping) else str(experiment))
            if experiment
            else Experiment()
        )
        values = dict(settings)
        if corpus_dir is not None:
            values["corpus_dir"] = _corpus_folder(corpus_dir, scratch)
        if questions is not None:
            values["questions"] = _questions_file(questions, scratch)
        exp = Experiment.from_dict({**base.to_dict(), **values})
        consent = Consent(yes, None, "yes=True", logging.getLogger("chunkeval").warning, _past_throughput)
        if cache_dir is not None and not isinstance(cache_dir, (str, Path)):
            raise InputError(f"cache_dir must be a folder's path, got {type(cache_dir).__name__}")
        cache = Path(cache_dir) if cache_dir else None
        state = prepare(exp, batch_size=batch_size, device=device, consent=consent, cache=cache)
        result = run_steps(state)
    return Results(
        result.summary,
        result.per_query,
        result.by_corpus,
        result.models,
        result.texts_embedded,
        result.by_slice,
        result.race,
    )


def _past_throughput() -> dict[str, float]:
    """Texts per second of each model in the runs $CHUNKEVAL_HOME's warehouse recorded (for a large grid's estimate)."""
    return Warehouse.at_home().model_throughput()


def _keywords_checked(fn):
    """`fn`, whose call with a keyword it does not take (`chunk_sizes=` to `check_gold`, `metrc=`) is one line naming
    the keyword and what it looks like, as the CLI's flags and the experiment's keys are: never Python's TypeError."""
    import functools

    known = signature(fn).parameters

    @functools.wraps(fn)
    def checked(*args, **kwargs):
        for name in kwargs:
            if name not in known:
                raise InputError(unknown_name(f"keyword of chunkeval.{fn.__name__}()", name, known))
        return fn(*args, **kwargs)

    return checked


def _with_settings(fn):
    """`fn`'s signature and docstring with one keyword per experiment setting of the settings table (it
    takes them, and old spellings, through `**settings`)."""
    given = signature(fn)
    own = [p for p in given.parameters.values() if p.kind is not Parameter.VAR_KEYWORD]
    taken = {p.name for p in own}
    extra = [s for s in SETTINGS if s.name not in taken]
    keywords = [Parameter(s.name, Parameter.KEYWORD_ONLY, default=None) for s in extra]
    fn.__signature__ = given.replace(parameters=own + keywords)
    lines = [f"    {s.name}: {s.help.replace('%%', '%')}" for s in extra]
    fn.__doc__ = (
        (fn.__doc__ or "").rstrip() + "\n\n    Settings (default: the experiment's):\n" + "\n".join(lines) + "\n"
    )
    return fn


evaluate = _with_settings(evaluate)


@_keywords_checked
def score(
    gold: Mapping[str, Sequence[str] | Mapping[str, float]],
    run: Mapping[str, Sequence[str]],
    k: int = 10,
    skip_empty_gold: bool = False,
) -> Results:
    """Set and rank metrics of ranked lists held in memory, as `chunkeval evaluate-run` computes them.

    `gold` maps a query id to its relevant items: a list (grade 1 each) or a mapping item → grade
    (grade > 0 is relevant; grades are nDCG's gains). `run` maps a query id to its ranked list, best
    first. Items are chunk ids or texts (a retrieved text is relevant when it equals a gold text).
    A gold query missing from `run` scores as an empty list; a repeated item keeps its first rank.
    """
    check_k(k)
    skip_empty_gold = _yes_or_no(skip_empty_gold, "skip_empty_gold")
    for name, given in (("gold", gold), ("run", run)):
        if not isinstance(given, Mapping):
            raise InputError(f"{name} must be a mapping of query id → items, got {type(given).__name__}")
    judgments = {}
    for qid, items in gold.items():
        if isinstance(items, Mapping):
            judgments[str(qid)] = {_item(qid, i, "gold"): _grade(qid, i, g) for i, g in items.items()}
        elif isinstance(items, Sequence) and not isinstance(items, str):
            judgments[str(qid)] = {_item(qid, i, "gold"): 1.0 for i in items}
        else:
            raise InputError(f"gold of query {qid!r} must be a list of items or a mapping item → grade")
    ranked = {}
    for qid, items in run.items():
        if str(qid) not in judgments:
            raise InputError(f"run names query {qid!r}, which is not in the gold set")
        if isinstance(items, str) or not isinstance(items, Sequence):
            raise InputError(f"run of query {qid!r} must be a list of items, best first")
        ranked[str(qid)] = list(dict.fromkeys(_item(qid, i, "run") for i in items))
    per_query, summary = score_run(
        Qrels(judgments, source="gold"), RankedLists(ranked, source="run"), k, skip_empty_gold
    )
    return Results(summary, per_query)


@_keywords_checked
def check_gold(
    corpus_dir: str | Path | Mapping[str, str],
    questions: str | Path | Sequence[Mapping],
    *,
    corpus: Sequence[str] | str | None = None,
    chunk_size: int | None = None,
    html: str = "full",
) -> dict:
    """`chunkeval gold check` from Python: the lists ambiguous_references, overlapping_references,
    empty_references, long_references (with `chunk_size`), repeated_questions, skipped_documents (the
    documents of the folder left out as unreadable) and left_out_qrels (of document gold; empty here)."""
    if chunk_size is not None:  # as a run's chunk_sizes is: a whole number from 1
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or not 1 <= chunk_size <= MAX_CHUNK_SIZE:
            raise InputError(f"chunk_size must be a whole number from 1 to {MAX_CHUNK_SIZE:,}, got {short(chunk_size)}")
    with _scratch() as scratch:
        exp = Experiment(
            corpus_dir=_corpus_folder(corpus_dir, scratch),
            questions=_questions_file(questions, scratch),
            corpus=tuple(_listed(corpus, "corpus") or ()),
            html=html,
        )
        inputs = load_inputs(exp)
    return check(inputs.gold, inputs.corpora, chunk_size, inputs.skipped).to_dict()


def _per_query(side, metric: str, what: str) -> pa.Table:
    table = side.per_query if isinstance(side, Results) else side
    if not isinstance(table, pa.Table) or "query_id" not in table.column_names:
        raise InputError(f"{what} must be Results, a per-query Arrow table or a recorded run id")
    if metric not in table.column_names or table.num_rows and table[metric].null_count == table.num_rows:
        raise InputError(f"{what} has no values of metric {metric!r} (doc_* metrics need document gold, span_* span "
                         "gold)")  # fmt: skip
    return table


@_keywords_checked
def compare(
    a: Results | pa.Table | str,
    b: Results | pa.Table | str | None = None,
    *,
    metric: str,
    config: Mapping | str | None = None,
    all_pairs: bool = False,
    alpha: float = 0.05,
) -> Comparisons:
    """Paired comparisons, as `chunkeval compare --json` prints them (definitions: docs/statistics.md), in
    a list that shows itself as a table (`Comparisons`).

    `a` and `b` are `Results` (of `evaluate` or `score`), per-query Arrow tables, or ids of runs recorded
    in the warehouse under `$CHUNKEVAL_HOME`. With one side, each configuration is compared with the best
    by the metric's mean (every pair with `all_pairs`); with two, each configuration both sides have,
    queries paired by query_id. `config` keeps only the configurations with those settings. Each
    comparison has `a`, `b`, `metric`, `n_queries`, `n_unmatched`, `mean_a`, `mean_b`, `mean_diff`,
    `ci_low`, `ci_high`, `p_ttest`, `p_permutation`, `p_adjusted` (Holm over the call) and `significant`.
    """
    C.check_alpha(alpha, "alpha")
    check_metric(metric)
    all_pairs = _yes_or_no(all_pairs, "all_pairs")
    config = _config(config)
    if isinstance(a, str):
        if b is not None and not isinstance(b, str):
            raise InputError("compare two recorded runs by their ids, or two results held in memory")
        return Comparisons(
            Warehouse.at_home(must_exist=True).compare(
                metric, [a] + ([b] if b else []), config=config, all_pairs=all_pairs, alpha=alpha
            )
        )
    if isinstance(b, str):
        raise InputError("compare two recorded runs by their ids, or two results held in memory")
    first = C.matching(_per_query(a, metric, "a"), config, "a")
    if b is None:
        return Comparisons(C.within_run(first, metric, "a", all_pairs, alpha))
    return Comparisons(
        C.across_runs(first, C.matching(_per_query(b, metric, "b"), config, "b"), metric, "a", "b", alpha)
    )


class Regressions(list):
    """`regressions`' list of regressions, with the whole `verdict` they come from (every check, its p-values)."""

    verdict: dict


@_keywords_checked
def regressions(
    experiment: str,
    metrics: Sequence[str] | str | None = None,
    threshold: float = 0.02,
    alpha: float = 0.05,
    baseline: str | None = None,
    config: Mapping | str | None = None,
) -> Regressions:
    """The one regression verdict (docs/statistics.md, "One verdict"), as `chunkeval trend --fail-on-regression`
    and the `trend-report` flow give it, on the newest completed run of a recorded experiment: configurations ×
    metrics whose paired mean fell by more than `threshold` against the baseline (the pinned or given run, else
    the previous run scored the same way), significant at `alpha` after the step-down max-T over paired sign flips,
    taken jointly over every (configuration, metric) checked: `metrics` (by default the watched list,
    `REGRESSION_METRICS`) × the configurations of `config`. Each has the configuration, `metric`, `before`,
    `after`, `change` (new − baseline), `sd`, `n_queries`, `n_unmatched`, `p_ttest`, `p_adjusted`, `mde`, `worst`
    (the queries that lost most), `run_id` and `reference_run_id`; an empty list when nothing fell. `.verdict`
    holds the whole verdict (every check, the correction, and `detectable`: the smallest fall the gate sees). `chunkeval.errors.NothingComparable`
    where the runs share no configuration or no paired question."""
    check_alpha(alpha, "alpha")
    check_threshold(threshold, "threshold")
    metrics = check_metrics(list(REGRESSION_METRICS) if metrics is None else _listed(metrics, "metrics"))
    wh = Warehouse.at_home(must_exist=True)
    wh.check_experiment(experiment)
    if baseline is not None:
        wh.run(baseline)
    found = wh.verdict(experiment, metrics, threshold, baseline, alpha, _config(config))
    if found is not None and found["verdict"] == NOTHING_COMPARABLE:
        raise NothingComparable(verdict_line(found))
    out = Regressions(found["regressions"] if found else [])
    out.verdict = found
    return out


class Inspection(dict):
    """`inspect`'s document (as `chunkeval inspect --json` prints it), shown as the command shows it in a
    terminal, and in Jupyter with the shared characters highlighted."""

    def __repr__(self) -> str:
        return format_inspect(self)

    def _repr_html_(self) -> str:
        from html import escape

        text = escape(format_inspect(self)).replace(MARK[0], "<mark>").replace(MARK[1], "</mark>")
        return f'<pre style="white-space: pre-wrap">{text}</pre>'


@_keywords_checked
def inspect(run_id: str, query_id: str, config: Mapping | str | None = None) -> Inspection:
    """One question of a run recorded in the warehouse under `$CHUNKEVAL_HOME`, as `chunkeval inspect
    --json` gives it: `{query_id, question, references: [{corpus_id, start, end, text, context}], configs:
    [{configuration keys…, retrieved: [{rank, chunk_id, corpus_id, start, end, score, relevant, grade, text,
    overlaps}]}]}`, for the configurations with the settings of `config`. Under document gold the references
    are the relevant documents `[{doc_id, grade}]` and each retrieved chunk names its `doc_id`."""
    wh = Warehouse.at_home(must_exist=True)
    with wh.session():
        return Inspection(inspect_doc(wh, run_id, query_id, _config(config)))
