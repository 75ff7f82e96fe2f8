"""The retriever worker: consumes regs.retrieve.requests, replies with RetrieveResult."""
from __future__ import annotations

import asyncio

from services.retriever.search import Searcher, SearchError
from shared import db
from shared.bus import BadRequest
from shared.config import Settings
from shared.embeddings import get_embedder
from shared.messages import Envelope, RetrieveRequest, RetrieveResult
from shared.streams import RETRIEVE
from shared.worker import ServiceDefinition

_state: dict = {}


async def setup(settings: Settings):
    await db.migrate(settings.database_url)
    pool = await db.create_pool(settings.database_url, max_size=10)
    embedder = await asyncio.to_thread(get_embedder, settings)
    searcher = Searcher(pool, settings, embedder)
    _state.update(pool=pool, searcher=searcher)

    async def handle(kind: str, request: RetrieveRequest, envelope: Envelope) -> RetrieveResult:
        try:
            return await searcher.search(request)
        except SearchError as exc:
            raise BadRequest(str(exc)) from exc

    return handle


async def ready() -> dict:
    await _state["pool"].fetchval("SELECT 1")
    return {"postgres": "ok"}


async def teardown() -> None:
    if "pool" in _state:
        await _state["pool"].close()


SERVICE = ServiceDefinition("retriever", RETRIEVE, setup, ready, teardown)
