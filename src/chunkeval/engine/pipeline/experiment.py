"""An experiment: a name plus everything a sweep takes. Immutable; given as flags, a YAML file, a mapping or
the Python API's keywords. Its settings are declared once, as the fields of `Experiment`
(`chunkeval.engine.settings.table`); docs/settings.md lists them, generated from here (`python -m
chunkeval.engine.pipeline.experiment docs/settings.md` rewrites its table). Relative paths are read from the YAML
file's folder.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from chunkeval.engine.chunking import ChunkerSpec, needs_embeddings
from chunkeval.engine.chunking import needs_embeddings as chunker_needs
from chunkeval.engine.embedding import check_model, pick_device, registry
from chunkeval.engine.embedding.backends import CHOICES as BACKEND_CHOICES
from chunkeval.engine.embedding.backends import QUANTIZE, check_backend
from chunkeval.engine.embedding.late import check_late
from chunkeval.engine.embedding.precision import PRECISIONS, check_device
from chunkeval.engine.embedding.registry import check_model_runs_on
from chunkeval.engine.embedding.served import is_spec, lookup, parse_models
from chunkeval.engine.inputs.anchoring import ANCHOR_BOUNDS, ANCHOR_SIMILARITY
from chunkeval.engine.inputs.duplicates import MODES as DUPLICATE_MODES
from chunkeval.engine.inputs.extract import HTML_MODES, check_html_mode
from chunkeval.engine.inputs.provenance import recorded as gold_recorded
from chunkeval.engine.inputs.readers import read_text
from chunkeval.engine.inputs.slices import check_slice_columns
from chunkeval.engine.pipeline.rules import (
    RACE_METRICS,
    check_race,
    checked_doc_gold,
    experiment_notes,
    parse_overlap,
)
from chunkeval.engine.retrieval.indexes import library_versions, parse_index
from chunkeval.engine.retrieval.indexes.axis import resolve_axis
from chunkeval.engine.retrieval.rerank import check_reranking, is_cross_encoder
from chunkeval.engine.retrieval.retrievers import check_retriever
from chunkeval.engine.retrieval.retrievers import needs_embeddings as retriever_needs
from chunkeval.engine.retrieval.vectors import check_axis
from chunkeval.engine.scoring.expansion import check_expand
from chunkeval.engine.scoring.metrics import share_held
from chunkeval.engine.settings import plugins
from chunkeval.engine.settings.alerts import parse_alerts
from chunkeval.engine.settings.table import (
    LARGE_GRID,
    MAX_CANDIDATES,
    MAX_CHUNK_SIZE,
    MAX_K,
    Setting,
    check_bounds,
    did_you_mean,
    read_value,
    reference,
    renamed,
    setting,
    table_of,
)
from chunkeval.errors import InputError
from chunkeval.limits import MAX_INT, check_name, short, yaml_load
from chunkeval.paths import DEMO_DIR
from chunkeval.stats.power import DETECT_FALL
from chunkeval.vocabulary import (
    CONTEXTS,
    DEFAULT_MODEL,
    GOLD_DRIFT,
    NO_CONTEXT,
    NO_EXPAND,
    NO_LATE,
    NO_RERANKER,
    RUN_SETTINGS,
    TIE_POLICIES,
    not_one_of,
    split_list,
)

if TYPE_CHECKING:
    from chunkeval.engine.chunking import ChunkerSpec


# keys a run records beside its settings (not settings: a recorded run's settings are read back without them)
RECORDED = ("index_libraries", "gold_kind", "gold_provenance", "backend_auto")


def _index_values(value, source) -> tuple[str, ...]:
    """The `index:` of a file or flag: a setting's text, a mapping, or a list of either (commas split only
    a single string, as for every list setting)."""
    items = value if isinstance(value, (list, tuple)) else [value]
    out = []
    for item in items:
        if isinstance(item, dict):
            out.append(parse_index(item, source).text)
        elif isinstance(item, (list, tuple)) or item is None:
            raise InputError(f"index items are settings like hnsw:m=16 or mappings, got {short(item)}", source)
        else:
            out += _listed(split_list, item, source)
    if not out:
        raise InputError("index takes at least one setting, e.g. exact or hnsw:m=16", source)
    return tuple(out)


def _relative_models(names: tuple[str, ...], base: Path, served: tuple = ()) -> tuple[str, ...]:
    """The models of an experiment file, a relative folder read from the file's folder (as every
    relative path of the file is). Names of bundled, buildable or served models, and absolute paths, stay."""
    named = {s.name for s in served}
    return tuple(
        name
        if registry.is_named_model(name) or Path(name).is_absolute() or is_spec(name) or name in named | {NO_RERANKER}
        else str((base / name).resolve())
        for name in names
    )


def _listed(parse, value, source, *args):
    """`parse(value, *args)` with its error naming the experiment file."""
    try:
        return parse(value, *args)
    except InputError as exc:
        raise InputError(exc.message, source) from None


@dataclass(frozen=True)
class Experiment:
    """An experiment's settings: each field is one entry of the settings table (`chunkeval.engine.settings.table`),
    from which the flags, the reading of files and mappings, the API's keywords, the range checks and
    docs/settings.md are made."""

    name: str = setting(
        "adhoc", "text",
        "the experiment's name (an experiment file's default: its file name); runs are recorded under it",
        "experiment", flag=None)  # fmt: skip
    corpus_dir: str = setting(
        str(DEMO_DIR / "corpora"),
        "path",
        "corpus folder: .md, .txt, .html, .pdf and .jsonl files and subfolders of them (default: the demo corpora; "
        "docs/formats.md)",
        "inputs",
    )
    questions: str = setting(
        str(DEMO_DIR / "questions.csv"),
        "path",
        "span gold set: CSV with question, references, corpus_id (default: the demo questions)",
        "inputs",
    )
    corpus: tuple[str, ...] = setting(
        (),
        "names",
        "only these corpora (default: every corpus in the folder)",
        "inputs",
        metavar="ID",
        repeatable=True,
    )
    chunker: tuple[str, ...] = setting(
        ("fixed_token",),
        "names",
        "comma-separated chunkers: fixed_token, fixed_char, recursive_token, none (the whole document), "
        "cluster_semantic, semantic_breakpoint, or module:function (a chunker or a text splitter)",
        "chunking",
        axis="chunker",
    )
    chunk_sizes: tuple[int, ...] = setting(
        (200,),
        "ints",
        "comma-separated chunk sizes (tokens; characters for fixed_char), e.g. 100,200",
        "chunking",
        minimum=1,
        maximum=MAX_CHUNK_SIZE,
        axis="chunk_size",
    )
    overlaps: tuple[str, ...] = setting(
        ("0",),
        "names",
        "comma-separated overlaps: a number of tokens, or a share of the chunk size like 10%% (rounded down)",
        "chunking",
        axis="chunk_overlap",
    )
    context: tuple[str, ...] = setting(  # chunkeval.engine.inputs.headings
        (NO_CONTEXT,), "names", "comma-separated chunk headers: none (default), title (the document's title before "
        "each chunk's text), headings (its path of headings); embedded and indexed, never scored (docs/metrics.md)",
        "chunking", choices=CONTEXTS, axis="context", added=True)  # fmt: skip
    late: tuple[str, ...] = setting(  # chunkeval.engine.embedding.late; docs/metrics.md
        (NO_LATE,), "names", "comma-separated late chunking: none (default: each chunk embedded alone) or "
        "window:size=N (each chunk's vector pooled from a window of N model tokens of its document)",
        "chunking", axis="late", added=True)  # fmt: skip
    k: tuple[int, ...] = setting(
        (5,), "ints", "comma-separated retrieval depths, e.g. 1,3,5", "retrieval", minimum=1, maximum=MAX_K, axis="k"
    )
    model: tuple[str, ...] = setting(
        (DEFAULT_MODEL,),
        "names",
        "comma-separated embedding models: all-MiniLM-L6-v2 (default, bundled), minilm-static "
        "(built locally on first use), local sentence-transformers folders, served models "
        "openai:MODEL[@BASE_URL] (an OpenAI-compatible /embeddings endpoint), or names of the experiment "
        "file's models: mapping",
        "embedding",
        axis="model",
    )
    retriever: tuple[str, ...] = setting(
        ("dense",),
        "names",
        "comma-separated retrievers: dense (default), bm25, hybrid, or module:function",
        "retrieval",
        axis="retriever",
    )
    # how the dense half searches (chunkeval.engine.retrieval.indexes), resolved settings
    index: tuple[str, ...] = setting(
        ("exact",),
        "index",
        "comma-separated indexes the dense half of dense and hybrid searches: exact (default), "
        "hnsw[:m=16][:ef_construction=200][:ef_search=64], ivf:nlist=1024[:nprobe=16][:pq_m=48], "
        "chroma[:url=http://HOST:PORT][:m=…][:ef_search=…] (docs/indexes.md)",
        "retrieval",
        axis="index",
        added=True,
    )
    vectors: tuple[str, ...] = setting(  # chunkeval.engine.retrieval.vectors
        ("float32",),
        "names",
        "comma-separated ways the dense half of dense and hybrid stores and searches vectors under exact search: "
        "float32 (default), int8 (scalar, calibrated on the corpus's vectors), binary (sign bits, Hamming), "
        "binary-rescore:depth=N (Hamming's top N re-scored by the float vectors); docs/vectors.md",
        "retrieval",
        axis="vectors",
        added=True,
    )
    dims: tuple[str, ...] = setting(
        ("full",), "names",
        "comma-separated numbers of leading dimensions the dense half keeps, renormalised (Matryoshka truncation, "
        "before vectors quantizes): full (default) or e.g. 256,128; docs/vectors.md",
        "retrieval", axis="dims", added=True)  # fmt: skip
    rrf_k: int = setting(
        60, "int", "the constant of hybrid's reciprocal rank fusion (default 60)", "retrieval", minimum=0,
        maximum=MAX_INT)  # fmt: skip
    own_corpus: bool = setting(
        False, "bool",
        "retrieve each question from its own corpus only (default: from all corpora pooled, as Chroma does)",
        "retrieval")  # fmt: skip
    skip_empty_gold: bool = setting(
        False, "bool", "leave questions without references out of the averages (default: they score recall 0)",
        "scoring")  # fmt: skip
    duplicates: str = setting(  # a run setting (chunkeval.vocabulary)
        RUN_SETTINGS["duplicates"],
        "text",
        "a reference whose text occurs more than once in its corpus: only its gold position counts "
        "(positional, the default) or the copy the retrieved chunks cover most (credit); docs/metrics.md",
        "scoring",
        choices=DUPLICATE_MODES,
    )
    ties: str = setting(  # always recorded: runs recorded before it read as `retriever` (chunkeval.engine.retrieval.ties)
        TIE_POLICIES[0],
        "text",
        "how exactly equal scores are ordered in every ranking: trec_eval (by id, descending, as trec_eval does; the "
        "default) or retriever (the order the retriever gave); docs/metrics.md",
        "scoring",
        choices=TIE_POLICIES,
    )
    relevance: str = setting(  # a run setting: overlap, coverage:F or contains
        RUN_SETTINGS["relevance"],
        "text",
        "which chunks are relevant to span gold: overlap (a character of a reference; the default), coverage:F "
        "(a share F of some reference) or contains (a whole reference); set and rank metrics follow it "
        "(docs/metrics.md)",
        "scoring",
        added=True,
    )
    backend: str = setting(  # chunkeval.engine.embedding.backends; auto: chunkeval.engine.embedding.auto
        "auto",
        "text",
        "who runs the embedding model: auto (default: the fastest backend installed here whose vectors equal "
        "torch fp32's, probed once per model and machine), torch (sentence-transformers), onnx (onnxruntime) or "
        "openvino; exported once into $CHUNKEVAL_HOME/backends (docs/backends.md)",
        "embedding",
        choices=BACKEND_CHOICES,
    )
    quantize: str = setting(
        "none", "text",
        "int8: quantised weights for backend onnx or openvino (faster, vectors drift; docs/backends.md)",
        "embedding", choices=QUANTIZE)  # fmt: skip
    precision: str = setting(  # chunkeval.engine.embedding.precision
        "fp32",
        "text",
        "how the model runs: fp32 (default), bf16 (torch or openvino; fast on CPUs with AMX or AVX-512 BF16, "
        "and GPUs) or fp16 (GPU); vectors are cached apart per precision (docs/backends.md)",
        "embedding",
        choices=PRECISIONS,
    )
    plugins: tuple[str, ...] = setting(
        (), "names",
        "modules whose module:function chunkers, retrievers and rerankers an experiment file may run "
        "(as --plugin MODULE does; docs/settings.md)",
        "experiment", flag=None, added=True)  # fmt: skip
    models: tuple = setting(  # chunkeval.engine.embedding.served.ServedModel
        (),
        "models",
        "a mapping that names served models with their settings (base_url, model, api_key_env, …; docs/served.md)",
        "embedding",
        flag=None,
    )
    reranker: tuple[str, ...] = setting(  # chunkeval.engine.retrieval.rerank
        (NO_RERANKER,),
        "names",
        "comma-separated rerankers of the first stage's top --candidates: none (default), an embedding model "
        "(as --model takes them), or a local sentence-transformers CrossEncoder folder",
        "retrieval",
        axis="reranker",
    )
    candidates: tuple[int, ...] = setting(
        (), "ints", "comma-separated numbers of first-stage chunks a reranker re-scores (at least each k)",
        "retrieval", minimum=1, maximum=MAX_CANDIDATES, axis="candidates")  # fmt: skip
    expand: tuple[str, ...] = setting(  # chunkeval.engine.scoring.expansion; docs/metrics.md
        (NO_EXPAND,), "names", "comma-separated small-to-big retrieval: what each matched chunk returns: none "
        "(default), window:n=N (N chunks each side) or parent:size=SIZE (its SIZE-token parent)", "retrieval", axis="expand", added=True
    )  # fmt: skip
    beir: str = setting(  # chunkeval.engine.inputs.document_gold
        "", "path", "document gold from a BEIR folder: corpus.jsonl, queries.jsonl, qrels/<split>.tsv (docs/formats.md)",
        "inputs", metavar="DIR", added=True)  # fmt: skip
    split: str = setting("test", "text", "the qrels of --beir: qrels/<split>.tsv (default test)", "inputs")
    queries: str = setting(
        "", "path", "document gold: a JSONL file of queries (_id, text), judged by --qrels", "inputs", added=True
    )
    qrels: str = setting(
        "",
        "path",
        "document gold for --corpus-dir: BEIR's TSV (query-id, corpus-id, score) or TREC qrels",
        "inputs",
        added=True,
    )
    strict: bool = setting(
        False,
        "bool",
        "anything in the inputs that would be set aside is an error: an unreadable document (a PDF without text, "
        "a damaged file, text not UTF-8), a qrels row naming an unknown query or document, and a question retired "
        "because a reference could not be placed in its changed document (default: left out, counted, and said in "
        "one summary line; docs/gold.md)",
        "inputs",
        added=True,
    )
    anchor_similarity: float = setting(  # chunkeval.engine.inputs.anchoring
        ANCHOR_SIMILARITY,
        "number",
        "a reference whose text is no longer in its document word for word is placed where the document holds "
        "text at least this similar (rapidfuzz's ratio, 0 to 100), else its question is retired (docs/gold.md)",
        "inputs",
        metavar="S",
        minimum=ANCHOR_BOUNDS[0],
        maximum=ANCHOR_BOUNDS[1],
        added=True,
    )
    html: str = setting(
        "full",
        "text",
        "the text of HTML documents: full (every visible text of <body>; the default) or main (the main content "
        "as trafilatura finds it: navigation, headers and footers dropped); span offsets refer to that text",
        "inputs",
        choices=HTML_MODES,
        added=True,
    )
    slice_by: tuple[str, ...] = setting(  # chunkeval.engine.inputs.slices
        (),
        "names",
        "comma-separated gold-set columns whose values make slices (type,tags): extra columns of the questions "
        "CSV (tags: a JSON list) or fields of the queries file (or its metadata); every summary gains per-slice rows",
        "inputs",
        metavar="COLUMNS",
        added=True,
    )
    mlflow: str = setting(
        "",
        "text",
        "the http(s) URI of an MLflow tracking server each run is published to (as run --mlflow, which wins); "
        "where results go, so runs do not record it",
        "output",
        flag=None,
        recorded=False,
    )
    alerts: tuple = setting(  # chunkeval.engine.settings.alerts
        (),
        "alerts",
        "who is told: a list of {to: DESTINATION, events: [...], grace: SECONDS}, each destination a name of your "
        "endpoints.yaml; events of regression, failed, gold_drift, nothing_comparable, silence (the default) and "
        "completed (docs/loop.md)",
        "output",
        flag=None,
        recorded=False,
    )
    gold_drift: float = setting(GOLD_DRIFT, "number", "the share of the gold set's questions retired or placed "
        "approximately at which a run emits gold_drift (0 to 1; docs/loop.md)", "output", flag=None, minimum=0,
        maximum=1, recorded=False)  # fmt: skip
    detect_fall: float = setting(DETECT_FALL, "number", "the fall of a metric you want the gate to see: where the "
        "gold set is too small for it, the run's verdict and the gate say how many questions would see it (0 to 1, "
        "default 0.05; 0: never said)", "output", minimum=0, maximum=1, added=True)  # fmt: skip
    max_configurations: int = setting(
        0,
        "int",
        f"the grid size this experiment intends: a grid of more than {LARGE_GRID} configurations (each at each k) "
        "runs without asking up to this many (0: ask, or need --yes off a terminal; docs/settings.md)",
        "output",
        flag=None,
        minimum=0,
        maximum=MAX_INT,
        recorded=False,
    )

    race: bool = setting(False, "bool", "race the grid: questions in a seeded random order, in batches; a configuration "
                         "(each at each k) shown worse than the leader by more than race_delta on race_metric is "
                         "evaluated no further; the run keeps the rows it evaluated", "racing", added=True)  # fmt: skip
    race_metric: str = setting("ndcg_at_k", "text", "the metric a race decides on", "racing", choices=RACE_METRICS,
                               added=True)  # fmt: skip
    race_alpha: float = setting(0.05, "number", "a race's error, over every configuration and look", "racing",
                                metavar="A", minimum=0, maximum=1, added=True)  # fmt: skip
    race_delta: float = setting(0.01, "number", "a race's tolerance: how much worse than the best may be dropped",
                                "racing", metavar="D", minimum=0, maximum=1, added=True)  # fmt: skip
    race_batch: int = setting(10, "int", "questions per look of a race", "racing", minimum=1, added=True)
    race_seed: int = setting(0, "int", "the seed of a race's order of questions", "racing", minimum=0, added=True)
    budget: int = setting(0, "int", "a race's most cells, question × configuration (0: none)", "racing", minimum=0,
                          added=True)  # fmt: skip

    @property
    def doc_gold(self) -> bool:
        """Whether the gold set judges documents (qrels) rather than spans."""
        return bool(self.beir or self.qrels)

    @classmethod
    def from_dict(
        cls,
        data: dict,
        base: Path | None = None,
        source: str | None = None,
        trusted: bool = True,
        allow=(),
        overrides: dict | None = None,
    ) -> Experiment:
        """Settings from a mapping, each read as the settings table says, then `overrides` (settings already read,
        as flags give them: a path is the caller's, never joined to `base`), validated once. From a file or a
        recorded run (`trusted=False`), a `module:function` chunker or retriever of the mapping must name a module
        of its `plugins:` or of `allow` (`--plugin`), checked before anything is imported
        (`chunkeval.engine.settings.plugins`); one given in `overrides` (a flag) needs none."""
        table = {s.name: s for s in SETTINGS}
        data = {k: v for k, v in data.items() if k not in RECORDED}  # what a run recorded beside its settings
        odd = [k for k in data if not isinstance(k, str)]
        if odd:
            raise InputError(f"experiment keys are names; got the key {short(odd[0])}", source)
        data = renamed(data, SETTINGS, source, _note)
        unknown = sorted(set(data) - set(table))
        if unknown:
            raise InputError(f"unknown experiment key {did_you_mean(unknown[0], table)}", source)
        values = {}
        for key, value in data.items():
            if value is None:
                continue
            s = table[key]
            if s.kind == "index":
                values[key] = _index_values(value, source)
            elif s.kind == "models":
                values[key] = parse_models(value, source)
            elif s.kind == "alerts":
                values[key] = parse_alerts(value, source)
            else:
                value = _listed(read_value, value, source, s)
                if s.kind == "path" and base is not None:
                    value = str((base / value).resolve())
                values[key] = value
        for key in ("model", "reranker"):  # a relative model folder is read from the file's folder
            if key in values and base is not None:
                values[key] = _relative_models(values[key], base, values.get("models", ()))
        if not trusted:  # names only; the registries refuse the standard library when they resolve
            specs = {"chunker": values.get("chunker", ()), "retriever": values.get("retriever", ())}
            plugins.check_allowed(specs, set(values.get("plugins", ())) | set(allow), source)
        values.update(overrides or {})
        return cls(**values).validate(source)

    @staticmethod
    def file_settings(path: Path) -> dict:
        """The settings of an experiment file, as written (read by `from_dict`): its name, by default the file's."""
        data = yaml_load(read_text(path), path)
        if not isinstance(data, dict):
            raise InputError("an experiment file is a YAML mapping of settings", path)
        data.setdefault("name", Path(path).stem)
        return data

    @classmethod
    def from_yaml(cls, path: Path, allow=()) -> Experiment:
        """An experiment file: relative paths are read from its folder, and it may run only the plug-ins it
        lists under `plugins:` (or `allow`, the modules given with --plugin)."""
        path = Path(path)
        return cls.from_dict(cls.file_settings(path), base=path.parent, source=str(path), trusted=False, allow=allow)

    @classmethod
    def demo(cls) -> Experiment:
        return cls.from_yaml(DEMO_DIR / "experiment.yaml")

    @classmethod
    def resolve(cls, ref: str | dict | Experiment) -> Experiment:
        """An experiment from `demo`, the path of a YAML file, or a mapping of settings."""
        if isinstance(ref, Experiment):
            return ref
        if isinstance(ref, dict):
            return cls.from_dict(ref)
        if ref == "demo":
            return cls.demo()
        return cls.from_yaml(Path(ref))

    def with_overrides(self, **changes) -> Experiment:
        changes = {k: v for k, v in changes.items() if v not in (None, (), [])}
        return replace(self, **changes).validate()

    def validate(self, source: str | None = None) -> Experiment:
        """Checked before any work; every error names the settings' file (`source`) unless it names another."""
        try:
            return self._validate(source)
        except InputError as exc:
            raise exc if exc.path is not None or source is None else InputError(exc.message, source) from None

    def _validate(self, source: str | None) -> Experiment:
        check_name(self.name, "experiment name", source)
        check_run_settings(self, source)
        check_reranking(self, source)
        check_expand(self, source)
        check_late(self, source)
        for key in ("model", "retriever", "chunker", "reranker", "context"):
            values = getattr(self, key)
            if not values:
                raise InputError(f"an experiment needs at least one {key}", source)
            twice = sorted({v for v in values if values.count(v) > 1})
            if twice:
                raise InputError(f"{key} {', '.join(map(repr, twice))} listed twice", source)
        for retriever in self.retriever:
            check_retriever(retriever)
        resolved = resolve_axis(self.index, self.retriever, source)
        vectors, dims = check_axis(self.vectors, self.dims, self.k, source)
        if self.needs_model():
            for model in self.model:
                served = lookup(model, self.models)
                if served is not None:
                    served.api_key()  # its variable must be set (the key is read again when it is used)
                    continue
                check_model(model)
                check_model_runs_on(model, self.backend, source, self.precision)
        self.grid()
        check_slice_columns(self.slice_by, source)
        check_race(self, source)

        checked = checked_doc_gold(self, source)
        if (vectors, dims) != (checked.vectors, checked.dims):
            checked = replace(checked, vectors=vectors, dims=dims)
        return checked if resolved == checked.index else replace(checked, index=resolved)

    def index_specs(self):
        """The index axis as `IndexSpec`s, in the order given."""
        return [parse_index(text) for text in self.index]

    def reranks(self) -> bool:
        return any(r != NO_RERANKER for r in self.reranker)

    def rerank_grid(self) -> list[tuple[str, int | None]]:
        """Every (reranker, candidates): `none` once, with no candidates."""
        return list(
            dict.fromkeys(
                (r, None) if r == NO_RERANKER else (r, c) for r in self.reranker for c in (self.candidates or (None,))
            )
        )

    def checked_for_device(self, device: str | None) -> Experiment:
        """This experiment, where its backend and precision can run on `device` (onnx and openvino run on
        the CPU here; fp16 needs a GPU)."""
        if device and device.startswith("cuda") and self.backend not in ("torch", "auto") and self.needs_model():
            raise InputError(
                f"--device {device} runs backend torch; backend {self.backend} runs on the CPU (use --device cpu or auto)"
            )
        if self.precision != "fp32" and self.needs_model():
            torch = self.backend in ("torch", "auto")  # auto runs a lower precision on torch
            check_device(self.precision, "torch" if torch else self.backend, pick_device(device) if torch else "cpu")
        return self

    def needs_model(self) -> bool:
        """Whether any chunker, retriever or reranker of the grid embeds: bm25 over fixed chunks never loads a model."""
        return self.first_stage_embeds() or bool(self.embedding_rerankers())

    def first_stage_embeds(self) -> bool:
        """Whether a chunker or retriever of the grid reads vectors of the model axis."""
        return any(chunker_needs(c) for c in self.chunker) or any(retriever_needs(r) for r in self.retriever)

    def embedding_rerankers(self) -> list[str]:
        """The rerankers that are embedding models (not none, not a CrossEncoder)."""
        return [r for r in self.reranker if r != NO_RERANKER and not is_cross_encoder(r)]

    def grid(self) -> list[ChunkerSpec]:
        """Every (chunker, size, overlap) setting, validated, without repeats, in the order given."""
        specs = []
        for chunker in self.chunker:
            if chunker == "none":  # the whole document: one setting, whatever the sizes and overlaps
                specs.append(ChunkerSpec(chunker, 0, 0).validate())
                continue
            no_overlap = needs_embeddings(chunker)  # semantic chunkers take none: once per size, at overlap 0
            for size in self.chunk_sizes:
                for overlap in self.overlaps:
                    specs.append(
                        ChunkerSpec(chunker, size, 0 if no_overlap else parse_overlap(overlap, size)).validate()
                    )
        return list(dict.fromkeys(specs))

    def notes(self) -> list[str]:
        """What a reader of the results must know about how they were computed (`experiment_notes`)."""
        return experiment_notes(self)

    def recorded_settings(self) -> dict:
        """The settings a run records: `to_dict`, and the versions of the index libraries it searches with."""
        versions = library_versions(self.index_specs())
        return {**self.to_dict(), **({"index_libraries": versions} if versions else {}), **gold_recorded(self)}

    def to_dict(self) -> dict:
        """The settings as a run records them (`as_recorded`)."""
        return as_recorded(self)

    def fingerprint(self) -> str:
        """Hash of the settings (not the data): two runs of the same experiment settings share it."""
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()


def check_run_settings(exp: Experiment, source: str | None) -> None:
    """The settings that stand alone: the grid's sizes, and the run settings' values."""
    if exp.mlflow and not exp.mlflow.startswith(("http://", "https://")):
        raise InputError(f"mlflow takes the http(s) URI of an MLflow tracking server, got {short(exp.mlflow)}", source)
    if not exp.chunker or not exp.chunk_sizes or not exp.overlaps or not exp.k:
        raise InputError("an experiment needs at least one chunker, chunk size, overlap and k", source)
    for s in SETTINGS:
        if s.minimum is not None or s.maximum is not None:
            check_bounds(s, getattr(exp, s.name), source)
    check_html_mode(exp.html, source)
    _listed(share_held, exp.relevance, source)
    check_backend(exp.backend, exp.quantize, source, exp.precision)
    for s in SETTINGS:  # the rest of the settings with choices, from the table
        values = getattr(exp, s.name)
        for value in values if isinstance(values, tuple) else (values,):
            if s.choices and value not in s.choices:
                raise InputError(not_one_of(s.name, value, s.choices), source)


SETTINGS: tuple[Setting, ...] = table_of(Experiment)  # the settings table, in the order of the fields


def _note(line: str) -> None:
    import sys

    print(f"chunkeval: {line}", file=sys.stderr)


def settings_reference() -> str:
    """The reference table of docs/settings.md, as the settings table makes it."""
    return reference(SETTINGS)


def as_recorded(exp: Experiment) -> dict:
    """An experiment's settings as a run records them: each key at its default written as runs recorded before the
    key existed (left out), where results go left out, tuples as lists."""
    data = asdict(exp)
    data["models"] = {m.name: m.settings() for m in exp.models}
    if not data["models"]:
        del data["models"]
    if not exp.beir:
        del data["split"]
    for s in SETTINGS:
        # where runs are published, not how they are evaluated, runs record not; a setting added later, at its
        # default, they record as runs did before it existed
        if not s.recorded or (s.added and data[s.name] == s.default):
            del data[s.name]
    return {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}


if __name__ == "__main__":  # python -m chunkeval.engine.pipeline.experiment docs/settings.md: rewrite its table
    import sys

    from chunkeval.engine.settings.table import with_reference

    page = Path(sys.argv[1])
    page.write_text(with_reference(page.read_text(encoding="utf-8"), SETTINGS), encoding="utf-8")
