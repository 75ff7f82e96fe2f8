"""Benchmarks: parse, embed, ingest, search and query (``regs bench ...``; see bench/README.md)."""
