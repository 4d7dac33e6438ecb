"""Shared fixtures. Tests use the real model, tokenizer, DuckDB and Prefect; nothing is mocked."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "data" / "demo"
CHROMA = (ROOT.parent / "shared" / "datasets" / "chroma_general").resolve()


@pytest.fixture(scope="session")
def chroma() -> Path:
    """The shared Chroma general evaluation data set (never copied into the repository)."""
    if not (CHROMA / "questions_df.csv").is_file():
        pytest.skip(f"the shared data set is absent: expected it at {CHROMA}")
    return CHROMA


@pytest.fixture(scope="session")
def shared_home(tmp_path_factory) -> Path:
    """One CHUNKEVAL_HOME for the session, so the embedding cache is shared between tests."""
    return tmp_path_factory.mktemp("chunkeval_home")


@pytest.fixture(autouse=True)
def _home(monkeypatch, shared_home):
    monkeypatch.setenv("CHUNKEVAL_HOME", str(shared_home))


@pytest.fixture(scope="session")
def embedder_factory(shared_home):
    from chunkeval.engine.embedding import Embedder

    def make(**kw):
        return Embedder(cache_dir=shared_home / "cache" / "embeddings", **kw)

    return make
