"""The scorer: evidence gates before and after generation, and the inline confidence.

- ``services.scorer.gates``: ``pre_gate`` / ``post_gate`` (pure functions)
- ``services.scorer.confidence``: ``ScorerThresholds`` (every threshold and weight) and ``compute_confidence``
- ``shared.figures`` (shared with the generator): figure and CFR-reference extraction, what a question asks for
- ``services.scorer.support``: lexical tools and claim support
- ``services.scorer.service``: ``Scorer(settings)`` with ``async pre`` / ``async post``
"""
