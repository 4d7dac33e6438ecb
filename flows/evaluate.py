"""Shim: the flow lives in the package, `chunkeval.flows.evaluate` (deployments name it by module)."""

from chunkeval.flows.evaluate import evaluate  # noqa: F401
