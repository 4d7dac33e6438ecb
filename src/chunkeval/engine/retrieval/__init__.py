"""Retrieval: from a question to a configuration's ranked chunks.

`retrievers/` (dense, bm25, hybrid and one's own), `indexes/` (how the dense half searches: exact, faiss,
Chroma), `rerank` (the second stage), `ranking` (one configuration's top k over the pooled or own corpora) and
`ties` (the policy for bit-equal scores).
"""
