"""`chunkeval backends`: what `backend: auto` chose for each model on this machine, kept since its probe; with
`--reprobe`, a new probe and choice (docs/backends.md)."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime

from chunkeval import progress
from chunkeval.cli.commands import summary
from chunkeval.cli.output import print_json
from chunkeval.cli.session import WarehouseAccess
from chunkeval.engine.embedding import auto
from chunkeval.engine.embedding.registry import is_named_model, model_fingerprint, resolve_model
from chunkeval.errors import InputError
from chunkeval.limits import short
from chunkeval.report.terminal import format_rows
from chunkeval.vocabulary import DEFAULT_MODEL, split_flags

WAREHOUSE_SESSION = False  # reads and writes the kept choices under $CHUNKEVAL_HOME/backends, never the warehouse


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "backends",
        help=summary("backends"),
        description="Show the backend `auto` chose for each model on this machine, kept since its probe: "
        "installing or removing a package never changes it. --reprobe probes the models named (--model; by "
        f"default {DEFAULT_MODEL}) again and keeps the new choice.",
    )
    p.add_argument("--model", action="append", metavar="MODEL", help="a local model (repeatable; comma-separated)")
    p.add_argument("--reprobe", action="store_true", help="probe the models again now and keep what it chooses")
    p.add_argument("--json", action="store_true", help="print the kept choices as a JSON list")
    p.set_defaults(func=run)
    return p


def _kept_records() -> list[dict]:
    """Every kept choice of this home and machine, read as `auto.kept` reads it (a record that does not hold is
    listed with why)."""
    folder = auto.backends_dir() / auto.AUTO
    out = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        except (OSError, ValueError):
            data = {}
        if data.get("cpu") != auto.cpu_model():
            continue  # another machine's (a home on a shared disk)
        fp = data.get("model_fingerprint", "")
        choice, why = auto.kept(fp) if isinstance(fp, str) and fp else (None, "unreadable")
        out.append({"model": data.get("model", "?"), "choice": choice, "why": why, "probed_at": data.get("probed_at")})
    return out


def run(args: argparse.Namespace, warehouse: WarehouseAccess) -> int:
    models = split_flags(args.model, "--model") if args.model else []
    for model in models:  # a name that is no model is bad input, whether to probe it or to show its choice
        if not is_named_model(model) and not resolve_model(model).is_dir():
            raise InputError(f"--model {short(model)} is no local model (a name chunkeval knows or a model folder)")
    if args.reprobe:
        for model in models or [DEFAULT_MODEL]:
            folder = resolve_model(model)
            with progress.show_progress():  # a bar on a terminal; off one a line at least every 10 s
                choice = auto.choose(model, folder, model_fingerprint(model), reprobe=True)
            print(f"{model}: {choice.line}")
        return 0
    rows = [r for r in _kept_records() if not models or r["model"] in models]
    if args.json:
        print_json(
            [
                {
                    "model": r["model"],
                    "backend": r["choice"].backend if r["choice"] else None,
                    "texts_per_s": r["choice"].texts_per_s if r["choice"] else None,
                    "lossless": list(r["choice"].lossless) if r["choice"] else None,
                    "probed_at": r["probed_at"],
                    "problem": r["why"] or None,
                }
                for r in rows
            ]
        )
        return 0
    if not rows:
        print("no choice kept on this machine: the first run with backend auto probes (or --reprobe)")
        return 0
    table = []
    for r in rows:
        when = datetime.fromtimestamp(r["probed_at"], UTC).strftime("%Y-%m-%d %H:%M") if r["probed_at"] else "?"
        c = r["choice"]
        speeds = ", ".join(f"{b} {s:.0f}/s" for b, s in c.texts_per_s.items()) if c else r["why"]
        table.append([r["model"], c.backend if c else "(probed again on next use)", when, speeds])
    print(format_rows(["model", "backend", "probed (UTC)", "texts per second on the probe"], table))
    print("kept until `chunkeval backends --reprobe` (or until its backend is uninstalled): docs/backends.md")
    return 0
