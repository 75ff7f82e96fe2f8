"""The bus against a real Redis: reclaim after a dead consumer, DLQ for poison, groups after a restart."""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from pydantic import BaseModel

from shared.bus import (FIELD, BusClient, StageError, StageTimeout, StreamWorker, ensure_groups, publish,
                        trim_consumed)
from shared.messages import Envelope
from shared.streams import Operation, StreamSpec


class Echo(BaseModel):
    text: str
    fail: bool = False
    sleep: float = 0.0


def _spec() -> StreamSpec:
    name = f"test.echo.{uuid.uuid4().hex[:8]}"
    return StreamSpec(name, "echo", "echo for tests", (Operation("echo", Echo, Echo),), max_workers=4)


async def _wait(predicate, timeout=15.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if await predicate():
            return True
        await asyncio.sleep(0.1)
    return False


async def test_request_reply_and_idempotent_redelivery(settings):
    spec = _spec()
    calls = []

    async def handler(kind, payload, envelope):
        calls.append(envelope.request_id)
        return Echo(text=payload.text.upper())

    worker = StreamWorker(spec, handler, settings)
    await worker.start()
    client = BusClient(settings)
    await client.start()
    try:
        reply = await client.request(spec, "echo", Echo(text="hi"), timeout=10, request_id="same-id")
        assert reply["text"] == "HI"
        # the same request id again: answered from the cache, the handler does not run twice
        reply2 = await client.request(spec, "echo", Echo(text="hi"), timeout=10, request_id="same-id")
        assert reply2 == reply
        assert calls == ["same-id"]
    finally:
        await client.close()
        await worker.stop()


async def test_entries_published_before_worker_started_are_not_skipped(settings):
    spec = _spec()
    r = aioredis.Redis.from_url(settings.redis_url)
    await ensure_groups(r, (spec,))
    reply_stream = f"test.replies.{uuid.uuid4().hex[:6]}"
    env = Envelope(kind="echo", payload={"text": "early"}, reply_to=reply_stream)
    await publish(r, spec.name, env, 1000)

    async def handler(kind, payload, envelope):
        return Echo(text="seen " + payload.text)

    worker = StreamWorker(spec, handler, settings)
    await worker.start()
    try:
        assert await _wait(lambda: _xlen(r, reply_stream, 1))
    finally:
        await worker.stop()
        await r.aclose()


async def test_trim_drops_only_what_every_group_has_acknowledged(settings):
    """MINID trimming: an entry leaves the stream once every group has been given it and acknowledged it;
    undelivered and pending entries stay (a stopped worker's backlog, a dead consumer's entry to reclaim)."""
    spec = _spec()
    r = aioredis.Redis.from_url(settings.redis_url)
    try:
        await ensure_groups(r, (spec,))
        await r.xgroup_create(spec.name, "audit", id="0")  # a second group, further behind
        ids = [await publish(r, spec.name, Envelope(kind="echo", payload={"text": str(i)}), 1000) for i in range(4)]

        async def take(group: str, n: int) -> list[bytes]:
            got = await r.xreadgroup(group, "c1", {spec.name: ">"}, count=n)
            return [entry_id for _, entries in got for entry_id, _ in entries]

        assert await trim_consumed(r, spec.name, keep_s=0) == 0  # nothing delivered yet
        first, second = await take(spec.group, 2)
        await r.xack(spec.name, spec.group, first)  # echo: 1 acked, 1 pending, 2 undelivered
        assert await trim_consumed(r, spec.name, keep_s=0) == 0  # audit has been given nothing
        await r.xack(spec.name, "audit", *await take("audit", 4))  # audit: all acked
        assert await trim_consumed(r, spec.name, keep_s=0) == 1
        assert [e for e, _ in await r.xrange(spec.name)] == ids[1:]
        await r.xack(spec.name, spec.group, second)
        assert await trim_consumed(r, spec.name, keep_s=3600) == 0  # acked, but younger than keep_s
        assert await trim_consumed(r, spec.name, keep_s=0) == 1
        assert [e for e, _ in await r.xrange(spec.name)] == ids[2:]  # never delivered to echo: kept
    finally:
        await r.delete(spec.name)
        await r.aclose()


async def test_a_worker_trims_the_entries_it_has_answered(settings):
    spec = _spec()

    async def handler(kind, payload, envelope):
        return Echo(text=payload.text.upper())

    worker = StreamWorker(spec, handler, settings.model_copy(update={"stream_keep_acked_s": 0}))
    await worker.start()
    client = BusClient(settings)
    await client.start()
    r = aioredis.Redis.from_url(settings.redis_url)
    try:
        for i in range(5):
            assert (await client.request(spec, "echo", Echo(text=f"t{i}"), timeout=10))["text"] == f"T{i}"
        assert await r.xlen(spec.name) >= 1
        assert await _wait(lambda: _xlen_is(r, spec.name, 0), timeout=10)  # the watchdog's next pass
    finally:
        await client.close()
        await worker.stop()
        await r.aclose()


async def _xlen_is(r, stream, n):
    return await r.xlen(stream) == n


async def _xlen(r, stream, n):
    return await r.xlen(stream) >= n


async def test_killed_worker_entry_is_reclaimed_by_another_consumer(settings, tmp_path):
    """Worker A (its own process) takes the entry and is SIGKILLed mid-message; worker B reclaims it."""
    spec = _spec()
    handled_by = []

    async def good_handler(kind, payload, envelope):
        handled_by.append(envelope.request_id)
        return Echo(text="done by B")

    marker = tmp_path / "a-took-it"
    script = Path(__file__).parent / "helpers" / "stuck_worker.py"
    proc = subprocess.Popen([sys.executable, str(script), settings.redis_url, spec.name, str(marker)])
    client = BusClient(settings)
    await client.start()
    try:
        r = client.redis
        await ensure_groups(r, (spec,))
        request = asyncio.create_task(client.request(spec, "echo", Echo(text="x"), timeout=30))
        assert await _wait(lambda: _exists(marker), timeout=30), "worker A never took the entry"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        pending = await r.xpending(spec.name, spec.group)
        assert pending["pending"] == 1  # A died holding it: nothing acked, nothing lost
        worker_b = StreamWorker(spec, good_handler, settings)
        await worker_b.start()
        try:
            reply = await request
            assert reply["text"] == "done by B"
            assert handled_by == [marker.read_text()]
            assert await _wait(lambda: _pending_is(r, spec, 0))
        finally:
            await worker_b.stop()
    finally:
        if proc.poll() is None:
            proc.kill()
        await client.close()


async def _exists(path):
    return path.exists()


async def _has(lst, item):
    return item in lst


async def _pending_is(r, spec, n):
    return (await r.xpending(spec.name, spec.group))["pending"] == n


async def test_poison_message_goes_to_dlq_while_others_flow(settings):
    spec = _spec()
    attempts = []

    async def handler(kind, payload, envelope):
        if payload.fail:
            attempts.append(envelope.request_id)
            raise RuntimeError("cannot process this one")
        return Echo(text="ok " + payload.text)

    worker = StreamWorker(spec, handler, settings)
    await worker.start()
    client = BusClient(settings)
    await client.start()
    try:
        poison = asyncio.create_task(client.request(spec, "echo", Echo(text="bad", fail=True), timeout=30))
        await asyncio.sleep(0.3)
        for i in range(5):  # other messages keep flowing while the poison one is retried
            reply = await client.request(spec, "echo", Echo(text=str(i)), timeout=10)
            assert reply["text"] == f"ok {i}"
        with pytest.raises(StageError) as err:
            await poison
        assert err.value.error.code == "dead_letter"
        assert "cannot process this one" in err.value.error.message
        assert len(attempts) == settings.max_deliveries
        dlq = await client.redis.xrange(spec.dlq)
        assert len(dlq) == 1
        assert b"cannot process this one" in dlq[0][1][b"error"]
        assert (await client.redis.xpending(spec.name, spec.group))["pending"] == 0
    finally:
        await client.close()
        await worker.stop()


async def test_undecodable_entry_goes_straight_to_dlq(settings):
    spec = _spec()

    async def handler(kind, payload, envelope):
        return Echo(text="x")

    worker = StreamWorker(spec, handler, settings)
    await worker.start()
    r = aioredis.Redis.from_url(settings.redis_url)
    try:
        await r.xadd(spec.name, {FIELD: "{not json"})
        assert await _wait(lambda: _xlen(r, spec.dlq, 1))
    finally:
        await worker.stop()
        await r.aclose()


async def test_requester_timeout_names_the_stage(settings):
    spec = _spec()

    async def handler(kind, payload, envelope):
        await asyncio.sleep(payload.sleep)
        return Echo(text="late")

    worker = StreamWorker(spec, handler, settings)
    await worker.start()
    client = BusClient(settings)
    await client.start()
    try:
        with pytest.raises(StageTimeout) as err:
            await client.request(spec, "echo", Echo(text="x", sleep=2.0), timeout=0.5, stage="retrieve")
        assert err.value.stage == "retrieve"
        await asyncio.sleep(2.0)
        assert client.late_replies == 1  # the late reply arrived and was dropped, not mis-delivered
    finally:
        await client.close()
        await worker.stop()


async def test_bad_payload_gets_an_error_reply_not_a_retry(settings):
    spec = _spec()

    async def handler(kind, payload, envelope):
        return payload

    worker = StreamWorker(spec, handler, settings)
    await worker.start()
    client = BusClient(settings)
    await client.start()
    try:
        class Wrong(BaseModel):
            nope: int = 1

        with pytest.raises(StageError) as err:
            await client.request(spec, "echo", Wrong(), timeout=10)
        assert err.value.error.code == "bad_request"
    finally:
        await client.close()
        await worker.stop()


async def test_groups_survive_a_redis_restart(settings, servers):
    """Restart the real Redis server; then lose the group entirely (a restart without persistence).
    Either way the worker keeps consuming."""
    if servers["redis"] is None:
        pytest.skip("external Redis: not ours to restart")
    spec = _spec()

    async def handler(kind, payload, envelope):
        return Echo(text="alive " + payload.text)

    worker = StreamWorker(spec, handler, settings)
    await worker.start()
    client = BusClient(settings)
    await client.start()
    try:
        assert (await client.request(spec, "echo", Echo(text="1"), timeout=10))["text"] == "alive 1"
        servers["redis"].stop()
        servers["redis"].start()
        reply = await _request_with_retry(client, spec, "2")
        assert reply["text"] == "alive 2"
        # a restart that lost the data: the group is gone (faststream alone would stop on NOGROUP)
        await client.redis.xgroup_destroy(spec.name, spec.group)
        reply = await _request_with_retry(client, spec, "3")
        assert reply["text"] == "alive 3"
        groups = [g["name"] for g in await client.redis.xinfo_groups(spec.name)]
        assert spec.group.encode() in groups
    finally:
        await client.close()
        await worker.stop()


async def _request_with_retry(client, spec, text, attempts=6):
    last = None
    for _ in range(attempts):
        try:
            return await client.request(spec, "echo", Echo(text=text), timeout=5)
        except (StageTimeout, Exception) as exc:  # noqa: BLE001 - the server is coming back
            last = exc
            await asyncio.sleep(0.5)
    raise AssertionError(f"no reply after restart: {last}")


async def test_a_slow_live_handler_is_not_reclaimed(settings):
    """A handler that works longer than reclaim_idle_ms keeps its lease: no second consumer runs it."""
    spec = _spec()
    runs = []

    async def slow(kind, payload, envelope):
        runs.append(envelope.request_id)
        await asyncio.sleep(settings.reclaim_idle_ms / 1000 * 3)
        return Echo(text="slow but sure")

    first = StreamWorker(spec, slow, settings)
    second = StreamWorker(spec, slow, settings)
    await first.start()
    await second.start()
    client = BusClient(settings)
    await client.start()
    try:
        reply = await client.request(spec, "echo", Echo(text="x"), timeout=30)
        assert reply["text"] == "slow but sure"
        assert len(runs) == 1
    finally:
        await client.close()
        await first.stop()
        await second.stop()
