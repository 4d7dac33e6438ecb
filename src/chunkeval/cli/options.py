"""Options that more than one command takes, each declared once here, and what turns their values into
the library's: the experiment settings of `run` and `sweep`, `--experiment`, `--run`, `--metric`,
`--alpha`, `--config`, `--threshold`, `--json`, the run-file options of `compare` and `evaluate-run`.

The checks of values that the Python API and the warehouse take too live beside what they check, in
the layer below: metric names in `chunkeval.stats.aggregate`, alpha and the regression threshold in
`chunkeval.analysis.comparisons`, k in `chunkeval.engine.experiment`, the batch size in the embedding.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from chunkeval.engine.experiment import Experiment, parse_ints, split_flags
from chunkeval.errors import InputError
from chunkeval.vocabulary import CONFIG_KEYS, GOLD_FORMATS, NUMBER_KEYS

# --------------------------------------------------------------------------- experiment settings


def add_experiment_flags(p: argparse.ArgumentParser) -> None:
    """An experiment file and the flags that override its settings (`run`, `sweep`), then how to embed."""
    p.add_argument(
        "experiment_file",
        nargs="?",
        metavar="experiment.yaml",
        help="an experiment file; flags given as well override its settings",
    )
    g = p.add_argument_group("experiment settings")
    _add_input_and_chunking_flags(g)
    _add_retrieval_and_scoring_flags(g)
    p.add_argument(
        "--plugin",
        action="append",
        metavar="MODULE",
        help="let the experiment file (or the recorded run) run module:function chunkers and retrievers of MODULE, "
        "as if it listed MODULE under plugins: (repeatable); plug-ins named by flags need none",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        help="texts per embedding batch (default 16 on a CPU; on a GPU, what a quarter of its free memory holds; "
        "1024 for a static model such as minilm-static)",
    )
    p.add_argument(
        "--device",
        default="auto",
        help="where to embed: auto (a GPU when torch sees one, else the CPU), cpu, cuda or cuda:N",
    )


def _add_input_and_chunking_flags(g) -> None:
    g.add_argument(
        "--corpus-dir",
        help="corpus folder: .md, .txt, .html, .pdf and .jsonl files and subfolders of them (default: the demo corpora; "
        "docs/formats.md)",
    )
    add_html(g)
    g.add_argument(
        "--questions", help="span gold set: CSV with question, references, corpus_id (default: the demo questions)"
    )
    g.add_argument(
        "--beir",
        metavar="DIR",
        help="document gold from a BEIR folder: corpus.jsonl, queries.jsonl, qrels/<split>.tsv (docs/formats.md)",
    )
    g.add_argument("--split", help="the qrels of --beir: qrels/<split>.tsv (default test)")
    g.add_argument("--queries", help="document gold: a JSONL file of queries (_id, text), judged by --qrels")
    g.add_argument(
        "--qrels", help="document gold for --corpus-dir: BEIR's TSV (query-id, corpus-id, score) or TREC qrels"
    )
    add_strict(g)
    add_corpus_filter(g, "only these corpora (default: every corpus in the folder)")
    g.add_argument(
        "--slice-by",
        metavar="COLUMNS",
        help="comma-separated gold-set columns whose values make slices (type,tags): extra columns of the questions "
        "CSV (tags: a JSON list) or fields of the queries file (or its metadata); every summary gains per-slice rows",
    )
    g.add_argument(
        "--chunker",
        help="comma-separated chunkers: fixed_token, fixed_char, recursive_token, none (the whole document), cluster_semantic, "
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


def _add_retrieval_and_scoring_flags(g) -> None:
    g.add_argument(
        "--model",
        help="comma-separated embedding models: all-MiniLM-L6-v2 (default, bundled), minilm-static "
        "(built locally on first use), local sentence-transformers folders, served models "
        "openai:MODEL[@BASE_URL] (an OpenAI-compatible /embeddings endpoint), or names of the experiment "
        "file's models: mapping",
    )
    g.add_argument("--retriever", help="comma-separated retrievers: dense (default), bm25, hybrid, or module:function")
    g.add_argument(
        "--index",
        help="comma-separated indexes the dense half of dense and hybrid searches: exact (default), "
        "hnsw[:m=16][:ef_construction=200][:ef_search=64], ivf:nlist=1024[:nprobe=16][:pq_m=48], "
        "chroma[:url=http://HOST:PORT][:m=…][:ef_search=…] (docs/indexes.md)",
    )
    g.add_argument(
        "--reranker",
        help="comma-separated rerankers of the first stage's top --candidates: none (default), an embedding model "
        "(as --model takes them), or a local sentence-transformers CrossEncoder folder",
    )
    g.add_argument(
        "--candidates", help="comma-separated numbers of first-stage chunks a reranker re-scores (at least each k)"
    )
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
        "--relevance",
        help="which chunks are relevant to span gold: overlap (a character of a reference; the default), coverage:F "
        "(a share F of some reference) or contains (a whole reference); set and rank metrics follow it (docs/metrics.md)",
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


# the settings among the experiment flags (not --batch-size or --device): giving one defines an experiment
SETTING_FLAGS = (
    "corpus_dir",
    "questions",
    "beir",
    "split",
    "queries",
    "qrels",
    "strict",
    "html",
    "corpus",
    "slice_by",
    "chunker",
    "chunk_sizes",
    "overlaps",
    "k",
    "model",
    "retriever",
    "index",
    "reranker",
    "candidates",
    "rrf_k",
    "own_corpus",
    "skip_empty_gold",
    "duplicates",
    "relevance",
    "backend",
    "quantize",
    "precision",
)


def gives_settings(args: argparse.Namespace) -> bool:
    """Whether any experiment setting was given on the command line."""
    return any(getattr(args, f) not in (None, [], ()) for f in SETTING_FLAGS)


def experiment_inputs(args: argparse.Namespace, exp: Experiment) -> list[str]:
    """The files and folders a command of this experiment reads (its file, corpus folders, gold files, local
    model folders): no output may replace them (`chunkeval.files.check_output`)."""
    found = [getattr(args, "experiment_file", None)]
    for key in ("corpus_dir", "questions", "beir", "queries", "qrels"):
        value = getattr(exp, key)
        found += [value] if isinstance(value, str) else list(value)
    found += [m for m in (*exp.model, *exp.reranker) if isinstance(m, str) and Path(m).is_dir()]
    return [f for f in found if f]


def experiment_from_args(
    args: argparse.Namespace, default: Experiment | None = None, name: str | None = None
) -> Experiment:
    """The experiment of the file given (else `default`, else the built-in one) changed by the flags given."""
    from chunkeval.engine.embedding import check_batch_size, check_device

    check_batch_size(args.batch_size)
    check_device(args.device)
    allow = tuple(args.plugin or ())
    exp = Experiment.from_yaml(Path(args.experiment_file), allow) if args.experiment_file else (default or Experiment())
    return exp.with_overrides(
        name=name,
        corpus_dir=args.corpus_dir,
        questions=args.questions,
        beir=args.beir,
        split=args.split,
        queries=args.queries,
        qrels=args.qrels,
        strict=args.strict,
        html=args.html,
        corpus=tuple(split_flags(args.corpus)),
        slice_by=tuple(split_flags(args.slice_by)),
        chunker=tuple(split_flags(args.chunker)),
        chunk_sizes=parse_ints(args.chunk_sizes, "--chunk-sizes"),
        overlaps=tuple(split_flags(args.overlaps)),
        k=parse_ints(args.k, "--k"),
        model=tuple(split_flags(args.model)),
        retriever=tuple(split_flags(args.retriever)),
        index=tuple(split_flags(args.index)),
        reranker=tuple(split_flags(args.reranker)),
        candidates=parse_ints(args.candidates, "--candidates"),
        rrf_k=args.rrf_k,
        own_corpus=args.own_corpus,
        skip_empty_gold=args.skip_empty_gold,
        duplicates=args.duplicates,
        relevance=args.relevance,
        backend=args.backend,
        quantize=args.quantize,
        precision=args.precision,
    ).checked_for_device(args.device)


def add_strict(p) -> None:
    """`--strict`: an unreadable document (and a qrels row naming an unknown query or document) is an error."""
    p.add_argument(
        "--strict",
        action="store_true",
        default=None,
        help="an unreadable document (a PDF without text, a damaged file, text not UTF-8) is an error, and so is a qrels "
        "row naming an unknown query or document (default: left out, with a warning, and counted)",
    )


def add_html(p) -> None:
    """`--html full|main`: what text an HTML document gives (docs/formats.md)."""
    p.add_argument(
        "--html",
        choices=("full", "main"),
        help="the text of HTML documents: full (every visible text of <body>; the default) or main (the main content "
        "as trafilatura finds it: navigation, headers and footers dropped); span offsets refer to that text",
    )


def add_corpus_filter(p, help: str) -> None:
    p.add_argument("--corpus", action="extend", nargs="+", metavar="ID", help=help)


# --------------------------------------------------------------------------- what a command reads


def add_experiment(
    p: argparse.ArgumentParser, help: str | None = None, *, required: bool = False, dest: str = "experiment"
) -> None:
    p.add_argument("--experiment", metavar="NAME", required=required, dest=dest, help=help)


def add_run(p: argparse.ArgumentParser, help: str | None = None, *, required: bool = False, many: bool = False) -> None:
    """`--run ID`, of a run recorded in the warehouse (given twice where `many`)."""
    p.add_argument("--run", action="append" if many else "store", metavar="ID", required=required, help=help)


def add_metric(p: argparse.ArgumentParser, help: str) -> None:
    """`--metric NAME`, which the command checks with `chunkeval.stats.aggregate.check_metric`."""
    p.add_argument("--metric", required=True, help=help)


def add_alpha(p: argparse.ArgumentParser) -> None:
    """`--alpha`, which the command checks with `chunkeval.analysis.comparisons.check_alpha`."""
    p.add_argument("--alpha", type=float, default=0.05, help="significance level after Holm (default 0.05)")


def add_threshold(p: argparse.ArgumentParser, help: str) -> None:
    """`--threshold`, which the command checks with `chunkeval.analysis.comparisons.check_threshold`."""
    p.add_argument("--threshold", type=float, default=0.02, help=help)


def add_config(p: argparse.ArgumentParser, help: str) -> None:
    """`--config KEY=VALUE`, repeatable; `config_filter` reads it."""
    p.add_argument("--config", action="append", metavar="KEY=VALUE", help=help)


def config_filter(values: list[str] | None) -> dict:
    """The configuration settings of `--config` (key=value pairs, comma-separated or repeated)."""
    out = {}
    for item in split_flags(values):
        key, sep, value = item.partition("=")
        if not sep:
            raise InputError(f"--config takes key=value pairs ({', '.join(CONFIG_KEYS)}), got {item!r}")
        key = key.strip()
        if key not in CONFIG_KEYS:
            raise InputError(f"--config keys are {', '.join(CONFIG_KEYS)}; got {key!r}")
        number = key in NUMBER_KEYS and value.strip() not in ("", "none", "null")  # candidates=none: no reranker
        out[key] = (
            parse_ints(value, f"--config {key}")[0] if number else (None if key in NUMBER_KEYS else value.strip())
        )
    return out


def add_json(p: argparse.ArgumentParser, help: str) -> None:
    p.add_argument("--json", action="store_true", help=help)


def add_run_file_options(p: argparse.ArgumentParser, format_help: str, k_help: str) -> None:
    """`--format` and `--k` of ranked-list files (`--k` is checked with `chunkeval.engine.experiment.check_k`)."""
    p.add_argument("--format", default="auto", choices=list(GOLD_FORMATS), help=format_help)
    p.add_argument("--k", type=int, default=10, help=k_help)


def check_at_least_one(value: int | None, flag: str) -> int | None:
    """A count given on the command line (--last, --chunk-size): at least 1 where given."""
    if value is not None and value < 1:
        raise InputError(f"{flag} must be at least 1, got {value}")
    return value
