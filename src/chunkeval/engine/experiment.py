"""An experiment: a name plus everything a sweep takes. Immutable; given as flags or a YAML file.

YAML keys are the long flag names with `_` for `-`: name, corpus_dir, html, questions, beir, split, queries, qrels, strict, corpus, chunker,
chunk_sizes, overlaps, k, model, retriever, index, rrf_k, own_corpus, skip_empty_gold, duplicates, slice_by, backend, quantize, precision (model, retriever and
the other lists take one value or a list), `models`, a mapping that names served models with their
settings (`chunkeval.engine.embedding.served`), and `mlflow`, the MLflow tracking server each run is published
to (as `run --mlflow`; where results go, not a setting of the evaluation: runs do not record it).
Relative paths are read from the YAML file's folder.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields, replace
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING

from chunkeval.engine import plugins
from chunkeval.errors import InputError
from chunkeval.limits import MAX_INT, check_name, short, yaml_load
from chunkeval.paths import DEMO_DIR
from chunkeval.vocabulary import (  # noqa: F401 (re-exported)
    DEFAULT_MODEL,
    NO_RERANKER,
    RUN_SETTINGS,
    TIE_POLICIES,
    split_flags,
    split_list,
)

if TYPE_CHECKING:
    from chunkeval.engine.chunking import ChunkerSpec


# keys a run records beside its settings (not settings: a recorded run's settings are read back without them)
RECORDED = ("index_libraries",)


def whole_number(value, what: str) -> int:
    """A whole number from YAML or a flag: `5` or `"5"`; never `18.9`, `5.0`, `true`, or one past `MAX_INT`."""
    if isinstance(value, bool) or isinstance(value, float):
        raise InputError(f"{what} must be whole numbers, got {short(value)}")
    try:
        number = int(str(value).strip()) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        raise InputError(f"{what} must be whole numbers, got {short(value)}") from None
    if abs(number) > MAX_INT:
        raise InputError(f"{what} must be at most {MAX_INT}, got {short(value)}")
    return number


def parse_ints(values, what: str) -> tuple[int, ...]:
    """Whole numbers from a YAML list (item by item) or a comma-separated string."""
    if isinstance(values, (list, tuple)):
        split_list(values)  # items must be single values
        return tuple(whole_number(v, what) for v in values)
    return tuple(whole_number(v, what) for v in split_list(values))


def check_k(k: int, what: str = "k", source: str | None = None) -> int:
    """A retrieval depth: at least 1 (`what` names it as the caller's user wrote it: k, --k)."""
    if k < 1:
        raise InputError(f"{what} must be at least 1, got {k}", source)
    return k


def parse_overlap(value: str, chunk_size: int) -> int:
    """`25` is 25 tokens; `10%` is that share of the chunk size, rounded down (10% of 250 → 25)."""
    if isinstance(value, (bool, float)):
        raise InputError(f"overlap must be a whole number or a percentage like 10%, got {short(value)}")
    text = str(value).strip()
    try:
        if text.endswith("%"):
            share = Fraction(text[:-1])
            if not 0 <= share <= 100:
                raise InputError(f"an overlap share must be between 0% and 100%, got {short(value)}")
            return int(share * chunk_size / 100)
        if abs(int(text)) > MAX_INT:
            raise InputError(f"overlap must be at most {MAX_INT}, got {short(value)}")
        return int(text)
    except (ValueError, ZeroDivisionError):
        raise InputError(f"overlap must be a whole number or a percentage like 10%, got {short(value)}") from None


def _index_values(value, source) -> tuple[str, ...]:
    """The `index:` of a file or flag: a setting's text, a mapping, or a list of either (commas split only
    a single string, as for every list setting)."""
    from chunkeval.engine.indexes import parse_index

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
    from chunkeval.engine.embedding import registry
    from chunkeval.engine.embedding.served import is_spec

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
    name: str = "adhoc"
    corpus_dir: str = str(DEMO_DIR / "corpora")
    questions: str = str(DEMO_DIR / "questions.csv")
    corpus: tuple[str, ...] = ()
    chunker: tuple[str, ...] = ("fixed_token",)
    chunk_sizes: tuple[int, ...] = (200,)
    overlaps: tuple[str, ...] = ("0",)
    k: tuple[int, ...] = (5,)
    model: tuple[str, ...] = (DEFAULT_MODEL,)
    retriever: tuple[str, ...] = ("dense",)
    index: tuple[str, ...] = ("exact",)  # how the dense half searches (chunkeval.engine.indexes), resolved settings
    rrf_k: int = 60
    own_corpus: bool = False
    skip_empty_gold: bool = False
    duplicates: str = RUN_SETTINGS["duplicates"]  # a run setting (chunkeval.vocabulary)
    relevance: str = RUN_SETTINGS["relevance"]  # a run setting: overlap, coverage:F or contains
    ties: str = TIE_POLICIES[0]  # how exactly equal scores are ordered: trec_eval or retriever (always recorded)
    backend: str = "torch"  # who runs the embedding model's transformer: torch, onnx or openvino (chunkeval.engine.embedding.backends)
    quantize: str = "none"  # none or int8 (backends onnx and openvino)
    precision: str = "fp32"  # how the model runs: fp32, bf16 or fp16 (chunkeval.engine.embedding.precision)
    plugins: tuple[str, ...] = ()  # modules whose module:function chunkers and retrievers a file may name
    models: tuple = ()  # served models named in `models:` (chunkeval.engine.embedding.served.ServedModel)
    reranker: tuple[str, ...] = (NO_RERANKER,)  # none, embedding models, CrossEncoder folders (chunkeval.engine.rerank)
    candidates: tuple[int, ...] = ()  # first-stage chunks a reranker re-scores
    beir: str = ""  # a BEIR folder: document-level gold (chunkeval.engine.documents)
    split: str = "test"  # the qrels of a BEIR folder: qrels/<split>.tsv
    queries: str = ""  # with qrels and corpus_dir: document-level gold for any corpus
    qrels: str = ""
    strict: bool = False  # an unreadable document, or a qrels row naming an unknown query or document, is an error
    html: str = "full"  # what text an HTML document gives: full (all of <body>) or main (trafilatura's main content)
    slice_by: tuple[str, ...] = ()  # gold-set columns whose values make slices (chunkeval.engine.slices)
    mlflow: str = ""  # the http(s) URI of an MLflow tracking server each run is published to (not recorded)

    @property
    def doc_gold(self) -> bool:
        """Whether the gold set judges documents (qrels) rather than spans."""
        return bool(self.beir or self.qrels)

    @classmethod
    def from_dict(
        cls, data: dict, base: Path | None = None, source: str | None = None, trusted: bool = True, allow=()
    ) -> Experiment:
        """Settings from a mapping. From a file or a recorded run (`trusted=False`), a `module:function`
        chunker or retriever must name a module of the mapping's `plugins:` or of `allow` (`--plugin`),
        checked before anything is imported (`chunkeval.engine.plugins`)."""
        names = {f.name for f in fields(cls)}
        data = {k: v for k, v in data.items() if k not in RECORDED}  # what a run recorded beside its settings
        unknown = sorted(set(data) - names)
        if unknown:
            raise InputError(
                f"unknown experiment key(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}", source
            )
        values = {}
        for key, value in data.items():
            if value is None:
                continue
            if key == "index":
                values[key] = _index_values(value, source)
                continue
            if key in ("corpus_dir", "questions", "beir", "queries", "qrels") and base is not None:
                value = str((base / str(value)).resolve())
            if key in ("corpus", "chunker", "overlaps", "model", "retriever", "plugins", "reranker", "slice_by"):
                if not isinstance(value, (str, int, float, list, tuple)):
                    raise InputError(f"{key} must be a name or a list of names, got {value!r}", source)
                value = tuple(_listed(split_list, value, source))
            elif key == "models":
                from chunkeval.engine.embedding.served import parse_models

                value = parse_models(value, source)
            elif key in ("chunk_sizes", "k", "candidates"):
                value = _listed(parse_ints, value, source, key)
            elif key == "rrf_k":
                if isinstance(value, (list, tuple, dict)):
                    raise InputError(f"rrf_k takes one whole number, got {short(value)}", source)
                value = _listed(whole_number, value, source, key)
            elif key in ("own_corpus", "skip_empty_gold", "strict"):
                if not isinstance(value, bool):
                    raise InputError(f"{key} must be true or false, got {value!r}", source)
            else:
                if isinstance(value, (list, tuple, dict)):
                    raise InputError(f"{key} takes one value, got {short(value)}", source)
                value = str(value)
            values[key] = value
        for key in ("model", "reranker"):  # a relative model folder is read from the file's folder
            if key in values and base is not None:
                values[key] = _relative_models(values[key], base, values.get("models", ()))
        if not trusted:  # names only; the registries refuse the standard library when they resolve
            specs = {"chunker": values.get("chunker", ()), "retriever": values.get("retriever", ())}
            plugins.check_allowed(specs, set(values.get("plugins", ())) | set(allow), source)
        return cls(**values).validate(source)

    @classmethod
    def from_yaml(cls, path: Path, allow=()) -> Experiment:
        """An experiment file: relative paths are read from its folder, and it may run only the plug-ins it
        lists under `plugins:` (or `allow`, the modules given with --plugin)."""
        from chunkeval.engine.inputs import read_text

        path = Path(path)
        data = yaml_load(read_text(path), path)
        if not isinstance(data, dict):
            raise InputError("an experiment file is a YAML mapping of settings", path)
        data.setdefault("name", path.stem)
        return cls.from_dict(data, base=path.parent, source=str(path), trusted=False, allow=allow)

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
        check_name(self.name, "experiment name", source)
        check_run_settings(self, source)
        from chunkeval.engine.rerank import check_reranking

        check_reranking(self, source)
        for key in ("model", "retriever", "chunker", "reranker"):
            values = getattr(self, key)
            if not values:
                raise InputError(f"an experiment needs at least one {key}", source)
            twice = sorted({v for v in values if values.count(v) > 1})
            if twice:
                raise InputError(f"{key} {', '.join(map(repr, twice))} listed twice", source)
        from chunkeval.engine.embedding import check_model
        from chunkeval.engine.retrievers import check_retriever

        for retriever in self.retriever:
            check_retriever(retriever)
        from chunkeval.engine.indexes.axis import resolve_axis

        resolved = resolve_axis(self.index, self.retriever, source)
        if self.needs_model():
            from chunkeval.engine.embedding.registry import check_model_runs_on
            from chunkeval.engine.embedding.served import lookup

            for model in self.model:
                served = lookup(model, self.models)
                if served is not None:
                    served.api_key()  # its variable must be set (the key is read again when it is used)
                    continue
                check_model(model)
                check_model_runs_on(model, self.backend, source, self.precision)
        self.grid()
        from chunkeval.engine.doc_settings import checked_doc_gold
        from chunkeval.engine.slices import check_slice_columns

        check_slice_columns(self.slice_by, source)

        checked = checked_doc_gold(self, source)
        return checked if resolved == checked.index else replace(checked, index=resolved)

    def index_specs(self):
        """The index axis as `IndexSpec`s, in the order given."""
        from chunkeval.engine.indexes import parse_index

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
        if device and device.startswith("cuda") and self.backend != "torch" and self.needs_model():
            raise InputError(
                f"--device {device} runs backend torch; backend {self.backend} runs on the CPU (use --device cpu or auto)"
            )
        if self.precision != "fp32" and self.needs_model():
            from chunkeval.engine.embedding import pick_device
            from chunkeval.engine.embedding.precision import check_device

            check_device(self.precision, self.backend, pick_device(device) if self.backend == "torch" else "cpu")
        return self

    def needs_model(self) -> bool:
        """Whether any chunker, retriever or reranker of the grid embeds: bm25 over fixed chunks never loads a model."""
        return self.first_stage_embeds() or bool(self.embedding_rerankers())

    def first_stage_embeds(self) -> bool:
        """Whether a chunker or retriever of the grid reads vectors of the model axis."""
        from chunkeval.engine.chunking import needs_embeddings as chunker_needs
        from chunkeval.engine.retrievers import needs_embeddings as retriever_needs

        return any(chunker_needs(c) for c in self.chunker) or any(retriever_needs(r) for r in self.retriever)

    def embedding_rerankers(self) -> list[str]:
        """The rerankers that are embedding models (not none, not a CrossEncoder)."""
        from chunkeval.engine.rerank import is_cross_encoder

        return [r for r in self.reranker if r != NO_RERANKER and not is_cross_encoder(r)]

    def grid(self) -> list[ChunkerSpec]:
        """Every (chunker, size, overlap) setting, validated, without repeats, in the order given."""
        from chunkeval.engine.chunking import ChunkerSpec, needs_embeddings

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

    def overlap_notes(self) -> list[str]:
        """What the grid does differently from what it lists (chunkers that take no overlap)."""
        from chunkeval.engine.chunking import needs_embeddings

        if all(parse_overlap(o, s) == 0 for o in self.overlaps for s in self.chunk_sizes):
            return []
        return [
            f"{c} takes no overlap: it runs once per chunk size, at overlap 0"
            for c in self.chunker
            if needs_embeddings(c)
        ]

    def notes(self) -> list[str]:
        """What a reader of the results must know about how they were computed (`chunkeval.engine.notes`)."""
        from chunkeval.engine.notes import experiment_notes

        return experiment_notes(self)

    def recorded_settings(self) -> dict:
        """The settings a run records: `to_dict`, and the versions of the index libraries it searches with."""
        from chunkeval.engine.indexes import library_versions

        versions = library_versions(self.index_specs())
        return {**self.to_dict(), **({"index_libraries": versions} if versions else {})}

    def to_dict(self) -> dict:
        data = asdict(self)
        if tuple(data["index"]) == ("exact",):
            del data["index"]  # settings of exact search stay as they were recorded before the key existed
        if not data["plugins"]:
            del data["plugins"]  # settings without plug-ins stay as they were recorded before the key existed
        if data["reranker"] == [NO_RERANKER] and not data["candidates"]:
            del data["reranker"], data["candidates"]  # as settings were recorded before reranking existed
        data["models"] = {m.name: m.settings() for m in self.models}
        if not data["models"]:
            del data["models"]
        if data["relevance"] == RUN_SETTINGS["relevance"]:
            del data["relevance"]  # runs of the default rule stay as they were recorded before the setting existed
        for key in ("beir", "queries", "qrels", "strict", "slice_by"):
            if not data[key]:
                del data[key]  # runs of span gold stay as they were recorded before document gold existed
        if data["html"] == "full":
            del data["html"]  # runs of the default extraction stay as they were recorded before the key existed
        if not self.beir:
            del data["split"]
        del data[
            "mlflow"
        ]  # where runs are published, not how they are evaluated: runs record their settings without it
        return {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}

    def fingerprint(self) -> str:
        """Hash of the settings (not the data): two runs of the same experiment settings share it."""
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()


def check_run_settings(exp: Experiment, source: str | None) -> None:
    """The settings that stand alone: the grid's sizes, and the run settings' values."""
    if exp.mlflow and not exp.mlflow.startswith(("http://", "https://")):
        raise InputError(f"mlflow takes the http(s) URI of an MLflow tracking server, got {short(exp.mlflow)}", source)
    if not exp.chunker or not exp.chunk_sizes or not exp.overlaps or not exp.k:
        raise InputError("an experiment needs at least one chunker, chunk size, overlap and k", source)
    for k in exp.k:
        check_k(k, source=source)
    from chunkeval.engine.duplicates import MODES
    from chunkeval.engine.embedding.backends import check_backend
    from chunkeval.engine.extract import check_html_mode
    from chunkeval.engine.metrics import share_held

    check_html_mode(exp.html, source)
    if exp.duplicates not in MODES:
        raise InputError(f"duplicates must be {' or '.join(MODES)}, got {exp.duplicates!r}", source)
    _listed(share_held, exp.relevance, source)
    if exp.ties not in TIE_POLICIES:
        raise InputError(f"ties must be {' or '.join(TIE_POLICIES)}, got {exp.ties!r}", source)
    check_backend(exp.backend, exp.quantize, source, exp.precision)
    for key, values in (("k", exp.k), ("chunk_sizes", exp.chunk_sizes), ("rrf_k", (exp.rrf_k,))):
        if any(abs(v) > MAX_INT for v in values):
            raise InputError(f"{key} must be at most {MAX_INT}, got {max(values, key=abs)}", source)
    if exp.rrf_k < 0:
        raise InputError(f"rrf_k must be 0 or more, got {exp.rrf_k}", source)
