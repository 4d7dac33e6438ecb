"""Where chunkeval keeps things: `$CHUNKEVAL_HOME` and its folders, and the files the package ships.

The demo data set and the deployments file are package data, read through `importlib.resources`, so that
an installed wheel finds them wherever it is run from.
"""

from __future__ import annotations

import errno
import os
from importlib.resources import files
from pathlib import Path

from chunkeval.errors import InputError

PACKAGE = Path(str(files("chunkeval")))
# the demo experiment: 16 Markdown documents in four families and 264 questions (data/demo/README.md);
# $CHUNKEVAL_DEMO_DIR names another folder of the same layout (the test suite's three-document demo, for speed)
DEMO_DIR = Path(os.environ.get("CHUNKEVAL_DEMO_DIR") or PACKAGE / "data" / "demo")
DEPLOYMENTS_FILE = PACKAGE / "deployments" / "prefect.yaml"  # chunkeval's Prefect deployments


def home() -> Path:
    """`$CHUNKEVAL_HOME`, by default `~/.chunkeval`: the embedding cache and the warehouse live there."""
    return Path(os.environ.get("CHUNKEVAL_HOME") or Path.home() / ".chunkeval").expanduser()


# chunkeval's folders directly under the home (`chunkeval.files.OWN_FOLDERS`, and the internal errors' logs)
HOME_FOLDERS = ("warehouse", "cache", "models", "indexes", "backends", "served", "experiments", "logs")

_WHY = {
    errno.ELOOP: "a symbolic link on its way points back round to itself (a symlink loop)",
    errno.ENAMETOOLONG: "it is a path too long for this file system",
    errno.EACCES: "a folder on its way may not be entered (permission denied)",
}


def check_home(path: Path | None = None, what: str = "$CHUNKEVAL_HOME") -> Path:
    """The home (`home()`), refused in one line (bad input: the user's setting, exit 2) where the system cannot
    resolve it or the folders chunkeval makes in it: a symlink loop, a file where a folder goes, a name too long,
    a folder that may not be entered. Every command checks it before it runs (`chunkeval.cli.main`), so that no
    OSError of resolving or creating the home is an internal error later, wherever it first makes a folder."""
    path = home() if path is None else Path(path)
    for probe in (path, *(path / name for name in HOME_FOLDERS)):
        try:
            os.stat(probe)
        except FileNotFoundError:
            continue  # made when first needed: its parent is what `check_writable_dir` checks
        except OSError as exc:
            inside = "" if probe == path else f" ({probe.name})"
            raise InputError(f"{what}{inside} cannot be used: {_why(exc, probe)}", path) from None
    return path


def _why(exc: OSError, probe: Path) -> str:
    """Why `probe` cannot be resolved, said for a person; for ENOTDIR, the file that stands where a folder goes."""
    if exc.errno == errno.ENOTDIR:
        blocker = next((p for p in probe.parents if os.path.lexists(p) and not os.path.isdir(p)), probe)
        return f"{blocker} is a file, not a folder"
    return _WHY.get(exc.errno) or (exc.strerror or type(exc).__name__).lower()


def backends_dir() -> Path:
    """Exports of embedding backends and `backend: auto`'s probes: `$CHUNKEVAL_BACKENDS`, by default
    `<home>/backends` (homes on one machine may share one: what it holds depends on the model and the machine)."""
    return Path(os.environ.get("CHUNKEVAL_BACKENDS") or home() / "backends").expanduser()


def cache_dir() -> Path:
    """The embedding cache: `<home>/cache/embeddings/<model fingerprint>/part-*.parquet`."""
    return home() / "cache" / "embeddings"
