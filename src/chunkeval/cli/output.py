"""How commands print what is not a table: JSON documents, times and missing numbers."""

from __future__ import annotations

import json
import math
import sys


def print_json(doc, **options) -> None:
    """`doc` as indented JSON on stdout, ended by a newline."""
    json.dump(doc, sys.stdout, indent=2, **options)
    print()


def print_json_rows(rows: list[dict]) -> None:
    """A JSON list of flat row objects on stdout, one row per line (each by the C encoder: `json.dump` with an
    indent encodes in Python, a second for 10,000 runs)."""
    body = ",\n  ".join(json.dumps(r) for r in rows)
    sys.stdout.write(f"[\n  {body}\n]\n" if rows else "[]\n")


def clean(value):
    """NaN as JSON's null."""
    return None if isinstance(value, float) and math.isnan(value) else value


def iso(value) -> str | None:
    """A UTC time of the warehouse as ISO 8601 to the second."""
    return None if value is None else value.isoformat(timespec="seconds") + "Z"
