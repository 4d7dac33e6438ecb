"""The `chunkeval` command."""

from chunkeval.cli.main import main

__all__ = ["main"]
