"""Where chunkeval keeps things: `$CHUNKEVAL_HOME` and its folders, and the files the package ships.

The demo data set and the deployments file are package data, read through `importlib.resources`, so that
an installed wheel finds them wherever it is run from.
"""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path

PACKAGE = Path(str(files("chunkeval")))
# the demo experiment: 16 Markdown documents in four families and 264 questions (data/demo/README.md);
# $CHUNKEVAL_DEMO_DIR names another folder of the same layout (the test suite's three-document demo, for speed)
DEMO_DIR = Path(os.environ.get("CHUNKEVAL_DEMO_DIR") or PACKAGE / "data" / "demo")
DEPLOYMENTS_FILE = PACKAGE / "deployments" / "prefect.yaml"  # chunkeval's Prefect deployments


def home() -> Path:
    """`$CHUNKEVAL_HOME`, by default `~/.chunkeval`: the embedding cache and the warehouse live there."""
    return Path(os.environ.get("CHUNKEVAL_HOME") or Path.home() / ".chunkeval").expanduser()


def backends_dir() -> Path:
    """Exports of embedding backends and `backend: auto`'s probes: `$CHUNKEVAL_BACKENDS`, by default
    `<home>/backends` (homes on one machine may share one: what it holds depends on the model and the machine)."""
    return Path(os.environ.get("CHUNKEVAL_BACKENDS") or home() / "backends").expanduser()


def cache_dir() -> Path:
    """The embedding cache: `<home>/cache/embeddings/<model fingerprint>/part-*.parquet`."""
    return home() / "cache" / "embeddings"
