"""Serve every deployment of `chunkeval/deployments/prefect.yaml` (package data) from one process (no work pool needed).

The YAML file is the one description of the deployments: `prefect deploy --all` reads it too.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from prefect import serve
from prefect.events import DeploymentEventTrigger
from prefect.schedules import Cron, Interval

from chunkeval.errors import InputError
from chunkeval.limits import yaml_load
from chunkeval.paths import DEPLOYMENTS_FILE

DEFAULT_FILE = DEPLOYMENTS_FILE


def _flow(entrypoint: str):
    path, _, name = entrypoint.partition(":")
    module = path.removesuffix(".py").replace("/", ".")
    return getattr(importlib.import_module(module), name)


def _schedule(spec: dict):
    if "cron" in spec:
        return Cron(spec["cron"], timezone=spec.get("timezone", "UTC"))
    if "interval" in spec:
        return Interval(spec["interval"])
    raise InputError(f"a schedule needs cron or interval, got {spec}")


def deployments(prefect_file: Path = DEFAULT_FILE) -> list:
    """The deployments of the file, as runner deployments of this process's flows."""
    try:
        text = Path(prefect_file).read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read deployments ({exc})", prefect_file) from None
    spec = yaml_load(text, prefect_file)  # a key given twice is an error here too
    out = []
    for d in spec.get("deployments", []):
        out.append(
            _flow(d["entrypoint"]).to_deployment(
                name=d["name"],
                description=d.get("description"),
                parameters=d.get("parameters") or {},
                schedules=[_schedule(s) for s in d.get("schedules", [])] or None,
                triggers=[
                    DeploymentEventTrigger(**{k: v for k, v in t.items() if k != "type"}) for t in d.get("triggers", [])
                ]
                or None,
            )
        )
    return out


def serve_all(prefect_file: Path = DEFAULT_FILE) -> None:
    serve(*deployments(prefect_file))
