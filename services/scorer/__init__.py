"""The scorer: evidence gates before and after generation, and the inline confidence.

- ``services.scorer.gates``: ``pre_gate`` / ``post_gate`` (pure functions)
- ``services.scorer.confidence``: ``ScorerThresholds`` (every threshold and weight) and ``compute_confidence``
- ``services.scorer.figures``: figure and CFR-reference extraction
- ``services.scorer.support``: lexical tools and claim support
- ``services.scorer.service``: ``Scorer(settings)`` with ``async pre`` / ``async post``
"""
