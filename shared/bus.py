"""The Redis-streams bus: consumer groups, at-least-once workers with a dead-letter stream, and
request/reply for the gateway's fan-out.

Delivery rules (README "The bus"):
- Groups are created explicitly at start from id 0 (``XGROUP CREATE … 0 MKSTREAM``), so entries
  published before a worker started are not skipped.
- A worker acks an entry only after its reply is written. An entry whose handler raised stays
  pending; after ``reclaim_idle_ms`` any consumer of the group claims it (XAUTOCLAIM) and tries
  again. After ``max_deliveries`` it is copied to ``<stream>.dlq`` with the error, acked, and the
  requester gets an error reply. faststream's nack/reject send nothing to Redis on streams, so
  this module does it itself.
- Handlers are idempotent per ``request_id``: a finished reply is cached in Redis, and a redelivered
  entry gets the cached reply instead of a second computation.
- Replies go to the stream named in ``reply_to`` (one per requester, ``regs.replies.<id>``), which
  expires ``reply_ttl_s`` after its last reply. A requester that has timed out simply never reads
  the reply; a worker that sees an already-expired deadline acks the entry without doing the work.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
import traceback
import uuid
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import redis.asyncio as aioredis
from faststream import AckPolicy
from faststream.redis import RedisBroker, RedisStreamMessage, StreamSub
from pydantic import BaseModel, ValidationError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError, TimeoutError as RedisTimeoutError

from shared import metrics
from shared.config import Settings
from shared.logs import bind_request
from shared.messages import Envelope, ErrorInfo, Reply
from shared.streams import ALL_STREAMS, REPLY_PREFIX, StreamSpec

log = logging.getLogger(__name__)

FIELD = "json"  # the one field of every entry
HEARTBEAT_TTL_S = 10


class BadRequest(ValueError):
    """The payload is well-formed JSON but not a valid request: reply with an error, do not retry."""


class StageTimeout(TimeoutError):
    def __init__(self, stage: str, seconds: float):
        super().__init__(f"stage {stage!r} did not answer within {seconds:.1f}s")
        self.stage = stage
        self.seconds = seconds


class StageError(RuntimeError):
    def __init__(self, stage: str, error: ErrorInfo):
        super().__init__(f"stage {stage!r} failed: {error.code}: {error.message}")
        self.stage = stage
        self.error = error


def consumer_name(group: str) -> str:
    return f"{group}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def connect_redis(url: str) -> aioredis.Redis:
    return aioredis.Redis.from_url(
        url, decode_responses=False, health_check_interval=10, socket_connect_timeout=5, retry_on_timeout=True
    )


async def _retrying(op: Callable[[], Awaitable[Any]], what: str, attempts: int = 6) -> Any:
    """Retry across a connection blip (faststream #2797 is the same problem on its publisher)."""
    delay = 0.1
    for attempt in range(1, attempts + 1):
        try:
            return await op()
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            if attempt == attempts:
                raise
            log.warning("%s failed (%s); retry %d in %.1fs", what, exc, attempt, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)


async def ensure_groups(r: aioredis.Redis, specs: tuple[StreamSpec, ...] = ALL_STREAMS) -> None:
    for spec in specs:
        try:
            await r.xgroup_create(spec.name, spec.group, id="0", mkstream=True)
            log.info("created consumer group %s on %s", spec.group, spec.name)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise


def _entry_id(value: Any) -> tuple[int, int]:
    text = value.decode() if isinstance(value, bytes) else str(value)
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


async def trim_consumed(r: aioredis.Redis, stream: str, keep_s: float, groups: list[dict] | None = None) -> int:
    """XTRIM MINID: drop the entries that every group of ``stream`` has been given and has acknowledged, once
    older than ``keep_s``. MAXLEN alone keeps the last 10,000 entries of a stream whatever their state, and a
    post-gate request carries the retrieved sections' text: ~200 kB an entry, 2 GB of Redis for the score stream.
    Entries a group has not been given yet (a stopped worker's backlog) and pending ones (to be reclaimed) stay.
    ``groups``: the stream's XINFO GROUPS, when the caller has just read them. Returns the number of entries removed
    (0 for a stream without groups: nothing says what is consumed)."""
    if groups is None:
        groups = await r.xinfo_groups(stream)
    if not groups:
        return 0
    bound = (int((time.time() - keep_s) * 1000), 0)
    for g in groups:
        delivered_ms, delivered_seq = _entry_id(g["last-delivered-id"])
        bound = min(bound, (delivered_ms, delivered_seq + 1))  # the last one given is consumed unless pending
        if g.get("pending"):
            oldest = (await r.xpending(stream, g["name"])).get("min")
            if oldest is not None:
                bound = min(bound, _entry_id(oldest))
    if bound <= (0, 1):
        return 0
    # exact: an approximate trim only drops whole macro nodes (100 entries), and this runs every few seconds
    return int(await r.xtrim(stream, minid=f"{bound[0]}-{bound[1]}", approximate=False))


async def publish(r: aioredis.Redis, stream: str, envelope: Envelope, maxlen: int) -> bytes:
    data = envelope.model_dump_json()
    return await _retrying(
        lambda: r.xadd(stream, {FIELD: data}, maxlen=maxlen, approximate=True), f"publish to {stream}"
    )


async def send_reply(r: aioredis.Redis, reply_to: str, reply: Reply, ttl_s: int) -> None:
    data = reply.model_dump_json()

    async def _send() -> None:
        async with r.pipeline(transaction=False) as pipe:
            pipe.xadd(reply_to, {FIELD: data}, maxlen=1000, approximate=True)
            pipe.expire(reply_to, ttl_s)
            await pipe.execute()

    await _retrying(_send, f"reply to {reply_to}")


async def publish_event(r: aioredis.Redis, stream: str, event: BaseModel, maxlen: int) -> None:
    data = event.model_dump_json()
    await _retrying(lambda: r.xadd(stream, {FIELD: data}, maxlen=maxlen, approximate=True), f"event to {stream}")


def decode_entry(fields: dict) -> Envelope:
    raw = fields.get(FIELD) if FIELD in fields else fields.get(FIELD.encode())
    if raw is None:
        raise BadRequest(f"entry has no {FIELD!r} field")
    if isinstance(raw, bytes):
        raw = raw.decode()
    return Envelope.model_validate_json(raw)


# --------------------------------------------------------------------------------------------
# worker side
# --------------------------------------------------------------------------------------------
Handler = Callable[[str, BaseModel, Envelope], Awaitable[BaseModel | None]]


@dataclass
class StreamWorker:
    """Consumes one stream in its group through faststream and calls ``handler(kind, payload, envelope)``."""

    spec: StreamSpec
    handler: Handler
    settings: Settings
    consumer: str = ""
    polling_ms: int = 200
    _broker: Any = None
    _redis: aioredis.Redis | None = None
    _tasks: list[asyncio.Task] = field(default_factory=list)
    _stopping: bool = False

    def __post_init__(self) -> None:
        self.consumer = self.consumer or consumer_name(self.spec.group)

    @property
    def redis(self) -> aioredis.Redis:
        assert self._redis is not None
        return self._redis

    def _build_broker(self):
        broker = RedisBroker(self.settings.redis_url, logger=log)
        spec = self.spec

        async def on_entry(body: dict, msg: RedisStreamMessage) -> None:
            await self._on_entry(body, msg)

        # new entries (XREADGROUP >) ...
        broker.subscriber(
            stream=StreamSub(spec.name, group=spec.group, consumer=self.consumer, polling_interval=self.polling_ms),
            ack_policy=AckPolicy.MANUAL,
            max_workers=spec.max_workers,
            title=f"{spec.name}:{spec.group}",
            description=spec.description,
        )(on_entry)
        # ... and entries left pending by a dead or failing consumer (XAUTOCLAIM)
        broker.subscriber(
            stream=StreamSub(
                spec.name, group=spec.group, consumer=self.consumer, polling_interval=max(self.polling_ms, 500),
                min_idle_time=self.settings.reclaim_idle_ms,
            ),
            ack_policy=AckPolicy.MANUAL,
            title=f"{spec.name}:{spec.group}:reclaim",
            include_in_schema=False,
        )(on_entry)
        return broker

    async def start(self) -> None:
        self._redis = connect_redis(self.settings.redis_url)
        await _retrying(lambda: ensure_groups(self.redis, (self.spec,)), "create groups", attempts=30)
        self._broker = self._build_broker()
        await self._broker.start()
        self._tasks.append(asyncio.create_task(self._watchdog(), name=f"watchdog:{self.spec.name}"))
        log.info("worker %s consuming %s as group %s", self.consumer, self.spec.name, self.spec.group)

    async def stop(self) -> None:
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._broker is not None:
            await self._broker.stop()
        if self._redis is not None:
            try:
                await self._redis.delete(self._heartbeat_key())
            except Exception:  # noqa: BLE001 - best effort on the way out
                pass
            await self._redis.aclose()

    def _heartbeat_key(self) -> str:
        return f"regs:heartbeat:{self.spec.group}:{self.consumer}"

    async def _watchdog(self) -> None:
        """Heartbeat for /readyz, group recreation after a Redis restart without persistence
        (faststream #2611: on NOGROUP its subscriber stops for good), stream gauges, and trimming what every group
        has consumed."""
        while not self._stopping:
            try:
                await self.redis.set(self._heartbeat_key(), str(time.time()), ex=HEARTBEAT_TTL_S)
                groups = await self.redis.xinfo_groups(self.spec.name)
                names = {g["name"].decode() if isinstance(g["name"], bytes) else g["name"] for g in groups}
                stopped = any(not getattr(sub, "running", True) for sub in self._broker.subscribers)
                rebuilt = self.spec.group not in names or stopped
                if rebuilt:
                    log.warning("group %s on %s is gone or a subscriber stopped: rebuilding", self.spec.group,
                                self.spec.name)
                    await ensure_groups(self.redis, (self.spec,))
                    await self._broker.stop()
                    self._broker = self._build_broker()
                    await self._broker.start()
                for g in groups:
                    name = g["name"].decode() if isinstance(g["name"], bytes) else g["name"]
                    metrics.STREAM_PENDING.labels(self.spec.name, name).set(g.get("pending", 0) or 0)
                    lag = g.get("lag")
                    if lag is not None:
                        metrics.STREAM_BACKLOG.labels(self.spec.name, name).set(lag)
                if not rebuilt:  # a recreated group reads from id 0: the groups read above no longer say what is consumed
                    await trim_consumed(self.redis, self.spec.name, self.settings.stream_keep_acked_s, groups)
                metrics.DLQ_DEPTH.labels(self.spec.dlq).set(await self.redis.xlen(self.spec.dlq))
                metrics.STREAM_CONSUMERS.labels(self.spec.name, self.spec.group).set(
                    len(await live_consumers(self.redis, self.spec.group))
                )
            except ResponseError as exc:
                if "no such key" in str(exc).lower():
                    await ensure_groups(self.redis, (self.spec,))
                else:
                    log.warning("watchdog: %s", exc)
            except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
                log.warning("watchdog: redis unavailable (%s)", exc)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - the watchdog must outlive surprises
                log.exception("watchdog failure")
            await asyncio.sleep(2.0)

    def _done_key(self, request_id: str, kind: str) -> str:
        return f"regs:done:{self.spec.name}:{kind}:{request_id}"

    def _error_key(self, entry_id: str) -> str:
        return f"regs:error:{self.spec.name}:{entry_id}"

    async def _on_entry(self, body: Any, msg: Any) -> None:
        entry_id = msg.raw_message["message_ids"][0]
        entry_id = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
        started = time.perf_counter()
        stream = self.spec.name
        try:
            envelope = decode_entry(body if isinstance(body, dict) else json.loads(body))
        except (BadRequest, ValidationError, ValueError) as exc:
            # a poison entry that can never be parsed: straight to the DLQ
            await self._dead_letter(entry_id, body, f"undecodable entry: {exc}", None, msg.ack)
            return
        bind_request(envelope.request_id, envelope.trace_id)
        deliveries = await msg.get_delivery_count()
        if deliveries > self.settings.max_deliveries:
            last_error = await self.redis.get(self._error_key(entry_id))
            reason = last_error.decode() if last_error else "unknown error"
            await self._dead_letter(entry_id, body, reason, envelope, msg.ack)
            return
        operation = self.spec.operation(envelope.kind)
        if operation is None:
            await self._reply_error(envelope, "bad_request", f"unknown kind {envelope.kind!r} on {stream}")
            metrics.STREAM_MESSAGES.labels(stream, "bad_request").inc()
            await msg.ack()
            return
        cached = await self.redis.get(self._done_key(envelope.request_id, envelope.kind))
        if cached is not None:
            if envelope.reply_to:
                await send_reply(self.redis, envelope.reply_to, Reply.model_validate_json(cached),
                                 self.settings.reply_ttl_s)
            metrics.STREAM_MESSAGES.labels(stream, "duplicate").inc()
            await msg.ack()
            return
        if envelope.expired():
            log.info("entry %s expired before work started; dropped", entry_id)
            metrics.STREAM_MESSAGES.labels(stream, "expired").inc()
            await msg.ack()
            return
        try:
            payload = operation.request.model_validate(envelope.payload)
        except ValidationError as exc:
            await self._reply_error(envelope, "bad_request", _short_validation(exc))
            metrics.STREAM_MESSAGES.labels(stream, "bad_request").inc()
            await msg.ack()
            return
        lease = asyncio.create_task(self._hold_lease(entry_id), name=f"lease:{entry_id}")
        try:
            result = await self.handler(envelope.kind, payload, envelope)
        except BadRequest as exc:
            await self._reply_error(envelope, "bad_request", str(exc))
            metrics.STREAM_MESSAGES.labels(stream, "bad_request").inc()
            await msg.ack()
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - left pending: reclaimed and retried, then DLQ
            detail = f"{type(exc).__name__}: {exc}"
            log.warning("handler failed on %s (delivery %d): %s", entry_id, deliveries, detail)
            await self.redis.set(self._error_key(entry_id), detail[:2000], ex=86400)
            metrics.STREAM_MESSAGES.labels(stream, "error").inc()
            return
        finally:
            lease.cancel()
        reply = Reply(
            request_id=envelope.request_id, trace_id=envelope.trace_id, kind=envelope.kind, ok=True,
            payload=result.model_dump(mode="json") if result is not None else {}, worker=self.consumer,
        )
        await self.redis.set(self._done_key(envelope.request_id, envelope.kind), reply.model_dump_json(),
                             ex=self.settings.reply_ttl_s)
        if envelope.reply_to:
            await send_reply(self.redis, envelope.reply_to, reply, self.settings.reply_ttl_s)
        await msg.ack()
        metrics.STREAM_MESSAGES.labels(stream, "ok").inc()
        metrics.STREAM_HANDLE_SECONDS.labels(stream).observe(time.perf_counter() - started)

    async def _hold_lease(self, entry_id: str) -> None:
        """A live handler keeps its entry's idle time low (XCLAIM … JUSTID to itself), so a long ingest or a
        slow provider call is not reclaimed by another consumer; a dead one stops renewing and is."""
        interval = max(self.settings.reclaim_idle_ms / 3000, 0.2)
        while True:
            await asyncio.sleep(interval)
            try:
                await self.redis.xclaim(self.spec.name, self.spec.group, self.consumer, 0, [entry_id], justid=True)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - a missed renewal only risks a duplicate, which is idempotent
                log.warning("lease renewal of %s failed: %s", entry_id, exc)

    async def _reply_error(self, envelope: Envelope, code: str, message: str) -> None:
        if not envelope.reply_to:
            return
        reply = Reply(request_id=envelope.request_id, trace_id=envelope.trace_id, kind=envelope.kind, ok=False,
                      error=ErrorInfo(code=code, message=message), worker=self.consumer)
        await send_reply(self.redis, envelope.reply_to, reply, self.settings.reply_ttl_s)

    async def _dead_letter(self, entry_id: str, body: Any, error: str, envelope: Envelope | None,
                           ack: Callable[[], Awaitable[Any]]) -> None:
        raw = body.get(FIELD) if isinstance(body, dict) else body
        if isinstance(raw, bytes):
            raw = raw.decode(errors="replace")
        await self.redis.xadd(
            self.spec.dlq,
            {"entry_id": entry_id, "group": self.spec.group, "error": error[:4000],
             FIELD: raw if isinstance(raw, str) else json.dumps(body, default=str), "at": str(time.time())},
            maxlen=self.settings.stream_maxlen, approximate=True,
        )
        metrics.STREAM_MESSAGES.labels(self.spec.name, "dead_letter").inc()
        log.error("entry %s moved to %s: %s", entry_id, self.spec.dlq, error)
        await ack()  # settled in the stream before the requester hears it was given up
        if envelope is not None:
            await self._reply_error(envelope, "dead_letter", f"gave up after {self.settings.max_deliveries} "
                                                             f"deliveries: {error}")


def _short_validation(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(x) for x in err.get("loc", ()))
        parts.append(f"{loc}: {err.get('msg')}")
    return "; ".join(parts)


async def live_consumers(r: aioredis.Redis, group: str) -> list[str]:
    keys = [k async for k in r.scan_iter(match=f"regs:heartbeat:{group}:*", count=200)]
    return [k.decode().split(":", 3)[3] for k in keys]


async def stream_overview(r: aioredis.Redis) -> list[dict[str, Any]]:
    out = []
    for spec in ALL_STREAMS:
        row: dict[str, Any] = {"stream": spec.name, "group": spec.group, "length": 0, "pending": 0, "lag": None,
                               "dlq": 0, "live_consumers": len(await live_consumers(r, spec.group))}
        try:
            row["length"] = await r.xlen(spec.name)
            for g in await r.xinfo_groups(spec.name):
                name = g["name"].decode() if isinstance(g["name"], bytes) else g["name"]
                if name == spec.group:
                    row["pending"] = g.get("pending", 0)
                    row["lag"] = g.get("lag")
            row["dlq"] = await r.xlen(spec.dlq)
        except ResponseError:
            pass
        out.append(row)
    return out


# --------------------------------------------------------------------------------------------
# requester side
# --------------------------------------------------------------------------------------------
class BusClient:
    """Request/reply over the streams for one requester process (the gateway, a CLI, a test)."""

    def __init__(self, settings: Settings, name: str | None = None):
        self.settings = settings
        self.name = name or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.reply_stream = REPLY_PREFIX + self.name
        self._redis: aioredis.Redis | None = None
        self._waiters: dict[str, asyncio.Future] = {}
        self._reader: asyncio.Task | None = None
        self._closing = False
        self.late_replies = 0

    @property
    def redis(self) -> aioredis.Redis:
        assert self._redis is not None, "BusClient.start() first"
        return self._redis

    async def start(self) -> None:
        self._redis = connect_redis(self.settings.redis_url)
        await _retrying(lambda: ensure_groups(self.redis), "create groups", attempts=30)
        self._reader = asyncio.create_task(self._read_replies(), name=f"replies:{self.name}")

    async def close(self) -> None:
        self._closing = True
        if self._reader:
            # redis-py can hang when a blocking XREAD is cancelled; let the loop see the flag instead
            done, _ = await asyncio.wait({self._reader}, timeout=3)
            if not done:
                self._reader.cancel()
        for fut in self._waiters.values():
            if not fut.done():
                fut.cancel()
        if self._redis is not None:
            try:
                await self._redis.delete(self.reply_stream)
            except Exception:  # noqa: BLE001
                pass
            await self._redis.aclose()

    async def _read_replies(self) -> None:
        last_id = "0-0"  # the stream is this requester's own and new: read all of it
        while not self._closing:
            try:
                response = await self.redis.xread({self.reply_stream: last_id}, block=500, count=100)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - reconnects on the next round
                log.warning("reply reader: %s", exc)
                await asyncio.sleep(0.5)
                continue
            for _stream, entries in response or []:
                for entry_id, fields in entries:
                    last_id = entry_id
                    try:
                        reply = Reply.model_validate_json(fields[FIELD.encode()])
                    except Exception:  # noqa: BLE001
                        log.warning("unreadable reply %s", entry_id)
                        continue
                    waiter = self._waiters.pop(f"{reply.kind}:{reply.request_id}", None)
                    if waiter is None or waiter.done():
                        self.late_replies += 1  # the requester timed out or got a duplicate: drop
                        continue
                    waiter.set_result(reply)

    async def request(
        self, spec: StreamSpec, kind: str, payload: BaseModel, *, timeout: float, stage: str | None = None,
        request_id: str | None = None, trace_id: str | None = None,
    ) -> dict[str, Any]:
        """Publish and wait for the reply; StageTimeout after ``timeout``, StageError on an error reply."""
        envelope = Envelope(
            request_id=request_id or uuid.uuid4().hex, trace_id=trace_id or uuid.uuid4().hex,
            deadline=time.time() + timeout, reply_to=self.reply_stream, kind=kind,
            payload=payload.model_dump(mode="json"),
        )
        key = f"{kind}:{envelope.request_id}"
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self._waiters[key] = future
        try:
            await publish(self.redis, spec.name, envelope, self.settings.stream_maxlen)
            reply: Reply = await asyncio.wait_for(future, timeout)
        except asyncio.TimeoutError:
            raise StageTimeout(stage or kind, timeout) from None
        finally:
            self._waiters.pop(key, None)
        if not reply.ok:
            raise StageError(stage or kind, reply.error or ErrorInfo(code="internal", message="no detail"))
        return reply.payload


def format_exception(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()
