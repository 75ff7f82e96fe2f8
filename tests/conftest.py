"""Session fixtures: real PostgreSQL+pgvector and real Redis for the whole test session.

Uses REGS_TEST_DATABASE_URL / REGS_TEST_REDIS_URL when set; otherwise starts embedded servers on
free ports under a temporary directory, so each test session is isolated.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def servers():
    from shared.embedded import EmbeddedPostgres, EmbeddedRedis, free_port

    db_url = os.environ.get("REGS_TEST_DATABASE_URL")
    redis_url = os.environ.get("REGS_TEST_REDIS_URL")
    tmp = Path(tempfile.mkdtemp(prefix="regs-test-"))
    started = []
    pg = rd = None
    if not db_url:
        pg = EmbeddedPostgres(tmp / "pg", free_port())
        pg.start()
        started.append(pg)
        db_url = pg.url
    if not redis_url:
        rd = EmbeddedRedis(tmp / "redis", free_port())
        rd.start()
        started.append(rd)
        redis_url = rd.url
    yield {"database_url": db_url, "redis_url": redis_url, "pg": pg, "redis": rd, "tmp": tmp}
    for server in reversed(started):
        server.stop()
    shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="session")
def settings(servers):
    from shared.config import Settings

    return Settings(
        database_url=servers["database_url"],
        redis_url=servers["redis_url"],
        data_dir=servers["tmp"] / "data",
        reclaim_idle_ms=1500,
        max_deliveries=3,
        generation_provider="extractive",
        stage_deadline_s=30.0,
    )


@pytest.fixture(scope="session")
async def migrated(settings):
    from shared import db

    await db.migrate(settings.database_url)
    return settings


# ------------------------------------------------------------------------------------------------
# a real corpus and the whole running stack
# ------------------------------------------------------------------------------------------------
CORPUS = Path(__file__).resolve().parents[1] / "data" / "corpus"
TEST_CORPUS = [
    # (file, title, parts): cheeses and milk products (siblings), Medicare Part A eligibility, NEPA at USDA
    ("Athish49_FDACompliance__CFR-2024-title21-vol2-chapI.xml.gz", 21, ["131", "133"]),
    ("TheAxiomFoundation_axiom-corpus__title-42-part-406.xml.gz", 42, None),
    ("OCIO-CTO_policy_as_code_experimentation__title-7.xml.gz", 7, None),
]
ADMIN_TOKEN = "test-admin-token-0123456789"


@pytest.fixture(scope="session")
async def corpus(migrated):
    """The test corpus, ingested once per session through the real pipeline (real MiniLM embeddings)."""
    from services.ingest.pipeline import IngestPipeline
    from shared import db
    from shared.messages import IngestRequest

    pool = await db.create_pool(migrated.database_url, max_size=4)
    try:
        pipeline = IngestPipeline(pool, migrated)
        records = []
        for name, title, parts in TEST_CORPUS:
            record = await pipeline.run(IngestRequest(source=str(CORPUS / name), title=title, parts=parts))
            assert record["state"] == "succeeded", record
            records.append(record)
    finally:
        await pool.close()
    return records


def _free_port_block(size: int) -> int:
    import random
    import socket

    for _ in range(200):
        base = random.randint(20000, 40000)
        ok = True
        for port in range(base, base + size):
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    ok = False
                    break
        if ok:
            return base
    raise RuntimeError("no free port block")


def start_stack(settings, tmp: Path, extra_env: dict | None = None, services=("ingest", "retriever", "generator",
                                                                               "scorer", "gateway")):
    """Start the service processes (python -m services.X) against the test servers; returns (url, procs, env)."""
    import subprocess
    import sys

    base = _free_port_block(5)
    env = {
        **os.environ,
        "REGS_DATABASE_URL": settings.database_url,
        "REGS_REDIS_URL": settings.redis_url,
        "REGS_METRICS_PORT_BASE": str(base),
        "REGS_GATEWAY_PORT": str(base + 4),
        "REGS_GATEWAY_HOST": "127.0.0.1",
        "REGS_DATA_DIR": str(tmp),
        "REGS_ADMIN_TOKEN": ADMIN_TOKEN,
        "REGS_RATE_LIMIT_PER_MINUTE": "10000",
        "REGS_RECLAIM_IDLE_MS": "3000",
        "REGS_STAGE_DEADLINE_S": "60",
        "HF_HUB_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("REGS_ANTHROPIC_API_KEY", None)
    env.pop("REGS_OPENAI_API_KEY", None)
    env.update(extra_env or {})
    logs = tmp / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    procs = {}
    for name in services:
        log = open(logs / f"{name}.log", "ab")  # noqa: SIM115
        procs[name] = subprocess.Popen([sys.executable, "-m", f"services.{name}"], stdout=log,
                                       stderr=subprocess.STDOUT, env=env, cwd=str(Path(__file__).parents[1]))
    return f"http://127.0.0.1:{base + 4}", procs, env


def wait_until_ready(url: str, procs: dict, tmp: Path, timeout: float = 180.0) -> None:
    import time

    import httpx

    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        for name, proc in procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}:\n"
                                   + (tmp / "logs" / f"{name}.log").read_text()[-4000:])
        try:
            response = httpx.get(f"{url}/readyz", timeout=2)
            last = response.text
            if response.status_code == 200:
                return
        except httpx.HTTPError as exc:
            last = str(exc)
        time.sleep(0.5)
    raise RuntimeError(f"stack not ready after {timeout}s: {last}")


def stop_stack(procs: dict) -> None:
    import signal

    for proc in procs.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs.values():
        try:
            proc.wait(15)
        except Exception:  # noqa: BLE001
            proc.kill()


@pytest.fixture(scope="session")
def live_stack(settings, corpus, servers):
    """Every service as its own process over the real servers and the ingested test corpus.
    Generation is the production default (anthropic) with no API key, so the extractive fallback answers."""
    tmp = servers["tmp"] / "stack"
    url, procs, env = start_stack(settings, tmp)
    try:
        wait_until_ready(url, procs, tmp)
        yield {"url": url, "procs": procs, "env": env, "tmp": tmp, "admin_token": ADMIN_TOKEN}
    finally:
        stop_stack(procs)


@pytest.fixture(scope="session")
def live_gateway(live_stack) -> str:
    return live_stack["url"]
