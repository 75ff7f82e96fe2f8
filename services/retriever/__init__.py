"""Retriever service: scope the question, then hybrid retrieval over the active corpus."""
