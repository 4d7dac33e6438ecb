"""One module per command, each with its options right beside its handler. A command module has:

- `add_parser(sub)`: adds the command's parser (and its subcommands) to the subparsers `sub`, sets
  `func` to the handler and returns the parser;
- handlers `(args, warehouse) -> int`, the exit status; `warehouse` is a
  `chunkeval.cli.session.WarehouseAccess`, what every opening of the warehouse goes through;
- `WAREHOUSE_SESSION`: whether the command holds one warehouse connection throughout (`chunkeval.cli.session`).

COMMANDS lists them in the order `chunkeval --help` shows them.
"""

from chunkeval.cli.commands import (
    alerts,
    backends,
    baseline,
    compare,
    diff,
    evaluate_run,
    extract,
    gold,
    inspect,
    report,
    run,
    runs,
    serve,
    sql,
    sweep,
    traces,
    trend,
    warehouse,
)

COMMANDS = (
    run,
    runs,
    trend,
    report,
    inspect,
    diff,
    baseline,
    compare,
    gold,
    traces,
    extract,
    sql,
    warehouse,
    serve,
    alerts,
    backends,
    sweep,
    evaluate_run,
)
