"""Shims for old `flows/<name>.py` entrypoints; the flows live in `chunkeval.flows`."""
