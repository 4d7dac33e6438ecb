"""Embedding backends: who runs the model's transformer.

- `torch`: sentence-transformers, as the model's authors ship it (the reference; `auto`, the default, is
  the fastest backend whose vectors equal its own: `chunkeval.engine.embedding.auto`).
- `onnx`: the transformer exported once to ONNX (`torch.onnx.export` of its eager attention, opset 17,
  dynamic batch and sequence axes), its operators fused by onnxruntime's transformer optimizer
  (attention, embedding + layer norm, bias + GELU, skip + layer norm) and run by onnxruntime.
- `openvino`: the same exported graph before fusion (plain ONNX operators) read by OpenVINO, saved as
  its IR and run on the CPU in f32.

With `quantize: int8` the exported weights are quantised: onnxruntime's dynamic quantisation (int8
weights per output channel, activations quantised per batch at run time) for `onnx`, NNCF's data-free
int8 weight compression for `openvino`. int8 changes the vectors; docs/backends.md has what it costs.

Exports are built offline from the installed model, once, into `$CHUNKEVAL_HOME/backends/
<model fingerprint>/<backend>-<quantize>/` (a folder built whole or not at all, see `chunkeval.engine.embedding.static`),
never inside the model's own folder (whose content is the model's fingerprint). The ONNX and OpenVINO
backends tokenise with the model's own `tokenizer.json` (the `tokenizers` library), truncate where the
model does (`max_seq_length`), and pool and normalise in numpy exactly as the model's Pooling and
Normalize modules do. The vectors of a backend are cached under their own fingerprint
(`Embedder.fingerprint`): a hash of the model's fingerprint, the backend, the quantisation, the
sequence limit and the exported files, so vectors of different backends never mix.

Static models (no transformer, e.g. `minilm-static`) have nothing to export: every backend runs them
as they are, under the model's own fingerprint.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import math
import os
from pathlib import Path

import numpy as np

from chunkeval.engine.embedding.built import RECORD, build_folder
from chunkeval.engine.embedding.precision import check_precision
from chunkeval.engine.settings.plugins import ExtensionPoint, resolve
from chunkeval.errors import InputError
from chunkeval.files import hash_folder
from chunkeval.paths import backends_dir
from chunkeval.vocabulary import not_one_of

BACKENDS = ("torch", "onnx", "openvino")
CHOICES = ("auto", *BACKENDS)  # auto: the fastest lossless one installed here (chunkeval.engine.embedding.auto)
# built-ins only: a new backend is a runner here, chosen in `load_runner` (docs/architecture.md, "Where to add")
BACKEND = ExtensionPoint("backend", dict.fromkeys(CHOICES))
QUANTIZE = ("none", "int8")
_NEEDS = {"onnx": ("onnxruntime", "onnx"), "openvino": ("openvino", "onnx")}
_NEEDS_INT8 = {"onnx": (), "openvino": ("nncf",)}
RECIPE = 2  # bump when an export changes, so that old exports are rebuilt (2: eager attention, fused for onnxruntime)
GRAPH = "graph.onnx"  # the exported graph in plain ONNX operators (what OpenVINO reads); model.onnx is it fused
SEAL = "export.sha256"  # the hash of an export's files, written last: a file changed in place is caught
log = logging.getLogger("chunkeval")
_POOLING = ("mean", "cls")


def check_backend(backend: str, quantize: str = "none", source: str | None = None, precision: str = "fp32") -> None:
    """One line for a backend, quantisation or precision that cannot run here (unknown, not together, or
    their packages missing)."""
    resolve(BACKEND, backend, source)
    if backend == "auto":
        if quantize != "none":
            raise InputError(
                f"quantize: {quantize} needs backend onnx or openvino named (backend auto chooses lossless "
                "backends only)",
                source,
            )
        return check_precision(precision, backend, quantize, source)
    if quantize not in QUANTIZE:
        raise InputError(not_one_of("quantize", quantize, QUANTIZE), source)
    if quantize == "int8" and backend == "torch":
        raise InputError(
            "quantize: int8 needs backend onnx or openvino (the torch backend runs the model as shipped)", source
        )
    check_precision(precision, backend, quantize, source)
    needs = _NEEDS.get(backend, ()) + (_NEEDS_INT8.get(backend, ()) if quantize == "int8" else ())
    missing = [p for p in needs if importlib.util.find_spec(p) is None]
    if missing:
        raise InputError(
            f"backend {backend}{' int8' if quantize == 'int8' else ''} needs {', '.join(missing)}: "
            f"pip install 'chunkeval[backends]'",
            source,
        )


def check_folder_runs_on(folder: Path, backend: str, source: str | None = None) -> None:
    """One line, before any work, for a model folder an exported backend cannot run (its modules, pooling or
    tokenizer file)."""
    if backend != "torch" and is_transformer(folder):
        _modules(folder)
        if not (folder / "tokenizer.json").is_file():
            raise InputError(
                f"backend {backend} reads the model's tokenizer.json, which {folder} lacks (use backend torch)", source
            )


def is_transformer(folder: Path) -> bool:
    """Whether a sentence-transformers folder starts with a Transformer module (a static model does not)."""
    try:
        modules = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return (folder / "config.json").is_file()
    return bool(modules) and str(modules[0].get("type", "")).endswith("models.Transformer")


def _modules(folder: Path) -> tuple[str, bool]:
    """(pooling, normalize) of a Transformer → Pooling [→ Normalize] folder; anything else is an error."""
    try:
        modules = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
        kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules]
    except (OSError, ValueError, AttributeError, TypeError):
        raise InputError(
            f"backends onnx and openvino run sentence-transformers folders (a readable modules.json); "
            f"{folder} has none (use backend torch)"
        ) from None
    if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
        raise InputError(
            f"backends onnx and openvino run Transformer → Pooling → Normalize models; {folder} has "
            f"{' → '.join(kinds)} (use backend torch)"
        )
    try:
        config = json.loads((folder / modules[1]["path"] / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError, TypeError):
        config = {}
    modes = [
        m
        for m in ("cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens", "weightedmean_tokens", "lasttoken")
        if config.get(f"pooling_mode_{m}")
    ]
    pooling = {"cls_token": "cls", "mean_tokens": "mean"}.get(modes[0]) if len(modes) == 1 else None
    if pooling is None:
        raise InputError(
            f"backends onnx and openvino pool by mean or cls token; {folder} pools by "
            f"{', '.join(modes) or 'nothing'} (use backend torch)"
        )
    return pooling, len(kinds) == 3


def max_seq_length(folder: Path) -> int:
    """The model's input limit in word pieces (sentence_bert_config.json, else its position embeddings)."""
    for name, key in (("sentence_bert_config.json", "max_seq_length"), ("config.json", "max_position_embeddings")):
        try:
            value = json.loads((folder / name).read_text(encoding="utf-8")).get(key)
        except (OSError, ValueError):
            continue
        if isinstance(value, int) and value > 0:
            return value
    return 512


# --------------------------------------------------------------------------- exports


def export_dir(model_fingerprint: str, backend: str, quantize: str) -> Path:
    return backends_dir() / model_fingerprint[:32] / f"{backend}-{quantize}"


def ensure_export(model: str, folder: Path, model_fingerprint: str, backend: str, quantize: str) -> Path:
    """The folder of the model's export for `backend` and `quantize`, built once (offline, from `folder`)."""

    def onnx_fp32() -> Path:  # openvino and int8 start from the fp32 ONNX graph: made (and checked) only to build them
        return ensure_export(model, folder, model_fingerprint, "onnx", "none")

    record = {
        "recipe": RECIPE,
        "model_fingerprint": model_fingerprint,
        "backend": backend,
        "quantize": quantize,
        "max_seq_length": max_seq_length(folder),
    }
    if backend == "onnx" and quantize == "none":
        build = lambda tmp: _export_onnx(folder, tmp)  # noqa: E731
    elif backend == "onnx":
        build = lambda tmp: _quantize_onnx(onnx_fp32() / "model.onnx", tmp)  # noqa: E731
    else:
        build = lambda tmp: _export_openvino(onnx_fp32() / GRAPH, tmp, quantize)  # noqa: E731
    what = f"{backend}{' int8' if quantize == 'int8' else ''}"
    final = export_dir(model_fingerprint, backend, quantize)

    def build_and_seal(tmp: Path) -> None:
        _quietly(build, tmp)
        (tmp / SEAL).write_text(export_hash(tmp) + "\n", encoding="utf-8")

    built = build_folder(final, record, build_and_seal, f"exporting {model} for backend {what}")
    if _sealed(built):
        return built
    # a file changed since the export was written (same size, other bytes): never used, built again
    log.warning("export %s does not match its seal (a damaged file); exporting again", built)
    (built / SEAL).unlink(missing_ok=True)
    return build_folder(final, record, build_and_seal, f"exporting {model} for backend {what}")


def _sealed(folder: Path) -> bool:
    try:
        return (folder / SEAL).read_text(encoding="utf-8").strip() == export_hash(folder)
    except OSError:
        return False


def _quietly(build, folder: Path) -> None:
    """An export without the exporters' chatter (tracer warnings, advice, progress tables)."""
    import logging
    import warnings

    loggers = [logging.getLogger(n) for n in ("", "nncf", "onnxruntime")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            build(folder)
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _export_onnx(folder: Path, out: Path) -> None:
    """The transformer as ONNX: `graph.onnx` as exported, `model.onnx` fused for onnxruntime.

    The export traces the eager attention (explicit matmul, mask and softmax) rather than the fused
    scaled-dot-product kernel that transformers picks by default: onnxruntime's optimizer recognises
    that pattern and replaces it with its own Attention operator, and OpenVINO runs it faster too."""
    import torch
    from onnxruntime.transformers.optimizer import optimize_model
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(folder), device="cpu", model_kwargs={"attn_implementation": "eager"})
    transformer = st[0].auto_model.eval()
    batch = st.tokenize(["an export needs an example batch", "of two texts"])
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in batch]

    class LastHiddenState(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, *inputs):
            return self.model(**dict(zip(names, inputs))).last_hidden_state

    with torch.inference_mode():
        torch.onnx.export(
            LastHiddenState(transformer),
            tuple(batch[n] for n in names),
            str(out / GRAPH),
            input_names=names,
            output_names=["last_hidden_state"],
            opset_version=17,
            dynamo=False,
            dynamic_axes={
                **{n: {0: "batch", 1: "sequence"} for n in names},
                "last_hidden_state": {0: "batch", 1: "sequence"},
            },
        )
    config = transformer.config
    # model_type "bert" covers the BERT family's graph patterns; what it does not recognise stays as exported
    fused = optimize_model(
        str(out / GRAPH),
        model_type="bert",
        num_heads=config.num_attention_heads,
        hidden_size=config.hidden_size,
        opt_level=1,
    )
    fused.save_model_to_file(str(out / "model.onnx"))
    # a fusion must not change what the graph computes: checked on a padded batch, else the plain graph serves
    probe = st.tokenize(["a short text", "a longer text, so that the first one is padded: " * 8])
    feed = {n: probe[n].numpy() for n in names}
    plain, quick = (_session(out / name).run(None, feed)[0] for name in (GRAPH, "model.onnx"))
    mask = feed["attention_mask"][:, :, None].astype(bool)
    if not np.allclose(np.where(mask, plain, 0), np.where(mask, quick, 0), atol=1e-4):
        log.warning("onnxruntime's fusion changed %s's outputs; running its graph unfused", folder)
        (out / "model.onnx").write_bytes((out / GRAPH).read_bytes())


def _session(path: Path):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _quantize_onnx(source: Path, out: Path) -> None:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # the fused operators carry no shape information for the quantiser: their outputs are float
    quantize_dynamic(
        str(source),
        str(out / "model.onnx"),
        per_channel=True,
        weight_type=QuantType.QInt8,
        extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
    )


def _export_openvino(source: Path, out: Path, quantize: str) -> None:
    import openvino as ov

    model = ov.Core().read_model(str(source))  # the ONNX front end: no converter (and no telemetry) involved
    if quantize == "int8":
        os.environ.setdefault("NNCF_CI", "1")  # NNCF reports usage unless told it runs in CI
        import nncf

        model = nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT8_ASYM)
    ov.save_model(model, str(out / "model.xml"), compress_to_fp16=False)


def export_hash(folder: Path) -> str:
    """SHA-256 over an export's files (not its record or seal)."""
    return hash_folder(folder, frozenset({RECORD, SEAL}))


_EXPORTERS = ("torch", "onnx", "onnxruntime", "openvino", "nncf")  # the packages an export is made and run with


def backend_fingerprint(model_fingerprint: str, folder: Path, backend: str, quantize: str) -> str:
    """The fingerprint that keys the vectors of a model run by an exported backend whose vectors are its own (int8
    weights, or fp32 where this machine's probe found them unlike torch's: `registry.embedder_fingerprint`): the
    model's own for a static model, which every backend runs as it is; else a hash of the model's, the backend,
    the quantisation, the sequence limit, the export recipe and the versions of the packages that make and run
    the export. What an export is made from, not its files: knowing it exports nothing (a poll never does)."""
    if backend == "torch" or not is_transformer(folder):
        return model_fingerprint
    versions = {p: package_version(p) for p in _EXPORTERS}
    key = [model_fingerprint, backend, quantize, max_seq_length(folder), RECIPE, versions]
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


def package_version(package: str) -> str | None:
    """An installed package's version, None where it is not installed."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


# --------------------------------------------------------------------------- running the model


_AUTOCAST = {"bf16": "bfloat16", "fp16": "float16"}


class TorchRunner:
    """The model through sentence-transformers (the reference every other backend is measured against);
    with `precision` bf16 or fp16, under `torch.autocast` on its device."""

    def __init__(self, folder: Path, device: str, precision: str = "fp32"):
        from sentence_transformers import SentenceTransformer

        self.st = SentenceTransformer(str(folder), device=device)
        self.device, self.precision = device, precision
        limit = self.st.max_seq_length
        self.max_seq_length = None if limit is None or math.isinf(limit) or not callable(self.st.tokenizer) else limit

    def reads(self, texts: list[str]) -> tuple[list[tuple], np.ndarray]:
        """Per text, what the model reads (its word-piece ids after truncation) and whether it was cut."""
        if self.max_seq_length is None:  # a static model reads every word
            return list(texts), np.zeros(len(texts), dtype=bool)
        limit = self.max_seq_length
        ids = self.st.tokenizer(texts, add_special_tokens=True, truncation=False, verbose=False)["input_ids"]
        truncated = np.fromiter((len(i) > limit for i in ids), dtype=bool, count=len(texts))
        # what the model reads: its first limit - 1 word pieces (then its end token) of a longer text
        return [tuple(i[: limit - 1]) if len(i) > limit else tuple(i) for i in ids], truncated

    def encode(self, texts: list[str], prompt: str, batch_size: int, show_progress: bool) -> np.ndarray:
        import contextlib

        import torch

        autocast = (
            torch.autocast(self.device.split(":")[0], dtype=getattr(torch, _AUTOCAST[self.precision]))
            if self.precision in _AUTOCAST
            else contextlib.nullcontext()
        )
        with autocast:
            vectors = self.st.encode(
                texts,
                prompt=prompt,
                batch_size=batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=show_progress,
            )
        return vectors.astype(np.float32, copy=False)  # float32 at every precision

    def hidden_states(self, feed: dict[str, np.ndarray]) -> np.ndarray:
        """The token embeddings of a padded batch (`input_ids`, `attention_mask`, `token_type_ids`), as the model's
        Transformer module gives them to its pooling: what late chunking pools (`chunkeval.engine.embedding.late`)."""
        import contextlib

        import torch

        autocast = (
            torch.autocast(self.device.split(":")[0], dtype=getattr(torch, _AUTOCAST[self.precision]))
            if self.precision in _AUTOCAST
            else contextlib.nullcontext()
        )
        names = getattr(self.st.tokenizer, "model_input_names", list(feed))
        features = {n: torch.from_numpy(v).to(self.device) for n, v in feed.items() if n in names}
        with torch.inference_mode(), autocast:
            hidden = self.st[0](features)["token_embeddings"]
        return hidden.float().cpu().numpy()


READ_WINDOW = 65536  # texts whose reading (word pieces) is found at once: `Embedder` shares and orders them by
# length, and `GraphRunner.reads` keeps them for the `encode` calls that follow


class GraphRunner:
    """An exported transformer (onnxruntime or OpenVINO) with the model's tokenizer, pooling and normalisation."""

    def __init__(self, folder: Path, export: Path, backend: str, precision: str = "fp32"):
        from tokenizers import Tokenizer

        self.pooling, self.normalize = _modules(folder)
        self.max_seq_length = max_seq_length(folder)
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(self.max_seq_length)  # tokenizer.json may carry a shorter limit of its own
        self._read: dict = {}  # text → its encoding, from the last `reads`
        if backend == "onnx":
            session = _session(export / "model.onnx")
            self.inputs = [i.name for i in session.get_inputs()]
            self._run = lambda feed: session.run(None, feed)[0]
        else:
            import openvino as ov

            hint = {"fp32": "f32", "bf16": "bf16"}[
                precision
            ]  # fp32 stays pinned to f32 (OpenVINO's own default may differ)
            compiled = ov.Core().compile_model(str(export / "model.xml"), "CPU", {"INFERENCE_PRECISION_HINT": hint})
            self.inputs = [i.any_name for i in compiled.inputs]
            request = compiled.create_infer_request()
            self._run = lambda feed: request.infer(feed)[0].copy()

    def hidden_states(self, feed: dict[str, np.ndarray]) -> np.ndarray:
        """The exported graph's output for a padded batch: the last hidden state, the token embeddings its pooling
        reads (what late chunking pools: `chunkeval.engine.embedding.late`)."""
        return np.asarray(self._run({n: feed[n] for n in self.inputs}), dtype=np.float32)

    def _tokenize(self, texts: list[str]):
        return self.tokenizer.encode_batch(texts, add_special_tokens=True)

    def reads(self, texts: list[str]) -> tuple[list[tuple], np.ndarray]:
        encodings = self._tokenize(texts)
        # `encode` of these texts (in parts, next) tokenizes none of them again; kept for a run's usual sizes only
        self._read = dict(zip(texts, encodings)) if len(texts) <= READ_WINDOW else {}
        return [tuple(e.ids) for e in encodings], np.fromiter(
            (bool(e.overflowing) for e in encodings), dtype=bool, count=len(texts)
        )

    def encode(self, texts: list[str], prompt: str, batch_size: int, show_progress: bool = False) -> np.ndarray:
        given = [prompt + t for t in texts]
        read = self._read
        fresh = iter(self._tokenize([t for t in given if t not in read]))
        encodings = [read[t] if t in read else next(fresh) for t in given]
        order = np.argsort(
            [-len(e.ids) for e in encodings], kind="stable"
        )  # like lengths share a batch: little padding
        out = np.empty((len(texts), 0), dtype=np.float32)
        for lo in range(0, len(texts), batch_size):
            rows = order[lo : lo + batch_size]
            width = max(len(encodings[i].ids) for i in rows)
            feed = {
                n: np.zeros((len(rows), width), dtype=np.int64)
                for n in ("input_ids", "attention_mask", "token_type_ids")
            }
            for r, i in enumerate(rows):
                e = encodings[i]
                feed["input_ids"][r, : len(e.ids)] = e.ids
                feed["attention_mask"][r, : len(e.ids)] = 1
                feed["token_type_ids"][r, : len(e.ids)] = e.type_ids
            hidden = np.asarray(self._run({n: feed[n] for n in self.inputs}), dtype=np.float32)
            if self.pooling == "cls":
                pooled = hidden[:, 0]
            else:
                mask = feed["attention_mask"][:, :, None].astype(np.float32)
                pooled = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
            if self.normalize:
                pooled = pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
            if out.shape[1] == 0:
                out = np.empty((len(texts), pooled.shape[1]), dtype=np.float32)
            out[rows] = pooled
        return out


def load_runner(
    model: str, folder: Path, model_fingerprint: str, backend: str, quantize: str, device: str, precision: str = "fp32"
):
    """The runner of a model folder for a backend (static models and `torch` through sentence-transformers)
    in `precision` (`chunkeval.engine.embedding.precision`; static models run in fp32 only)."""
    if backend == "torch" or not is_transformer(folder):
        return TorchRunner(folder, device, precision if is_transformer(folder) else "fp32")
    return GraphRunner(folder, ensure_export(model, folder, model_fingerprint, backend, quantize), backend, precision)
