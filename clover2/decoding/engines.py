"""The target's KV-cache engines by name (`clover2.decoding.cache` builds them), apart from torch so that
the command line can name them without loading it."""

ENGINES = ("eager", "static", "graphs")  # a growing cache; a preallocated one; the same, captured as CUDA graphs
