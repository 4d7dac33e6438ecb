"""Shim: the flow lives in the package, `chunkeval.flows.trend_report` (deployments name it by module)."""

from chunkeval.flows.trend_report import trend_report  # noqa: F401
