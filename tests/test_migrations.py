"""Migrations apply to an empty database and are idempotent."""
import asyncpg

from shared import db


async def test_migrations_apply_to_empty_database_and_are_idempotent(servers):
    admin = await asyncpg.connect(servers["database_url"])
    await admin.execute("DROP DATABASE IF EXISTS regs_migrate_check")
    await admin.execute("CREATE DATABASE regs_migrate_check")
    await admin.close()
    url = servers["database_url"].rsplit("/", 1)[0] + "/regs_migrate_check"
    first = await db.migrate(url)
    assert first == [v for v, _, _ in db.migration_files()]
    assert await db.migrate(url) == []  # second run: nothing to do
    conn = await db.connect(url)
    try:
        tables = {r["tablename"] for r in await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname='public'")}
        assert {"sections", "section_windows", "corpus_versions", "ingest_runs", "schema_migrations"} <= tables
        assert await conn.fetchval("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        indexes = {r["indexname"] for r in await conn.fetch("SELECT indexname FROM pg_indexes WHERE tablename='sections'")}
        assert {"sections_tsv", "sections_status_title_part_section"} <= indexes
    finally:
        await conn.close()


def test_active_rows_is_the_one_filter():
    assert db.active_rows("s") == "s.status = 'active'"
