"""How the embedding model's arithmetic runs: `fp32` (the default), `bf16` or `fp16`.

- `torch`: fp32 runs the model as shipped; bf16 and fp16 run it under `torch.autocast` (matrix
  products in the lower precision, softmax and layer norms in fp32), bf16 on the CPU or a GPU, fp16 on
  a GPU only.
- `openvino`: its CPU plugin's `INFERENCE_PRECISION_HINT`, `f32` for fp32 (pinned, as before this
  setting existed) and `bf16` for bf16; fp16 needs a GPU, which chunkeval's OpenVINO does not use.
- `onnx`: fp32 only. onnxruntime's CPU kernels have no bf16 or fp16 arithmetic on x86 (its bf16
  fast-math GEMM is for ARM64 only), so a lower precision would mean a cast graph that runs slower.

Vectors are stored as float32 whatever the precision. A precision other than fp32 is part of the
fingerprint that keys the vectors (`precision_fingerprint`): vectors of different precisions never mix
in the cache, and fp32 keeps the fingerprint it had before precisions existed. int8 weights and
static models (no transformer) run in fp32 only.

Whether the hardware runs a precision fast is read from the CPU's flags (`/proc/cpuinfo`) and
torch's view of the GPU, never measured at run time: bf16 is fast on a CPU with AMX (`amx_bf16`) or
AVX-512 BF16 (`avx512_bf16`), and on a GPU that torch says supports it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from pathlib import Path

from chunkeval import progress
from chunkeval.errors import InputError
from chunkeval.paths import backends_dir
from chunkeval.vocabulary import not_one_of

PRECISIONS = ("fp32", "bf16", "fp16")
log = logging.getLogger("chunkeval")

# what docs/performance.md reports: torch autocast bf16 against fp32 on an Intel Xeon with AMX
AMX_SPEEDUP = "2.9×"


def check_precision(precision: str, backend: str, quantize: str, source: str | None = None) -> None:
    """One line for a precision that cannot run with this backend and quantisation."""
    if precision not in PRECISIONS:
        raise InputError(not_one_of("precision", precision, PRECISIONS), source)
    if precision == "fp32":
        return
    if quantize == "int8":
        raise InputError(
            f"precision {precision} with quantize: int8: int8 weights run in the export's own arithmetic, "
            f"not in {precision} (choose one: quantize none with {precision}, or int8 with precision fp32)",
            source,
        )
    if backend == "onnx":
        raise InputError(
            f"precision {precision} on backend onnx: onnxruntime's CPU kernels have no bf16 or fp16 "
            "arithmetic on x86 (use backend torch or openvino, or precision fp32)",
            source,
        )


def check_static(model: str, is_static: bool, precision: str, source: str | None = None) -> None:
    """One line for a lower precision asked of a static model (a table of vectors: no arithmetic to lower)."""
    if precision != "fp32" and is_static:
        raise InputError(
            f"precision {precision} with model {model!r}: a static model looks its vectors up, it has no "
            "transformer to run in another precision (use precision fp32)",
            source,
        )


def check_device(precision: str, backend: str, device: str) -> None:
    """One line for fp16 where no GPU runs the model (`device` is the one the run will use)."""
    if precision == "fp16" and (backend != "torch" or not device.startswith("cuda")):
        where = "the CPU" if backend == "torch" else f"backend {backend}, which runs on the CPU"
        raise InputError(
            f"precision fp16 needs a GPU (backend torch on --device cuda); this run embeds on {where} "
            "(use bf16 or fp32 there)"
        )


def precision_fingerprint(fingerprint: str, precision: str) -> str:
    """The fingerprint of vectors computed in `precision` by the model and backend of `fingerprint`:
    `fingerprint` itself for fp32 (caches written before precisions existed stay valid)."""
    if precision == "fp32":
        return fingerprint
    return hashlib.sha256(json.dumps([fingerprint, "precision", precision]).encode()).hexdigest()


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as Linux lists them (empty where /proc/cpuinfo is not to be had)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags") and ":" in line:
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def has_amx(flags: frozenset[str]) -> bool:
    return "amx_bf16" in flags and "amx_tile" in flags


def fast_bf16_cpu(flags: frozenset[str]) -> bool:
    return has_amx(flags) or "avx512_bf16" in flags


def advice(precision: str, backend: str, quantize: str, device: str, flags: frozenset[str] | None = None) -> str | None:
    """The one line a run prints about its precision on this hardware, or None.

    - fp32 where bf16 would be faster (a CPU with AMX, or a GPU): that `--precision bf16` is there,
      with what docs/performance.md reports;
    - bf16 on a CPU without AVX-512 BF16 or AMX, or on a GPU without bf16: that it will be slower."""
    flags = cpu_flags() if flags is None else flags
    gpu = device.startswith("cuda") and backend == "torch"
    if precision == "fp32":
        if quantize != "none" or backend == "onnx":
            return None
        if gpu:
            return (
                "fp32 on a GPU: --precision bf16 (or fp16) runs the model in half precision "
                "(vectors within a cosine of 0.9999 of fp32's; docs/backends.md)"
            )
        if has_amx(flags):
            return (
                f"fp32 on a CPU with AMX: --precision bf16 embedded {AMX_SPEEDUP} faster than fp32 on an AMX "
                "Xeon (docs/performance.md; vectors within a cosine of 0.9999 of fp32's)"
            )
        return None
    if precision == "bf16":
        if gpu:
            import torch

            if not torch.cuda.is_bf16_supported():
                return "precision bf16: this GPU has no bf16 arithmetic; it will run slower than fp32"
            return None
        if flags and not fast_bf16_cpu(flags):
            return (
                "precision bf16: this CPU has neither AVX-512 BF16 nor AMX; it runs bf16 in software, slower than fp32"
            )
    return None


_said: set[str] = set()


def tell(precision: str, backend: str, quantize: str, device: str) -> None:
    """Say `advice` when a model is first loaded (after every input was checked), where a person sees it without
    -v: advice on a faster precision is a notice (a healthy run on an AMX CPU or a GPU prints no WARNING:
    `progress.notice`), said once per machine and home (a mark under the kept backend choices: every run of an
    AMX machine said it again, issue 42); a precision that will run slower than fp32 is a warning, once per
    process."""
    line = advice(precision, backend, quantize, device)
    if line is None or line in _said:
        return
    _said.add(line)
    if precision != "fp32":
        log.warning(line)
        return
    mark = None
    try:
        mark = backends_dir() / f"advised-{hashlib.sha256(line.encode()).hexdigest()[:16]}"
        if mark.exists():
            return
    except (OSError, InputError):  # an unreadable home: said, as before
        mark = None
    progress.notice(line + " (said once on this machine)")
    if mark is not None:
        try:
            mark.parent.mkdir(parents=True, exist_ok=True)
            mark.write_text(line + "\n", encoding="utf-8")
        except OSError:
            pass
