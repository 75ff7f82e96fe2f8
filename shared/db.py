"""PostgreSQL access: the pool, migrations, and the query layer every reader goes through.

The rule "readers see only active rows" lives in ``active_rows`` and nowhere else: every query that
reads sections or their windows calls it to build its WHERE clause.
"""
from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any, Iterable

import asyncpg
from pgvector.asyncpg import register_vector

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
_MIGRATION_LOCK_KEY = 7_311_2024  # pg_advisory_lock key: one migrator at a time


# --------------------------------------------------------------------------------------------
# connections
# --------------------------------------------------------------------------------------------
async def _init_connection(conn: asyncpg.Connection) -> None:
    try:
        await register_vector(conn)
    except ValueError:
        # the extension does not exist yet (first connection before migrations): nothing to register
        pass
    # binary format, so COPY (binary) can load jsonb columns too
    await conn.set_type_codec(
        "jsonb", encoder=_jsonb_encode, decoder=_jsonb_decode, schema="pg_catalog", format="binary"
    )


def _jsonb_encode(value: Any) -> bytes:
    return b"\x01" + json.dumps(value).encode()


def _jsonb_decode(data: bytes) -> Any:
    return json.loads(data[1:])


async def create_pool(dsn: str, *, min_size: int = 1, max_size: int = 10) -> asyncpg.Pool:
    # statement_cache_size=0 would lose prepared-statement speed; instead, the vector queries embed
    # the model literal so a cached generic plan still matches the partial HNSW index.
    return await asyncpg.create_pool(
        dsn, min_size=min_size, max_size=max_size, init=_init_connection, command_timeout=60
    )


async def connect(dsn: str) -> asyncpg.Connection:
    conn = await asyncpg.connect(dsn)
    await _init_connection(conn)
    return conn


# --------------------------------------------------------------------------------------------
# migrations
# --------------------------------------------------------------------------------------------
def migration_files() -> list[tuple[int, str, Path]]:
    found = []
    for path in sorted(MIGRATIONS_DIR.glob("*.sql")):
        match = re.match(r"(\d+)_(.+)\.sql$", path.name)
        if match:
            found.append((int(match.group(1)), match.group(2), path))
    return found


async def migrate(dsn: str) -> list[int]:
    """Apply pending migrations in order, each in its own transaction; returns the versions applied."""
    conn = await asyncpg.connect(dsn)
    applied_now: list[int] = []
    try:
        await conn.execute("SELECT pg_advisory_lock($1)", _MIGRATION_LOCK_KEY)
        await conn.execute(
            """CREATE TABLE IF NOT EXISTS schema_migrations (
                   version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"""
        )
        done = {r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations")}
        for version, name, path in migration_files():
            if version in done:
                continue
            async with conn.transaction():
                await conn.execute(path.read_text())
                await conn.execute("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", version, name)
            applied_now.append(version)
            log.info("applied migration %04d_%s", version, name)
    finally:
        try:
            await conn.execute("SELECT pg_advisory_unlock($1)", _MIGRATION_LOCK_KEY)
        finally:
            await conn.close()
    return applied_now


# --------------------------------------------------------------------------------------------
# the query layer
# --------------------------------------------------------------------------------------------
def active_rows(alias: str) -> str:
    """The one definition of 'rows a reader may see': the active corpus version.

    Every reader of ``sections``, ``section_windows`` or ``section_lexemes`` puts this in its WHERE clause.
    """
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", alias):
        raise ValueError(f"bad table alias {alias!r}")
    return f"{alias}.status = 'active'"


def sql_literal(value: str) -> str:
    """Quote a string as an SQL literal (for partial-index predicates that parameters cannot match)."""
    return "'" + value.replace("'", "''") + "'"


def vector_index_name(table: str, model: str, dim: int) -> str:
    slug = re.sub(r"[^a-z0-9]+", "_", model.lower()).strip("_")[:40]
    return f"{table}_hnsw_{slug}_{dim}"


def vector_index_predicate(table: str, model: str) -> str:
    """The rows a model's HNSW index holds: the model's active rows, exactly what the dense searches read (their
    WHERE implies it, so the planner uses the index). Staged rows enter the graph once, when the swap activates
    them, and superseded ones leave it: a refresh inserts each new row into the graph once (not at the COPY, the
    activation and the superseding UPDATE), and the graph never fills with versions no search may return."""
    return f"{active_rows(table)} AND embedding_model = {sql_literal(model)}"


async def ensure_vector_indexes(conn: asyncpg.Connection, model: str, dim: int) -> None:
    """One partial HNSW cosine index per embedding model (the column itself is dimensionless)."""
    for table in ("section_windows", "sections"):
        name = vector_index_name(table, model, dim)
        await conn.execute(
            f"CREATE INDEX IF NOT EXISTS {name} ON {table} USING hnsw "
            f"((embedding::vector({dim})) vector_cosine_ops) WHERE {vector_index_predicate(table, model)}"
        )


SECTION_COLUMNS = (
    "s.id, s.version_id, s.status, s.title, s.chapter, s.subchapter, s.part, s.part_heading, s.subpart, "
    "s.subject_group, s.section, s.kind, s.heading, s.agency, s.cfr_ref, s.text, s.paragraphs, s.source_note, "
    "s.editorial_notes, s.reserved, s.removed, s.content_hash, s.source, s.source_date, s.embedding_model"
)


async def fetch_active_sections(
    conn: asyncpg.Connection | asyncpg.Pool, cfr_refs: Iterable[str]
) -> dict[str, asyncpg.Record]:
    refs = list(dict.fromkeys(cfr_refs))
    if not refs:
        return {}
    rows = await conn.fetch(
        f"SELECT {SECTION_COLUMNS} FROM sections s WHERE {active_rows('s')} AND s.cfr_ref = ANY($1::text[])",
        refs,
    )
    return {r["cfr_ref"]: r for r in rows}


async def fetch_active_section(
    conn: asyncpg.Connection | asyncpg.Pool, title: int, section: str
) -> asyncpg.Record | None:
    return await conn.fetchrow(
        f"SELECT {SECTION_COLUMNS} FROM sections s WHERE {active_rows('s')} AND s.title = $1 AND s.section = $2",
        title,
        section,
    )


async def active_corpus_summary(conn: asyncpg.Connection | asyncpg.Pool) -> list[dict[str, Any]]:
    rows = await conn.fetch(
        f"""
        SELECT v.title, v.version_id, v.source, v.source_date, v.embedding_model, v.activated_at,
               count(s.id) AS sections,
               count(s.id) FILTER (WHERE s.reserved) AS reserved,
               count(DISTINCT s.part) AS parts
        FROM corpus_versions v
        JOIN sections s ON s.version_id = v.version_id AND {active_rows('s')}
        WHERE v.status = 'active'
        GROUP BY v.title, v.version_id
        ORDER BY v.title
        """
    )
    return [dict(r) for r in rows]


async def active_titles(conn: asyncpg.Connection | asyncpg.Pool) -> list[int]:
    rows = await conn.fetch("SELECT title FROM corpus_versions WHERE status = 'active' ORDER BY title")
    return [r["title"] for r in rows]


# --------------------------------------------------------------------------------------------
# retrieval queries (all readers of active rows go through active_rows)
# --------------------------------------------------------------------------------------------
async def catalog_rows(conn: asyncpg.Connection | asyncpg.Pool) -> list[asyncpg.Record]:
    return await conn.fetch(
        f"SELECT s.id, s.cfr_ref, s.title, s.part, s.section, s.heading, s.kind, s.reserved FROM sections s "
        f"WHERE {active_rows('s')}"
    )


async def active_signature(conn: asyncpg.Connection | asyncpg.Pool) -> tuple:
    rows = await conn.fetch("SELECT version_id FROM corpus_versions WHERE status = 'active' ORDER BY version_id")
    return tuple(r["version_id"] for r in rows)


async def active_embedding_models(conn: asyncpg.Connection | asyncpg.Pool) -> list[str]:
    rows = await conn.fetch("SELECT DISTINCT embedding_model FROM corpus_versions WHERE status = 'active'")
    return [r["embedding_model"] for r in rows]


async def dense_window_search(
    conn: asyncpg.Connection, query_vector, model: str, dim: int, limit: int, ef_search: int = 100
) -> list[asyncpg.Record]:
    """Best windows by cosine over the partial HNSW index of ``model``; one row per section (its best window).

    The model name is a literal (not a parameter) so a cached generic plan still matches the partial
    index (``vector_index_predicate``: active rows of the model); iterative scans keep returning rows when a
    filter removes candidates.
    """
    async with conn.transaction():
        await conn.execute(f"SET LOCAL hnsw.ef_search = {int(ef_search)}; SET LOCAL hnsw.iterative_scan = relaxed_order")
        return await conn.fetch(
            f"""
            WITH nearest AS MATERIALIZED (
                SELECT w.section_id, 1 - (w.embedding::vector({dim}) <=> $1::vector({dim})) AS similarity
                FROM section_windows w
                WHERE {active_rows('w')} AND w.embedding_model = {sql_literal(model)}
                ORDER BY w.embedding::vector({dim}) <=> $1::vector({dim})
                LIMIT $2
            )
            SELECT section_id, max(similarity) AS similarity FROM nearest GROUP BY section_id
            ORDER BY similarity DESC
            """,
            query_vector, limit,
        )


async def lexeme_document_frequencies(conn: asyncpg.Connection | asyncpg.Pool) -> tuple[int, dict[str, int]]:
    """How many active sections hold each lexeme (for IDF weighting of full-text queries)."""
    total = await conn.fetchval(f"SELECT count(*) FROM sections s WHERE {active_rows('s')}")
    inner = f"SELECT s.tsv FROM sections s WHERE {active_rows('s')}"
    rows = await conn.fetch("SELECT word, ndoc FROM ts_stat($1)", inner)
    return total, {r["word"]: r["ndoc"] for r in rows}


async def question_lexemes(conn: asyncpg.Connection | asyncpg.Pool, question: str) -> list[str]:
    rows = await conn.fetch("SELECT lexeme FROM unnest(to_tsvector('english', $1))", question)
    return [r["lexeme"] for r in rows]


async def lexeme_presence(conn: asyncpg.Connection | asyncpg.Pool, section_ids: list[int],
                          lexemes: list[str]) -> dict[int, dict[str, set[str]]]:
    """Which of ``lexemes`` each active section holds, and where: the tsvector weight labels ('A' heading,
    'B' hierarchy, 'D' text). Reads the candidates' own tsvectors, so the cost follows the few sections asked for."""
    if not section_ids or not lexemes:
        return {}
    rows = await conn.fetch(
        f"SELECT s.id, u.lexeme, u.weights FROM sections s, unnest(s.tsv) AS u "
        f"WHERE s.id = ANY($1::bigint[]) AND {active_rows('s')} AND u.lexeme = ANY($2::text[])",
        section_ids, lexemes,
    )
    out: dict[int, dict[str, set[str]]] = {}
    for r in rows:
        out.setdefault(r["id"], {})[r["lexeme"]] = set(r["weights"])
    return out


async def index_lexemes(conn: asyncpg.Connection, version_id: int) -> int:
    """Write the full-text postings of a version's sections (at its activation, in the swap transaction): one row
    per lexeme of each section's tsvector, weighted by its ts_rank there (heading A above hierarchy B above text D,
    normalised by the section's length)."""
    status = await conn.execute(
        """
        INSERT INTO section_lexemes (lexeme, section_id, version_id, status, title, weight)
        SELECT u.lexeme, s.id, s.version_id, s.status, s.title, ts_rank(s.tsv, quote_literal(u.lexeme)::tsquery, 1)
        FROM sections s, unnest(s.tsv) AS u
        WHERE s.version_id = $1
        """,
        version_id,
    )
    return int(status.split()[-1])


async def absent_phrases(conn: asyncpg.Connection | asyncpg.Pool, phrases: list[str]) -> list[str]:
    """The phrases no active section contains (as a phrase of its tsvector: same words, same order)."""
    if not phrases:
        return []
    rows = await conn.fetch(
        f"""
        SELECT p FROM unnest($1::text[]) AS p
        WHERE numnode(phraseto_tsquery('english', p)) > 0
          AND NOT EXISTS (SELECT 1 FROM sections s WHERE {active_rows('s')}
                          AND s.tsv @@ phraseto_tsquery('english', p))
        """,
        phrases,
    )
    return [r["p"] for r in rows]


async def fulltext_search(
    conn: asyncpg.Connection | asyncpg.Pool, lexemes: list[str], weights: list[float], limit: int,
    postings_per_lexeme: int = 5000,
) -> list[asyncpg.Record]:
    """PostgreSQL full-text ranking over the weighted tsvector (heading A, hierarchy B, text D), read from its
    inverted index (``section_lexemes``).

    A section's rank is the sum over the question's lexemes of IDF × ts_rank(tsv, lexeme), so a rare word of the
    question ("alprazolam") counts for more than a common one ("drug") — BM25's idea on PostgreSQL's own ranking.
    Each lexeme contributes its ``postings_per_lexeme`` best postings (an index range scan, best first): exact
    while no lexeme is in more sections than that; beyond, the sections where a common word weighs least lose
    that word's small share. The cost follows the postings read, not the number of sections that match.
    """
    if not lexemes:
        return []
    return await conn.fetch(
        f"""
        SELECT p.section_id, sum(t.w * p.weight) AS rank
        FROM unnest($1::text[], $2::float8[]) AS t(l, w)
        CROSS JOIN LATERAL (
            SELECT x.section_id, x.weight FROM section_lexemes x
            WHERE x.lexeme = t.l AND {active_rows('x')}
            ORDER BY x.weight DESC
            LIMIT $4
        ) AS p
        GROUP BY p.section_id
        ORDER BY rank DESC, p.section_id
        LIMIT $3
        """,
        lexemes, weights, limit, postings_per_lexeme,
    )


async def dense_section_search(
    conn: asyncpg.Connection, query_vector, model: str, dim: int, limit: int, ef_search: int = 100
) -> list[asyncpg.Record]:
    """Sections by the cosine of their whole-section embedding (the mean of their windows)."""
    async with conn.transaction():
        # on a small table the planner prefers a scan + sort of every section (15-20 ms at 3,824, more as
        # ef_search grows) to the index (1-3 ms): only the HNSW index yields this order, so rule the others out
        await conn.execute(f"SET LOCAL hnsw.ef_search = {int(ef_search)}; SET LOCAL hnsw.iterative_scan = relaxed_order;"
                           " SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off; SET LOCAL enable_sort = off")
        return await conn.fetch(
            f"""
            SELECT s.id AS section_id, 1 - (s.embedding::vector({dim}) <=> $1::vector({dim})) AS similarity
            FROM sections s
            WHERE {active_rows('s')} AND s.embedding_model = {sql_literal(model)}
            ORDER BY s.embedding::vector({dim}) <=> $1::vector({dim})
            LIMIT $2
            """,
            query_vector, limit,
        )


async def section_similarities(
    conn: asyncpg.Connection | asyncpg.Pool, section_ids: list[int], query_vector, model: str, dim: int
) -> dict[int, float]:
    """Exact best-window cosine for given sections (hits that came from full-text or citations)."""
    if not section_ids:
        return {}
    rows = await conn.fetch(
        f"""
        SELECT w.section_id, max(1 - (w.embedding::vector({dim}) <=> $2::vector({dim}))) AS similarity
        FROM section_windows w
        WHERE {active_rows('w')} AND w.embedding_model = {sql_literal(model)} AND w.section_id = ANY($1::bigint[])
        GROUP BY w.section_id
        """,
        section_ids, query_vector,
    )
    return {r["section_id"]: float(r["similarity"]) for r in rows}


async def active_sections_by_id(conn: asyncpg.Connection | asyncpg.Pool, ids: list[int],
                                with_text: bool = True) -> dict[int, asyncpg.Record]:
    """Active sections by id; ``with_text=False`` leaves the body (text, paragraphs, notes) empty, for callers
    that show only the metadata (a search result list: 60 KB of text per reply otherwise, up to 400 KB)."""
    if not ids:
        return {}
    columns = SECTION_COLUMNS if with_text else SECTION_COLUMNS.replace(
        "s.text, s.paragraphs, s.source_note, s.editorial_notes",
        "'' AS text, '[]'::jsonb AS paragraphs, s.source_note, '[]'::jsonb AS editorial_notes")
    rows = await conn.fetch(
        f"SELECT {columns} FROM sections s WHERE {active_rows('s')} AND s.id = ANY($1::bigint[])", ids
    )
    return {r["id"]: r for r in rows}


async def active_ids_for_refs(conn: asyncpg.Connection | asyncpg.Pool, refs: list[str]) -> dict[str, int]:
    if not refs:
        return {}
    rows = await conn.fetch(
        f"SELECT s.id, s.cfr_ref FROM sections s WHERE {active_rows('s')} AND s.cfr_ref = ANY($1::text[])", refs
    )
    return {r["cfr_ref"]: r["id"] for r in rows}


async def latest_superseded(
    conn: asyncpg.Connection | asyncpg.Pool, refs: list[str], query_vector, model: str, dim: int
) -> list[asyncpg.Record]:
    """The newest superseded row of each given section, with its similarity to the question — what the
    scorer's stale check compares against the active text. Superseded rows are read nowhere else."""
    if not refs:
        return []
    return await conn.fetch(
        f"""
        SELECT DISTINCT ON (s.cfr_ref) {SECTION_COLUMNS},
               1 - (s.embedding::vector({dim}) <=> $2::vector({dim})) AS similarity
        FROM sections s
        WHERE s.status = 'superseded' AND s.cfr_ref = ANY($1::text[]) AND s.embedding_model = {sql_literal(model)}
        ORDER BY s.cfr_ref, s.version_id DESC
        """,
        refs, query_vector,
    )
