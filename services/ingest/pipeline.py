"""CFR XML → a staged corpus version per title → sanity checks → one transaction that swaps it in.

Differential: a section whose content hash (and embedding model) equals the active row's reuses its
stored window embeddings; nothing unchanged is embedded twice. A run that changes nothing (and is not
forced) writes no new version. A failed check, an error or a crash leaves the active version serving.

Scope of a run (what "removed" means): ``parts`` when given; else the whole title for ``shipped`` and
``ecfr:DATE`` sources; else (a file or directory) the parts present in that source — ingesting a
part-level file never drops the title's other parts, they carry forward unchanged.

Safety:
- one ingest per title at a time: a per-title advisory lock, taken before parsing when the title is known
  (a duplicate is refused: "another ingest of title N is running");
- a cancelled run discards its staged version (shielded from a second cancel) and records the run failed;
- a staged version left by a dead process is found under the title lock (before a new one is staged, and
  by ``recover()`` at worker start) and discarded;
- checks (``CheckLimits``) compare the staged version with the active one in the run's scope; a failure
  names the check (``min_count_ratio``, ``max_empty_share``, ``embedded``, ``sample_search``).

First loads: COPY into the tables, with the partial HNSW index of the model built after the COPY when the
load is large compared with what the index already holds (see ``bench/bench_ingest.py``); small refreshes
insert into the existing index.
"""
from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from collections import Counter, defaultdict, deque
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

TITLE_LOCK = 7311  # pg_advisory_lock(TITLE_LOCK, title): one ingest per title at a time
SWAP_LOCK = 7312
# A model's first load of at least this many window rows builds the partial HNSW indexes after the COPY instead
# of inserting into them row by row. bench/bench_ingest.py, whole shipped corpus (3,824 sections, 13,840 windows,
# 2 busy cores): index first 41.8 s, COPY then build 9.7 s (4.3x); at 200 sections / 706 windows 1.0 s vs 0.4 s.
# A 50-section refresh into the built index takes 0.35 s against 4.8 s to rebuild: refreshes stay incremental.
BULK_INDEX_MIN_SECTIONS = 150  # ≈ 500 windows: below that, inserting into the graph costs less than a build
BULK_MAINTENANCE_WORK_MEM = "256MB"  # at least this for the HNSW build of a first load (graph in memory)


class IngestError(RuntimeError):
    """A run that cannot go on; the message is what the run record and the user see."""


class IngestBusy(IngestError):
    pass


@dataclass
class CheckLimits:
    min_count_ratio: float = 0.90  # staged sections (in the run's scope) ≥ this × active sections (same scope)
    max_empty_share: float = 0.02  # non-reserved sections with no text
    sample_size: int = 5  # sections (newly embedded ones first) whose first window must find them in the top 3


@dataclass
class TitleOutcome:
    title: int
    version_id: int | None
    counts: dict[str, int]
    activated: bool
    checks: dict = field(default_factory=dict)
    message: str = ""
    failed_check: str | None = None
    seconds: dict[str, float] = field(default_factory=dict)  # embed, load, check, swap


SECTION_COPY_COLUMNS = [
    "id", "version_id", "status", "title", "chapter", "subchapter", "part", "part_heading", "subpart",
    "subject_group", "section", "kind", "heading", "agency", "cfr_ref", "text", "paragraphs", "source_note",
    "editorial_notes", "reserved", "removed", "content_hash", "source", "source_date", "embedding",
    "embedding_model",
]
WINDOW_COPY_COLUMNS = ["section_id", "version_id", "status", "title", "window_no", "embedding_model", "embedding"]

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def part_of(identifier: str) -> str:
    """The part of an eCFR section identifier: "406.15" → "406", "Appendix A to Part 277" → "277"."""
    match = re.search(r"\bPart\s+(\S+)\s*$", identifier, re.IGNORECASE)
    if match:
        return match.group(1)
    return identifier.split(".", 1)[0].strip()


def run_scope(request: IngestRequest, sections: Iterable[ParsedSection]) -> set[str] | None:
    """The parts a run replaces (None: the whole title). See the module docstring."""
    if request.parts:
        return set(request.parts)
    if request.source == "shipped" or request.source.startswith("ecfr:"):
        return None
    return {s.part for s in sections}


# --------------------------------------------------------------------------------------------
# sources
# --------------------------------------------------------------------------------------------
async def load_sections(request: IngestRequest, settings: Settings,
                        ecfr_client: Callable[[], ECFRClient] | None = None,
                        report: Callable[..., Awaitable[None]] | None = None) -> dict[int, list[ParsedSection]]:
    """Parse the requested source into sections grouped by title (parts filter applied)."""
    by_title: dict[int, list[ParsedSection]] = defaultdict(list)
    parts = set(request.parts or [])

    def keep(section: ParsedSection) -> bool:
        return (request.title is None or section.title == request.title) and (not parts or section.part in parts)

    if request.source.startswith("ecfr:"):
        if request.title is None:
            raise IngestError("an eCFR ingest needs a title (e.g. --title 21)")
        date = request.source.split(":", 1)[1] or time.strftime("%Y-%m-%d")
        if not _DATE.fullmatch(date):
            raise IngestError(f"bad eCFR date {date!r} in source {request.source!r} (expected ecfr:YYYY-MM-DD)")
        factory = ecfr_client or (lambda: ECFRClient(base_url=settings.ecfr_base_url))
        async with factory() as client:
            wanted = sorted(parts) or [None]
            for n, part in enumerate(wanted):
                where = f"title {request.title}" + (f" part {part}" if part else "")
                if report is not None:
                    await report(f"fetching {where} from eCFR ({date})", n, len(wanted))
                try:
                    body = await client.full_xml(date, request.title, part)
                except ECFRError as exc:
                    raise IngestError(f"eCFR fetch of {where} failed: {exc}") from exc
                label = f"ecfr:title-{request.title}:{date}:{part or 'all'}"
                try:
                    parsed = await asyncio.to_thread(lambda: list(parse_bytes(body, label, source_date=date)))
                except CFRParseError as exc:
                    raise IngestError(f"eCFR returned unreadable XML for {where}: {exc}") from exc
                for section in parsed:
                    if keep(section):
                        by_title[section.title].append(section)
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
            raise IngestError(f"cannot parse the source: {exc}") from exc
        except OSError as exc:
            raise IngestError(f"cannot read the source: {exc}") from exc
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
                 limits: CheckLimits | None = None, *, ecfr_client: Callable[[], ECFRClient] | None = None):
        """``ecfr_client``: a factory of the eCFR client (default ``ECFRClient(base_url=settings.ecfr_base_url)``);
        tests pass one with short retry backoffs."""
        self.pool = pool
        self.settings = settings
        self._embedder = embedder
        self.limits = limits or CheckLimits()
        self._ecfr_client = ecfr_client or (lambda: ECFRClient(base_url=settings.ecfr_base_url))

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

    async def _fail_run(self, run_id: str, message: str) -> None:
        await self.pool.execute(
            "UPDATE ingest_runs SET state = 'failed', error = $2, message = $2, finished_at = now() "
            "WHERE run_id = $1", run_id, message,
        )
        metrics.INGEST_RUNS.labels("failed").inc()

    async def run(self, request: IngestRequest, progress: Progress | None = None) -> dict:
        """Run one ingest to completion; returns the run record. Never raises for a bad source: the error
        is recorded on the run (state failed) and the active version keeps serving. A cancelled run
        (CancelledError) discards its staged version, records itself failed and re-raises."""
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

        async def lock(title: int) -> None:
            if title in locked_titles:
                return
            if not await lock_conn.fetchval("SELECT pg_try_advisory_lock($1, $2)", TITLE_LOCK, title):
                raise IngestBusy(f"another ingest of title {title} is running; try again when it finishes")
            locked_titles.append(title)

        try:
            await self.pool.execute(
                "UPDATE ingest_runs SET state = 'running', error = NULL, finished_at = NULL WHERE run_id = $1", run_id)
            if request.title is not None:
                await lock(request.title)  # refuse a duplicate before spending time on parsing
            await report("parsing")
            started = time.perf_counter()
            by_title = await load_sections(request, self.settings, self._ecfr_client, report)
            timings: dict[str, float] = {"parse": time.perf_counter() - started}
            metrics.INGEST_STAGE_SECONDS.labels("parse").observe(timings["parse"])
            for title in sorted(by_title):
                await lock(title)
            outcomes = []
            bulk = await self._begin_bulk_load(sum(len(sections) for sections in by_title.values()))
            try:
                for title in sorted(by_title, key=lambda t: (-len(by_title[t]), t)):
                    outcomes.append(await self._ingest_title(title, by_title[title], request, run_id, report,
                                                             run_scope(request, by_title[title]), bulk))
            finally:
                if bulk:
                    # also after a failed title: the next (incremental) load needs the indexes again
                    await report("building the vector indexes")
                    started = time.perf_counter()
                    await asyncio.shield(_build_indexes(self.pool, self.embedder.model_name, self.embedder.dim))
                    timings["index"] = time.perf_counter() - started
                    metrics.INGEST_STAGE_SECONDS.labels("index").observe(timings["index"])
            counts: dict[str, int] = defaultdict(int)
            for outcome in outcomes:
                for key, value in outcome.counts.items():
                    counts[key] += value
                for stage, seconds in outcome.seconds.items():
                    timings[stage] = timings.get(stage, 0.0) + seconds
            timings = {stage: round(seconds, 3) for stage, seconds in timings.items()}
            failed = [o for o in outcomes if o.failed_check]
            state = "failed" if failed else "succeeded"
            message = "; ".join(o.message for o in outcomes)
            await self.pool.execute(
                "UPDATE ingest_runs SET state = $2, message = $3, counts = $4, finished_at = now(), "
                "version_ids = $5, error = $6, timings = $7 WHERE run_id = $1",
                run_id, state, message, dict(counts), [o.version_id for o in outcomes if o.version_id],
                "; ".join(o.message for o in failed) or None, timings,
            )
            metrics.INGEST_RUNS.labels(state).inc()
            for key in ("added", "changed", "removed", "unchanged"):
                metrics.INGEST_SECTIONS.labels(key).inc(counts.get(key, 0))
        except asyncio.CancelledError:
            log.warning("ingest run %s cancelled", run_id)
            await asyncio.shield(self._fail_run(run_id, "interrupted: the ingest was cancelled (worker stopping?)"))
            raise
        except Exception as exc:  # noqa: BLE001 - recorded on the run; the active version is untouched
            if isinstance(exc, IngestError):
                log.warning("ingest run %s failed: %s", run_id, exc)
                message = str(exc)
            else:
                log.exception("ingest run %s failed", run_id)
                message = f"{type(exc).__name__}: {exc}"
            await self._fail_run(run_id, message)
        finally:
            try:
                for title in locked_titles:
                    await lock_conn.execute("SELECT pg_advisory_unlock($1, $2)", TITLE_LOCK, title)
            finally:
                # release resets the session (pg_advisory_unlock_all) should the unlock above not have run
                await self.pool.release(lock_conn)
        await self._refresh_gauges()
        return dict(await self.pool.fetchrow("SELECT * FROM ingest_runs WHERE run_id = $1", run_id))

    # ------------------------------------------------------------------------------------------ eCFR
    async def changed_since(self, title: int, since: str) -> set[str]:
        """Identifiers of the sections/appendices of ``title`` the eCFR says were amended, added or removed on or
        after ``since`` (YYYY-MM-DD)."""
        if not _DATE.fullmatch(since):
            raise IngestError(f"bad date {since!r} (expected YYYY-MM-DD)")
        async with self._ecfr_client() as client:
            try:
                return await client.changed_sections(title, since)
            except ECFRError as exc:
                raise IngestError(f"eCFR versions of title {title} failed: {exc}") from exc

    async def refresh_since(self, title: int, since: str, date: str | None = None,
                            progress: Progress | None = None, force: bool = False) -> dict:
        """Refresh ``title`` from the eCFR as of ``date`` (default today), fetching only the parts holding a
        section changed since ``since``. Returns the run record; nothing changed: a succeeded run, no fetch."""
        date = date or time.strftime("%Y-%m-%d")
        request = IngestRequest(source=f"ecfr:{date}", title=title, run_id=uuid.uuid4().hex[:12], force=force)
        try:
            changed = await self.changed_since(title, since)
        except IngestError as exc:
            await self.create_run(request)
            await self._fail_run(request.run_id, str(exc))
            return dict(await self.pool.fetchrow("SELECT * FROM ingest_runs WHERE run_id = $1", request.run_id))
        parts = sorted({part_of(identifier) for identifier in changed})
        if not parts:
            await self.create_run(request)
            await self.pool.execute(
                "UPDATE ingest_runs SET state = 'succeeded', message = $2, finished_at = now() WHERE run_id = $1",
                request.run_id, f"title {title}: no section changed in the eCFR since {since}; nothing fetched",
            )
            return dict(await self.pool.fetchrow("SELECT * FROM ingest_runs WHERE run_id = $1", request.run_id))
        log.info("title %d: %d sections changed since %s, in parts %s", title, len(changed), since, parts)
        return await self.run(request.model_copy(update={"parts": parts}), progress)

    # ------------------------------------------------------------------------------------------ recovery
    async def recover(self) -> dict[str, int]:
        """After a crash: staged versions no live ingest is building (their title's lock is free) are marked
        failed and their rows deleted; runs left queued/running whose title is free are marked failed."""
        out = {"staged_discarded": 0, "runs_failed": 0}
        async with self.pool.acquire() as conn:
            for row in await conn.fetch("SELECT version_id, title FROM corpus_versions WHERE status = 'staged'"):
                if await conn.fetchval("SELECT pg_try_advisory_lock($1, $2)", TITLE_LOCK, row["title"]):
                    try:
                        await self._discard(row["version_id"], "interrupted: left staged by a stopped ingest")
                        out["staged_discarded"] += 1
                    finally:
                        await conn.execute("SELECT pg_advisory_unlock($1, $2)", TITLE_LOCK, row["title"])
            # a queued run is still in the stream (it runs when delivered); a running one whose title nobody
            # holds died with its worker
            stale = await conn.fetch(
                "SELECT run_id, title, state, started_at < now() - interval '1 hour' AS old FROM ingest_runs "
                "WHERE state IN ('queued', 'running') AND started_at < now() - interval '30 seconds'")
            for row in stale:
                free = row["old"]
                if row["state"] == "running" and row["title"] is not None and not free:
                    free = await conn.fetchval("SELECT pg_try_advisory_lock($1, $2)", TITLE_LOCK, row["title"])
                    if free:
                        await conn.execute("SELECT pg_advisory_unlock($1, $2)", TITLE_LOCK, row["title"])
                if free:
                    await conn.execute(
                        "UPDATE ingest_runs SET state = 'failed', error = 'interrupted: the ingest worker restarted',"
                        " message = 'interrupted: the ingest worker restarted', finished_at = now() "
                        "WHERE run_id = $1 AND state IN ('queued', 'running')", row["run_id"])
                    out["runs_failed"] += 1
        if any(out.values()):
            log.warning("recovered after an interrupted ingest: %s", out)
        return out

    async def _refresh_gauges(self) -> None:
        for row in await db.active_corpus_summary(self.pool):
            metrics.ACTIVE_SECTIONS.labels(str(row["title"])).set(row["sections"])

    # ------------------------------------------------------------------------------------------ one title
    async def _begin_bulk_load(self, sections: int) -> bool:
        """A model's first large load (≥ BULK_INDEX_MIN_SECTIONS sections, no row of the model stored): drop its
        (empty) HNSW indexes, so that the run's COPYs and swaps write no graph entries, and have the run build them
        once at its end. Measured faster than inserting into the graph row by row (bench/bench_ingest.py), and the
        swaps' UPDATEs write new row versions that an existing graph would index again (13,840 windows: 5-7 s).
        No reader needs the indexes meanwhile: no row of the model is active before this run activates one, the
        checks search staged rows exactly, and until the build ends a search of this model scans exactly too."""
        if sections < BULK_INDEX_MIN_SECTIONS:
            return False
        model, dim = self.embedder.model_name, self.embedder.dim
        async with self.pool.acquire() as conn:
            if await conn.fetchval(f"SELECT EXISTS (SELECT 1 FROM section_windows WHERE embedding_model = "
                                   f"{db.sql_literal(model)})"):
                return False
            for table in ("section_windows", "sections"):
                await conn.execute(f"DROP INDEX IF EXISTS {db.vector_index_name(table, model, dim)}")
        return True

    async def _ingest_title(self, title: int, parsed: list[ParsedSection], request: IngestRequest, run_id: str,
                            report, scope: set[str] | None, bulk_load: bool = False) -> TitleOutcome:
        model = self.embedder.model_name
        recipe = self._embedding_recipe()
        active = await self.pool.fetch(
            f"SELECT s.id, s.cfr_ref, s.part, s.content_hash, s.embedding_model, s.part_heading, s.subpart, "
            f"s.subject_group, v.embedding_recipe FROM sections s JOIN corpus_versions v USING (version_id) "
            f"WHERE {db.active_rows('s')} AND s.title = $1", title,
        )
        active_by_ref = {r["cfr_ref"]: r for r in active}
        incoming = {s.cfr_ref: s for s in parsed}
        # sections of parts outside the run's scope carry forward unchanged
        carried = [r for r in active if scope is not None and r["part"] not in scope and r["cfr_ref"] not in incoming]
        in_scope_active = [r for r in active if scope is None or r["part"] in scope]
        if any(r["embedding_recipe"] != recipe for r in carried):
            raise IngestError(f"title {title}: the embedding windows are now cut as '{recipe}', not as the active "
                              f"version's: ingest the whole title (no parts filter) so every section is re-embedded")
        counts = {"added": 0, "changed": 0, "removed": 0, "unchanged": 0, "embedded": 0, "reused": 0,
                  "carried": len(carried)}
        reuse: dict[str, int] = {}
        to_embed: list[ParsedSection] = []
        for ref, section in incoming.items():
            old = active_by_ref.get(ref)
            if old is None:
                counts["added"] += 1
                to_embed.append(section)
            elif (old["content_hash"] == section.content_hash and old["embedding_model"] == model
                  and old["embedding_recipe"] == recipe
                  # the hierarchy is part of every embedded window (the breadcrumb): a move re-embeds
                  and (old["part_heading"], old["subpart"], old["subject_group"])
                  == (section.part_heading, section.subpart, section.subject_group)):
                counts["unchanged"] += 1
                reuse[ref] = old["id"]
            else:
                counts["changed"] += 1
                to_embed.append(section)
        counts["removed"] = sum(1 for r in in_scope_active if r["cfr_ref"] not in incoming)
        if not request.force and active and counts["added"] == counts["changed"] == counts["removed"] == 0:
            await report(f"title {title}: nothing changed", len(incoming), len(incoming))
            return TitleOutcome(title, None, counts, activated=False,
                                message=f"title {title}: unchanged ({counts['unchanged']} sections), no new version")
        await self._discard_stale_staged(title)  # we hold the title lock: any staged version is a dead run's
        version_id = await self.pool.fetchval(
            "INSERT INTO corpus_versions (title, status, source, source_date, embedding_model, embedding_dim, run_id,"
            " embedding_recipe) VALUES ($1, 'staged', $2, $3, $4, $5, $6, $7) RETURNING version_id",
            title, request.source, _latest_date(parsed), model, self.embedder.dim, run_id, recipe,
        )
        seconds: dict[str, float] = {}
        clock = time.perf_counter()

        def lap(stage: str) -> None:
            nonlocal clock
            now = time.perf_counter()
            seconds[stage] = now - clock
            metrics.INGEST_STAGE_SECONDS.labels(stage).observe(seconds[stage])
            clock = now

        try:
            embedded = await self._embed(to_embed, title, report)
            lap("embed")
            counts["embedded"] = len(to_embed)
            counts["reused"] = len(reuse)
            await report(f"title {title}: loading", len(incoming), len(incoming))
            await self._load(version_id, title, incoming, embedded, reuse, [r["id"] for r in carried], model,
                             bulk_load)
            lap("load")
            await report(f"title {title}: checking", len(incoming), len(incoming))
            checks = await self._check(version_id, title, len(active), len(in_scope_active), scope, model,
                                       set(embedded))
            lap("check")
            if not checks["passed"]:
                await asyncio.shield(self._discard(version_id, f"check {checks['failed_check']} failed"))
                return TitleOutcome(title, version_id, counts, activated=False, checks=checks, seconds=seconds,
                                    failed_check=checks["failed_check"],
                                    message=f"title {title}: check {checks['failed_check']} failed: "
                                            f"{checks['failure']}; version {version_id} discarded, the active "
                                            f"version keeps serving")
            old = await self._swap(version_id, title)
            lap("swap")
        except BaseException as exc:
            # shielded: a second cancel must not leave the staged rows behind
            await asyncio.shield(self._discard(version_id, f"{type(exc).__name__}: {exc}"[:500]))
            raise
        return TitleOutcome(title, version_id, counts, activated=True, checks=checks, seconds=seconds,
                            message=f"title {title}: version {version_id} active (was {old}; {counts['added']} "
                                    f"added, {counts['changed']} changed, {counts['removed']} removed, "
                                    f"{counts['unchanged']} unchanged, {counts['carried']} carried; "
                                    f"{counts['embedded']} embedded, {counts['reused']} reused)")

    async def _embed(self, sections: list[ParsedSection], title: int, report) -> dict[str, np.ndarray]:
        windows: list[tuple[str, str, int]] = []  # (text, owner, window number)
        for section in sections:
            windows.extend((text, section.cfr_ref, n) for n, text in enumerate(self._windows_for(section)))
        # similar lengths together: the embedder pads each batch to its longest text, and a call of windows of
        # one length band fills its batches evenly (every core busy until the call's last batch)
        windows.sort(key=lambda w: len(w[0]))
        left = Counter(owner for _, owner, _ in windows)
        out: dict[str, list[np.ndarray | None]] = {ref: [None] * n for ref, n in left.items()}
        done_sections = 0
        chunk = max(256, self.settings.embedding_batch_size * 16)
        parts = [windows[start : start + chunk] for start in range(0, len(windows), chunk)]
        # two calls in flight: the next call's texts are tokenised, and its batches queued, while this one's
        # last batches run (a local embedder shares one pool between calls; a remote one overlaps requests)
        in_flight: deque[asyncio.Task] = deque()
        try:
            for index in range(len(parts)):
                while len(in_flight) < 2 and index + len(in_flight) < len(parts):
                    texts = [text for text, _, _ in parts[index + len(in_flight)]]
                    in_flight.append(asyncio.ensure_future(asyncio.to_thread(self.embedder.embed_documents, texts)))
                vectors = await in_flight.popleft()
                part = parts[index]
                if len(vectors) != len(part):
                    raise IngestError(f"the embedder returned {len(vectors)} vectors for {len(part)} texts")
                for (_, owner, n), vector in zip(part, vectors):
                    out[owner][n] = vector
                    left[owner] -= 1
                    done_sections += left[owner] == 0
                await report(f"title {title}: embedding", done_sections, len(sections))
        finally:
            for task in in_flight:
                task.cancel()
            await asyncio.gather(*in_flight, return_exceptions=True)
        return {ref: np.stack(vecs) for ref, vecs in out.items()}

    async def _load(self, version_id: int, title: int, incoming: dict[str, ParsedSection],
                    embedded: dict[str, np.ndarray], reuse: dict[str, int], carried_ids: list[int], model: str,
                    bulk_load: bool) -> None:
        dim = self.embedder.dim
        async with self.pool.acquire() as conn:
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
            if not bulk_load:
                # the graph holds active rows only: these staged rows enter it when the swap activates them
                await db.ensure_vector_indexes(conn, model, dim)
            await _copy(conn, version_id, section_rows, window_rows, carried_ids)

    async def _check(self, version_id: int, title: int, active_count: int, active_in_scope: int,
                     scope: set[str] | None, model: str, embedded_refs: set[str]) -> dict:
        limits = self.limits
        async with self.pool.acquire() as conn:
            stats = await conn.fetchrow(
                "SELECT count(*) AS n, count(*) FILTER (WHERE part = ANY($2::text[]) OR $2 IS NULL) AS in_scope, "
                "count(*) FILTER (WHERE NOT reserved AND NOT removed AND length(text) = 0) AS empty, "
                "count(*) FILTER (WHERE embedding IS NULL) AS unembedded FROM sections WHERE version_id = $1",
                version_id, sorted(scope) if scope is not None else None,
            )
            windowless = await conn.fetchval(
                "SELECT count(*) FROM sections s WHERE s.version_id = $1 AND NOT EXISTS "
                "(SELECT 1 FROM section_windows w WHERE w.section_id = s.id)", version_id,
            )
            where = f" in parts {', '.join(sorted(scope))}" if scope is not None else ""
            checks: dict = {"sections": stats["n"], "in_scope": stats["in_scope"], "active_before": active_count,
                            "active_in_scope": active_in_scope, "empty": stats["empty"],
                            "unembedded": stats["unembedded"] + windowless, "passed": True, "failure": None,
                            "failed_check": None}

            def fail(name: str, why: str) -> None:
                checks.update(passed=False, failed_check=name, failure=why)

            if active_in_scope and stats["in_scope"] < limits.min_count_ratio * active_in_scope:
                fail("min_count_ratio", f"{stats['in_scope']} sections{where} is below "
                                        f"{limits.min_count_ratio:g} × the active version's {active_in_scope}")
            elif active_count and stats["n"] < limits.min_count_ratio * active_count:
                fail("min_count_ratio", f"{stats['n']} sections is below {limits.min_count_ratio:g} × the active "
                                        f"version's {active_count}")
            elif stats["n"] and stats["empty"] / stats["n"] > limits.max_empty_share:
                fail("max_empty_share", f"{stats['empty']} of {stats['n']} sections have no text (more than "
                                        f"{limits.max_empty_share:.0%})")
            elif checks["unembedded"]:
                fail("embedded", f"{checks['unembedded']} sections are not embedded")
            else:
                found = await self._sample_search(conn, version_id, title, model, embedded_refs)
                checks["sample_search"] = found
                if found["hits"] < found["tried"]:
                    fail("sample_search", f"{found['tried'] - found['hits']} of {found['tried']} sampled sections "
                                          f"were not found by their own text (misses: {', '.join(found['misses'])})")
        await self.pool.execute("UPDATE corpus_versions SET checks = $2, section_count = $3 WHERE version_id = $1",
                                version_id, checks, checks["sections"])
        return checks

    async def _sample_search(self, conn: asyncpg.Connection, version_id: int, title: int, model: str,
                             embedded_refs: set[str]) -> dict:
        """Embed the first window of a few sections again (as queries: these are probes, not stored) and search
        the staged vectors with it, exactly: each must come back in the top 3. Newly embedded sections are
        sampled first. Catches vectors that do not belong to their rows (wrong model, misaligned load)."""
        sample = await conn.fetch(
            "SELECT id, cfr_ref, part_heading, subpart, subject_group, title, part, section, heading, text "
            "FROM sections WHERE version_id = $1 AND NOT reserved AND length(text) > 200 "
            "ORDER BY (cfr_ref = ANY($3::text[])) DESC, content_hash LIMIT $2",
            version_id, self.limits.sample_size, sorted(embedded_refs),
        )
        if not sample:
            return {"tried": 0, "hits": 0, "misses": []}
        texts = [self._windows_for(ParsedSection(
            title=r["title"], part=r["part"], section=r["section"], heading=r["heading"], text=r["text"],
            part_heading=r["part_heading"], subpart=r["subpart"], subject_group=r["subject_group"]))[0] for r in sample]
        vectors = await asyncio.to_thread(self.embedder.embed_queries, texts)
        dim = self.embedder.dim
        misses = []
        for row, vector in zip(sample, vectors):
            # exact scan over the staged windows of this title (the (status, title) index), not the HNSW graph
            top = await conn.fetch(
                f"SELECT section_id FROM section_windows WHERE status = 'staged' AND title = $3 AND version_id = $1 "
                f"AND embedding_model = {db.sql_literal(model)} "
                f"ORDER BY embedding::vector({dim}) <=> $2::vector({dim}) LIMIT 3",
                version_id, vector, title,
            )
            if not any(t["section_id"] == row["id"] for t in top):
                misses.append(row["cfr_ref"])
        return {"tried": len(sample), "hits": len(sample) - len(misses), "misses": misses}

    def _embedding_recipe(self) -> str:
        st = self.settings
        return f"windows {st.embedding_window_words}/{st.embedding_window_stride}/{st.embedding_max_windows}"

    def _windows_for(self, section: ParsedSection) -> list[str]:
        return section_windows(
            section.breadcrumb(), f"§ {section.section} {section.heading}", section.text or section.heading,
            words=self.settings.embedding_window_words, stride=self.settings.embedding_window_stride,
            max_windows=self.settings.embedding_max_windows,
        )

    async def _swap(self, version_id: int, title: int) -> int | None:
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1, $2)", SWAP_LOCK, title)
            staged = await conn.fetchval(
                "SELECT status FROM corpus_versions WHERE version_id = $1 FOR UPDATE", version_id)
            if staged != "staged":
                raise IngestError(f"version {version_id} is {staged}, not staged: not activated")
            old = await conn.fetchval("SELECT version_id FROM corpus_versions WHERE title = $1 AND status = 'active'",
                                      title)
            if old is not None:
                await conn.execute("UPDATE sections SET status = 'superseded' WHERE version_id = $1", old)
                await conn.execute("UPDATE section_windows SET status = 'superseded' WHERE status = 'active' AND "
                                   "title = $2 AND version_id = $1", old, title)
                await conn.execute("UPDATE corpus_versions SET status = 'superseded', superseded_at = now() "
                                   "WHERE version_id = $1", old)
                await conn.execute("DELETE FROM section_lexemes WHERE version_id = $1", old)
            await conn.execute("UPDATE sections SET status = 'active' WHERE version_id = $1", version_id)
            await db.index_lexemes(conn, version_id)
            await conn.execute("UPDATE section_windows SET status = 'active' WHERE status = 'staged' AND title = $2 "
                               "AND version_id = $1", version_id, title)
            await conn.execute("UPDATE corpus_versions SET status = 'active', activated_at = now() "
                               "WHERE version_id = $1", version_id)
        log.info("title %d: version %d active (was %s)", title, version_id, old)
        return old

    async def _discard(self, version_id: int, reason: str = "") -> None:
        """A staged version that will not serve: drop its rows, keep the record (as failed) for the audit."""
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute("DELETE FROM sections WHERE version_id = $1 AND status = 'staged'", version_id)
            await conn.execute(
                "UPDATE corpus_versions SET status = 'failed', checks = checks || jsonb_build_object('discarded', $2::text)"
                " WHERE version_id = $1 AND status = 'staged'", version_id, reason or "discarded")

    async def _discard_stale_staged(self, title: int) -> None:
        rows = await self.pool.fetch("SELECT version_id FROM corpus_versions WHERE title = $1 AND status = 'staged'",
                                     title)
        for row in rows:
            log.warning("title %d: discarding version %d left staged by an interrupted ingest", title,
                        row["version_id"])
            await self._discard(row["version_id"], "interrupted: left staged by a stopped ingest")


async def _copy(conn: asyncpg.Connection, version_id: int, section_rows: list, window_rows: list,
                carried_ids: list[int]) -> None:
    async with conn.transaction():
        await conn.copy_records_to_table("sections", records=section_rows, columns=SECTION_COPY_COLUMNS)
        await conn.copy_records_to_table("section_windows", records=window_rows, columns=WINDOW_COPY_COLUMNS)
        if carried_ids:
            await _carry_forward(conn, carried_ids, version_id)


async def _build_indexes(pool: asyncpg.Pool, model: str, dim: int) -> None:
    async with pool.acquire() as conn:
        # raise (never lower) the memory the HNSW build may use, for this session only
        await conn.execute(
            "SELECT set_config('maintenance_work_mem', CASE WHEN pg_size_bytes(current_setting('maintenance_work_mem'))"
            " < pg_size_bytes($1) THEN $1 ELSE current_setting('maintenance_work_mem') END, false)",
            BULK_MAINTENANCE_WORK_MEM)
        try:
            await db.ensure_vector_indexes(conn, model, dim)
        finally:
            await conn.execute("RESET maintenance_work_mem")


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
    await conn.execute(
        f"INSERT INTO sections (version_id, status, {col_list}) "
        f"SELECT $2, 'staged', {col_list} FROM sections WHERE id = ANY($1::bigint[])",
        section_ids, version_id,
    )
    await conn.execute(
        "INSERT INTO section_windows (section_id, version_id, status, title, window_no, embedding_model, embedding) "
        "SELECT n.id, $2, 'staged', w.title, w.window_no, w.embedding_model, w.embedding "
        "FROM section_windows w JOIN sections o ON o.id = w.section_id "
        "JOIN sections n ON n.cfr_ref = o.cfr_ref AND n.version_id = $2 WHERE o.id = ANY($1::bigint[])",
        section_ids, version_id,
    )
