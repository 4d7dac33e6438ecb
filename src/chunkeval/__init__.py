"""chunkeval: measure how well a chunking, an embedding model and a retrieval depth find the answers."""

__version__ = "0.1.0"
