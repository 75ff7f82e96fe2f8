"""What every worker process shares: logging, the stream consumer, and /healthz /readyz /metrics on its own port.

A service module provides ``async def setup(settings) -> Handler`` (and optionally a ``ready`` check);
``run_service`` does the rest and stops cleanly on SIGINT/SIGTERM.
"""
from __future__ import annotations

import asyncio
import logging
import signal
import time
from dataclasses import dataclass
from typing import Awaitable, Callable

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from shared.bus import Handler, StreamWorker
from shared.config import Settings, get_settings
from shared.logs import setup_logging
from shared.streams import StreamSpec

log = logging.getLogger(__name__)

SERVICE_PORT_OFFSETS = {"ingest": 0, "retriever": 1, "generator": 2, "scorer": 3}


def service_port(settings: Settings, service: str) -> int:
    return settings.metrics_port_base + SERVICE_PORT_OFFSETS[service]


@dataclass
class ServiceDefinition:
    name: str
    spec: StreamSpec
    setup: Callable[[Settings], Awaitable[Handler]]
    ready: Callable[[], Awaitable[dict]] | None = None
    teardown: Callable[[], Awaitable[None]] | None = None


class PostgresPool:
    """A worker's PostgreSQL pool: opened in setup, checked by /readyz, closed on the way out."""

    def __init__(self) -> None:
        self.pool = None

    async def open(self, settings: Settings, max_size: int = 10):
        from shared import db

        await db.migrate(settings.database_url)
        self.pool = await db.create_pool(settings.database_url, max_size=max_size)
        return self.pool

    async def ready(self) -> dict:
        await self.pool.fetchval("SELECT 1")
        return {"postgres": "ok"}

    async def close(self) -> None:
        if self.pool is not None:
            await self.pool.close()
            self.pool = None


def _health_app(definition: ServiceDefinition, worker_ref: dict, started: float) -> Starlette:
    async def healthz(_: Request) -> Response:
        return JSONResponse({"status": "ok", "service": definition.name, "uptime_s": round(time.time() - started, 1)})

    async def readyz(_: Request) -> Response:
        checks: dict = {"consumer": "ok" if worker_ref.get("worker") else "starting"}
        ok = worker_ref.get("worker") is not None
        if worker_ref.get("worker") is not None:
            try:
                await worker_ref["worker"].redis.ping()
                checks["redis"] = "ok"
            except Exception as exc:  # noqa: BLE001
                checks["redis"] = f"error: {exc}"
                ok = False
        if definition.ready is not None:
            try:
                checks.update(await definition.ready())
            except Exception as exc:  # noqa: BLE001
                checks["dependencies"] = f"error: {exc}"
                ok = False
        ok = ok and all(v == "ok" for v in checks.values() if isinstance(v, str))
        return JSONResponse({"ready": ok, "service": definition.name, "checks": checks}, status_code=200 if ok else 503)

    async def metrics_endpoint(_: Request) -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    return Starlette(routes=[Route("/healthz", healthz), Route("/readyz", readyz), Route("/metrics", metrics_endpoint)])


async def serve(definition: ServiceDefinition, settings: Settings | None = None) -> None:
    settings = settings or get_settings()
    if not settings.redis_url or not settings.database_url:
        raise SystemExit("REGS_REDIS_URL and REGS_DATABASE_URL must be set (`regs up` sets them for its children)")
    started = time.time()
    worker_ref: dict = {}
    server = uvicorn.Server(
        uvicorn.Config(_health_app(definition, worker_ref, started), host="0.0.0.0",
                       port=service_port(settings, definition.name), log_level="warning", lifespan="off")
    )
    server_task = asyncio.create_task(server.serve(), name="health-server")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    handler = await definition.setup(settings)
    worker = StreamWorker(definition.spec, handler, settings)
    await worker.start()
    worker_ref["worker"] = worker
    log.info("%s ready: consuming %s, health on :%d", definition.name, definition.spec.name,
             service_port(settings, definition.name))
    await stop.wait()
    log.info("%s stopping", definition.name)
    await worker.stop()
    if definition.teardown is not None:
        await definition.teardown()
    server.should_exit = True
    await asyncio.gather(server_task, return_exceptions=True)


def run_service(definition: ServiceDefinition) -> None:
    settings = get_settings()
    setup_logging(definition.name, settings.log_level)
    asyncio.run(serve(definition, settings))
