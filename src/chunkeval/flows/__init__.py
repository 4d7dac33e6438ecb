"""Prefect flows of chunkeval: thin wrappers, each task one library function."""
