"""The ingest worker: consumes regs.ingest.requests, runs the pipeline, publishes IngestEvents."""
from __future__ import annotations

import logging

from services.ingest.pipeline import IngestPipeline
from shared.bus import connect_redis, publish_event
from shared.config import Settings
from shared.messages import Envelope, IngestEvent, IngestRequest
from shared.streams import INGEST, INGEST_EVENTS
from shared.worker import PostgresPool, ServiceDefinition

log = logging.getLogger(__name__)
_state: dict = {}
_postgres = PostgresPool()


async def setup(settings: Settings):
    pool = await _postgres.open(settings, max_size=4)
    pipeline = IngestPipeline(pool, settings)
    _state["pipeline"] = pipeline
    # a previous worker that died mid-run left its staged version (and its run 'running'): clean them up
    await pipeline.recover()

    async def handle(kind: str, request: IngestRequest, envelope: Envelope) -> IngestEvent:
        worker_redis = _state["redis"]
        # the envelope's request id names the run when the requester gave none: a redelivery after a crash
        # continues the same run record instead of leaving an orphan behind
        run_id = await pipeline.create_run(
            request.model_copy(update={"run_id": request.run_id or f"bus-{envelope.request_id[:24]}"}))
        request = request.model_copy(update={"run_id": run_id})
        await publish_event(worker_redis, INGEST_EVENTS, IngestEvent(
            run_id=run_id, state="running", message=f"ingest of {request.source} started"), settings.stream_maxlen)

        async def progress(message: str, done: int, total: int) -> None:
            await publish_event(worker_redis, INGEST_EVENTS, IngestEvent(
                run_id=run_id, state="progress", message=message, done=done, total=total), settings.stream_maxlen)

        record = await pipeline.run(request, progress)
        message = record["message"] or ""
        if record["state"] == "failed" and record["error"] and record["error"] not in message:
            message = f"{message}: {record['error']}" if message else record["error"]
        event = IngestEvent(run_id=run_id, state=record["state"], message=message,
                            done=record["done"], total=record["total"], counts=record["counts"] or {})
        await publish_event(worker_redis, INGEST_EVENTS, event, settings.stream_maxlen)
        return event

    _state["redis"] = connect_redis(settings.redis_url)
    return handle


async def teardown() -> None:
    await _postgres.close()
    if "redis" in _state:
        await _state.pop("redis").aclose()
    _state.pop("pipeline", None)


SERVICE = ServiceDefinition("ingest", INGEST, setup, _postgres.ready, teardown)
