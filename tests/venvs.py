"""A test server's own venv (infinity-emb, MLflow, Phoenix: each pins what the project cannot), built once per
machine: in place (a venv holds its own path), under a lock beside it so that two test workers build it once, and
removed first where a build was left half done."""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def built_once(final: Path, ready: Callable[[], T | None], build: Callable[[Path], None]) -> T:
    """What `ready` finds in the venv at `final` (None while it is not complete), after `build(python)` made it
    where it found nothing: `build` installs into the fresh venv and marks it complete last."""
    if (found := ready()) is not None:
        return found
    final.parent.mkdir(parents=True, exist_ok=True)
    with open(final.parent / f".{final.name}.lock", "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (found := ready()) is None:
            shutil.rmtree(final, ignore_errors=True)  # half-built (no mark) or another version: built again
            subprocess.run([sys.executable, "-m", "venv", str(final)], check=True)
            build(final / "bin" / "python")
            found = ready()
    if found is None:
        raise RuntimeError(f"the venv at {final} was built but is not complete")
    return found
