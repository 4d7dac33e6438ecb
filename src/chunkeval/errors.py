"""The exceptions a user sees as one actionable line, and the one table of exit statuses every command uses
(`EXIT_CODES`): bad input 2, nothing comparable 3, a fault of the machine or of the warehouse's state 4."""

from __future__ import annotations

import errno

from chunkeval.visible import visible

# every command's exit status (`chunkeval --help` and docs/exit-codes.md show this table)
EXIT_OK, EXIT_REGRESSION, EXIT_INPUT, EXIT_NOTHING_COMPARABLE, EXIT_FAULT = 0, 1, 2, 3, 4
EXIT_CODES = (
    (EXIT_OK, "success, or no regression"),
    (EXIT_REGRESSION, "a regression (trend --fail-on-regression)"),
    (EXIT_INPUT, "bad input or usage"),
    (EXIT_NOTHING_COMPARABLE, "nothing comparable: the runs share no configuration or no paired question"),
    (EXIT_FAULT, "a fault: damaged state (a results file, the catalogue), a full disk, a server that does not answer"),
)


def exit_code_table() -> str:
    """`EXIT_CODES` as the lines `chunkeval --help` ends with."""
    return "exit status:\n" + "\n".join(f"  {code}  {meaning}" for code, meaning in EXIT_CODES)


def one_line(text: str) -> str:
    """`text` with every control character written as its escape (`\\x1e`, `\\x1b`, `\\n`): what an error message
    that quotes hostile input (a file name, a CSV header, a model's answer) prints as one line that a terminal
    shows and never obeys (`chunkeval.visible.visible`)."""
    return visible(text)


class InputError(Exception):
    """Malformed or inconsistent input. `str()` gives `file:row: what is wrong`, on one line whatever the input
    it quotes holds (`one_line`)."""

    exit_code = EXIT_INPUT

    def __init__(self, message: str, path: object | None = None, row: int | None = None):
        self.message = message
        self.path = None if path is None else str(path)
        self.row = row
        where = ""
        if self.path is not None:
            where = self.path + (f": row {row}" if row is not None else "") + ": "
        super().__init__(one_line(where + message))


class NothingComparable(InputError):
    """Two runs (the newest and its baseline) that share no configuration or no paired question: no verdict
    can be given, and none is ("no regression" would be a lie). One line, exit status 3."""

    exit_code = EXIT_NOTHING_COMPARABLE


class Fault(InputError):
    """Not the input but the machine or the state it keeps: a read-only volume, a full disk, a damaged file,
    a server that does not answer. One line too, exit status 4."""

    exit_code = EXIT_FAULT


FAULT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS}


def as_fault(exc: OSError) -> Fault | None:
    """An OSError of the machine (no space, a read-only file system) as a `Fault` naming the file; else None."""
    if exc.errno not in FAULT_ERRNOS:
        return None
    what = "no space left on the device" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else "a read-only file system"
    return Fault(f"cannot write: {what} (nothing was half-written; free space or use a writable volume)", exc.filename)
