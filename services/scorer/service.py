"""The scorer service's logic: ``Scorer(settings)`` with ``pre`` and ``post``.

The gates are pure functions (``services.scorer.gates``); this class holds the thresholds taken from the
settings, the embedding cache for claim support and the answer reader, and runs the CPU work off the event loop.
"""
from __future__ import annotations

import asyncio
import logging

from shared import metrics
from shared.config import Settings
from shared.messages import Confidence, PostGateRequest, PostGateResult, PreGateRequest, PreGateResult, RetrieveResult

from services.scorer.confidence import ScorerThresholds, compute_confidence
from services.scorer.gates import post_gate, pre_gate
from services.scorer.reader import AnswerReader, shared_reader
from services.scorer.support import CorpusStats
from shared.embeddings import EmbeddingCache

log = logging.getLogger(__name__)


class Scorer:
    def __init__(self, settings: Settings, thresholds: ScorerThresholds | None = None, *,
                 corpus_titles: list[int] | None = None, embedder=None, corpus_stats: CorpusStats | None = None,
                 reader: AnswerReader | None = None):
        self.settings = settings
        self.thresholds = thresholds or ScorerThresholds.from_settings(settings)
        self.corpus_titles = corpus_titles
        self.corpus_stats = corpus_stats
        self._embedder = embedder
        self._cache: EmbeddingCache | None = None
        self._reader = reader

    def answer_reader(self) -> AnswerReader | None:
        """The answer reader the pre-gate asks last (``REGS_ANSWER_READER``), loaded on first use."""
        if not self.settings.answer_reader:
            return None
        if self._reader is None:
            self._reader = shared_reader()
        return self._reader

    def _support_cache(self) -> EmbeddingCache:
        if self._cache is None:
            if self._embedder is None:
                from shared.embeddings import get_embedder

                self._embedder = get_embedder(self.settings)
            self._cache = EmbeddingCache(self._embedder)
        return self._cache

    # synchronous forms, for the eval harness and tests ------------------------------------------------
    def pre_sync(self, req: PreGateRequest) -> PreGateResult:
        result = pre_gate(req.question, req.retrieval, self.thresholds, corpus_titles=self.corpus_titles,
                          corpus_stats=self.corpus_stats, reader=self.answer_reader())
        if "answer_probability" in result.signals:
            metrics.ANSWER_READER_PROBABILITY.observe(result.signals["answer_probability"])
        if "strict_answer_probability" in result.signals:
            metrics.STRICT_READER_PROBABILITY.observe(result.signals["strict_answer_probability"])
        return result

    def post_sync(self, req: PostGateRequest) -> PostGateResult:
        return post_gate(req, self.thresholds, self._support_cache(), corpus_stats=self.corpus_stats)

    # the service API ----------------------------------------------------------------------------------
    async def pre(self, req: PreGateRequest) -> PreGateResult:
        return await asyncio.to_thread(self.pre_sync, req)

    async def post(self, req: PostGateRequest) -> PostGateResult:
        return await asyncio.to_thread(self.post_sync, req)

    def refusal_confidence(self, retrieval: RetrieveResult, pre: PreGateResult) -> Confidence:
        """Confidence for an answer refused before generation: coverage 0; tier not_found for not_found."""
        not_found = pre.refusal is not None and pre.refusal.reason == "not_found"
        return compute_confidence([h.similarity for h in retrieval.hits], 0.0, self.thresholds,
                                  not_found=not_found, signals=pre.signals)


async def load_corpus_stats(pool) -> CorpusStats:
    """Document frequencies of the active sections' content stems (heading + text), for IDF-weighted coverage."""
    from shared import db

    rows = await pool.fetch(f"SELECT s.cfr_ref, s.heading, s.text FROM sections s WHERE {db.active_rows('s')}")
    texts = [f"{r['heading'] or ''}\n{r['text'] or ''}" for r in rows]
    return await asyncio.to_thread(CorpusStats.from_texts, texts, [r["cfr_ref"] for r in rows])
