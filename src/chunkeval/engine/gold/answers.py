"""Reading what a chat model answers: the one tolerant reader of `gold generate` and `gold judge` (docs/gold.md).

A model's answer is untrusted text. It is read tolerantly where models have habits (prose before or after the
JSON, a code fence, a trailing comma, a missing bracket: repaired by `json_repair`, a library kept for exactly
this) and strictly where it gives values: a grade is a whole number from 0 to 3 and nothing else (`2.9`, `"2"`,
`true` and `2.0` are no grade), a list of questions holds objects. Reading is bounded: an answer longer than
`ANSWER_CHARS` characters, or nested deeper than `limits.JSON_DEPTH`, is unusable before any parsing. Whatever is
unusable says why in one short line (`ValueError`), which the commands count and keep.
"""

from __future__ import annotations

import json
import re

from chunkeval.limits import JSON_DEPTH, json_depth, json_loads

ANSWER_CHARS = 1 << 20  # the longest answer read, in characters (a generation's answer is a few KiB)
_FENCE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\n?(.*?)```", flags=re.S)
_FINAL = re.compile(r"final[\s_]*score\s*[:=]?\s*\**\s*(-?\d+(?:[.,]\d+)?)(?![\d.,]*\d)", flags=re.I)


def _bounded(content) -> str:
    if not isinstance(content, str):
        raise ValueError("the answer is not text")
    if len(content) > ANSWER_CHARS:
        raise ValueError(f"the answer holds {len(content):,} characters, more than the {ANSWER_CHARS:,} read")
    return content


def read_json(content: str):
    """The JSON value an answer holds: the whole answer, else its first fenced block, else the text from its first
    `{` or `[` to its last `}` or `]`, each read strictly first; else that text repaired (`json_repair`: trailing
    commas, missing brackets, single quotes). Raises ValueError where no JSON value is found."""
    text = _bounded(content).strip()
    candidates = [text]
    fenced = _FENCE.search(text)
    if fenced:
        candidates.append(fenced[1].strip())
    first = min((i for i in (text.find("{"), text.find("[")) if i >= 0), default=-1)
    last = max(text.rfind("}"), text.rfind("]"))
    if first >= 0:
        candidates.append(text[first : last + 1] if last > first else text[first:])
    for candidate in candidates:
        try:
            return json_loads(candidate)
        except (ValueError, RecursionError):
            continue
    repairable = candidates[-1] if first >= 0 or fenced else ""
    if not repairable:
        raise ValueError("no JSON in the answer")
    if json_depth(repairable) > JSON_DEPTH:
        raise ValueError(f"JSON nested deeper than {JSON_DEPTH} levels")
    import json_repair

    try:
        value = json_repair.loads(repairable)
    except (ValueError, RecursionError, TypeError, IndexError):
        value = None
    if value in (None, "") or not isinstance(value, (dict, list)):
        raise ValueError("no JSON in the answer (not even once repaired)")
    return value


def questions(content: str, asked: int) -> tuple[list[dict], int]:
    """The proposed questions of a generation's answer (a JSON `questions` list, or a list), at most `asked` of
    them, and how many more the answer held (never read further). Items that are not objects are kept as empty
    ones (rejected later as incomplete). Raises ValueError where the answer holds no list of questions."""
    data = read_json(content)
    items = data.get("questions") if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise ValueError("no list of questions in the answer")
    return [i if isinstance(i, dict) else {} for i in items[:asked]], max(0, len(items) - asked)


GRADES = (0, 1, 2, 3)


def _grade(value, said) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value not in GRADES:
        raise ValueError(f"grade {json.dumps(said)[:40]} is not a whole number from 0 to 3")
    return value


def grade(content: str) -> int:
    """The grade of a judge's answer: its last `##final score: N` (UMBRELA's form), else a JSON object's `grade`
    (or `score`), fenced or not, else a lone digit. Strict about the value: a whole number from 0 to 3
    (`final score: 2.9` is no grade, nor `{"grade": "2"}`). Raises ValueError where there is no such grade."""
    text = _bounded(content)
    marks = _FINAL.findall(text)
    if marks:
        said = marks[-1]
        if not re.fullmatch(r"-?\d+", said):
            raise ValueError(f"grade {said!r} is not a whole number from 0 to 3")
        return _grade(int(said), said)
    stripped = text.strip().strip("`").strip()
    if re.fullmatch(r"\d", stripped):
        return _grade(int(stripped), stripped)
    try:
        data = read_json(text)
    except ValueError:
        raise ValueError(f"no grade in the answer ({text.strip()[:80]!r})") from None
    if isinstance(data, dict):
        for key in ("grade", "score", "final_score", "final score"):
            if key in data:
                return _grade(data[key], data[key])
    raise ValueError(f"no grade in the answer ({text.strip()[:80]!r})")
