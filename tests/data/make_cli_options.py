"""What a user can type to `chunkeval`, as JSON: every command path (`chunkeval`, `chunkeval runs`,
`chunkeval runs delete`, …) with its subcommands in help order, its positionals and its options, each
option with what `--help` and the parser show of it (flags, metavar, default, choices, nargs, type,
required, action, group). Help wording is left out: it may improve; the options may not change.

    PYTHONPATH=src python tests/data/make_cli_options.py > tests/data/cli_options.json

`tests/test_cli_options.py` asserts the parser of today still gives the committed file, which was
written from the CLI as it was before it was split into command modules (commit c502078).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _value(value):
    """A default as JSON, with paths inside the installed package made independent of where it is."""
    import chunkeval

    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, list | tuple):
        return [_value(v) for v in value]
    text = str(value)
    package = str(Path(chunkeval.__file__).resolve().parent)
    return text.replace(package, "<chunkeval>") if text.startswith(package) else text


def _action(action: argparse.Action, group: str) -> dict:
    return {
        "flags": sorted(action.option_strings),
        "metavar": _value(action.metavar),
        "default": None if action.default is argparse.SUPPRESS else _value(action.default),
        "choices": _value(list(action.choices)) if action.choices is not None else None,
        "nargs": _value(action.nargs),
        "type": getattr(action.type, "__name__", None),
        "required": action.required,
        "action": type(action).__name__,
        "group": group,
    }


def describe(parser: argparse.ArgumentParser, path: str = "chunkeval") -> dict:
    """{command path: {"subcommands": [...], "positionals": [...], "options": {flag: details}}}."""
    group_of = {id(a): g.title for g in parser._action_groups for a in g._group_actions}
    entry = {"subcommands": [], "positionals": [], "options": {}}
    out = {path: entry}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            entry["subcommands"] = list(action.choices)
            entry["subcommand_required"] = action.required
            for name, child in action.choices.items():
                out.update(describe(child, f"{path} {name}"))
        elif not action.option_strings:
            entry["positionals"].append(
                {"name": action.metavar or action.dest, **_action(action, group_of[id(action)])}
            )
        else:
            entry["options"][max(action.option_strings, key=len)] = _action(action, group_of[id(action)])
    entry["options"] = dict(sorted(entry["options"].items()))
    return out


def dumps(described: dict) -> str:
    """JSON with one line per option, so that a change reads as a one-line diff."""
    one = lambda value: json.dumps(value, ensure_ascii=False)  # noqa: E731
    blocks = []
    for path, entry in described.items():
        lines = [f"  {one(key)}: {one(value)}," for key, value in entry.items() if key != "options"]
        options = [f"    {one(flag)}: {one(details)}" for flag, details in entry["options"].items()]
        lines.append('  "options": {\n' + ",\n".join(options) + "\n  }")
        blocks.append(f" {one(path)}: {{\n" + "\n".join(lines) + "\n }")
    return "{\n" + ",\n".join(blocks) + "\n}\n"


def main() -> None:
    from chunkeval.cli.main import build_parser

    sys.stdout.write(dumps(describe(build_parser())))


if __name__ == "__main__":
    main()
