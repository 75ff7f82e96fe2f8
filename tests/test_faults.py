"""Faults against the real servers and the live stack: a worker killed mid-request, Redis and PostgreSQL
restarts, a provider outage, and a burst far above the rated load.

Every test restores what it breaks (a killed service is restarted with the live stack's own environment and put
back into ``live_stack["procs"]``; a stopped server is started again), so later tests still see a full stack.
Every wait is a bounded loop; everything listens on loopback only.
"""
from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psutil
import pytest
import redis

from shared.streams import GENERATE
from tests.conftest import _free_port_block, start_stack, stop_stack, wait_until_ready
from tests.fakes import NOT_ANSWERED
from tests.fakes.anthropic_server import FakeAnthropic

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
GOUDA = "How much milkfat must gouda cheese contain?"
EXTRACTIVE = "extractive/regs-extractive-1.0"


# ------------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------------
def _spawn(live_stack, name: str, extra_env: dict | None = None) -> subprocess.Popen:
    """One service process like ``start_stack`` does (same env unless overridden), logging to the stack's logs."""
    env = {**live_stack["env"], **(extra_env or {})}
    logs = live_stack["tmp"] / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log = open(logs / f"{name}.log", "ab")  # noqa: SIM115 - the child owns it
    return subprocess.Popen([sys.executable, "-m", f"services.{name}"], stdout=log, stderr=subprocess.STDOUT,
                            env=env, cwd=str(ROOT))


def _until(check, timeout: float, interval: float = 0.5, what: str = "condition"):
    """Call ``check`` until it returns something truthy (exceptions count as not yet); bounded."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            result = check()
            if result:
                return result
            last = result
        except Exception as exc:  # noqa: BLE001 - the point is to outlast failures
            last = exc
        time.sleep(interval)
    raise AssertionError(f"{what} not reached within {timeout:.0f}s (last: {last!r})")


def _ready(url: str, timeout: float = 120.0) -> None:
    _until(lambda: httpx.get(f"{url}/readyz", timeout=5).status_code == 200, timeout, what=f"{url}/readyz 200")


def _worker_ready(port: int, timeout: float = 120.0, log: Path | None = None) -> None:
    try:
        _until(lambda: httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).status_code == 200, timeout,
               what=f"worker on :{port} ready")
    except AssertionError as exc:
        tail = log.read_text(errors="replace")[-3000:] if log and log.exists() else "(no log)"
        raise AssertionError(f"{exc}\n--- {log} ---\n{tail}") from None


def _redis(live_stack) -> redis.Redis:
    return redis.Redis.from_url(live_stack["env"]["REGS_REDIS_URL"], socket_connect_timeout=5, socket_timeout=10)


def _pending(r: redis.Redis, stream: str, group: str) -> int:
    return r.xpending(stream, group)["pending"]


def _all_alive(live_stack) -> None:
    dead = {name: proc.returncode for name, proc in live_stack["procs"].items() if proc.poll() is not None}
    assert not dead, f"service processes exited: {dead}"


def _assert_label_matches_calls(result: dict) -> None:
    """The label names exactly the models of the calls that produced the text."""
    model = result["model"]
    produced = list(dict.fromkeys(f"{c['provider']}/{c['model']}" for c in model["calls"] if c["provider"] != "none"))
    assert model["answered"] == (", ".join(produced) if produced else None), model


def _stop(proc: subprocess.Popen, sig=signal.SIGTERM, timeout: float = 20) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.fixture
def api(live_stack):
    _all_alive(live_stack)
    with httpx.Client(base_url=live_stack["url"], timeout=120) as client:
        yield client
    _all_alive(live_stack)


# ------------------------------------------------------------------------------------------------
# a worker killed mid-request
# ------------------------------------------------------------------------------------------------
def test_generator_killed_mid_request_is_reclaimed_by_a_fresh_consumer(live_stack, api):
    """The only generator is SIGKILLed while it holds a generate entry (a provider call that takes minutes);
    a fresh generator claims the entry once it has been idle REGS_RECLAIM_IDLE_MS, and the question completes,
    labelled with the model that actually answered. Nothing stays pending."""
    r = _redis(live_stack)
    procs = live_stack["procs"]
    with FakeAnthropic("slow", slow_s=300) as fake:
        # 1. the live generator steps aside (cleanly: it holds nothing) for a slow one
        _stop(procs["generator"])
        slow_base = _free_port_block(5)
        slow = _spawn(live_stack, "generator", {
            "REGS_GENERATION_PROVIDER": "anthropic", "REGS_ANTHROPIC_API_KEY": "test-key",
            "REGS_ANTHROPIC_BASE_URL": fake.url, "REGS_GENERATION_TIMEOUT_S": "300", "REGS_GENERATION_RETRIES": "0",
            "REGS_METRICS_PORT_BASE": str(slow_base),
        })
        fresh = None
        try:
            _worker_ready(slow_base + 2, log=live_stack["tmp"] / "logs" / "generator.log")
            # 2. a question through the gateway, in flight
            outcome: dict = {}

            def ask() -> None:
                try:
                    outcome["response"] = api.post("/v1/query", json={"question": GOUDA}, timeout=150)
                except Exception as exc:  # noqa: BLE001
                    outcome["error"] = exc

            asker = threading.Thread(target=ask, daemon=True)
            asker.start()
            # 3. the slow generator holds the entry: the provider has the request, the group has it pending
            _until(lambda: fake.requests, 60, 0.2, "the provider call")
            _until(lambda: _pending(r, GENERATE.name, GENERATE.group) >= 1, 10, 0.2, "a pending generate entry")
            held_by = {c["consumer"].decode() for c in r.xpending_range(GENERATE.name, GENERATE.group, "-", "+", 10)}
            # 4. SIGKILL mid-request: no ack, no reply, no lease renewal
            slow.send_signal(signal.SIGKILL)
            slow.wait(10)
            killed_at = time.monotonic()
            # 5. a fresh generator with the live stack's own configuration takes over
            fresh = _spawn(live_stack, "generator")
            procs["generator"] = fresh
            asker.join(150)
            assert not asker.is_alive(), "the request hung past every deadline"
            assert "error" not in outcome, outcome.get("error")
            response = outcome["response"]
            assert response.status_code in (200, 504), response.text
            print(f"generator killed: {response.status_code} {time.monotonic() - killed_at:.1f}s after the kill; "
                  f"model {response.json().get('model', {}).get('answered')}")
            if response.status_code == 504:  # allowed by the contract: a clear failure naming the stage
                assert response.json()["stage"].startswith("generate"), response.text
            else:
                result = response.json()
                assert result["status"] == "answered", result
                assert time.monotonic() - killed_at >= 2.5  # not before the entry went idle (3 s)
                _assert_label_matches_calls(result)
                assert result["model"]["answered"] == EXTRACTIVE  # the killed anthropic call produced nothing
                assert [c["step"] for c in result["model"]["calls"]] == ["plain", "legal"]
                assert "46 percent" in result["plain_english"] + result["legal"]
            assert not fake.replies, "the slow provider never answered"
            # 6. nothing left pending; the dead consumer holds nothing
            _until(lambda: _pending(r, GENERATE.name, GENERATE.group) == 0, 30, 0.5, "no pending generate entries")
            for consumer in r.xinfo_consumers(GENERATE.name, GENERATE.group):
                name = consumer["name"].decode() if isinstance(consumer["name"], bytes) else consumer["name"]
                if name in held_by:
                    assert consumer["pending"] == 0
            assert r.xlen(GENERATE.dlq) == 0
        finally:
            _stop(slow, signal.SIGKILL)
            if fresh is None:  # restore the stack whatever happened
                procs["generator"] = _spawn(live_stack, "generator")
            r.close()
    _ready(live_stack["url"])
    assert api.post("/v1/query", json={"question": GOUDA}).json()["status"] == "answered"


# ------------------------------------------------------------------------------------------------
# a provider outage (a separate stack on Redis DB 1: its streams and groups are its own)
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def provider_stack(settings, servers, live_stack):
    """retriever + scorer + generator (anthropic, pointed at a local fake) + gateway on Redis DB 1, sharing the
    live stack's PostgreSQL (and so its corpus). No ingest worker: readiness ignores that group."""
    base_url = settings.redis_url.rsplit("/", 1)[0]
    db1 = f"{base_url}/1"
    r = redis.Redis.from_url(db1)
    r.flushdb()
    with FakeAnthropic("ok") as fake:
        tmp = servers["tmp"] / "provider-stack"
        url, procs, _ = start_stack(
            settings.model_copy(update={"redis_url": db1}), tmp,
            {"REGS_GENERATION_PROVIDER": "anthropic", "REGS_ANTHROPIC_API_KEY": "test-key",
             "REGS_ANTHROPIC_BASE_URL": fake.url, "REGS_GENERATION_RETRIES": "1"},
            services=("retriever", "scorer", "generator", "gateway"),
        )
        try:
            def ready() -> bool:
                for name, proc in procs.items():
                    if proc.poll() is not None:
                        raise RuntimeError(f"{name} exited: " + (tmp / "logs" / f"{name}.log").read_text()[-3000:])
                checks = httpx.get(f"{url}/readyz", timeout=5).json()["checks"]
                return all(v == "ok" for k, v in checks.items() if k != "workers.ingest")

            deadline = time.monotonic() + 180
            while True:
                try:
                    if ready():
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, "the provider stack did not become ready"
                time.sleep(0.5)
            with httpx.Client(base_url=url, timeout=120) as client:
                yield client, fake
        finally:
            stop_stack(procs)
            r.flushdb()
            r.close()


def test_provider_overloaded_falls_back_to_extractive_and_says_so(provider_stack):
    client, fake = provider_stack
    fake.reset("529")
    result = client.post("/v1/query", json={"question": GOUDA}).json()
    assert result["status"] == "answered", result
    model = result["model"]
    assert model["requested"] == "anthropic/claude-haiku-4-5"
    assert model["answered"] == EXTRACTIVE
    assert model["fallback_reason"].startswith("overloaded")  # "overloaded: 529"
    assert all(c["fallback_reason"].startswith("overloaded") for c in model["calls"]) and len(model["calls"]) == 2
    _assert_label_matches_calls(result)
    assert len(fake.requests) >= 4  # both calls, each retried once by the SDK
    assert not fake.replies
    assert "46 percent" in result["plain_english"] + result["legal"]


def test_provider_answering_is_labelled_with_the_model_it_returned(provider_stack):
    client, fake = provider_stack
    fake.reset("ok")
    result = client.post("/v1/query", json={"question": GOUDA}).json()
    model = result["model"]
    assert model["requested"] == "anthropic/claude-haiku-4-5"
    assert model["answered"] == "anthropic/claude-haiku-4-5-20251001"  # returned, not requested
    assert model["fallback_reason"] is None
    assert [(c["provider"], c["model"], c["requested_model"]) for c in model["calls"]] == [
        ("anthropic", "claude-haiku-4-5-20251001", "claude-haiku-4-5")] * 2
    _assert_label_matches_calls(result)
    assert len(fake.requests) == 2 and len(fake.replies) == 2
    assert result["status"] == "answered", result.get("refusal")
    assert "21 CFR 133.142" in [c["cfr_ref"] for c in result["citations"]]


def test_a_model_that_finds_the_sections_do_not_answer_is_a_not_found_refusal(provider_stack):
    """plain.v2's structured decline: no legal call, a not_found refusal naming the model that read the sections
    and its sentence, with the sections as evidence; nothing of an answer is shown."""
    client, fake = provider_stack
    fake.reset("not_answered")
    result = client.post("/v1/query", json={"question": GOUDA}).json()
    assert result["status"] == "refused", result
    refusal = result["refusal"]
    assert refusal["reason"] == "not_found"
    assert "claude-haiku-4-5-20251001" in refusal["message"] and NOT_ANSWERED in refusal["message"]
    assert "21 CFR 133.142" in [e["cfr_ref"] for e in refusal["evidence"]]
    assert result["confidence"]["tier"] == "not_found"
    assert not result["plain_english"] and not result["legal"] and not result["quotes"] and not result["citations"]
    model = result["model"]
    assert model["answered"] == "anthropic/claude-haiku-4-5-20251001" and model["fallback_reason"] is None
    assert [c["step"] for c in model["calls"]] == ["plain"]  # the legal call was not made
    assert len(fake.requests) == 1 and len(fake.replies) == 1
    metrics_text = client.get("/metrics").text
    assert 'regs_model_declined_total{model="claude-haiku-4-5-20251001"} 1.0' in metrics_text


# ------------------------------------------------------------------------------------------------
# a burst of 10x the rated load
# ------------------------------------------------------------------------------------------------
def test_burst_of_ten_times_the_rate_limit_is_shed_with_429s(settings, servers, live_stack):
    limit = 20
    tmp = servers["tmp"] / "burst-gateway"
    url, procs, _ = start_stack(settings, tmp, {"REGS_RATE_LIMIT_PER_MINUTE": str(limit)}, services=("gateway",))
    try:
        wait_until_ready(url, procs, tmp)
        gateway = psutil.Process(procs["gateway"].pid)
        # a client of its own: the gateway trusts X-Forwarded-For from the loopback proxy address
        headers = {"X-Forwarded-For": f"198.51.100.{int(time.time()) % 250 + 1}"}
        with httpx.Client(base_url=url, timeout=90, headers=headers,
                          limits=httpx.Limits(max_connections=32)) as client:
            warm = client.post("/v1/search", json={"question": GOUDA})
            assert warm.status_code == 200, warm.text
            rss_before = gateway.memory_info().rss

            def one(i: int) -> httpx.Response:
                return client.post("/v1/search", json={"question": f"{GOUDA} ({i})"})

            started = time.monotonic()
            with ThreadPoolExecutor(max_workers=24) as pool:
                responses = list(pool.map(one, range(10 * limit)))
            elapsed = time.monotonic() - started
            rss_after = gateway.memory_info().rss
            statuses = [resp.status_code for resp in responses]
            assert not [s for s in statuses if s >= 500], statuses
            assert set(statuses) <= {200, 429}, statuses
            # at most the limit per window (twice if the burst straddled a minute boundary), the rest shed
            assert statuses.count(200) <= 2 * limit
            assert statuses.count(429) >= 10 * limit - 2 * limit - 1
            for resp in responses:
                if resp.status_code == 429:
                    assert 0 <= int(resp.headers["Retry-After"]) <= 60
                    assert "rate limit" in resp.json()["detail"]
            assert gateway.is_running() and procs["gateway"].poll() is None
            assert client.get("/healthz").status_code == 200
            assert rss_after < 1.5 * rss_before + 200 * 2**20, (rss_before, rss_after)
            print(f"burst: {len(statuses)} requests in {elapsed:.1f}s: {statuses.count(200)} ok, "
                  f"{statuses.count(429)} shed; rss {rss_before / 2**20:.0f} -> {rss_after / 2**20:.0f} MB")
    finally:
        stop_stack(procs)


# ------------------------------------------------------------------------------------------------
# server restarts
# ------------------------------------------------------------------------------------------------
def test_redis_restart_workers_recover(live_stack, servers, api):
    if servers["redis"] is None:
        pytest.skip("REGS_TEST_REDIS_URL is an external server: not ours to restart")
    assert api.post("/v1/query", json={"question": GOUDA}).json()["status"] == "answered"
    servers["redis"].stop()
    try:
        assert not servers["redis"].running()
        during = api.post("/v1/search", json={"question": GOUDA}, timeout=30)
        assert during.status_code == 503 and during.json()["detail"], during.text
        time.sleep(1.0)
    finally:
        servers["redis"].start()
    r = _redis(live_stack)
    try:
        # appendonly: the groups survived the restart
        for spec_name, group in (("regs.retrieve.requests", "retriever"), ("regs.generate.requests", "generator"),
                                 ("regs.score.requests", "scorer"), ("regs.query.requests", "gateway")):
            _until(lambda: group in {g["name"].decode() for g in r.xinfo_groups(spec_name)}, 30,
                   what=f"group {group}")

        def answered() -> bool:
            response = api.post("/v1/query", json={"question": GOUDA}, timeout=60)
            return response.status_code == 200 and response.json()["status"] == "answered"

        _until(answered, 120, 2.0, "an answered query after the Redis restart")
        _ready(live_stack["url"], 60)
        _all_alive(live_stack)
    finally:
        r.close()


def test_postgres_restart_fails_cleanly_then_recovers(live_stack, servers, api):
    if servers["pg"] is None:
        pytest.skip("REGS_TEST_DATABASE_URL is an external server: not ours to restart")
    assert api.get("/v1/sections/21/133.142").status_code == 200
    deadline_s = float(live_stack["env"]["REGS_STAGE_DEADLINE_S"])
    servers["pg"].stop()
    try:
        assert not servers["pg"].running()
        section = api.get("/v1/sections/21/133.142", timeout=30)
        assert section.status_code == 503, section.text
        assert section.headers["content-type"].startswith("application/json")
        assert "database is unavailable" in section.json()["detail"] and section.headers["Retry-After"]
        corpus = api.get("/v1/corpus", timeout=30)
        assert corpus.status_code == 503 and corpus.json()["detail"]
        started = time.monotonic()
        search = api.post("/v1/search", json={"question": GOUDA}, timeout=deadline_s + 30)
        took = time.monotonic() - started
        assert 500 <= search.status_code < 600, search.text
        assert search.headers["content-type"].startswith("application/json")
        body = search.json()
        assert body["detail"] and body.get("stage") == "retrieve", body
        assert took <= deadline_s + 10
        print(f"postgres down: /v1/sections {section.status_code}, /v1/search {search.status_code} in {took:.1f}s: "
              f"{body['detail'][:160]}")
        ready = api.get("/readyz", timeout=30)
        assert ready.status_code == 503 and ready.json()["checks"]["postgres"].startswith("error")
        assert api.get("/healthz").status_code == 200
        _all_alive(live_stack)
    finally:
        servers["pg"].start()

    def recovered() -> bool:
        return (api.get("/v1/sections/21/133.142", timeout=30).status_code == 200
                and api.post("/v1/search", json={"question": GOUDA}, timeout=60).status_code == 200)

    _until(recovered, 120, 2.0, "sections and search after the PostgreSQL restart")

    def answered() -> bool:
        response = api.post("/v1/query", json={"question": GOUDA}, timeout=90)
        return response.status_code == 200 and response.json()["status"] == "answered"

    _until(answered, 120, 2.0, "an answered query after the PostgreSQL restart")
    _ready(live_stack["url"], 60)
    _all_alive(live_stack)
