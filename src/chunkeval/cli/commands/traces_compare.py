"""`chunkeval traces compare`: production and a grid's configurations on the same judged production queries,
paired, through the one verdict; with `--race`, judged query by query until the answer is known (docs/traces.md)."""

from __future__ import annotations


def add_parser(tsub) -> None:
    return None
