"""Late chunking (`late`, docs/design_space.md "Late chunking"): each chunk's vector read from its document, not
from its own text. The model runs once per window of the document (at most `size` of its own tokens, its [CLS]
and [SEP] included); a chunk's vector is the mean of the window's token embeddings whose characters overlap the
chunk's span, together with the tokens the model adds around every text (its [CLS] and [SEP], and a document
prompt where the model has one), normalised as the model's own pooling is. So a chunk that is a whole window is
pooled exactly as it is today: the same mean over the same tokens.

Windows (`place`): `width` = `size` less the tokens added around a text. A grid of windows starts at the document's
first token and steps by half a width; every window begins and ends at a word's edge (the tokenizer's words), so
that its own text reads as the same tokens, and holds at most `width` tokens. A chunk (widened to its words' edges)
is read in the window that holds it whole with the most context on its shorter side (the earlier on a tie); a chunk
no grid window holds whole gets a window of its own, centred on it. So no chunk of at most `width` tokens is cut.
A chunk longer than a window is read in windows of its own that cover it end to end (consecutive, word-aligned,
each at most `width` tokens, no context outside it): its vector is the mean over all of their pooled tokens,
each window's added tokens included.

The cache key of a chunk is what determines its vector: the window's text (prompt included) and the chunk's span
in it (each window's, for a long chunk), so a second run embeds nothing and loads no model.

Runs on local transformer models that pool by the mean (all-MiniLM-L6-v2 is one) on every backend (torch through
sentence-transformers' Transformer module; onnx and openvino through the exported graph, whose output is the last
hidden state); a served model, a static model, a model that pools otherwise, or a window past the model's
position limit is refused in one line before any work.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from chunkeval.engine.embedding import static
from chunkeval.engine.embedding.cache import text_hash
from chunkeval.engine.embedding.registry import resolve_model
from chunkeval.engine.embedding.served import is_spec, lookup
from chunkeval.errors import InputError
from chunkeval.vocabulary import NO_LATE, not_one_of

_WINDOW = re.compile(r"window:size=(\d+)")
MIN_SIZE = 8  # a window's tokens at the least: its [CLS] and [SEP] and a few of the document's


def parse_late(text: str, source: str | None = None) -> int | None:
    """The window size of a `late` setting: None for `none`, N for `window:size=N`."""
    if text == NO_LATE:
        return None
    found = _WINDOW.fullmatch(str(text).strip())
    if found is None:
        raise InputError(
            not_one_of("late", text, (NO_LATE, "window"), "none or window:size=N (tokens of a window)"), source
        )
    size = int(found.group(1))
    if size < MIN_SIZE:
        raise InputError(f"late window:size must be at least {MIN_SIZE} tokens, got {size}", source)
    return size


def position_limit(folder: Path) -> int:
    """The most tokens the model can read at once: its position embeddings (config.json), 512 if unsaid."""
    try:
        value = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("max_position_embeddings")
    except (OSError, ValueError, AttributeError):
        value = None
    return value if isinstance(value, int) and value > 0 else 512


def refusal(model: str, folder: Path | None, size: int) -> str | None:
    """Why `model` cannot read chunks late in windows of `size` tokens (None where it can). `folder` is None for a
    served model."""
    if folder is None:
        return f"late: {model} is a served model, whose endpoint returns one vector per text, not token embeddings"
    try:
        modules = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
        kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules]
        pooling = json.loads((folder / modules[1]["path"] / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, AttributeError, TypeError, KeyError, IndexError):
        kinds, pooling = [], {}
    if kinds[:2] != ["Transformer", "Pooling"] or any(k not in ("Normalize",) for k in kinds[2:]):
        return f"late: {model} is not a transformer followed by its pooling ({' → '.join(kinds) or 'no modules.json'})"
    modes = [k[len("pooling_mode_") :] for k, v in pooling.items() if k.startswith("pooling_mode_") and v]
    if modes != ["mean_tokens"]:
        return f"late: {model} pools by {', '.join(modes) or 'nothing'}; late chunking needs mean pooling"
    if not (folder / "tokenizer.json").is_file():
        return f"late: {model} has no tokenizer.json, whose offsets place chunks in a window"
    limit = position_limit(folder)
    if size > limit:
        return f"late: window:size={size} exceeds {model}'s position limit ({limit} tokens)"
    return None


def check_late(exp, source: str | None = None) -> None:
    """An experiment's `late` values: each parses, listed once; every model that embeds chunks can read them
    late in the largest window asked for (one line naming the first that cannot)."""
    if not exp.late:
        raise InputError("an experiment needs at least one late (none: each chunk embedded from its own text)", source)
    sizes = [parse_late(text, source) for text in exp.late]
    twice = sorted({text for text in exp.late if exp.late.count(text) > 1})
    if twice:
        raise InputError(f"late {', '.join(map(repr, twice))} listed twice", source)
    if NO_LATE not in exp.late and tuple(exp.context) != (NO_LATE,):  # `none` of both axes
        raise InputError("late other than none is crossed with context none only; add none to late", source)
    size = max((n for n in sizes if n is not None), default=None)
    if size is None or not exp.needs_model():
        return
    refused = late_refusals(exp)
    for model in dict.fromkeys(exp.embedding_rerankers()):  # a reranker reads its vectors as the grid's models do
        if model in refused:
            raise InputError(refused[model], source)
    if refused and all(model in refused for model in exp.model):  # nothing left to read late
        raise InputError(refused[exp.model[0]], source)


def late_refusals(exp) -> dict[str, str]:
    """Each model of the grid that cannot read chunks late in the largest window asked for, with why (a static
    model, one that pools otherwise, a window past its limit). The grid leaves out the late configurations of these
    models, said in one notice (`late_notice`), where another model takes them; none where late is `none` alone."""
    sizes = [n for n in (parse_late(text) for text in exp.late) if n is not None]
    if not sizes:
        return {}
    out = {}
    for model in dict.fromkeys(exp.model + tuple(exp.embedding_rerankers())):
        served = lookup(model, exp.models) is not None or is_spec(model)
        if static.is_buildable(model):  # known without building it
            out[model] = f"late: {model} is a static model, whose words have no embeddings in context"
            continue
        why = refusal(model, None if served else resolve_model(model), max(sizes))
        if why:
            out[model] = why
    return out


def tokenizer_of(folder: Path):
    """The model's own tokenizer (tokenizer.json), with no padding or truncation of its own."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


# --------------------------------------------------------------------------- where windows go


def _down(bounds: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The largest word edge at or before each of `at`."""
    return bounds[np.searchsorted(bounds, at, "right") - 1]


def _up(bounds: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The smallest word edge at or after each of `at`."""
    return bounds[np.minimum(np.searchsorted(bounds, at, "left"), len(bounds) - 1)]


def _grid(bounds: np.ndarray, n: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """The grid of windows [lo, hi) over n tokens: word-aligned, at most `width` tokens, stepping half a width."""
    los, his, lo = [], [], 0
    stride = max(width // 2, 1)
    while True:
        hi = int(_down(bounds, np.array([lo + width]))[0])
        cut = hi <= lo  # one word longer than a window: cut inside it
        hi = min(lo + width, n) if cut else hi
        los.append(lo)
        his.append(hi)
        if hi >= n:
            break
        step = int(_down(bounds, np.array([lo + stride]))[0])
        lo = hi if cut or step <= lo else step
    return np.array(los, dtype=np.int64), np.array(his, dtype=np.int64)


def _pieces(bounds: np.ndarray, a: int, b: int, width: int) -> list[tuple[int, int]]:
    """Consecutive word-aligned windows of at most `width` tokens covering [a, b): a long chunk's own."""
    out, lo = [], a
    while lo < b:
        hi = int(_down(bounds, np.array([min(lo + width, b)]))[0])
        hi = min(lo + width, b) if hi <= lo else hi
        out.append((lo, hi))
        lo = hi
    return out or [(a, b)]


@dataclass(frozen=True)
class Placed:
    """One document's windows and where each chunk is read: `windows` (lo, hi) token ranges; per chunk, the
    windows it is pooled over (one, or a long chunk's own pieces)."""

    windows: list[tuple[int, int]]
    reads: list[list[int]]


def place(token_starts: np.ndarray, token_ends: np.ndarray, word_first: np.ndarray, starts, ends, width: int) -> Placed:
    """Windows over one document's tokens (character offsets `token_starts`/`token_ends`, `word_first` where a word
    begins) and the window(s) each chunk [starts, ends) (characters) is read in; the rule is the module's."""
    n = len(token_starts)
    starts, ends = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
    if n == 0:
        return Placed([(0, 0)], [[0] for _ in range(len(starts))])
    bounds = np.union1d(np.flatnonzero(word_first), [0, n]).astype(np.int64)
    # a chunk's tokens: those whose characters overlap its span; widened to its words' edges
    a = np.searchsorted(np.maximum.accumulate(token_ends), starts, "right")
    b = np.maximum(np.searchsorted(token_starts, ends, "left"), a)
    a, b = _down(bounds, np.minimum(a, n)), _up(bounds, b)
    los, his = _grid(bounds, n, width)
    fits = b - a <= width
    # grid windows holding a chunk whole: j0 <= j < j1 (lo and hi both grow with j); the most central one
    j0 = np.searchsorted(his, b, "left")
    j1 = np.searchsorted(los, a, "right")
    best = np.full(len(a), -1, dtype=np.int64)
    margin = np.full(len(a), -1, dtype=np.int64)
    for d in range(int(np.max(j1 - j0, initial=0))):
        j = j0 + d
        ok = j < j1
        jj = np.minimum(j, len(los) - 1)
        m = np.where(ok, np.minimum(a - los[jj], his[jj] - b), -1)
        better = ok & (m > margin)
        best, margin = np.where(better, j, best), np.where(better, m, margin)
    windows = list(zip(los.tolist(), his.tolist()))
    # a chunk no grid window holds whole: a window of its own, centred on it
    own = np.flatnonzero(fits & (best < 0))
    if len(own):
        oa, ob = a[own], b[own]
        target = np.clip(oa - (width - (ob - oa)) // 2, 0, max(n - width, 0))
        lo = _down(bounds, target)
        lo = np.where(lo + width < ob, _up(bounds, ob - width), lo)
        hi = _down(bounds, lo + width)
        index = {w: i for i, w in enumerate(windows)}
        for c, w in zip(own.tolist(), zip(lo.tolist(), hi.tolist())):
            best[c] = index.setdefault(w, len(windows))
            if best[c] == len(windows):
                windows.append(w)
    reads = [[int(w)] for w in best.tolist()]
    index = {w: i for i, w in enumerate(windows)}
    for c in np.flatnonzero(~fits).tolist():  # longer than a window: its own pieces, end to end
        pieces = _pieces(bounds, int(a[c]), int(b[c]), width)
        reads[c] = [index.setdefault(p, len(index)) for p in pieces]
        windows += [p for p in pieces if index[p] >= len(windows)]
    return Placed(windows, reads)


# --------------------------------------------------------------------------- one key per chunk


@dataclass(frozen=True)
class Plan:
    """Every chunk's reading: the distinct window texts (prompt included) and, per chunk, its cache key and the
    (window, span start, span end) items it is pooled over (spans in the window text's characters)."""

    texts: list[str]
    keys: list[str]
    items: list[list[tuple[int, int, int]]]
    tokens: int  # the tokens of the windows' texts as the model reads them (what embedding them all costs)


def plan(tokenizer, documents: list[str], spans: list[tuple[np.ndarray, np.ndarray]], size: int, prompt: str) -> Plan:
    """Where every chunk of `documents` is read (`spans`: each document's chunk starts and ends) in windows of
    `size` tokens: the rule is the module's."""
    added = len(tokenizer.encode(prompt, add_special_tokens=True).ids)  # [CLS], [SEP] and the prompt's tokens
    width = max(size - added, 1)
    encodings = tokenizer.encode_batch(list(documents), add_special_tokens=False)
    texts: dict[str, int] = {}
    keys, items = [], []
    for doc, enc, (starts, ends) in zip(documents, encodings, spans):
        offsets = np.asarray(enc.offsets, dtype=np.int64).reshape(-1, 2)
        words = np.asarray([-1 if w is None else w for w in enc.word_ids], dtype=np.int64)
        word_first = np.concatenate([[True], words[1:] != words[:-1]]) if len(words) else np.zeros(0, dtype=bool)
        placed = place(offsets[:, 0], offsets[:, 1], word_first, starts, ends, width)
        lo_char = [int(offsets[lo, 0]) if hi > lo else 0 for lo, hi in placed.windows]
        hi_char = [int(offsets[hi - 1, 1]) if hi > lo else 0 for lo, hi in placed.windows]
        at = [texts.setdefault(prompt + doc[x:y], len(texts)) for x, y in zip(lo_char, hi_char)]
        for s, e, read in zip(np.asarray(starts).tolist(), np.asarray(ends).tolist(), placed.reads):
            mine = []
            for w in read:
                lo, hi = lo_char[w], hi_char[w]
                mine.append(
                    (at[w], len(prompt) + min(max(s - lo, 0), hi - lo), len(prompt) + min(max(e - lo, 0), hi - lo))
                )
            items.append(mine)
    ordered = list(texts)
    for mine in items:
        keys.append(text_hash("\x00late\x00" + "\x00".join(f"{x}:{y}\x00{ordered[w]}" for w, x, y in mine)))
    tokens = sum(len(e.ids) for e in tokenizer.encode_batch(ordered, add_special_tokens=True)) if ordered else 0
    return Plan(ordered, keys, items, min(tokens, len(ordered) * size))


# --------------------------------------------------------------------------- running the windows and pooling


def pool(
    hidden: np.ndarray, offsets: np.ndarray, shared: np.ndarray, spans: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(sums, counts) of one window's pooling for each of `spans` (rows of [start, end) characters): the token
    embeddings `hidden` whose characters overlap a span, and every `shared` token (those added around the text)."""
    inside = (offsets[None, :, 0] < spans[:, 1:2]) & (offsets[None, :, 1] > spans[:, 0:1]) & ~shared[None, :]
    member = (inside | shared[None, :]).astype(np.float32)
    return member @ hidden, member.sum(axis=1)


def embed_windows(runner, tokenizer, texts: list[str], size: int, prompt: str, batch_size: int, items_of: dict):
    """Run the model once per window text of `texts`, pooling each window's items (`items_of`: window → list of
    (item id, start, end)) at once: yields (item ids, sums, counts, tokens) per window, longest windows first."""
    tok = tokenizer_copy(tokenizer, size)
    encodings = tok.encode_batch(texts, add_special_tokens=True)
    order = np.argsort([-len(e.ids) for e in encodings], kind="stable")
    for lo in range(0, len(order), batch_size):
        rows = order[lo : lo + batch_size].tolist()
        width = max(len(encodings[i].ids) for i in rows)
        feed = {
            n: np.zeros((len(rows), width), dtype=np.int64) for n in ("input_ids", "attention_mask", "token_type_ids")
        }
        for r, i in enumerate(rows):
            e = encodings[i]
            feed["input_ids"][r, : len(e.ids)] = e.ids
            feed["attention_mask"][r, : len(e.ids)] = 1
            feed["token_type_ids"][r, : len(e.ids)] = e.type_ids
        hidden = runner.hidden_states(feed)
        for r, i in enumerate(rows):
            e = encodings[i]
            offsets = np.asarray(e.offsets, dtype=np.int64).reshape(-1, 2)
            shared = np.asarray(e.special_tokens_mask, dtype=bool) | (offsets[:, 1] <= len(prompt)) & (len(prompt) > 0)
            ids, spans = zip(*[(item, (s, t)) for item, s, t in items_of[i]])
            sums, counts = pool(hidden[r, : len(e.ids)], offsets, shared, np.asarray(spans, dtype=np.int64))
            yield list(ids), sums, counts, len(e.ids)


def tokenizer_copy(tokenizer, size: int):
    """The tokenizer truncating at `size` tokens (a window's text reads as at most that many)."""
    from tokenizers import Tokenizer

    copy = Tokenizer.from_str(tokenizer.to_str())
    copy.enable_truncation(size)
    return copy


def vectors_of(runner, tokenizer, late: Plan, wanted: list[int], size: int, prompt: str, batch_size: int):
    """(vectors, tokens run) of the chunks `wanted` (indices into the plan): their windows run once each, their pooled sums
    added over their items, divided by their tokens and L2-normalised (as the model's Normalize module does,
    and as every vector chunkeval embeds is)."""
    items_of: dict[int, list] = {}
    for n, c in enumerate(wanted):
        for w, s, e in late.items[c]:
            items_of.setdefault(w, []).append((n, s, e))
    windows = sorted(items_of)
    local = {w: i for i, w in enumerate(windows)}
    items_local = {local[w]: v for w, v in items_of.items()}
    sums = counts = None
    tokens = 0
    for ids, s, c, n in embed_windows(
        runner, tokenizer, [late.texts[w] for w in windows], size, prompt, batch_size, items_local
    ):
        if sums is None:
            sums, counts = np.zeros((len(wanted), s.shape[1]), dtype=np.float64), np.zeros(len(wanted))
        np.add.at(sums, ids, s)
        np.add.at(counts, ids, c)
        tokens += n
    if sums is None:
        return np.zeros((0, 0), dtype=np.float32), 0
    means = sums / np.maximum(counts, 1e-9)[:, None]
    means /= np.maximum(np.linalg.norm(means, axis=1, keepdims=True), 1e-12)
    return means.astype(np.float32), tokens
