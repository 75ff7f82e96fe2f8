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
