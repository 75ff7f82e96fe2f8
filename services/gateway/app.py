"""The public HTTP gateway (FastAPI): the v1 API, streamed progress, the web page, health and metrics."""
from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
import uuid
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import asyncpg
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field
from sse_starlette.sse import EventSourceResponse
from starlette.datastructures import Headers, MutableHeaders

from services.gateway.asyncapi import register as register_asyncapi
from services.gateway.fanout import answer
from shared import db, metrics
from shared.bus import BadRequest, BusClient, StageError, StageTimeout, StreamWorker, live_consumers, publish, stream_overview
from shared.config import Settings, get_settings
from shared.logs import bind_request
from shared.messages import Envelope, IngestRequest, QueryRequest, QueryResult, RetrieveRequest, RetrieveResult
from shared.streams import INGEST, QUERY, RETRIEVE, WORKER_STREAMS

log = logging.getLogger(__name__)
STATIC_DIR = Path(__file__).parent / "static"


class SearchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    question: str
    top_k: int | None = Field(None, ge=1, le=50)
    mode: Literal["hybrid", "dense", "fulltext"] | None = None
    scoping: bool | None = None


class AdminIngestRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: int | None = None
    source: str = "shipped"
    parts: list[str] | None = None
    force: bool = False


class Problem(Exception):
    def __init__(self, status: int, detail: str, **extra: Any):
        self.status, self.detail, self.extra = status, detail, extra


_CSP = ("default-src 'self'; script-src 'self' https://cdn.jsdelivr.net; style-src 'self' 'unsafe-inline' "
        "https://cdn.jsdelivr.net; img-src 'self' data: https://fastapi.tiangolo.com; connect-src 'self'; "
        "frame-ancestors 'none'; base-uri 'none'; form-action 'self'")


class RequestContext:
    """Request id, security headers and the request counter, as a plain ASGI middleware (Starlette's
    ``@app.middleware("http")`` wraps every response in a task and a stream: a few milliseconds per request)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        request_id = headers.get("x-request-id") or uuid.uuid4().hex
        if len(request_id) > 128:
            request_id = uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id
        bind_request(request_id)
        https = scope.get("scheme") == "https" or headers.get("x-forwarded-proto") == "https"
        status = {"code": 500}

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                out = MutableHeaders(scope=message)
                out["X-Request-ID"] = request_id
                out["X-Content-Type-Options"] = "nosniff"
                out["Referrer-Policy"] = "no-referrer"
                out["X-Frame-Options"] = "DENY"
                if https:
                    out["Strict-Transport-Security"] = "max-age=63072000; includeSubDomains"
                if out.get("content-type", "").startswith("text/html"):
                    out["Content-Security-Policy"] = _CSP
            await send(message)

        try:
            await self.app(scope, receive, send_with_headers)
        finally:
            route = scope.get("route")
            metrics.REQUESTS.labels(getattr(route, "path", "unmatched"), str(status["code"])).inc()


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    state: dict[str, Any] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await db.migrate(settings.database_url)
        state["pool"] = await db.create_pool(settings.database_url, max_size=10)
        bus = BusClient(settings, name=f"gateway-{uuid.uuid4().hex[:8]}")
        await bus.start()
        state["bus"] = bus

        async def on_query(kind: str, request: QueryRequest, envelope: Envelope) -> QueryResult:
            """Questions submitted on regs.query.requests by other systems take the same path."""
            try:
                _check_question(request.question, settings)
            except Problem as exc:
                raise BadRequest(exc.detail) from exc
            return await answer(request.question, bus, settings, top_k=request.top_k, mode=request.mode,
                                query_id=envelope.request_id)

        query_worker = StreamWorker(QUERY, on_query, settings)
        await query_worker.start()
        state["query_worker"] = query_worker
        try:
            yield
        finally:
            await query_worker.stop()
            await bus.close()
            await state["pool"].close()

    app = FastAPI(
        title="regs — answers from the Code of Federal Regulations",
        version="1.0.0",
        description="Plain-English and legal-language answers with verbatim quotes, citations, an honest "
                    "confidence tier, and refusals that name their reason. Not legal advice.",
        lifespan=lifespan,
    )
    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["GET", "POST"],
                           allow_headers=["*"], expose_headers=["X-Request-ID", "Retry-After"])

    app.add_middleware(RequestContext)

    @app.exception_handler(Problem)
    async def problem_handler(request: Request, exc: Problem):
        headers = {"Retry-After": str(exc.extra.pop("retry_after"))} if "retry_after" in exc.extra else None
        return JSONResponse({"detail": exc.detail, "request_id": getattr(request.state, "request_id", None),
                             **exc.extra}, status_code=exc.status, headers=headers)

    @app.exception_handler(asyncpg.PostgresConnectionError)
    @app.exception_handler(asyncpg.exceptions.OperatorInterventionError)
    @app.exception_handler(OSError)  # ConnectionRefusedError, TimeoutError while the pool reconnects
    async def unavailable_handler(request: Request, exc: Exception):
        """PostgreSQL down or restarting: a 503 JSON answer (not a bare 500); the pool reconnects by itself."""
        if isinstance(exc, StageTimeout):  # a TimeoutError, hence an OSError, that escaped its route
            return await problem_handler(request, fail_stage(exc))
        log.warning("%s %s: backing server unavailable: %r", request.method, request.url.path, exc)
        return JSONResponse({"detail": f"the database is unavailable, retry shortly ({type(exc).__name__})",
                             "request_id": getattr(request.state, "request_id", None)},
                            status_code=503, headers={"Retry-After": "5"})

    async def rate_limit(request: Request) -> None:
        bus: BusClient = state["bus"]
        client = request.client.host if request.client else "unknown"
        window = int(time.time() // 60)
        key = f"regs:ratelimit:{client}:{window}"
        try:
            async with bus.redis.pipeline(transaction=True) as pipe:
                pipe.incr(key)
                pipe.expire(key, 61)
                count, _ = await pipe.execute()
        except Exception as exc:  # noqa: BLE001 - Redis down: the request will fail at the bus anyway
            raise Problem(503, f"the queue is unavailable: {exc}") from exc
        if count > settings.rate_limit_per_minute:
            metrics.RATE_LIMITED.inc()
            raise Problem(429, f"rate limit of {settings.rate_limit_per_minute} requests per minute exceeded",
                          retry_after=60 - int(time.time()) % 60)

    def fail_stage(exc: Exception) -> Problem:
        if isinstance(exc, StageTimeout):
            return Problem(504, f"the {exc.stage} stage missed its {exc.seconds:.0f}s deadline", stage=exc.stage)
        if isinstance(exc, StageError):
            status = 400 if exc.error.code == "bad_request" else 502
            return Problem(status, f"the {exc.stage} stage failed: {exc.error.message}", stage=exc.stage,
                           code=exc.error.code)
        raise exc

    # ---------------------------------------------------------------------------------- query
    @app.post("/v1/query", response_model=QueryResult, dependencies=[Depends(rate_limit)],
              summary="Answer a question: plain English, legal language, quotes, citations, confidence or refusal")
    async def query(body: QueryRequest, request: Request) -> QueryResult:
        _check_question(body.question, settings)
        try:
            return await answer(body.question, state["bus"], settings, top_k=body.top_k, mode=body.mode,
                                query_id=_query_id(request))
        except (StageTimeout, StageError) as exc:
            raise fail_stage(exc) from exc

    @app.post("/v1/query/stream", dependencies=[Depends(rate_limit)],
              summary="The same as /v1/query as Server-Sent Events: status events, then one result event")
    async def query_stream(body: QueryRequest, request: Request):
        _check_question(body.question, settings)
        queue: asyncio.Queue = asyncio.Queue()
        query_id = _query_id(request)

        async def on_status(status: str) -> None:
            await queue.put({"event": "status", "data": json.dumps({"id": query_id, "status": status})})

        async def run() -> None:
            try:
                result = await answer(body.question, state["bus"], settings, top_k=body.top_k, mode=body.mode,
                                      query_id=query_id, on_status=on_status)
                await queue.put({"event": "result", "data": result.model_dump_json()})
            except (StageTimeout, StageError) as exc:
                problem = fail_stage(exc)
                await queue.put({"event": "error", "data": json.dumps({"status": problem.status,
                                                                        "detail": problem.detail, **problem.extra})})
            except Exception as exc:  # noqa: BLE001
                log.exception("stream query failed")
                await queue.put({"event": "error", "data": json.dumps({"status": 500, "detail": str(exc)})})
            await queue.put(None)

        async def events():
            task = asyncio.create_task(run())
            try:
                while (item := await queue.get()) is not None:
                    yield item
            finally:
                task.cancel()

        return EventSourceResponse(events(), ping=5)

    # ---------------------------------------------------------------------------------- search
    @app.post("/v1/search", dependencies=[Depends(rate_limit)],
              summary="Scope the question and return the ranked sections (through the retriever service)")
    async def search(body: SearchRequest) -> dict:
        _check_question(body.question, settings)
        try:
            payload = await state["bus"].request(
                RETRIEVE, "retrieve",
                RetrieveRequest(question=body.question, top_k=body.top_k, mode=body.mode, scoping=body.scoping,
                                include_text=False),
                timeout=settings.stage_deadline_s, stage="retrieve")
        except (StageTimeout, StageError) as exc:
            raise fail_stage(exc) from exc
        result = RetrieveResult.model_validate(payload)
        return {
            "scope": result.scope.model_dump(), "mode": result.mode, "top_k": result.top_k,
            "embedding_model": result.embedding_model, "empty_reason": result.empty_reason,
            "results": [{"cfr_ref": h.cfr_ref, "title": h.title, "part": h.part, "section": h.section,
                         "heading": h.heading, "score": h.score, "similarity": h.similarity, "rank": h.rank,
                         "matched_by": h.matched_by} for h in result.hits],
        }

    # ---------------------------------------------------------------------------------- corpus
    @app.get("/v1/sections/{title}/{section}", summary="The active text and metadata of one section")
    async def section(title: int, section: str) -> dict:
        row = await db.fetch_active_section(state["pool"], title, section)
        if row is None:
            raise Problem(404, f"{title} CFR {section} is not in the active corpus")
        out = dict(row)
        out.pop("id", None)
        return out

    @app.get("/v1/corpus", summary="Titles, active version, source date and section counts")
    async def corpus() -> dict:
        rows = await db.active_corpus_summary(state["pool"])
        titles = [{"title": r["title"], "version_id": r["version_id"], "source": r["source"],
                   "source_date": r["source_date"], "embedding_model": r["embedding_model"],
                   "activated_at": r["activated_at"].isoformat() if r["activated_at"] else None,
                   "sections": r["sections"], "reserved": r["reserved"], "parts": r["parts"]} for r in rows]
        return {"titles": titles, "total_sections": sum(t["sections"] for t in titles)}

    # ---------------------------------------------------------------------------------- admin
    async def admin(request: Request) -> None:
        if settings.admin_token is None:
            raise Problem(404, "admin routes are off: set REGS_ADMIN_TOKEN to enable them")
        header = request.headers.get("authorization", "")
        token = header[7:] if header.lower().startswith("bearer ") else ""
        if not secrets.compare_digest(token.encode(), settings.admin_token.get_secret_value().encode()):
            raise Problem(401, "a valid bearer token is required")

    @app.post("/v1/admin/ingest", status_code=202, dependencies=[Depends(admin)],
              summary="Queue an ingest run (bearer token)")
    async def admin_ingest(body: AdminIngestRequest) -> dict:
        run_id = uuid.uuid4().hex[:12]
        request = IngestRequest(title=body.title, source=body.source, parts=body.parts, force=body.force,
                                run_id=run_id)
        await state["pool"].execute(
            "INSERT INTO ingest_runs (run_id, title, source, parts, state) VALUES ($1, $2, $3, $4, 'queued')",
            run_id, body.title, body.source, body.parts)
        await publish(state["bus"].redis, INGEST.name,
                      Envelope(kind="ingest", payload=request.model_dump(mode="json"), reply_to=None,
                               deadline=time.time() + 6 * 3600, request_id=run_id),
                      settings.stream_maxlen)
        return {"run_id": run_id, "state": "queued", "status_url": f"/v1/admin/ingest/{run_id}"}

    @app.get("/v1/admin/ingest/{run_id}", dependencies=[Depends(admin)], summary="An ingest run's record")
    async def admin_ingest_status(run_id: str) -> dict:
        row = await state["pool"].fetchrow("SELECT * FROM ingest_runs WHERE run_id = $1", run_id)
        if row is None:
            raise Problem(404, f"no ingest run {run_id!r}")
        out = dict(row)
        for key in ("started_at", "finished_at"):
            out[key] = out[key].isoformat() if out[key] else None
        return out

    # ---------------------------------------------------------------------------------- ops
    @app.get("/healthz", summary="The process is up")
    async def healthz() -> dict:
        return {"status": "ok"}

    @app.get("/readyz", summary="Postgres, Redis, and a live consumer in every worker group")
    async def readyz() -> Response:
        checks: dict[str, str] = {}
        try:
            await state["pool"].fetchval("SELECT 1")
            checks["postgres"] = "ok"
        except (asyncpg.PostgresError, OSError) as exc:
            checks["postgres"] = f"error: {exc}"
        try:
            await state["bus"].redis.ping()
            checks["redis"] = "ok"
            for spec in WORKER_STREAMS:
                alive = await live_consumers(state["bus"].redis, spec.group)
                checks[f"workers.{spec.group}"] = "ok" if alive else "no live consumer"
        except Exception as exc:  # noqa: BLE001
            checks["redis"] = f"error: {exc}"
        ready = all(v == "ok" for v in checks.values())
        return JSONResponse({"ready": ready, "checks": checks}, status_code=200 if ready else 503)

    @app.get("/v1/streams", summary="Every stream: length, pending, lag, dead letters, live consumers")
    async def streams() -> list[dict]:
        return await stream_overview(state["bus"].redis)

    @app.get("/metrics", include_in_schema=False)
    async def metrics_endpoint() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/", include_in_schema=False)
    async def index() -> Response:
        page = STATIC_DIR / "index.html"
        if not page.exists():
            return JSONResponse({"detail": "the web page is not built"}, status_code=404)
        return FileResponse(page, media_type="text/html")

    register_asyncapi(app, settings)  # GET /asyncapi.json and /asyncapi: the bus's streams and payloads
    if STATIC_DIR.exists():
        app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    return app


def _query_id(request: Request) -> str:
    """An Idempotency-Key makes a retried request reuse the same stage request ids, so the workers answer it
    from their reply cache instead of generating twice."""
    key = request.headers.get("idempotency-key")
    if key and 8 <= len(key) <= 128:
        return "idem-" + "".join(ch for ch in key if ch.isalnum() or ch in "-_")
    return request.state.request_id if len(request.state.request_id) <= 64 else uuid.uuid4().hex


def _check_question(question: str, settings: Settings) -> None:
    text = (question or "").strip()
    if len(text) < settings.question_min_chars:
        raise Problem(422, f"the question is too short: at least {settings.question_min_chars} characters")
    if len(text) > settings.question_max_chars:
        raise Problem(422, f"the question is too long: at most {settings.question_max_chars} characters "
                           f"(it has {len(text)})")
