"""The one exception a user sees: bad input, reported as one actionable line (exit status 2)."""

from __future__ import annotations


class InputError(Exception):
    """Malformed or inconsistent input. `str()` gives `file:row: what is wrong`."""

    def __init__(self, message: str, path: object | None = None, row: int | None = None):
        self.message = message
        self.path = None if path is None else str(path)
        self.row = row
        where = ""
        if self.path is not None:
            where = self.path + (f": row {row}" if row is not None else "") + ": "
        super().__init__(where + message)
