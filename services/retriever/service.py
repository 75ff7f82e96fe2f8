"""The retriever worker: consumes regs.retrieve.requests, replies with RetrieveResult."""
from __future__ import annotations

import asyncio
import logging

from services.retriever.search import Searcher, SearchError
from shared.bus import BadRequest
from shared.config import Settings
from shared.embeddings import get_embedder
from shared.messages import Envelope, RetrieveRequest, RetrieveResult
from shared.streams import RETRIEVE
from shared.worker import PostgresPool, ServiceDefinition

log = logging.getLogger(__name__)
_postgres = PostgresPool()


async def setup(settings: Settings):
    pool = await _postgres.open(settings, max_size=10)
    if settings.embedding_threads == 0:
        # one thread per query embedding: a one-sentence query gains little from a second one, and the other core
        # serves the full-text and dense searches PostgreSQL runs at the same time (85k: 20.6 -> 17.6 ms p50)
        settings = settings.model_copy(update={"embedding_threads": 1})
    embedder = await asyncio.to_thread(get_embedder, settings)
    searcher = Searcher(pool, settings, embedder)
    try:
        await searcher.catalog()  # before consuming: the first request should not pay for loading it
    except SearchError as exc:
        log.error("%s", exc)  # every search will answer with this error; the process stays up to say so

    async def handle(kind: str, request: RetrieveRequest, envelope: Envelope) -> RetrieveResult:
        try:
            return await searcher.search(request)
        except SearchError as exc:
            raise BadRequest(str(exc)) from exc

    return handle


SERVICE = ServiceDefinition("retriever", RETRIEVE, setup, _postgres.ready, _postgres.close)
