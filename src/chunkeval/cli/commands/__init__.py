"""One module per command, each with its options right beside its handler. A command module has:

- `add_parser(sub)`: adds the command's parser (and its subcommands) to the subparsers `sub`, with its line of
  `chunkeval --help` from `summary(name)`, sets `func` to the handler and returns the parser;
- handlers `(args, warehouse) -> int`, the exit status; `warehouse` is a
  `chunkeval.cli.session.WarehouseAccess`, what every opening of the warehouse goes through;
- `WAREHOUSE_SESSION`: whether the command holds one warehouse connection throughout (`chunkeval.cli.session`).

`COMMANDS` names them in the order `chunkeval --help` shows them, each with its line of help. This
module imports none of them: a command line imports the module of the command it names and no other
(`chunkeval.cli.main.build_parser`), so that `chunkeval --help` and `chunkeval runs` do not pay for the engine that
`chunkeval run` needs (docs/performance.md, "Commands").
"""

from __future__ import annotations

import importlib
from types import ModuleType

COMMANDS: dict[str, str] = {  # name → its line of --help; its module is chunkeval.cli.commands.<name, - as _>
    "run": "run an experiment as a Prefect flow, record it in the warehouse, print its summary",
    "runs": "list the recorded runs, newest first (`runs delete`, `runs prune` remove them)",
    "trend": "a metric per completed run and configuration, oldest first, with the change",
    "report": "the macro/micro table of a run, or its HTML page",
    "inspect": "one question of a run: its references in context and what each configuration retrieved",
    "diff": "what changed between two runs: questions better, worse or unchanged, and what they retrieved",
    "baseline": "pin a completed run as the baseline that regressions are measured against",
    "compare": "paired significance tests between configurations, runs or run files",
    "gold": "`gold check`: what in a gold set makes its numbers unfair; `gold update`: correct it for a changed corpus; `gold generate`: a gold set from your documents, asked of a chat model; `gold judge`: graded relevance of a run's passages, asked of a chat model",
    "traces": "production traffic: import retrieval traces, sample them as questions, compare production with a grid",
    "extract": "write the text chunkeval chunks, one file per document (to write span gold against)",
    "sql": "run one read-only SQL query over the warehouse and print its rows",
    "warehouse": "look after the warehouse: `warehouse repair` rebuilds a damaged catalogue, `warehouse snapshot` copies it to explore",
    "serve": "serve every deployment of chunkeval's deployments file (or --prefect-file) from this process",
    "alerts": "alarms: `alerts test` sends a test message to each destination of an experiment and says what answered",
    "backends": "what backend auto chose for each model on this machine (--reprobe: probe again and keep the new choice)",
    "sweep": "score a grid of chunking settings and k on a span gold set or document qrels, write the results",
    "evaluate-run": "score a run file of a retriever that runs elsewhere against a gold set",
}


def summary(name: str) -> str:
    """The command's line of `chunkeval --help`."""
    return COMMANDS[name]


def command_module(name: str) -> ModuleType:
    """The module of the command `name`, imported now."""
    return importlib.import_module(f"chunkeval.cli.commands.{name.replace('-', '_')}")


def command_modules() -> list[ModuleType]:
    """Every command's module, in the order of `chunkeval --help` (what a test or the docs read of all of them)."""
    return [command_module(name) for name in COMMANDS]
