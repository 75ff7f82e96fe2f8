"""The ingest pipeline's versioning against the real PostgreSQL+pgvector and real MiniLM embeddings.

Every test runs in a database of its own (``regs_ingest_<uuid>`` on the session server, migrated, dropped
after), so the session ``corpus`` is never touched. Inputs are small real files: 42 CFR part 406 (25 sections)
and part 407 (28). Embeddings are real MiniLM vectors, computed once per text for the module (a cache in front
of the real embedder); counting wrappers on top show what a run asks to embed.
"""
from __future__ import annotations

import asyncio
import gzip
import json
import re
import threading
import time
import uuid
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse, urlunparse

import asyncpg
import numpy as np
import pytest

from services.ingest.ecfr_client import ECFRClient
from services.ingest.parsing import parse_file
from services.ingest.pipeline import CheckLimits, IngestPipeline, part_of
from shared import db
from shared.messages import IngestRequest

pytestmark = pytest.mark.slow

CORPUS = Path(__file__).resolve().parents[1] / "data" / "corpus"
FILE_406 = CORPUS / "TheAxiomFoundation_axiom-corpus__title-42-part-406.xml.gz"
FILE_407 = CORPUS / "TheAxiomFoundation_axiom-corpus__title-42-part-407.xml.gz"
FILE_T7 = CORPUS / "OCIO-CTO_policy_as_code_experimentation__title-7.xml.gz"
XML_406 = gzip.decompress(FILE_406.read_bytes()).decode()
XML_407 = gzip.decompress(FILE_407.read_bytes()).decode()
N_406 = 25


# ------------------------------------------------------------------------------------------------
# embedders: the real one once per module, a text cache in front, counting/misbehaving wrappers on top
# ------------------------------------------------------------------------------------------------
class CachedEmbedder:
    """Real MiniLM vectors, each text embedded once for the whole module."""

    def __init__(self, inner):
        self.inner = inner
        self.model_name = inner.model_name
        self.dim = inner.dim
        self._cache: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()

    def embed_documents(self, texts):
        with self._lock:
            missing = [t for t in dict.fromkeys(texts) if t not in self._cache]
            if missing:
                for text, vector in zip(missing, self.inner.embed_documents(missing)):
                    self._cache[text] = vector
            return np.stack([self._cache[t] for t in texts]) if texts else np.zeros((0, self.dim), np.float32)

    embed_queries = embed_documents


class Counting:
    def __init__(self, inner):
        self.inner = inner
        self.model_name = inner.model_name
        self.dim = inner.dim
        self.document_calls = 0
        self.document_texts: list[str] = []
        self.query_texts: list[str] = []

    def embed_documents(self, texts):
        self.document_calls += 1
        self.document_texts.extend(texts)
        return self.inner.embed_documents(texts)

    def embed_queries(self, texts):
        self.query_texts.extend(texts)
        return self.inner.embed_queries(texts)


class RandomDocuments(Counting):
    """Stores garbage: random unit vectors for documents, real vectors for queries."""

    def embed_documents(self, texts):
        super().embed_documents(texts)
        rng = np.random.default_rng(len(self.document_texts))
        v = rng.normal(size=(len(texts), self.dim)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)


class Blocking(Counting):
    """Blocks inside embed_documents until released: a run can be cancelled 'during embedding'."""

    def __init__(self, inner):
        super().__init__(inner)
        self.started = threading.Event()
        self.release = threading.Event()

    def embed_documents(self, texts):
        self.started.set()
        self.release.wait(30)
        return super().embed_documents(texts)


@pytest.fixture(scope="module")
def embedder(settings):
    from shared.embeddings import get_embedder

    return CachedEmbedder(get_embedder(settings))


# ------------------------------------------------------------------------------------------------
# a database of our own per test
# ------------------------------------------------------------------------------------------------
def _db_url(base: str, name: str) -> str:
    parsed = urlparse(base)
    return urlunparse(parsed._replace(path="/" + name))


@pytest.fixture
async def scratch(migrated):
    name = f"regs_ingest_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(migrated.database_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    url = _db_url(migrated.database_url, name)
    await db.migrate(url)
    pool = await db.create_pool(url, max_size=6)
    settings = migrated.model_copy(update={"database_url": url})
    try:
        yield {"url": url, "pool": pool, "settings": settings}
    finally:
        await pool.close()
        admin = await asyncpg.connect(migrated.database_url)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


def pipeline(scratch, embedder, **kw) -> IngestPipeline:
    return IngestPipeline(scratch["pool"], scratch["settings"], embedder, **kw)


async def first_ingest(scratch, embedder, source=FILE_406, title=42) -> dict:
    record = await pipeline(scratch, embedder).run(IngestRequest(source=str(source), title=title))
    assert record["state"] == "succeeded", record
    return record


async def active_version(pool, title=42) -> int | None:
    return await pool.fetchval("SELECT version_id FROM corpus_versions WHERE title = $1 AND status = 'active'", title)


async def active_snapshot(pool, title=42) -> set[tuple]:
    rows = await pool.fetch(
        f"SELECT s.id, s.cfr_ref, s.content_hash, s.version_id FROM sections s WHERE {db.active_rows('s')} "
        f"AND s.title = $1", title)
    return {tuple(r) for r in rows}


async def assert_nothing_staged(pool) -> None:
    assert await pool.fetchval("SELECT count(*) FROM sections WHERE status = 'staged'") == 0
    assert await pool.fetchval("SELECT count(*) FROM section_windows WHERE status = 'staged'") == 0
    assert await pool.fetchval("SELECT count(*) FROM corpus_versions WHERE status = 'staged'") == 0


# ------------------------------------------------------------------------------------------------
# XML edits
# ------------------------------------------------------------------------------------------------
def _div8(xml: str, section: str) -> re.Match:
    match = re.search(r'<DIV8 N="%s".*?</DIV8>\n?' % re.escape(section), xml, re.S)
    assert match, section
    return match


def change_text(xml: str, section: str, extra: str) -> str:
    block = _div8(xml, section)
    new = block.group(0).replace("<CITA", f"<P>{extra}</P>\n<CITA", 1)
    assert new != block.group(0)
    return xml[: block.start()] + new + xml[block.end():]


def remove_section(xml: str, section: str) -> str:
    block = _div8(xml, section)
    return xml[: block.start()] + xml[block.end():]


def add_section(xml: str, after: str, number: str, heading: str, text: str) -> str:
    block = _div8(xml, after)
    new = (f'<DIV8 N="{number}" TYPE="SECTION">\n<HEAD>&#xA7; {number} {heading}</HEAD>\n<P>{text}</P>\n'
           f'<CITA TYPE="N">[99 FR 1, Jan. 1, 2026]\n</CITA>\n</DIV8>\n')
    return xml[: block.end()] + new + xml[block.end():]


def blank_sections(xml: str, sections: list[str]) -> str:
    for section in sections:
        block = _div8(xml, section)
        xml = xml[: block.start()] + re.sub(r"<P>.*?</P>", "", block.group(0), flags=re.S) + xml[block.end():]
    return xml


CHANGED_SENTENCE = ("(z) For the purposes of this test, an individual with end-stage renal disease who receives a "
                    "kidney transplant remains entitled for 36 months after the month of the transplant.")
NEW_TEXT = ("(a) A test section added to part 406: an individual who files an application for hospital insurance "
            "through the test office is entitled from the first day of the month after the month of filing, "
            "provided that the individual meets the other conditions of this subpart. (b) The test office "
            "keeps the application for seven years.")


def modified_406(tmp_path: Path) -> Path:
    """406.13 changed, 406.52 removed, 406.99 added."""
    xml = change_text(XML_406, "406.13", CHANGED_SENTENCE)
    xml = remove_section(xml, "406.52")
    xml = add_section(xml, "406.50", "406.99", "Test entitlement on filing.", NEW_TEXT)
    path = tmp_path / "title-42-part-406-modified.xml"
    path.write_text(xml)
    return path


# ------------------------------------------------------------------------------------------------
# 1. first ingest
# ------------------------------------------------------------------------------------------------
async def test_first_ingest_activates_a_version_with_correct_rows(scratch, embedder):
    pool = scratch["pool"]
    counting = Counting(embedder)
    record = await pipeline(scratch, counting).run(IngestRequest(source=str(FILE_406), title=42))
    assert record["state"] == "succeeded", record
    assert record["error"] is None
    assert record["counts"]["added"] == N_406
    assert record["counts"]["changed"] == record["counts"]["removed"] == record["counts"]["unchanged"] == 0
    assert record["counts"]["embedded"] == N_406 and record["counts"]["reused"] == 0
    # where the run's time went, by stage, on the record and in the metrics
    assert set(record["timings"]) == {"parse", "embed", "load", "check", "swap"}
    assert all(seconds >= 0 for seconds in record["timings"].values()) and record["timings"]["embed"] > 0
    from prometheus_client import REGISTRY
    assert REGISTRY.get_sample_value("regs_ingest_stage_seconds_count", {"stage": "embed"}) >= 1
    version = await active_version(pool)
    assert record["version_ids"] == [version]
    v = await pool.fetchrow("SELECT * FROM corpus_versions WHERE version_id = $1", version)
    assert v["status"] == "active" and v["section_count"] == N_406 and v["activated_at"] is not None
    assert v["embedding_model"] == embedder.model_name and v["embedding_dim"] == 384
    assert v["checks"]["passed"] is True and v["checks"]["sample_search"]["tried"] == 5
    assert v["checks"]["sample_search"]["hits"] == 5
    assert counting.document_calls >= 1 and len(counting.query_texts) == 5  # probes go through embed_queries

    parsed = next(s for s in parse_file(FILE_406) if s.section == "406.13")
    row = await db.fetch_active_section(pool, 42, "406.13")
    assert row is not None and row["version_id"] == version
    assert (row["title"], row["part"], row["section"]) == (42, "406", "406.13")
    assert row["heading"] == "Individual who has end-stage renal disease"
    assert row["agency"] == "Centers for Medicare & Medicaid Services"
    assert row["cfr_ref"] == "42 CFR 406.13"
    assert row["text"] == parsed.text and row["content_hash"] == parsed.content_hash
    assert row["paragraphs"] == [{"designation": p.designation, "start": p.start, "end": p.end}
                                 for p in parsed.paragraphs]
    assert row["paragraphs"][0]["designation"] == "(a)" and len(row["paragraphs"]) == 37
    assert row["source_note"] == "[48 FR 12536, Mar. 25, 1983, as amended at 60 FR 22535, May 8, 1995; " \
                                 "87 FR 66503, Nov. 3, 2022]"
    assert row["source_date"] == parsed.source_date  # a file carries no date (eCFR runs do: see below)
    assert row["embedding_model"] == embedder.model_name
    assert row["subpart"] == "B—Hospital Insurance Without Monthly Premiums"
    windows = await pool.fetch(
        "SELECT window_no, embedding, status, version_id FROM section_windows WHERE section_id = $1 ORDER BY window_no",
        row["id"])
    assert len(windows) >= 1 and [w["window_no"] for w in windows] == list(range(len(windows)))
    assert all(w["status"] == "active" and w["version_id"] == version for w in windows)
    stacked = np.stack([np.asarray(w["embedding"].to_numpy(), dtype=np.float32) for w in windows])
    mean = stacked.mean(axis=0)
    mean /= np.linalg.norm(mean)
    section_vec = np.asarray(
        (await pool.fetchval("SELECT embedding FROM sections WHERE id = $1", row["id"])).to_numpy(), np.float32)
    assert np.allclose(section_vec, mean, atol=1e-5) and abs(np.linalg.norm(section_vec) - 1) < 1e-5
    # every section has windows; the HNSW indexes exist
    assert await pool.fetchval(
        "SELECT count(*) FROM sections s WHERE NOT EXISTS (SELECT 1 FROM section_windows w WHERE w.section_id = s.id)"
    ) == 0
    indexes = {r["indexname"] for r in await pool.fetch("SELECT indexname FROM pg_indexes")}
    assert db.vector_index_name("section_windows", embedder.model_name, 384) in indexes
    await assert_nothing_staged(pool)


# ------------------------------------------------------------------------------------------------
# 2. unchanged re-ingest; forced re-ingest reuses embeddings and supersedes
# ------------------------------------------------------------------------------------------------
async def test_unchanged_reingest_embeds_nothing_and_force_reuses_embeddings(scratch, embedder):
    pool = scratch["pool"]
    await first_ingest(scratch, embedder)
    v1 = await active_version(pool)
    before = await active_snapshot(pool)

    counting = Counting(embedder)
    record = await pipeline(scratch, counting).run(IngestRequest(source=str(FILE_406), title=42))
    assert record["state"] == "succeeded", record
    assert record["counts"]["unchanged"] == N_406
    assert record["counts"]["added"] == record["counts"]["changed"] == record["counts"]["removed"] == 0
    assert record["version_ids"] == [] and "no new version" in record["message"]
    assert counting.document_calls == 0 and counting.query_texts == []
    assert await active_version(pool) == v1 and await active_snapshot(pool) == before
    assert await pool.fetchval("SELECT count(*) FROM corpus_versions") == 1

    forced = Counting(embedder)
    record = await pipeline(scratch, forced).run(IngestRequest(source=str(FILE_406), title=42, force=True))
    assert record["state"] == "succeeded", record
    assert forced.document_calls == 0 and forced.document_texts == []  # zero document embeddings
    assert record["counts"]["unchanged"] == N_406 and record["counts"]["reused"] == N_406
    assert record["counts"]["embedded"] == 0
    v2 = await active_version(pool)
    assert v2 != v1 and record["version_ids"] == [v2]
    old = await pool.fetchrow("SELECT status, superseded_at FROM corpus_versions WHERE version_id = $1", v1)
    assert old["status"] == "superseded" and old["superseded_at"] is not None
    # the old rows are kept (superseded), not deleted
    assert await pool.fetchval("SELECT count(*) FROM sections WHERE version_id = $1 AND status = 'superseded'",
                               v1) == N_406
    assert await pool.fetchval("SELECT count(*) FROM section_windows WHERE version_id = $1 AND status <> 'superseded'",
                               v1) == 0
    # the new rows carry the very same vectors
    pairs = await pool.fetch(
        "SELECT o.embedding AS old, n.embedding AS new FROM section_windows o "
        "JOIN sections os ON os.id = o.section_id JOIN sections ns ON ns.cfr_ref = os.cfr_ref AND ns.version_id = $2 "
        "JOIN section_windows n ON n.section_id = ns.id AND n.window_no = o.window_no WHERE o.version_id = $1", v1, v2)
    assert len(pairs) == await pool.fetchval("SELECT count(*) FROM section_windows WHERE version_id = $1", v1)
    assert all(np.array_equal(p["old"].to_numpy(), p["new"].to_numpy()) for p in pairs)
    # readers see exactly one version
    assert await pool.fetchval(f"SELECT count(DISTINCT s.version_id) FROM sections s WHERE {db.active_rows('s')}") == 1
    await assert_nothing_staged(pool)


async def test_new_window_settings_re_embed_every_section(scratch, embedder):
    pool = scratch["pool"]
    await first_ingest(scratch, embedder)
    assert await pool.fetchval("SELECT embedding_recipe FROM corpus_versions") == "windows 150/120/24"
    recut = {**scratch, "settings": scratch["settings"].model_copy(update={"embedding_window_stride": 150})}
    # a parts-filtered run would carry sections cut the old way into the new version: refused, clearly
    partial = await pipeline(recut, Counting(embedder)).run(IngestRequest(source=str(FILE_407), title=42,
                                                                          parts=["407"]))
    assert partial["state"] == "failed" and "whole title" in partial["error"], partial
    counting = Counting(embedder)
    record = await pipeline(recut, counting).run(IngestRequest(source=str(FILE_406), title=42))
    assert record["state"] == "succeeded", record
    assert record["counts"]["embedded"] == N_406 and record["counts"]["reused"] == 0
    assert await pool.fetchval("SELECT embedding_recipe FROM corpus_versions WHERE status = 'active'") == \
        "windows 150/150/24"


# ------------------------------------------------------------------------------------------------
# 3. differential refresh
# ------------------------------------------------------------------------------------------------
async def test_differential_refresh_embeds_only_changed_and_added(scratch, embedder, tmp_path):
    pool = scratch["pool"]
    await first_ingest(scratch, embedder)
    v1 = await active_version(pool)
    source = modified_406(tmp_path)
    counting = Counting(embedder)
    p = pipeline(scratch, counting)
    record = await p.run(IngestRequest(source=str(source), title=42))
    assert record["state"] == "succeeded", record
    counts = record["counts"]
    assert {k: counts[k] for k in ("added", "changed", "removed", "unchanged")} == {
        "added": 1, "changed": 1, "removed": 1, "unchanged": N_406 - 2}
    assert counts["embedded"] == 2 and counts["reused"] == N_406 - 2
    # exactly the windows of 406.13 (changed) and 406.99 (added) were embedded, nothing else
    parsed = {s.section: s for s in parse_file(source)}
    expected = p._windows_for(parsed["406.13"]) + p._windows_for(parsed["406.99"])
    assert sorted(counting.document_texts) == sorted(expected)
    v2 = await active_version(pool)
    assert v2 != v1
    active = {r["section"]: r for r in await pool.fetch(
        f"SELECT s.section, s.text, s.version_id FROM sections s WHERE {db.active_rows('s')}")}
    assert len(active) == N_406 and "406.52" not in active and "406.99" in active
    assert CHANGED_SENTENCE in active["406.13"]["text"]
    # the superseded version still holds the removed section and the old text
    old_1313 = await pool.fetchval("SELECT text FROM sections WHERE version_id = $1 AND section = '406.13'", v1)
    assert CHANGED_SENTENCE not in old_1313
    assert await pool.fetchval("SELECT status FROM sections WHERE version_id = $1 AND section = '406.52'",
                               v1) == "superseded"
    # the full-text postings follow the active version: every lexeme of every active section, none of v1's
    assert await pool.fetchval("SELECT count(*) FROM section_lexemes WHERE version_id = $1", v1) == 0
    assert await pool.fetchval("SELECT count(*) FROM section_lexemes WHERE version_id = $1", v2) == \
        await pool.fetchval("SELECT sum(length(tsv)) FROM sections WHERE version_id = $1", v2) > 0
    lexemes = await db.question_lexemes(pool, CHANGED_SENTENCE)
    found = await db.fulltext_search(pool, lexemes, [1.0] * len(lexemes), 3)
    assert found and await pool.fetchval("SELECT section FROM sections WHERE id = $1",
                                         found[0]["section_id"]) == "406.13"
    await assert_nothing_staged(pool)


# ------------------------------------------------------------------------------------------------
# 4. a forced bad version never becomes active
# ------------------------------------------------------------------------------------------------
def _few_sections(tmp_path: Path) -> Path:
    xml = XML_406
    for section in [s.section for s in parse_file(FILE_406)][3:]:
        xml = remove_section(xml, section)
    path = tmp_path / "few.xml"
    path.write_text(xml)
    return path


def _empty_texts(tmp_path: Path) -> Path:
    path = tmp_path / "empty-texts.xml"
    path.write_text(blank_sections(XML_406, ["406.1", "406.2", "406.7", "406.50", "406.52"]))
    return path


@pytest.mark.parametrize("case, make_source, make_embedder, check, detail", [
    ("far fewer sections", _few_sections, Counting, "min_count_ratio", "3 sections in parts 406 is below 0.9"),
    ("empty texts", _empty_texts, Counting, "max_empty_share", "5 of 25 sections have no text"),
    ("random document vectors", modified_406, RandomDocuments, "sample_search", "not found by their own text"),
])
async def test_forced_bad_version_never_becomes_active(scratch, embedder, tmp_path, case, make_source,
                                                       make_embedder, check, detail):
    pool = scratch["pool"]
    await first_ingest(scratch, embedder)
    v1 = await active_version(pool)
    before = await active_snapshot(pool)
    record = await pipeline(scratch, make_embedder(embedder)).run(
        IngestRequest(source=str(make_source(tmp_path)), title=42, force=True))
    assert record["state"] == "failed", record
    assert f"check {check} failed" in record["error"] and detail in record["error"], record["error"]
    assert "the active version keeps serving" in record["error"]
    assert await active_version(pool) == v1 and await active_snapshot(pool) == before
    bad = record["version_ids"][0]
    v = await pool.fetchrow("SELECT status, checks FROM corpus_versions WHERE version_id = $1", bad)
    assert v["status"] == "failed" and v["checks"]["failed_check"] == check
    assert await pool.fetchval("SELECT count(*) FROM sections WHERE version_id = $1", bad) == 0
    assert await pool.fetchval("SELECT count(*) FROM section_windows WHERE version_id = $1", bad) == 0
    await assert_nothing_staged(pool)
    if check == "sample_search":  # the two freshly embedded sections were sampled first, and both missed
        assert sorted(v["checks"]["sample_search"]["misses"]) == ["42 CFR 406.13", "42 CFR 406.99"]


# ------------------------------------------------------------------------------------------------
# 5. bad input
# ------------------------------------------------------------------------------------------------
def _truncated(tmp_path: Path) -> str:
    path = tmp_path / "truncated.xml"
    path.write_text(XML_406[: len(XML_406) // 2])
    return str(path)


def _truncated_gz(tmp_path: Path) -> str:
    path = tmp_path / "truncated.xml.gz"
    path.write_bytes(FILE_406.read_bytes()[:6000])
    return str(path)


def _empty(tmp_path: Path) -> str:
    path = tmp_path / "empty.xml"
    path.write_bytes(b"")
    return str(path)


@pytest.mark.parametrize("case, make_source, title, expected", [
    ("truncated XML", _truncated, 42, "truncated XML"),
    ("truncated gzip", _truncated_gz, 42, "file truncated or corrupt"),
    ("empty file", _empty, 42, "empty file"),
    ("unknown title", lambda tmp: str(FILE_T7), 99, "the source holds no sections of title 99"),
    ("missing path", lambda tmp: str(tmp / "nowhere" / "title-42.xml"), 42, "does not exist"),
])
async def test_bad_input_fails_clearly_and_leaves_the_active_version(scratch, embedder, tmp_path, case,
                                                                     make_source, title, expected):
    pool = scratch["pool"]
    await first_ingest(scratch, embedder)
    v1 = await active_version(pool)
    before = await active_snapshot(pool)
    counting = Counting(embedder)
    record = await pipeline(scratch, counting).run(IngestRequest(source=make_source(tmp_path), title=title))
    assert record["state"] == "failed", record
    assert expected in record["error"], record["error"]
    assert record["finished_at"] is not None and record["version_ids"] == []
    assert counting.document_calls == 0
    assert await active_version(pool) == v1 and await active_snapshot(pool) == before
    assert await pool.fetchval("SELECT count(*) FROM corpus_versions") == 1
    await assert_nothing_staged(pool)


# ------------------------------------------------------------------------------------------------
# 6. duplicate concurrent ingest; a crash mid-run
# ------------------------------------------------------------------------------------------------
async def test_duplicate_concurrent_ingest_is_refused(scratch, embedder):
    pool = scratch["pool"]
    request = IngestRequest(source=str(FILE_406), title=42)
    a, b = await asyncio.gather(pipeline(scratch, embedder).run(request), pipeline(scratch, embedder).run(request))
    states = sorted([a["state"], b["state"]])
    assert states == ["failed", "succeeded"], (a, b)
    loser = a if a["state"] == "failed" else b
    assert "another ingest of title 42 is running" in loser["error"]
    assert await pool.fetchval("SELECT count(*) FROM corpus_versions") == 1
    assert len(await active_snapshot(pool)) == N_406
    # the lock is released: the next run goes through (nothing changed)
    again = await pipeline(scratch, embedder).run(request)
    assert again["state"] == "succeeded" and again["counts"]["unchanged"] == N_406


async def test_cancel_during_embedding_leaves_the_active_version_and_no_staged_rows(scratch, embedder, tmp_path):
    pool = scratch["pool"]
    await first_ingest(scratch, embedder)
    v1 = await active_version(pool)
    before = await active_snapshot(pool)
    blocking = Blocking(embedder)
    task = asyncio.create_task(pipeline(scratch, blocking).run(
        IngestRequest(source=str(modified_406(tmp_path)), title=42, run_id="crash-1")))
    try:
        assert await asyncio.to_thread(blocking.started.wait, 30), "embedding never started"
        staged = await pool.fetchval("SELECT version_id FROM corpus_versions WHERE status = 'staged'")
        assert staged is not None
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        blocking.release.set()
    assert await active_version(pool) == v1 and await active_snapshot(pool) == before
    await assert_nothing_staged(pool)
    assert await pool.fetchval("SELECT status FROM corpus_versions WHERE version_id = $1", staged) == "failed"
    run = await pool.fetchrow("SELECT state, error FROM ingest_runs WHERE run_id = 'crash-1'")
    assert run["state"] == "failed" and "interrupted" in run["error"]
    # the title lock went with the cancelled run
    record = await pipeline(scratch, embedder).run(IngestRequest(source=str(modified_406(tmp_path)), title=42))
    assert record["state"] == "succeeded" and record["counts"]["changed"] == 1


async def test_a_dead_runs_staged_version_is_cleaned_up(scratch, embedder, tmp_path):
    """A process killed mid-run (no chance to clean up) leaves a staged version and a 'running' run: the next
    worker's recover() discards them; a new ingest of the title is not blocked by the leftover either."""
    pool = scratch["pool"]
    await first_ingest(scratch, embedder)
    v1 = await active_version(pool)
    dead = pipeline(scratch, embedder)

    async def no_cleanup(*args, **kwargs):  # what a SIGKILL amounts to
        return None

    dead._discard = no_cleanup
    dead._fail_run = no_cleanup
    blocking = Blocking(embedder)
    dead._embedder = blocking
    task = asyncio.create_task(dead.run(IngestRequest(source=str(modified_406(tmp_path)), title=42, run_id="dead-1")))
    try:
        assert await asyncio.to_thread(blocking.started.wait, 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        blocking.release.set()
    # the leftovers of the dead run
    leftover = await pool.fetchval("SELECT version_id FROM corpus_versions WHERE status = 'staged'")
    assert leftover is not None
    assert await pool.fetchval("SELECT state FROM ingest_runs WHERE run_id = 'dead-1'") == "running"
    await pool.execute("UPDATE ingest_runs SET started_at = now() - interval '5 minutes' WHERE run_id = 'dead-1'")
    # loaded rows too, as if it died after the COPY
    await pool.execute(
        "INSERT INTO sections (version_id, status, title, part, section, heading, cfr_ref, text, content_hash, source) "
        "VALUES ($1, 'staged', 42, '406', '406.13', 'x', '42 CFR 406.13', 'x', 'x', 'x')", leftover)

    recovered = await pipeline(scratch, embedder).recover()
    assert recovered == {"staged_discarded": 1, "runs_failed": 1}
    await assert_nothing_staged(pool)
    assert await pool.fetchval("SELECT status FROM corpus_versions WHERE version_id = $1", leftover) == "failed"
    run = await pool.fetchrow("SELECT state, error FROM ingest_runs WHERE run_id = 'dead-1'")
    assert run["state"] == "failed" and "worker restarted" in run["error"]
    assert await active_version(pool) == v1

    # without recover(): a new run of the title discards the leftover itself (it holds the title lock)
    await pool.execute("INSERT INTO corpus_versions (title, status, source, embedding_model, embedding_dim) "
                       "VALUES (42, 'staged', 'x', $1, 384)", embedder.model_name)
    record = await pipeline(scratch, embedder).run(IngestRequest(source=str(modified_406(tmp_path)), title=42))
    assert record["state"] == "succeeded", record
    await assert_nothing_staged(pool)


async def test_a_running_ingest_is_not_recovered(scratch, embedder, tmp_path):
    """recover() leaves a live run alone: its title lock is held."""
    pool = scratch["pool"]
    await first_ingest(scratch, embedder)
    blocking = Blocking(embedder)
    task = asyncio.create_task(pipeline(scratch, blocking).run(
        IngestRequest(source=str(modified_406(tmp_path)), title=42, run_id="live-1")))
    try:
        assert await asyncio.to_thread(blocking.started.wait, 30)
        await pool.execute("UPDATE ingest_runs SET started_at = now() - interval '5 minutes' WHERE run_id = 'live-1'")
        assert await pipeline(scratch, embedder).recover() == {"staged_discarded": 0, "runs_failed": 0}
    finally:
        blocking.release.set()
    record = await task
    assert record["state"] == "succeeded", record


# ------------------------------------------------------------------------------------------------
# 7. eCFR source, against a local fake eCFR server
# ------------------------------------------------------------------------------------------------
XML_406_AUGUST = change_text(XML_406, "406.15", "(z) Amended in August 2026 for the test: the special provisions "
                                                "also apply to individuals who enroll through the test office.")
VERSIONS = {"content_versions": [
    {"date": "2025-01-10", "amendment_date": "2025-01-10", "issue_date": "2025-01-05", "identifier": "407.2",
     "part": "407", "type": "section", "removed": False, "substantive": True, "title": "42"},
    {"date": "2026-07-20", "amendment_date": "2026-07-20", "issue_date": "2026-07-15", "identifier": "406.15",
     "part": "406", "type": "section", "removed": False, "substantive": True, "title": "42"},
    {"date": "2026-07-20", "amendment_date": "2026-07-20", "issue_date": "2026-07-15", "identifier": "406",
     "part": "406", "type": "part", "removed": False, "substantive": True, "title": "42"},
]}


class _ECFRHandler(BaseHTTPRequestHandler):
    server: "_ECFRServer"

    def log_message(self, *args) -> None:
        pass

    def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def do_GET(self) -> None:  # noqa: N802
        url = urlparse(self.path)
        query = parse_qs(url.query)
        with self.server.lock:
            self.server.requests.append((url.path, query))
        match = re.fullmatch(r"/api/versioner/v1/full/(\d{4}-\d{2}-\d{2})/title-42\.xml", url.path)
        if match:
            date, part = match.group(1), (query.get("part") or [None])[0]
            if date == "2026-09-01" and part == "407":  # the API goes down after the first part
                return self._send(503, b"maintenance", "text/plain")
            if part == "406":
                return self._send(200, (XML_406_AUGUST if date >= "2026-08-01" else XML_406).encode(),
                                  "application/xml")
            if part == "407":
                return self._send(200, XML_407.encode(), "application/xml")
            return self._send(404, b'{"error":"not found"}')
        if url.path == "/api/versioner/v1/versions/title-42.json":
            since = (query.get("issue_date[gte]") or [""])[0]
            body = {"content_versions": [v for v in VERSIONS["content_versions"] if v["issue_date"] >= since]}
            return self._send(200, json.dumps(body).encode())
        return self._send(404, b'{"error":"not found"}')


class _ECFRServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _ECFRHandler)
        self.requests: list = []
        self.lock = threading.Lock()

    def fetched_parts(self) -> Counter:
        return Counter((p.split("/")[5], (q.get("part") or ["all"])[0]) for p, q in self.requests
                       if p.startswith("/api/versioner/v1/full/"))


@pytest.fixture(scope="module")
def ecfr_server():
    srv = _ECFRServer()
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def ecfr(scratch, ecfr_server):
    ecfr_server.requests.clear()
    scratch["settings"] = scratch["settings"].model_copy(
        update={"ecfr_base_url": f"http://127.0.0.1:{ecfr_server.server_address[1]}"})
    return ecfr_server


async def test_ecfr_ingest_and_refresh_of_changed_parts_only(scratch, embedder, ecfr):
    pool = scratch["pool"]
    assert part_of("406.15") == "406" and part_of("Appendix A to Part 277") == "277" and part_of("1b.4") == "1b"
    # the default client: ECFRClient(base_url=settings.ecfr_base_url)
    record = await pipeline(scratch, embedder).run(
        IngestRequest(source="ecfr:2026-07-01", title=42, parts=["406", "407"]))
    assert record["state"] == "succeeded", record
    assert record["counts"]["added"] == N_406 + 28
    assert ecfr.fetched_parts() == Counter({("2026-07-01", "406"): 1, ("2026-07-01", "407"): 1})
    v1 = await active_version(pool)
    assert await pool.fetchval("SELECT source_date FROM corpus_versions WHERE version_id = $1", v1) == "2026-07-01"
    assert await pool.fetchval("SELECT source FROM corpus_versions WHERE version_id = $1", v1) == "ecfr:2026-07-01"
    row = await db.fetch_active_section(pool, 42, "406.13")
    assert row["source_date"] == "2026-07-01" and row["agency"] == "Centers for Medicare & Medicaid Services"
    assert row["source"] == "ecfr:title-42:2026-07-01:406"

    p = pipeline(scratch, Counting(embedder))
    assert await p.changed_since(42, "2026-07-02") == {"406.15"}
    assert await p.changed_since(42, "2024-01-01") == {"406.15", "407.2"}
    assert await p.changed_since(42, "2026-12-01") == set()

    ecfr.requests.clear()
    record = await p.refresh_since(42, since="2026-07-02", date="2026-08-01")
    assert record["state"] == "succeeded", record
    assert record["parts"] == ["406"]
    assert ecfr.fetched_parts() == Counter({("2026-08-01", "406"): 1})  # part 407 was not fetched
    counts = record["counts"]
    assert (counts["changed"], counts["unchanged"], counts["added"], counts["removed"]) == (1, N_406 - 1, 0, 0)
    assert counts["carried"] == 28  # part 407 carried forward unchanged
    assert p.embedder.document_calls >= 1
    assert all("\n§ 406.15 " in t for t in p.embedder.document_texts)  # only the changed section was embedded
    v2 = await active_version(pool)
    assert v2 != v1
    assert await pool.fetchval(f"SELECT count(*) FROM sections s WHERE {db.active_rows('s')}") == N_406 + 28
    assert await pool.fetchval("SELECT source_date FROM corpus_versions WHERE version_id = $1", v2) == "2026-08-01"

    # nothing changed since: no fetch, no version
    ecfr.requests.clear()
    record = await p.refresh_since(42, since="2026-12-01", date="2026-12-02")
    assert record["state"] == "succeeded" and "nothing fetched" in record["message"]
    assert ecfr.fetched_parts() == Counter() and await active_version(pool) == v2


async def test_ecfr_failure_mid_run_fails_clearly(scratch, embedder, ecfr):
    pool = scratch["pool"]
    await first_ingest(scratch, embedder)
    v1 = await active_version(pool)
    before = await active_snapshot(pool)
    base = scratch["settings"].ecfr_base_url
    p = pipeline(scratch, embedder, ecfr_client=lambda: ECFRClient(base_url=base, retries=2, backoff=0.01,
                                                                   max_backoff=0.02))
    record = await p.run(IngestRequest(source="ecfr:2026-09-01", title=42, parts=["406", "407"]))
    assert record["state"] == "failed", record
    error = record["error"]
    assert "eCFR fetch of title 42 part 407 failed" in error and "HTTP 503" in error and "3 attempts" in error
    assert ecfr.fetched_parts() == Counter({("2026-09-01", "406"): 1, ("2026-09-01", "407"): 3})
    assert await active_version(pool) == v1 and await active_snapshot(pool) == before
    await assert_nothing_staged(pool)

    record = await p.run(IngestRequest(source="ecfr:July 2026", title=42))
    assert record["state"] == "failed" and "bad eCFR date" in record["error"]


# ------------------------------------------------------------------------------------------------
# 8. the worker, end to end through the bus
# ------------------------------------------------------------------------------------------------
async def test_worker_end_to_end_through_the_bus(scratch, embedder):
    import redis.asyncio as aioredis

    from services.ingest import service
    from shared.bus import BusClient, StreamWorker
    from shared.messages import IngestEvent
    from shared.streams import INGEST, INGEST_EVENTS

    # a Redis database of our own: no other ingest worker of the session (live stack) takes our entries
    redis_url = urlunparse(urlparse(scratch["settings"].redis_url)._replace(path="/9"))
    settings = scratch["settings"].model_copy(update={"redis_url": redis_url})
    r = aioredis.from_url(redis_url)
    await r.delete(INGEST.name, INGEST_EVENTS)
    handler = await service.setup(settings)
    service._state["pipeline"]._embedder = embedder  # the cached real embedder
    worker = StreamWorker(INGEST, handler, settings)
    await worker.start()
    client = BusClient(settings)
    await client.start()
    try:
        started = time.time()
        reply = await client.request(INGEST, "ingest", IngestRequest(source=str(FILE_406), title=42), timeout=120)
        event = IngestEvent.model_validate(reply)
        assert event.state == "succeeded", event
        assert event.counts["added"] == N_406 and event.run_id.startswith("bus-")
        record = await scratch["pool"].fetchrow("SELECT * FROM ingest_runs WHERE run_id = $1", event.run_id)
        assert record["state"] == "succeeded"
        assert len(await active_snapshot(scratch["pool"])) == N_406

        bad = IngestEvent.model_validate(await client.request(
            INGEST, "ingest", IngestRequest(source="/nowhere/title-42.xml", title=42), timeout=60))
        assert bad.state == "failed" and "does not exist" in bad.message

        entries = await r.xrange(INGEST_EVENTS)
        events = [IngestEvent.model_validate_json(fields[b"json"]) for _, fields in entries]
        mine = [e for e in events if e.run_id == event.run_id]
        states = [e.state for e in mine]
        assert states[0] == "running" and states[-1] == "succeeded" and "progress" in states
        messages = [e.message for e in mine if e.state == "progress"]
        assert "parsing" in messages and any("embedding" in m for m in messages)
        assert any("loading" in m for m in messages)
        assert mine[-1].counts == event.counts
        assert [e.state for e in events if e.run_id == bad.run_id][-1] == "failed"
        assert time.time() - started < 120
    finally:
        await client.close()
        await worker.stop()
        await service.teardown()
        await r.delete(INGEST.name, INGEST_EVENTS, INGEST.dlq)
        await r.aclose()


async def test_check_limits_are_configurable(scratch, embedder, tmp_path):
    """A looser min_count_ratio lets a deliberately smaller source through (e.g. a part truly shrank)."""
    pool = scratch["pool"]
    await first_ingest(scratch, embedder)
    record = await pipeline(scratch, embedder, limits=CheckLimits(min_count_ratio=0.1)).run(
        IngestRequest(source=str(_few_sections(tmp_path)), title=42))
    assert record["state"] == "succeeded", record
    assert record["counts"]["removed"] == N_406 - 3
    assert len(await active_snapshot(pool)) == 3


async def test_first_large_load_builds_the_hnsw_index_after_the_copy(scratch, embedder, monkeypatch):
    """A model's first large load drops its (empty) HNSW indexes, COPYs and activates, then builds them once (the
    swap's new row versions are not inserted into a graph); later small loads insert into the existing graph.
    Either way the indexes exist afterwards and dense search uses them."""
    from services.ingest import pipeline as pipeline_module

    pool = scratch["pool"]
    monkeypatch.setattr(pipeline_module, "BULK_INDEX_MIN_SECTIONS", 1)  # 25 sections count as "large" here
    name = db.vector_index_name("section_windows", embedder.model_name, 384)
    executed: list[str] = []
    original = pipeline_module._build_indexes

    async def spy(*args):
        active = await pool.fetchval("SELECT count(*) FROM sections WHERE status = 'active'")
        executed.append(f"build with {active} active sections")
        await original(*args)

    monkeypatch.setattr(pipeline_module, "_build_indexes", spy)
    record = await first_ingest(scratch, embedder)
    assert executed == [f"build with {N_406} active sections"]
    assert record["timings"]["index"] > 0
    assert await pool.fetchval("SELECT count(*) FROM pg_indexes WHERE indexname = $1", name) == 1
    # the second load of the model is incremental (rows exist): no rebuild
    record = await pipeline(scratch, embedder).run(IngestRequest(source=str(FILE_406), title=42, force=True))
    assert record["state"] == "succeeded" and executed == [f"build with {N_406} active sections"]
    async with pool.acquire() as conn:
        vector = embedder.embed_queries(["entitlement to hospital insurance for end-stage renal disease"])[0]
        async with conn.transaction():
            await conn.execute("SET LOCAL enable_seqscan = off")  # a tiny table: show the index is usable
            plan = "\n".join(r[0] for r in await conn.fetch(
                f"EXPLAIN SELECT section_id FROM section_windows w WHERE {db.active_rows('w')} AND w.embedding_model = "
                f"{db.sql_literal(embedder.model_name)} ORDER BY w.embedding::vector(384) <=> $1::vector(384) LIMIT 5",
                vector))
        assert name in plan, plan
        hits = await db.dense_window_search(conn, vector, embedder.model_name, 384, 5)
    assert hits, "dense search over the rebuilt index found nothing"
    top = await db.active_sections_by_id(pool, [hits[0]["section_id"]])
    assert top[hits[0]["section_id"]]["section"] in {"406.13", "406.15"}


async def test_a_failed_first_large_load_still_builds_the_hnsw_indexes(scratch, embedder, tmp_path, monkeypatch):
    """The bulk load drops the model's indexes at the start of the run: a version that fails its checks is
    discarded and the indexes are built anyway, so the next (incremental) load inserts into a graph."""
    from services.ingest import pipeline as pipeline_module

    pool = scratch["pool"]
    monkeypatch.setattr(pipeline_module, "BULK_INDEX_MIN_SECTIONS", 1)
    record = await pipeline(scratch, embedder).run(IngestRequest(source=str(_empty_texts(tmp_path)), title=42))
    assert record["state"] == "failed" and "check max_empty_share failed" in record["error"], record
    assert await active_version(pool) is None
    for table in ("section_windows", "sections"):
        name = db.vector_index_name(table, embedder.model_name, 384)
        assert await pool.fetchval("SELECT count(*) FROM pg_indexes WHERE indexname = $1", name) == 1, name
    await first_ingest(scratch, embedder)  # the discarded rows are gone: a bulk load again, and a good one
    assert await active_version(pool) is not None


async def test_a_renamed_subpart_re_embeds_its_sections(scratch, embedder, tmp_path):
    """The breadcrumb (part, subpart, subject group) is in every embedded window: same text under a new subpart
    heading is not reused with the old breadcrumb's vectors."""
    pool = scratch["pool"]
    await first_ingest(scratch, embedder)
    old_head = "<HEAD>Subpart A&#x2014;General Provisions</HEAD>"
    assert old_head in XML_406
    source = tmp_path / "renamed-subpart.xml"
    source.write_text(XML_406.replace(old_head, "<HEAD>Subpart A&#x2014;General Provisions and Definitions</HEAD>"))
    in_a = [s.section for s in parse_file(FILE_406) if s.subpart and s.subpart.startswith("A")]
    assert in_a
    counting = Counting(embedder)
    record = await pipeline(scratch, counting).run(IngestRequest(source=str(source), title=42))
    assert record["state"] == "succeeded", record
    assert record["counts"]["changed"] == len(in_a) and record["counts"]["unchanged"] == N_406 - len(in_a)
    assert all("General Provisions and Definitions" in t for t in counting.document_texts)
    row = await db.fetch_active_section(pool, 42, in_a[0])
    assert row["subpart"] == "A—General Provisions and Definitions"
