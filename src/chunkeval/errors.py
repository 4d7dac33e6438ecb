"""The exceptions a user sees as one actionable line: bad input (exit status 2), and faults of the machine
(a read-only volume, a full disk: exit status 1)."""

from __future__ import annotations

import errno


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


class Fault(InputError):
    """Not the input but the machine: a read-only volume, a full disk. One line too, exit status 1."""

    exit_code = 1


FAULT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS}


def as_fault(exc: OSError) -> Fault | None:
    """An OSError of the machine (no space, a read-only file system) as a `Fault` naming the file; else None."""
    if exc.errno not in FAULT_ERRNOS:
        return None
    what = "no space left on the device" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else "a read-only file system"
    return Fault(f"cannot write: {what} (nothing was half-written; free space or use a writable volume)", exc.filename)
