"""`chunkeval alerts test`: one test message to each destination an experiment's alerts name, and what each
answered (docs/loop.md, "Who is told")."""

from __future__ import annotations

import argparse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from chunkeval.cli.commands import summary
from chunkeval.cli.commands.run import named_experiment
from chunkeval.cli.options import add_experiment
from chunkeval.cli.session import WarehouseAccess
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.engine.settings.endpoints import destination
from chunkeval.errors import EXIT_FAULT, InputError
from chunkeval.publish.alerts import credentials, send, test_payload

WAREHOUSE_SESSION = False  # reads an experiment file and the user's endpoints, never the warehouse


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "alerts",
        help=summary("alerts"),
    )
    asub = p.add_subparsers(dest="alerts_command", metavar="command", required=True)
    t = asub.add_parser(
        "test",
        help="send one test message to each destination the experiment's alerts name; print what each answered",
        description="Send one test message, as the alarms are sent (the same body per kind: webhook, Slack, Teams, "
        "email), straight from this process to each destination of the experiment's alerts: entries, and print "
        "what each answered. Every destination is tried at once, each exchange within its bounds (20 s, 256 KiB: "
        "docs/limits.md). Exit 0 when every destination took it, 4 when one did not (a fault of the machine or of the "
        "destination, not of the input), 2 when a variable a destination names is not set (nothing is sent).",
    )
    t.add_argument("experiment_file", nargs="?", metavar="EXPERIMENT.yaml", help="an experiment file")
    add_experiment(t, "the experiment's name: demo, $CHUNKEVAL_HOME/experiments/NAME.yaml, or its last run's settings")
    t.set_defaults(func=test)
    return p


def test(args: argparse.Namespace, warehouse: WarehouseAccess) -> int:
    if bool(args.experiment_file) == bool(args.experiment):
        raise InputError("alerts test takes an experiment: a file (EXPERIMENT.yaml) or --experiment NAME")
    if args.experiment_file:
        exp = Experiment.from_yaml(Path(args.experiment_file))
    else:
        named = named_experiment(args.experiment, False, warehouse)
        exp = Experiment.from_dict(named.data, named.base, named.source, named.trusted)
    if not exp.alerts:
        raise InputError(f"experiment {exp.name} names no alerts: destinations (docs/loop.md, 'Who is told')")
    targets = [destination(route.to, f"experiment {exp.name}: alerts") for route in exp.alerts]  # all, or one line
    for dest in targets:
        credentials(dest)  # a variable that is not set: one line, before anything is sent
    with ThreadPoolExecutor(max_workers=len(targets)) as pool:  # at once: one slow destination holds no other back
        answers = list(pool.map(lambda d: send(d, "chunkeval.alerts.test", test_payload(exp.name, d.name)), targets))
    for dest, answer in zip(targets, answers):
        print(f"{dest.name} ({dest.kind}, {dest.shown()}): {answer}")
    return EXIT_FAULT if any(not a.startswith("delivered") for a in answers) else 0
