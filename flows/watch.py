"""Shim: the flow lives in the package, `chunkeval.flows.watch` (deployments name it by module)."""

from chunkeval.flows.watch import watch  # noqa: F401
