"""Shim: serving lives in the package, `chunkeval.flows.serve`."""

from chunkeval.flows.serve import deployments, serve_all  # noqa: F401
