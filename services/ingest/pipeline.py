"""CFR XML → a staged corpus version per title → sanity checks → one transaction that swaps it in.

Differential: a section whose content hash (and embedding model) equals the active row's reuses its
stored window embeddings; nothing unchanged is embedded twice. A run that changes nothing (and is not
forced) writes no new version. A failed check, an error or a crash leaves the active version serving.
"""
from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Awaitable, Callable, Iterable

import asyncpg
import numpy as np

from services.ingest.ecfr_client import ECFRClient, ECFRError
from services.ingest.parsing import CFRParseError, parse_bytes, parse_file, shipped_corpus_files
from shared import db, metrics
from shared.config import Settings
from shared.corpus import ParsedSection
from shared.embeddings import Embedder, get_embedder, section_windows
from shared.messages import IngestRequest

log = logging.getLogger(__name__)

Progress = Callable[[str, int, int], Awaitable[None] | None]  # (message, done, total)


class IngestError(RuntimeError):
    """A run that cannot go on; the message is what the run record and the user see."""


class IngestBusy(IngestError):
    pass


@dataclass
class CheckLimits:
    min_count_ratio: float = 0.90  # staged sections ≥ this × active sections
    max_empty_share: float = 0.02  # non-reserved sections with no text
    sample_size: int = 5  # sections whose own heading must find them among the top 10


@dataclass
class TitleOutcome:
    title: int
    version_id: int | None
    counts: dict[str, int]
    activated: bool
    checks: dict = field(default_factory=dict)
    message: str = ""


SECTION_COPY_COLUMNS = [
    "id", "version_id", "status", "title", "chapter", "subchapter", "part", "part_heading", "subpart",
    "subject_group", "section", "kind", "heading", "agency", "cfr_ref", "text", "paragraphs", "source_note",
    "editorial_notes", "reserved", "removed", "content_hash", "source", "source_date", "embedding",
    "embedding_model",
]
WINDOW_COPY_COLUMNS = ["section_id", "version_id", "status", "title", "window_no", "embedding_model", "embedding"]


# --------------------------------------------------------------------------------------------
# sources
# --------------------------------------------------------------------------------------------
async def load_sections(request: IngestRequest, settings: Settings) -> dict[int, list[ParsedSection]]:
    """Parse the requested source into sections grouped by title (parts filter applied)."""
    by_title: dict[int, list[ParsedSection]] = defaultdict(list)
    parts = set(request.parts or [])

    def keep(section: ParsedSection) -> bool:
        return (request.title is None or section.title == request.title) and (not parts or section.part in parts)

    if request.source.startswith("ecfr:"):
        if request.title is None:
            raise IngestError("an eCFR ingest needs a title (e.g. --title 21)")
        date = request.source.split(":", 1)[1] or time.strftime("%Y-%m-%d")
        async with ECFRClient() as client:
            try:
                for part in sorted(parts) or [None]:
                    body = await client.full_xml(date, request.title, part)
                    for section in parse_bytes(body, f"ecfr:title-{request.title}:{date}:{part or 'all'}",
                                               source_date=date):
                        if keep(section):
                            by_title[section.title].append(section)
            except ECFRError as exc:
                raise IngestError(f"eCFR fetch failed: {exc}") from exc
    else:
        if request.source == "shipped":
            files = shipped_corpus_files(settings.corpus_dir)
        else:
            path = Path(request.source)
            if not path.exists():
                raise IngestError(f"source {request.source!r} does not exist")
            files = shipped_corpus_files(path) if path.is_dir() else [path]
        if not files:
            raise IngestError(f"no CFR XML files in {request.source!r}")

        def parse_all() -> None:
            for path in files:
                for section in parse_file(path):
                    if keep(section):
                        by_title[section.title].append(section)

        try:
            await asyncio.to_thread(parse_all)
        except CFRParseError as exc:
            raise IngestError(str(exc)) from exc
    if request.title is not None and request.title not in by_title:
        raise IngestError(f"the source holds no sections of title {request.title}"
                          + (f" in parts {sorted(parts)}" if parts else ""))
    if not by_title:
        raise IngestError("the source holds no CFR sections")
    for title, sections in by_title.items():
        seen: dict[str, ParsedSection] = {}
        for section in sections:
            if section.cfr_ref in seen:
                raise IngestError(f"{section.cfr_ref} appears twice ({seen[section.cfr_ref].source}, {section.source})")
            seen[section.cfr_ref] = section
    return dict(by_title)


# --------------------------------------------------------------------------------------------
# the run
# --------------------------------------------------------------------------------------------
class IngestPipeline:
    def __init__(self, pool: asyncpg.Pool, settings: Settings, embedder: Embedder | None = None,
                 limits: CheckLimits | None = None):
        self.pool = pool
        self.settings = settings
        self._embedder = embedder
        self.limits = limits or CheckLimits()

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = get_embedder(self.settings)
        return self._embedder

    async def create_run(self, request: IngestRequest) -> str:
        run_id = request.run_id or uuid.uuid4().hex[:12]
        await self.pool.execute(
            "INSERT INTO ingest_runs (run_id, title, source, parts, state) VALUES ($1, $2, $3, $4, 'queued') "
            "ON CONFLICT (run_id) DO NOTHING",
            run_id, request.title, request.source, request.parts,
        )
        return run_id

    async def run(self, request: IngestRequest, progress: Progress | None = None) -> dict:
        """Run one ingest to completion; returns the run record. Never raises for a bad source: the error
        is recorded on the run (state failed) and the active version keeps serving."""
        run_id = await self.create_run(request)

        async def report(message: str, done: int = 0, total: int = 0) -> None:
            await self.pool.execute(
                "UPDATE ingest_runs SET message = $2, done = $3, total = $4 WHERE run_id = $1",
                run_id, message, done, total,
            )
            if progress is not None:
                result = progress(message, done, total)
                if asyncio.iscoroutine(result):
                    await result

        lock_conn = await self.pool.acquire()
        locked_titles: list[int] = []
        try:
            await self.pool.execute("UPDATE ingest_runs SET state = 'running' WHERE run_id = $1", run_id)
            await report("parsing")
            by_title = await load_sections(request, self.settings)
            for title in sorted(by_title):
                got = await lock_conn.fetchval("SELECT pg_try_advisory_lock(7311, $1)", title)
                if not got:
                    raise IngestBusy(f"another ingest of title {title} is running; try again when it finishes")
                locked_titles.append(title)
            outcomes = []
            for title in sorted(by_title):
                outcomes.append(await self._ingest_title(title, by_title[title], request, run_id, report))
            counts: dict[str, int] = defaultdict(int)
            for outcome in outcomes:
                for key, value in outcome.counts.items():
                    counts[key] += value
            failed = [o for o in outcomes if not o.activated and o.message.startswith("check failed")]
            state = "failed" if failed else "succeeded"
            message = "; ".join(o.message for o in outcomes)
            await self.pool.execute(
                "UPDATE ingest_runs SET state = $2, message = $3, counts = $4, finished_at = now(), "
                "version_ids = $5, error = $6 WHERE run_id = $1",
                run_id, state, message, dict(counts), [o.version_id for o in outcomes if o.version_id],
                "; ".join(o.message for o in failed) or None,
            )
            metrics.INGEST_RUNS.labels(state).inc()
            for key, value in counts.items():
                metrics.INGEST_SECTIONS.labels(key).inc(value)
        except Exception as exc:  # noqa: BLE001 - recorded on the run; the active version is untouched
            log.exception("ingest run %s failed", run_id)
            message = str(exc) if isinstance(exc, IngestError) else f"{type(exc).__name__}: {exc}"
            await self.pool.execute(
                "UPDATE ingest_runs SET state = 'failed', error = $2, message = $2, finished_at = now() "
                "WHERE run_id = $1", run_id, message,
            )
            metrics.INGEST_RUNS.labels("failed").inc()
        finally:
            for title in locked_titles:
                await lock_conn.execute("SELECT pg_advisory_unlock(7311, $1)", title)
            await self.pool.release(lock_conn)
        await self._refresh_gauges()
        return dict(await self.pool.fetchrow("SELECT * FROM ingest_runs WHERE run_id = $1", run_id))

    async def _refresh_gauges(self) -> None:
        for row in await db.active_corpus_summary(self.pool):
            metrics.ACTIVE_SECTIONS.labels(str(row["title"])).set(row["sections"])

    async def _ingest_title(self, title: int, parsed: list[ParsedSection], request: IngestRequest, run_id: str,
                            report) -> TitleOutcome:
        model = self.embedder.model_name
        active = await self.pool.fetch(
            f"SELECT s.id, s.cfr_ref, s.part, s.content_hash, s.embedding_model FROM sections s "
            f"WHERE {db.active_rows('s')} AND s.title = $1", title,
        )
        active_by_ref = {r["cfr_ref"]: r for r in active}
        parts_filter = set(request.parts or [])
        incoming = {s.cfr_ref: s for s in parsed}
        # sections of other parts carry forward unchanged when only some parts are refreshed
        carried = [r for r in active if parts_filter and r["part"] not in parts_filter]
        counts = {"added": 0, "changed": 0, "removed": 0, "unchanged": 0, "embedded": 0, "reused": 0,
                  "carried": len(carried)}
        reuse: dict[str, int] = {}
        to_embed: list[ParsedSection] = []
        for ref, section in incoming.items():
            old = active_by_ref.get(ref)
            if old is None:
                counts["added"] += 1
                to_embed.append(section)
            elif old["content_hash"] == section.content_hash and old["embedding_model"] == model:
                counts["unchanged"] += 1
                reuse[ref] = old["id"]
            else:
                counts["changed"] += 1
                to_embed.append(section)
        counts["removed"] = sum(
            1 for r in active if r["cfr_ref"] not in incoming and (not parts_filter or r["part"] in parts_filter)
        )
        if not request.force and active and counts["added"] == counts["changed"] == counts["removed"] == 0:
            await report(f"title {title}: nothing changed", len(incoming), len(incoming))
            return TitleOutcome(title, None, counts, activated=False,
                                message=f"title {title}: unchanged ({counts['unchanged']} sections), no new version")
        version_id = await self.pool.fetchval(
            "INSERT INTO corpus_versions (title, status, source, source_date, embedding_model, embedding_dim, run_id)"
            " VALUES ($1, 'staged', $2, $3, $4, $5, $6) RETURNING version_id",
            title, request.source, _latest_date(parsed), model, self.embedder.dim, run_id,
        )
        try:
            embedded = await self._embed(to_embed, title, report)
            counts["embedded"] = len(to_embed)
            counts["reused"] = len(reuse)
            await report(f"title {title}: loading", len(incoming), len(incoming))
            await self._load(version_id, title, incoming, embedded, reuse, [r["id"] for r in carried], model)
            checks = await self._check(version_id, title, len(active), model)
            if not checks["passed"]:
                await self._discard(version_id)
                return TitleOutcome(title, version_id, counts, activated=False, checks=checks,
                                    message=f"check failed for title {title}: {checks['failure']}")
            await self._swap(version_id, title)
        except BaseException:
            await self._discard(version_id)
            raise
        return TitleOutcome(title, version_id, counts, activated=True, checks=checks,
                            message=f"title {title}: version {version_id} active ({counts['added']} added, "
                                    f"{counts['changed']} changed, {counts['removed']} removed, "
                                    f"{counts['unchanged']} unchanged)")

    async def _embed(self, sections: list[ParsedSection], title: int, report) -> dict[str, np.ndarray]:
        windows: list[str] = []
        owners: list[str] = []
        for section in sections:
            for window in self._windows_for(section):
                windows.append(window)
                owners.append(section.cfr_ref)
        out: dict[str, list[np.ndarray]] = defaultdict(list)
        batch = max(64, self.settings.embedding_batch_size * 4)
        for start in range(0, len(windows), batch):
            vectors = await asyncio.to_thread(self.embedder.embed_documents, windows[start : start + batch])
            for owner, vector in zip(owners[start : start + batch], vectors):
                out[owner].append(vector)
            done_sections = len({o for o in owners[: start + batch]})
            await report(f"title {title}: embedding", done_sections, len(sections))
        return {ref: np.stack(vecs) for ref, vecs in out.items()}

    async def _load(self, version_id: int, title: int, incoming: dict[str, ParsedSection],
                    embedded: dict[str, np.ndarray], reuse: dict[str, int], carried_ids: list[int], model: str) -> None:
        async with self.pool.acquire() as conn:
            await db.ensure_vector_indexes(conn, model, self.embedder.dim)
            ids = [r[0] for r in await conn.fetch(
                "SELECT nextval('sections_id_seq') FROM generate_series(1, $1)", len(incoming))]
            reused_windows = await _windows_of(conn, list(reuse.values()))
            section_rows, window_rows = [], []
            for new_id, (ref, section) in zip(ids, incoming.items()):
                if ref in reuse:
                    vectors = reused_windows.get(reuse[ref])
                else:
                    vectors = embedded.get(ref)
                if vectors is None or len(vectors) == 0:
                    raise IngestError(f"{ref} has no embedding")
                mean = vectors.mean(axis=0)
                mean = mean / (np.linalg.norm(mean) or 1.0)
                section_rows.append(_section_record(new_id, version_id, section, mean.astype(np.float32), model))
                for window_no, vector in enumerate(vectors):
                    window_rows.append((new_id, version_id, "staged", title, window_no, model,
                                        np.asarray(vector, dtype=np.float32)))
            async with conn.transaction():
                await conn.copy_records_to_table("sections", records=section_rows, columns=SECTION_COPY_COLUMNS)
                await conn.copy_records_to_table("section_windows", records=window_rows, columns=WINDOW_COPY_COLUMNS)
                if carried_ids:
                    await _carry_forward(conn, carried_ids, version_id)

    async def _check(self, version_id: int, title: int, active_count: int, model: str) -> dict:
        limits = self.limits
        async with self.pool.acquire() as conn:
            stats = await conn.fetchrow(
                "SELECT count(*) AS n, count(*) FILTER (WHERE NOT reserved AND NOT removed AND length(text) = 0) "
                "AS empty, count(*) FILTER (WHERE embedding IS NULL) AS unembedded FROM sections WHERE version_id = $1",
                version_id,
            )
            windowless = await conn.fetchval(
                "SELECT count(*) FROM sections s WHERE s.version_id = $1 AND NOT EXISTS "
                "(SELECT 1 FROM section_windows w WHERE w.section_id = s.id)", version_id,
            )
            checks: dict = {"sections": stats["n"], "active_before": active_count, "empty": stats["empty"],
                            "unembedded": stats["unembedded"] + windowless, "passed": True, "failure": None}
            if active_count and stats["n"] < limits.min_count_ratio * active_count:
                checks.update(passed=False, failure=f"{stats['n']} sections is far below the active version's "
                                                    f"{active_count}")
            elif stats["n"] and stats["empty"] / stats["n"] > limits.max_empty_share:
                checks.update(passed=False, failure=f"{stats['empty']} of {stats['n']} sections have no text")
            elif checks["unembedded"]:
                checks.update(passed=False, failure=f"{checks['unembedded']} sections are not embedded")
            else:
                found = await self._sample_search(conn, version_id, model)
                checks["sample_search"] = found
                if found["hits"] < found["tried"]:
                    checks.update(passed=False, failure=f"sample search found {found['hits']} of {found['tried']} "
                                                        f"sections by their own heading")
        await self.pool.execute("UPDATE corpus_versions SET checks = $2, section_count = $3 WHERE version_id = $1",
                                version_id, checks, checks["sections"])
        return checks

    async def _sample_search(self, conn: asyncpg.Connection, version_id: int, model: str) -> dict:
        """Embed the first window of a few sections again and search the staged vectors with it: each must
        come back first. Catches vectors that do not belong to their rows (wrong model, misaligned load)."""
        sample = await conn.fetch(
            "SELECT id, part_heading, subpart, subject_group, title, part, section, heading, text FROM sections "
            "WHERE version_id = $1 AND NOT reserved AND length(text) > 200 ORDER BY content_hash LIMIT $2",
            version_id, self.limits.sample_size,
        )
        if not sample:
            return {"tried": 0, "hits": 0}
        texts = [self._windows_for(ParsedSection(
            title=r["title"], part=r["part"], section=r["section"], heading=r["heading"], text=r["text"],
            part_heading=r["part_heading"], subpart=r["subpart"], subject_group=r["subject_group"]))[0] for r in sample]
        vectors = await asyncio.to_thread(self.embedder.embed_documents, texts)
        dim = self.embedder.dim
        hits = 0
        for row, vector in zip(sample, vectors):
            top = await conn.fetch(
                f"SELECT section_id FROM section_windows WHERE version_id = $1 AND embedding_model = "
                f"{db.sql_literal(model)} ORDER BY embedding::vector({dim}) <=> $2::vector({dim}) LIMIT 3",
                version_id, vector,
            )
            hits += any(t["section_id"] == row["id"] for t in top)
        return {"tried": len(sample), "hits": hits}

    def _windows_for(self, section: ParsedSection) -> list[str]:
        return section_windows(
            section.breadcrumb(), f"§ {section.section} {section.heading}", section.text or section.heading,
            words=self.settings.embedding_window_words, stride=self.settings.embedding_window_stride,
            max_windows=self.settings.embedding_max_windows,
        )

    async def _swap(self, version_id: int, title: int) -> None:
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(7312, $1)", title)
            old = await conn.fetchval("SELECT version_id FROM corpus_versions WHERE title = $1 AND status = 'active'",
                                      title)
            if old is not None:
                await conn.execute("UPDATE sections SET status = 'superseded' WHERE version_id = $1", old)
                await conn.execute("UPDATE section_windows SET status = 'superseded' WHERE version_id = $1", old)
                await conn.execute("UPDATE corpus_versions SET status = 'superseded', superseded_at = now() "
                                   "WHERE version_id = $1", old)
            await conn.execute("UPDATE sections SET status = 'active' WHERE version_id = $1", version_id)
            await conn.execute("UPDATE section_windows SET status = 'active' WHERE version_id = $1", version_id)
            await conn.execute("UPDATE corpus_versions SET status = 'active', activated_at = now() "
                               "WHERE version_id = $1", version_id)
        log.info("title %d: version %d active (was %s)", title, version_id, old)

    async def _discard(self, version_id: int) -> None:
        """A staged version that will not serve: drop its rows, keep the record (as failed) for the audit."""
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute("DELETE FROM sections WHERE version_id = $1 AND status = 'staged'", version_id)
            await conn.execute("UPDATE corpus_versions SET status = 'failed' WHERE version_id = $1 AND "
                               "status = 'staged'", version_id)


def _latest_date(sections: Iterable[ParsedSection]) -> str | None:
    dates = [s.source_date for s in sections if s.source_date]
    return max(dates) if dates else None


def _section_record(new_id: int, version_id: int, s: ParsedSection, embedding: np.ndarray, model: str) -> tuple:
    return (
        new_id, version_id, "staged", s.title, s.chapter, s.subchapter, s.part, s.part_heading, s.subpart,
        s.subject_group, s.section, s.kind, s.heading, s.agency, s.cfr_ref, s.text,
        [{"designation": p.designation, "start": p.start, "end": p.end} for p in s.paragraphs],
        s.source_note, list(s.editorial_notes), s.reserved, s.removed, s.content_hash, s.source, s.source_date,
        embedding, model,
    )


async def _windows_of(conn: asyncpg.Connection, section_ids: list[int]) -> dict[int, np.ndarray]:
    if not section_ids:
        return {}
    rows = await conn.fetch(
        "SELECT section_id, window_no, embedding FROM section_windows WHERE section_id = ANY($1::bigint[]) "
        "ORDER BY section_id, window_no", section_ids,
    )
    grouped: dict[int, list] = defaultdict(list)
    for row in rows:
        grouped[row["section_id"]].append(np.asarray(row["embedding"].to_numpy() if hasattr(row["embedding"], "to_numpy")
                                                     else row["embedding"], dtype=np.float32))
    return {sid: np.stack(v) for sid, v in grouped.items()}


async def _carry_forward(conn: asyncpg.Connection, section_ids: list[int], version_id: int) -> None:
    """Copy unchanged rows of parts not being refreshed into the staged version (embeddings included)."""
    cols = [c for c in SECTION_COPY_COLUMNS if c not in ("id", "version_id", "status")]
    col_list = ", ".join(cols)
    mapping = await conn.fetch(
        f"INSERT INTO sections (version_id, status, {col_list}) "
        f"SELECT $2, 'staged', {col_list} FROM sections WHERE id = ANY($1::bigint[]) RETURNING id, cfr_ref",
        section_ids, version_id,
    )
    await conn.execute(
        "INSERT INTO section_windows (section_id, version_id, status, title, window_no, embedding_model, embedding) "
        "SELECT n.id, $2, 'staged', w.title, w.window_no, w.embedding_model, w.embedding "
        "FROM section_windows w JOIN sections o ON o.id = w.section_id "
        "JOIN sections n ON n.cfr_ref = o.cfr_ref AND n.version_id = $2 WHERE o.id = ANY($1::bigint[])",
        section_ids, version_id,
    )
    del mapping
