"""The scorer worker: consumes regs.score.requests ('pre_gate' before generation, 'post_gate' after)."""
from __future__ import annotations

import asyncio
import logging
import time

from services.scorer.service import Scorer, load_corpus_stats
from shared import db
from shared.config import Settings
from shared.messages import Envelope, PostGateRequest, PreGateRequest
from shared.streams import SCORE
from shared.worker import PostgresPool, ServiceDefinition

_postgres = PostgresPool()
log = logging.getLogger(__name__)


async def setup(settings: Settings):
    pool = await _postgres.open(settings, max_size=2)
    scorer = Scorer(settings, corpus_titles=(await db.active_titles(pool)) or None,
                    corpus_stats=await load_corpus_stats(pool))
    await asyncio.to_thread(scorer._support_cache)  # load the embedder and the answer reader before traffic
    await asyncio.to_thread(scorer.answer_reader)
    refreshed = {"at": time.monotonic(), "signature": await db.active_signature(pool), "task": None}

    async def refresh_stats(signature: tuple) -> None:
        try:
            scorer.corpus_stats = await load_corpus_stats(pool)
            refreshed["signature"] = signature
        except Exception:  # noqa: BLE001 - the previous statistics keep serving; the next check retries
            log.exception("corpus statistics refresh failed")

    async def handle(kind: str, request, envelope: Envelope):
        if time.monotonic() - refreshed["at"] > 30:  # titles and word statistics follow ingests
            refreshed["at"] = time.monotonic()
            scorer.corpus_titles = (await db.active_titles(pool)) or None
            signature = await db.active_signature(pool)
            task = refreshed["task"]
            if signature != refreshed["signature"] and (task is None or task.done()):
                # recounting every section's words takes seconds on a large corpus: in the background, while the
                # previous statistics serve
                refreshed["task"] = asyncio.create_task(refresh_stats(signature), name="corpus-stats-refresh")
        if kind == "pre_gate":
            assert isinstance(request, PreGateRequest)
            result = await scorer.pre(request)
            if not result.proceed:
                result.confidence = scorer.refusal_confidence(request.retrieval, result)
            return result
        assert isinstance(request, PostGateRequest)
        return await scorer.post(request)

    return handle


SERVICE = ServiceDefinition("scorer", SCORE, setup, _postgres.ready, _postgres.close)
