"""Text from data made harmless where it is shown: on a terminal, and as a field of a line-based file.

A name, a question or a model's answer can hold control characters: `ESC ] 0 ; … BEL` retitles a terminal,
`ESC [ 2 J` clears it, a carriage return overwrites what a line said, a line break forges a line of output, a
tab a column of a TSV file. `visible` is the one function every printed name passes: each such character is
written as its escape (`\\x1b`, `\\n`, `\\u202e`), so the text is shown, never obeyed. `visible_lines` is the
same for a whole output (what the `chunkeval` command writes to stdout and stderr), keeping its own line
breaks and tabs. (Files whose separators cannot be escaped, TSV and TREC runs, refuse a value holding one:
`chunkeval.files.field`.)
"""

from __future__ import annotations

import re

# C0 and C1 controls and DEL; the line and paragraph separators; the bidirectional overrides and isolates,
# which reorder what a terminal or an editor shows (CVE-2021-42574, "Trojan Source")
_OTHERS = "\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069"
_CONTROL = re.compile(f"[\x00-\x1f{_OTHERS}]")
_CONTROL_BUT_LINES = re.compile(f"[\x00-\x08\x0b\x0c\x0e-\x1f{_OTHERS}]")  # tab, \n and \r kept


def _escape(match: re.Match) -> str:
    char = match.group()
    code = ord(char)
    if char in "\n\r\t":
        return repr(char)[1:-1]
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text) -> str:
    """`text` (any value, as `str`) with every control character written as its escape: one line, nothing a
    terminal obeys. What every name, question or answer that chunkeval prints passes through."""
    return _CONTROL.sub(_escape, str(text))


def visible_lines(text: str) -> str:
    """`visible`, but keeping line breaks (`\\n`), carriage returns (a progress bar's redraw) and tabs: what the
    command's whole output passes through, as a net under the names already shown with `visible`."""
    return _CONTROL_BUT_LINES.sub(_escape, text)


TERMINAL_WIDTH = 120  # what the default summary fits: the width prose is folded to


def fold(text: str, width: int = TERMINAL_WIDTH, indent: str = "  ") -> str:
    """A line of prose within `width` columns: its words (a path, an id or a label is never cut, nor a label from
    its `[config_id]`, nor `a − b`) go on on lines indented by `indent` more than its own indent."""
    import textwrap

    lead = text[: len(text) - len(text.lstrip(" "))]
    glued = text.lstrip(" ").replace(" [", "\0[").replace(" − ", "\0−\0")  # a label and its [id] stay together
    return textwrap.fill(
        glued,
        width,
        initial_indent=lead,
        subsequent_indent=lead + indent,
        break_long_words=False,
        break_on_hyphens=False,
    ).replace("\0", " ")
