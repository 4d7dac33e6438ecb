"""The version of chunkeval, recorded with every run."""

__version__ = "0.2.0"
