"""The ingest worker: consumes regs.ingest.requests, runs the pipeline, publishes IngestEvents."""
from __future__ import annotations

import logging

import asyncpg

from services.ingest.pipeline import IngestPipeline
from shared import db
from shared.bus import publish_event
from shared.config import Settings
from shared.messages import Envelope, IngestEvent, IngestRequest
from shared.streams import INGEST, INGEST_EVENTS
from shared.worker import ServiceDefinition

log = logging.getLogger(__name__)
_state: dict = {}


async def setup(settings: Settings):
    await db.migrate(settings.database_url)
    pool: asyncpg.Pool = await db.create_pool(settings.database_url, max_size=4)
    _state["pool"] = pool
    pipeline = IngestPipeline(pool, settings)
    await pool.execute(
        "UPDATE ingest_runs SET state = 'failed', error = 'interrupted: the ingest worker restarted', "
        "finished_at = now() WHERE state IN ('queued', 'running') AND started_at < now() - interval '1 hour'"
    )

    async def handle(kind: str, request: IngestRequest, envelope: Envelope) -> IngestEvent:
        worker_redis = _state["redis"]
        run_id = await pipeline.create_run(request)
        request = request.model_copy(update={"run_id": run_id})

        async def progress(message: str, done: int, total: int) -> None:
            await publish_event(worker_redis, INGEST_EVENTS, IngestEvent(
                run_id=run_id, state="progress", message=message, done=done, total=total), settings.stream_maxlen)

        record = await pipeline.run(request, progress)
        event = IngestEvent(run_id=run_id, state=record["state"], message=record["message"] or "",
                            done=record["done"], total=record["total"], counts=record["counts"] or {})
        await publish_event(worker_redis, INGEST_EVENTS, event, settings.stream_maxlen)
        return event

    from shared.bus import connect_redis

    _state["redis"] = connect_redis(settings.redis_url)
    return handle


async def ready() -> dict:
    await _state["pool"].fetchval("SELECT 1")
    return {"postgres": "ok"}


async def teardown() -> None:
    if "pool" in _state:
        await _state["pool"].close()
    if "redis" in _state:
        await _state["redis"].aclose()


SERVICE = ServiceDefinition("ingest", INGEST, setup, ready, teardown)
