"""Chunkers that return exact `[start, end)` character offsets into the corpus.

- `registry`: the chunker registry (`register_chunker`, `resolve_chunker`), `ChunkerSpec`, `Chunks`, `chunk_corpora`;
- `tokens`: the offline cl100k_base tokenizer and token offsets;
- `fixed`: fixed_token, fixed_char and recursive_token;
- `semantic`: cluster_semantic and semantic_breakpoint (they embed);
- `splitters`: third-party text splitters (lists of strings) located in the text.

Importing the package registers every built-in chunker.
"""

from chunkeval.engine.chunking import semantic  # noqa: F401 (the built-ins register themselves)
from chunkeval.engine.chunking.fixed import (
    RECURSIVE_SEPARATORS,
    fixed_char,
    fixed_token,
    recursive_token,
    window_bounds,
)
from chunkeval.engine.chunking.registry import (
    CHUNKERS,
    Chunker,
    ChunkerSpec,
    Chunks,
    chunk_corpora,
    needs_embeddings,
    register_chunker,
    resolve_chunker,
)
from chunkeval.engine.chunking.tokens import TOKENIZER, char_byte_offsets, count_tokens, get_encoding, token_offsets

__all__ = [
    "CHUNKERS",
    "RECURSIVE_SEPARATORS",
    "TOKENIZER",
    "char_byte_offsets",
    "fixed_char",
    "fixed_token",
    "recursive_token",
    "window_bounds",
    "Chunker",
    "ChunkerSpec",
    "Chunks",
    "chunk_corpora",
    "count_tokens",
    "get_encoding",
    "needs_embeddings",
    "register_chunker",
    "resolve_chunker",
    "token_offsets",
]
