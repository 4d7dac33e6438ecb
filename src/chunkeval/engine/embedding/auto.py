"""`backend: auto`: the fastest lossless backend installed here, chosen once per model and machine, and kept.

A probe embeds `PROBE_TEXTS` fixed passages of the bundled demo corpus with torch fp32 (the reference)
and with every other installed backend in fp32 (onnx, openvino), each model loaded and warmed up first,
best of `REPEATS` timings. A backend is lossless here when every one of its vectors keeps a cosine of at
least `MIN_COSINE` to torch's and no component differs by more than `MAX_ABS`. Of the lossless backends
the fastest is chosen; another than torch only when it is at least `MARGIN` × torch (less is within the
noise of a shared machine).

The choice is kept (a small JSON file under `$CHUNKEVAL_HOME/backends/auto/`, keyed by the model's fingerprint
and the CPU's model string: nothing else) and every later run reads it: installing or removing a package, or a
second probe that would time things otherwise, never changes it. It is made again only when asked
(`chunkeval backends --reprobe`), when its backend is no longer installed, or when the kept record does not hold
(each field checked: `kept`), each with one line saying so. Lossless backends compute interchangeable vectors,
so the choice changes no fingerprint and embeds nothing again (`chunkeval.engine.embedding.registry`).
`CHUNKEVAL_AUTO_BACKEND` pins the choice on a machine without a probe (the test suite pins torch, so that its
numbers never depend on how busy the machine was when it probed). Lossy settings (`quantize: int8`,
`precision: bf16 | fp16`) are never chosen here: with one of them, `auto` means torch (precision) or is refused
(int8 needs a backend named). Those rules, and the choice for several models at once, are the backend's one
decision (`chunkeval.engine.embedding.resolution.choose_backend`), which asks this module for a model's choice."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import logging
import os
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from chunkeval import progress
from chunkeval.engine.embedding.backends import (
    _NEEDS,
    GraphRunner,
    TorchRunner,
    check_folder_runs_on,
    ensure_export,
    package_version,
)
from chunkeval.errors import InputError
from chunkeval.files import write_text
from chunkeval.limits import json_loads, record_text, short
from chunkeval.paths import DEMO_DIR, backends_dir

AUTO = "auto"
CANDIDATES = ("onnx", "openvino")  # torch is the reference, always installed
PROBE_TEXTS = 64
PROBE_WORDS = 120  # words a probe passage (about 160 word pieces: the size of a typical chunk)
REPEATS = 2
SETTLE = 1.0  # seconds between two timings of the probe (`_timed`)
MIN_COSINE = 0.99999  # per vector, to torch fp32's
MAX_ABS = 1e-4  # per component, to torch fp32's (measured: 1.9e-7 onnx, 2.8e-7 openvino; docs/backends.md)
PIN = "CHUNKEVAL_AUTO_BACKEND"  # an environment variable that pins what auto means on a machine (docs/backends.md)
MARGIN = 1.10  # another backend than torch is chosen when at least this many times torch's speed
VERSION = 3  # bump when the probe changes, so that kept choices are probed again (3: kept per model and machine)
_PACKAGES = ("torch", "sentence-transformers", "onnxruntime", "onnx", "openvino")
log = logging.getLogger("chunkeval")
probes_run = 0  # probes this process ran (not read from the cache): tests count them


@dataclass(frozen=True)
class Choice:
    """What `auto` chose for a model: its backend, the line that says why, and the probe's figures."""

    backend: str
    line: str
    texts_per_s: dict = field(default_factory=dict)  # backend → texts per second on the probe
    agreement: dict = field(default_factory=dict)  # backend → {"min_cosine", "max_abs"} to torch fp32
    skipped: dict = field(default_factory=dict)  # backend → why it was not chosen
    lossless: tuple = ("torch",)  # the backends whose vectors agreed with torch fp32's
    cached: bool = False


def probe_texts() -> list[str]:
    """`PROBE_TEXTS` passages of `PROBE_WORDS` words, windows spread evenly over the demo corpus's words."""
    words = []
    for path in sorted((DEMO_DIR / "corpora").glob("*.md")):
        words += [w for line in path.read_text(encoding="utf-8").splitlines() if not line.startswith("#")
                  for w in line.split()]  # fmt: skip
    step = max(1, (len(words) - PROBE_WORDS) // (PROBE_TEXTS - 1))
    return [" ".join(words[i * step : i * step + PROBE_WORDS]) for i in range(PROBE_TEXTS)]


def cpu_model() -> str:
    """The CPU's model string (`/proc/cpuinfo`), else what the platform says."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.lower().startswith("model name"):
                return f"{line.split(':', 1)[1].strip()} ×{os.cpu_count()}"
    except OSError:
        pass
    return f"{platform.processor() or platform.machine()} ×{os.cpu_count()}"


def cache_path(model_fingerprint: str) -> Path:
    """Where the choice for this model on this machine is kept: keyed by the model and the CPU, nothing else (no
    package version: a package installed or removed never changes a kept choice silently)."""
    key = [VERSION, model_fingerprint, cpu_model()]
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
    return backends_dir() / AUTO / f"{model_fingerprint[:16]}-{digest[:16]}.json"


def installed(backend: str) -> str | None:
    """Why `backend` cannot run here (its packages missing), or None."""
    missing = [p for p in _NEEDS.get(backend, ()) if importlib.util.find_spec(p) is None]
    return f"not installed (needs {', '.join(missing)}: pip install 'chunkeval[backends]')" if missing else None


def agreement(vectors: np.ndarray, reference: np.ndarray) -> dict:
    """The worst cosine of a vector to its reference, and the largest difference of a component."""
    cos = np.sum(vectors * reference, axis=1) / np.maximum(
        np.linalg.norm(vectors, axis=1) * np.linalg.norm(reference, axis=1), 1e-12
    )
    return {"min_cosine": float(cos.min()), "max_abs": float(np.abs(vectors - reference).max())}


def lossless(agreed: dict) -> bool:
    return agreed["min_cosine"] >= MIN_COSINE and agreed["max_abs"] <= MAX_ABS


def _timed(runners: dict, texts: list[str], batch_size: int) -> tuple[dict, dict]:
    """Each runner's vectors of `texts`, and its best texts per second of `REPEATS` rounds after a warm-up.
    The rounds take the runners in turn, so that a machine busy with other work slows each alike; each timing
    starts `SETTLE` s after the last, once the thread pools of the runner before (torch's OpenMP, onnxruntime's,
    OpenVINO's) have stopped spinning: in one process they would otherwise take the cores of the next."""
    for runner in runners.values():
        runner.encode(texts[:batch_size], "", batch_size, False)
    vectors, best = {}, dict.fromkeys(runners, 0.0)
    for _ in range(REPEATS):
        for name, runner in runners.items():
            time.sleep(SETTLE)
            start = time.perf_counter()
            vectors[name] = runner.encode(texts, "", batch_size, False)
            best[name] = max(best[name], len(texts) / max(time.perf_counter() - start, 1e-9))
    return vectors, best


PROBING = "probing backends"  # the progress step of a probe


def probe(
    model: str, folder: Path, model_fingerprint: str, candidates=tuple((b, "none") for b in CANDIDATES)
) -> Choice:
    """Run the probe: torch fp32 and each (backend, quantize) of `candidates`; the fastest lossless one."""
    global probes_run
    probes_run += 1
    if not log.isEnabledFor(logging.INFO):  # the model's own loading bar only with -v
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    runners = {"torch": TorchRunner(folder, "cpu")}  # a model torch cannot load is the run's to report, in its words
    progress.notice("backend auto: probing torch, onnx and openvino on %d texts of %s (once per model and machine)",
                    PROBE_TEXTS, model)  # fmt: skip
    skipped = {}
    steps = len(candidates) + 1  # each candidate made ready (exported where it is not yet), then all of them timed
    progress.step(PROBING, 0, steps)  # off a terminal, a line at least every 10 s while it lasts
    for done, (backend, quantize) in enumerate(candidates, start=1):
        name = backend if quantize == "none" else f"{backend} {quantize}"
        why = installed(backend)
        if why is None:
            try:
                check_folder_runs_on(folder, backend)
                export = ensure_export(model, folder, model_fingerprint, backend, quantize)
                runners[name] = GraphRunner(folder, export, backend)
            except (InputError, OSError, RuntimeError, ValueError, ImportError) as exc:
                why = f"cannot run this model ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
        if why is not None:
            skipped[name] = why
        progress.step(PROBING, done, steps)
    vectors, speeds = _timed(runners, probe_texts(), 16)
    progress.step(PROBING, steps, steps)
    agreed = {name: agreement(vectors[name], vectors["torch"]) for name in runners if name != "torch"}
    for name, a in agreed.items():
        if not lossless(a):
            skipped[name] = (
                f"vectors differ from torch fp32's (worst cosine {a['min_cosine']:.6f}, largest "
                f"difference {a['max_abs']:.1e}; the bar is {MIN_COSINE} and {MAX_ABS:g})"
            )
    good = tuple(b for b in speeds if b not in skipped)
    fastest = fastest_lossless(good, [speeds])
    return Choice(
        fastest, _line(fastest, speeds, agreed), speeds, agreed, {**skipped, **_slower(good, fastest, speeds)}, good
    )


def fastest_lossless(lossless: tuple, speeds: list[dict]) -> str:
    """The lossless backend that embeds the probes of every model soonest; torch unless another is `MARGIN` × faster."""
    seconds = {b: sum(1 / s[b] for s in speeds) for b in lossless}
    best = min(seconds, key=seconds.get)
    return best if seconds["torch"] >= MARGIN * seconds[best] else "torch"


def _slower(lossless: tuple, chosen: str, speeds: dict) -> dict:
    """Why each other lossless backend was not chosen."""

    def why(b: str) -> str:
        ratio = speeds[b] / speeds["torch"]
        return f"{ratio:.2f}× torch" + (
            f", under the {MARGIN:.2f}× worth a new fingerprint" if chosen == "torch" and ratio > 1 else ""
        )

    return {b: why(b) for b in lossless if b not in (chosen, "torch")}


def _line(backend: str, speeds: dict, agreed: dict) -> str:
    if backend == "torch":
        return f"backend auto: torch ({speeds['torch']:.1f} texts/s on {PROBE_TEXTS} probe texts, the fastest here)"
    return (
        f"backend auto: {backend} ({speeds[backend] / speeds['torch']:.2f}× torch on {PROBE_TEXTS} probe texts, "
        f"cosine to torch fp32 ≥ {agreed[backend]['min_cosine']:.6f})"
    )


_RECORDED = ("backend", "line", "texts_per_s", "agreement", "skipped", "lossless")
MAX_RECORD_BYTES = 1 << 16  # a kept choice is a few hundred bytes


def _finite_positive(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < float("inf")


def check_record(data) -> Choice:
    """The kept choice a record holds, each field checked against the others (a record is trusted state, made
    by a probe: a damaged or forged one is re-made, never obeyed); `ValueError` naming what does not hold."""
    if not isinstance(data, dict) or not all(k in data for k in _RECORDED):
        raise ValueError("it lacks fields")
    backend, lossless_, speeds, agreed = data["backend"], data["lossless"], data["texts_per_s"], data["agreement"]
    if backend not in ("torch", *CANDIDATES):
        raise ValueError(f"backend {short(backend)} is no backend")
    if not isinstance(lossless_, list) or not lossless_ or not set(lossless_) <= {"torch", *CANDIDATES}:
        raise ValueError("its lossless backends are not a list of backends")
    if "torch" not in lossless_ or backend not in lossless_:
        raise ValueError(f"its backend {backend} is not among its lossless ones")
    if not isinstance(speeds, dict) or not all(_finite_positive(speeds.get(b)) for b in lossless_):
        raise ValueError("its texts per second are not positive numbers")
    if not isinstance(agreed, dict):
        raise ValueError("its agreement is not a mapping")
    for b in lossless_:
        a = agreed.get(b) if b != "torch" else {"min_cosine": 1.0, "max_abs": 0.0}
        if not isinstance(a, dict) or not all(isinstance(a.get(k), (int, float)) for k in ("min_cosine", "max_abs")):
            raise ValueError(f"its agreement of {b} to torch is missing")
        if not lossless(a):
            raise ValueError(f"{b} is called lossless with a cosine of {a['min_cosine']:g} to torch")
    if speeds[backend] < speeds["torch"]:
        raise ValueError(f"{backend} is slower than torch")
    if not isinstance(data["line"], str) or not isinstance(data["skipped"], dict):
        raise ValueError("its line or skipped backends are not text")
    return Choice(backend, data["line"], speeds, agreed, data["skipped"], tuple(lossless_), cached=True)


def kept(model_fingerprint: str) -> tuple[Choice | None, str]:
    """(the choice kept for this model on this machine, "") or (None, why there is none to use: "" where none was
    made, else why the record does not hold). Only a regular file is read (a FIFO would block)."""
    path = cache_path(model_fingerprint)
    try:
        text = record_text(path, MAX_RECORD_BYTES)  # never waits on a FIFO, never reads past the bound
    except FileNotFoundError:
        return None, ""
    except OSError as exc:
        return None, f"{path} is {exc.strerror}"
    try:
        data = json_loads(text)
        if isinstance(data, dict) and (data.get("model_fingerprint"), data.get("cpu")) != (
            model_fingerprint,
            cpu_model(),
        ):
            raise ValueError("it is another model's or another machine's")
        return check_record(data), ""
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return None, f"the kept choice does not hold ({str(exc)[:120] or type(exc).__name__})"


def choose(model: str, folder: Path, model_fingerprint: str, reprobe: bool = False) -> Choice:
    """The choice kept for this model on this machine; a probe's (then kept) where none is kept, where asked
    (`reprobe`), where the kept one's backend is no longer installed, or where its record does not hold."""
    choice, damaged = (None, "") if reprobe else kept(model_fingerprint)
    if choice is not None:
        gone = installed(choice.backend) if choice.backend != "torch" else None
        if gone is None:
            return choice
        progress.notice("backend auto: %s, kept for %s on this machine, is %s: probing again", choice.backend,
                        model, gone)  # fmt: skip
    elif damaged:
        progress.notice("backend auto: %s (%s): probing again", damaged, model)
    with progress.stage("probing backends"):  # a first run's own stage (exports included), not its checks'
        choice = probe(model, folder, model_fingerprint)
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    if load and load[0] > (os.cpu_count() or 1):  # other work shared the cores: the figures may not hold
        busy = f" [probed while the machine was busy: load {load[0]:.1f} on {os.cpu_count()} cores]"
        choice = dataclasses.replace(choice, line=choice.line + busy)
    record = {k: getattr(choice, k) for k in _RECORDED}
    record.update(model=model, model_fingerprint=model_fingerprint, cpu=cpu_model(), probed_at=time.time())
    record["versions"] = {p: package_version(p) for p in _PACKAGES}
    record["load_average"] = load
    record["tolerance"] = {"min_cosine": MIN_COSINE, "max_abs": MAX_ABS, "margin": MARGIN}
    path = cache_path(model_fingerprint)
    if path.is_symlink() or (path.exists() and not path.is_file() and not path.is_dir()):
        path.unlink()  # a link or a FIFO where the record goes: replaced, never followed or opened
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(record, indent=1, sort_keys=True) + "\n")
    return choice


def lossy_here(model_fingerprint: str, backend: str) -> bool:
    """Whether this machine's probe found `backend`'s fp32 vectors of the model unlike torch's (then they key
    vectors of their own: `registry.embedder_fingerprint`). A backend never probed here is lossless by its
    export's recipe (measured: docs/backends.md); nothing is probed to answer (a poll must not)."""
    choice, _ = kept(model_fingerprint)
    return choice is not None and backend in choice.agreement and backend not in choice.lossless


def on_gpu(device: str | None) -> bool:
    """Whether torch would run on a GPU for `device` (`auto`/None: where torch sees one)."""
    if device not in (None, "auto"):
        return device.startswith("cuda")
    if platform.system() == "Linux" and not any(Path("/dev").glob("nvidia[0-9]*")):
        return False  # no NVIDIA device node: no CUDA, and no 1.4 s import of torch to learn it
    # here, not at the top: torch only where a GPU may be
    import torch

    return torch.cuda.is_available()
