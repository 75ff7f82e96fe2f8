"""Generation providers: anthropic (default), openai (any compatible endpoint), extractive (offline)."""
