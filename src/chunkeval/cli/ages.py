"""Ages on the command line (`--older-than 90d`, `--since 7d`): the CLI's parser, which the warehouse never
sees (it takes a timedelta)."""

from __future__ import annotations

import re
from datetime import timedelta

from chunkeval.errors import InputError

_DURATION = re.compile(r"^\s*(\d+)\s*(h|d|w)\s*$")


def parse_age(text: str, flag: str) -> timedelta:
    """`36h`, `7d`, `2w` as a timedelta; anything else is an error naming the flag."""
    found = _DURATION.match(str(text))
    if not found or int(found.group(1)) < 1:
        raise InputError(f"{flag} takes an age such as 36h, 7d or 2w, got {text!r}")
    n, unit = int(found.group(1)), found.group(2)
    return timedelta(hours=n) if unit == "h" else timedelta(days=n * (7 if unit == "w" else 1))
