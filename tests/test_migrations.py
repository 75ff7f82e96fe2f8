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


async def test_0005_rebuilds_an_all_rows_vector_index_to_hold_active_rows_only(servers):
    """A database migrated before 0005 has HNSW indexes over every row of a model (staged and superseded too):
    0005 rebuilds each, same name and model (quotes in a model name included), on the model's active rows."""
    admin = await asyncpg.connect(servers["database_url"])
    await admin.execute("DROP DATABASE IF EXISTS regs_migrate_0005 WITH (FORCE)")
    await admin.execute("CREATE DATABASE regs_migrate_0005")
    url = servers["database_url"].rsplit("/", 1)[0] + "/regs_migrate_0005"
    try:
        await db.migrate(url)
        conn = await db.connect(url)
        try:
            models = ("all-MiniLM-L6-v2", "it's-a-model")
            for model in models:
                for table in ("section_windows", "sections"):  # as ensure_vector_indexes made them before 0005
                    await conn.execute(
                        f"CREATE INDEX {db.vector_index_name(table, model, 384)} ON {table} USING hnsw "
                        f"((embedding::vector(384)) vector_cosine_ops) WHERE embedding_model = {db.sql_literal(model)}")
            await conn.execute("DELETE FROM schema_migrations WHERE version = 5")
        finally:
            await conn.close()
        assert await db.migrate(url) == [5]
        conn = await db.connect(url)
        try:
            for model in models:
                await db.ensure_vector_indexes(conn, model, 384)  # what a new database gets: the same indexes
                for table in ("section_windows", "sections"):
                    definition = await conn.fetchval("SELECT indexdef FROM pg_indexes WHERE indexname = $1",
                                                     db.vector_index_name(table, model, 384))
                    assert "USING hnsw" in definition and "vector(384)" in definition
                    assert "(status = 'active'::text)" in definition, definition
                    assert f"(embedding_model = {db.sql_literal(model)}::text)" in definition, definition
            assert await conn.fetchval("SELECT count(*) FROM pg_indexes WHERE indexdef LIKE '%USING hnsw%'") == 4
        finally:
            await conn.close()
    finally:
        await admin.execute("DROP DATABASE IF EXISTS regs_migrate_0005 WITH (FORCE)")
        await admin.close()


def test_active_rows_is_the_one_filter():
    assert db.active_rows("s") == "s.status = 'active'"
