"""Ingest benchmark: parse, embed and load measured separately on the shipped corpus.

    .venv/bin/python bench/bench_ingest.py [--limit-sections N] [--repeats 3] [--refresh-sections 50]
                                           [--database-url URL] [--corpus data/corpus]
    .venv/bin/python bench/bench_ingest.py --e2e --database-url URL      # the whole ingest, stage by stage

``--limit-sections N`` takes the first N sections of the shipped corpus (default: all of it). The load runs in
scratch databases (``regs_bench_<uuid>``, created, migrated and dropped) on ``--database-url`` /
``REGS_DATABASE_URL``, or on an embedded PostgreSQL started in a temp dir when neither is set.

Prints one JSON object:
- ``parse``: sections/s (median of ``--repeats`` runs);
- ``embed``: sections/s and windows/s of the configured embedder (one run: it is the slow phase), fed in
  chunks as the pipeline does;
- ``load``: for a first ingest into empty tables, the two orders of building the partial HNSW indexes,
  ``index_first`` (indexes exist, COPY maintains them row by row — what an incremental load does) and
  ``index_after`` (COPY into unindexed tables, then CREATE INDEX — what the pipeline does for a model's
  first large load), each a median over ``--repeats`` fresh databases; plain COPY rows/s; the HNSW build
  time; and an incremental refresh (``--refresh-sections`` sections' rows COPYed into the indexed tables)
  against rebuilding the indexes.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import urlparse, urlunparse

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 4)


def parse_sections(corpus: Path, limit: int | None):
    from services.ingest.parsing import parse_file, shipped_corpus_files

    out = []
    for path in shipped_corpus_files(corpus):
        for section in parse_file(path):
            out.append(section)
            if limit and len(out) >= limit:
                return out
    return out


def bench_parse(corpus: Path, limit: int | None, repeats: int) -> tuple[list, dict]:
    times, sections = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        sections = parse_sections(corpus, limit)
        times.append(time.perf_counter() - started)
    return sections, {"sections": len(sections), "seconds_median": _median(times),
                      "sections_per_s": round(len(sections) / statistics.median(times), 1)}


def bench_embed(settings, sections) -> tuple[dict, dict]:
    from shared.embeddings import get_embedder, section_windows

    started = time.perf_counter()
    embedder = get_embedder(settings)
    load_s = time.perf_counter() - started
    windows, owners = [], []
    started = time.perf_counter()
    for s in sections:
        for w in section_windows(s.breadcrumb(), f"§ {s.section} {s.heading}", s.text or s.heading,
                                 words=settings.embedding_window_words, stride=settings.embedding_window_stride,
                                 max_windows=settings.embedding_max_windows):
            windows.append(w)
            owners.append(s.cfr_ref)
    window_s = time.perf_counter() - started
    vectors = {}
    batch = max(64, settings.embedding_batch_size * 4)  # the pipeline's chunking
    started = time.perf_counter()
    for start in range(0, len(windows), batch):
        for owner, vector in zip(owners[start: start + batch], embedder.embed_documents(windows[start: start + batch])):
            vectors.setdefault(owner, []).append(vector)
    seconds = time.perf_counter() - started
    return {ref: np.stack(v) for ref, v in vectors.items()}, {
        "model": embedder.model_name, "backend": getattr(embedder, "backend", None), "model_load_s": round(load_s, 2),
        "windows": len(windows), "windowing_s": round(window_s, 3), "seconds": round(seconds, 2),
        "sections_per_s": round(len(sections) / seconds, 1), "windows_per_s": round(len(windows) / seconds, 1),
    }


def resample_vectors(settings, sections, real: dict) -> dict:
    """Vectors for every section (as many as its windows) drawn from the real ones plus noise: keeps the load
    phase's row counts and a realistic, clustered vector distribution without embedding everything."""
    from shared.embeddings import section_windows

    pool = np.concatenate(list(real.values()))
    rng = np.random.default_rng(7)
    out = {}
    for s in sections:
        if s.cfr_ref in real:
            out[s.cfr_ref] = real[s.cfr_ref]
            continue
        n = len(section_windows(s.breadcrumb(), f"§ {s.section} {s.heading}", s.text or s.heading,
                                words=settings.embedding_window_words, stride=settings.embedding_window_stride,
                                max_windows=settings.embedding_max_windows))
        v = pool[rng.integers(0, len(pool), n)] + rng.normal(scale=0.03, size=(n, pool.shape[1]))
        out[s.cfr_ref] = (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)
    return out


def build_rows(sections, vectors, model: str, first_id: int = 1, version_id: int = 1):
    from services.ingest.pipeline import _section_record

    section_rows, window_rows = [], []
    for n, s in enumerate(sections):
        vecs = vectors[s.cfr_ref]
        mean = vecs.mean(axis=0)
        mean = (mean / (np.linalg.norm(mean) or 1.0)).astype(np.float32)
        section_rows.append(_section_record(first_id + n, version_id, s, mean, model))
        for window_no, v in enumerate(vecs):
            window_rows.append((first_id + n, version_id, "staged", s.title, window_no, model,
                                np.asarray(v, dtype=np.float32)))
    return section_rows, window_rows


async def _scratch_db(base_url: str):
    import asyncpg

    from shared import db

    name = f"regs_bench_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(base_url)
    await admin.execute(f'CREATE DATABASE "{name}"')
    await admin.close()
    url = urlunparse(urlparse(base_url)._replace(path="/" + name))
    await db.migrate(url)
    return name, url


async def _drop_db(base_url: str, name: str) -> None:
    import asyncpg

    admin = await asyncpg.connect(base_url)
    await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    await admin.close()


async def _versions(conn, n: int, model: str) -> None:
    for _ in range(n):
        await conn.execute("INSERT INTO corpus_versions (title, status, source, embedding_model, embedding_dim) "
                           "VALUES (0, 'failed', 'bench', $1, 384)", model)


async def _copy(conn, section_rows, window_rows) -> None:
    from services.ingest.pipeline import SECTION_COPY_COLUMNS, WINDOW_COPY_COLUMNS

    async with conn.transaction():
        await conn.copy_records_to_table("sections", records=section_rows, columns=SECTION_COPY_COLUMNS)
        await conn.copy_records_to_table("section_windows", records=window_rows, columns=WINDOW_COPY_COLUMNS)


async def _build_indexes(conn, model: str, dim: int) -> None:
    from services.ingest.pipeline import BULK_MAINTENANCE_WORK_MEM
    from shared import db

    await conn.execute(
        "SELECT set_config('maintenance_work_mem', CASE WHEN pg_size_bytes(current_setting('maintenance_work_mem'))"
        " < pg_size_bytes($1) THEN $1 ELSE current_setting('maintenance_work_mem') END, false)",
        BULK_MAINTENANCE_WORK_MEM)
    await db.ensure_vector_indexes(conn, model, dim)


async def bench_load(base_url: str, sections, vectors, model: str, dim: int, repeats: int,
                     refresh_sections: int) -> dict:
    from shared import db

    section_rows, window_rows = build_rows(sections, vectors, model, first_id=1, version_id=1)
    refresh = sections[:refresh_sections]
    r_sections, r_windows = build_rows(refresh, vectors, model, first_id=len(sections) + 1, version_id=2)
    rows = len(section_rows) + len(window_rows)
    results: dict[str, list[float]] = {k: [] for k in (
        "index_first_total_s", "index_after_copy_s", "index_after_build_s", "index_after_total_s",
        "refresh_copy_s", "refresh_rebuild_s")}
    for r in range(repeats):
        order = ("index_first", "index_after") if r % 2 == 0 else ("index_after", "index_first")
        for strategy in order:
            name, url = await _scratch_db(base_url)
            conn = await db.connect(url)
            try:
                await _versions(conn, 2, model)
                await conn.execute("CHECKPOINT")
                if strategy == "index_first":
                    started = time.perf_counter()
                    await _build_indexes(conn, model, dim)
                    await _copy(conn, section_rows, window_rows)
                    results["index_first_total_s"].append(time.perf_counter() - started)
                else:
                    started = time.perf_counter()
                    await _copy(conn, section_rows, window_rows)
                    copied = time.perf_counter()
                    await _build_indexes(conn, model, dim)
                    built = time.perf_counter()
                    results["index_after_copy_s"].append(copied - started)
                    results["index_after_build_s"].append(built - copied)
                    results["index_after_total_s"].append(built - started)
                    # a small refresh into the indexed tables, against rebuilding the indexes
                    started = time.perf_counter()
                    await _copy(conn, r_sections, r_windows)
                    results["refresh_copy_s"].append(time.perf_counter() - started)
                    started = time.perf_counter()
                    await conn.execute(f"REINDEX INDEX {db.vector_index_name('section_windows', model, dim)}")
                    await conn.execute(f"REINDEX INDEX {db.vector_index_name('sections', model, dim)}")
                    results["refresh_rebuild_s"].append(time.perf_counter() - started)
            finally:
                await conn.close()
                await _drop_db(base_url, name)
    med = {k: _median(v) for k, v in results.items()}
    faster = "index_after" if med["index_after_total_s"] < med["index_first_total_s"] else "index_first"
    return {
        "section_rows": len(section_rows), "window_rows": len(window_rows), "repeats": repeats,
        "copy_rows_per_s_no_index": round(rows / med["index_after_copy_s"], 1),
        "copy_rows_per_s_index_first": round(rows / med["index_first_total_s"], 1),
        "hnsw_build_s": med["index_after_build_s"],
        "first_ingest_index_first_s": med["index_first_total_s"],
        "first_ingest_index_after_s": med["index_after_total_s"],
        "faster_first_ingest": faster,
        "speedup": round(max(med["index_first_total_s"], med["index_after_total_s"])
                         / min(med["index_first_total_s"], med["index_after_total_s"]), 2),
        "refresh": {"sections": len(r_sections), "windows": len(r_windows),
                    "incremental_copy_s": med["refresh_copy_s"], "full_reindex_s": med["refresh_rebuild_s"]},
        "samples": {k: [round(x, 4) for x in v] for k, v in results.items()},
    }


async def bench_end_to_end(base_url: str, corpus: Path) -> dict:
    """``regs ingest`` of the whole shipped corpus into an empty database: the pipeline as it runs (parse, embed,
    COPY, checks, the activating swap with its lexeme postings), its own stage timings from the run record; then a
    forced refresh of the largest title (nothing re-embedded: a new version's database work)."""
    from services.ingest.pipeline import IngestPipeline
    from shared import db
    from shared.config import Settings
    from shared.messages import IngestRequest

    name, url = await _scratch_db(base_url)
    try:
        settings = Settings().model_copy(update={"database_url": url})
        pool = await db.create_pool(url, max_size=4)
        try:
            pipeline = IngestPipeline(pool, settings)
            started = time.perf_counter()
            pipeline.embedder  # the model loads before the clock that matters
            model_load_s = time.perf_counter() - started
            started = time.perf_counter()
            record = await pipeline.run(IngestRequest(source=str(corpus)))
            seconds = time.perf_counter() - started
            windows = await pool.fetchval("SELECT count(*) FROM section_windows WHERE status = 'active'")
            # a refresh of the largest title with nothing changed, forced: every section's vectors reused, so
            # what it measures is the database work of a new version (COPY, checks, swap)
            largest = await pool.fetchval("SELECT title FROM sections WHERE status = 'active' GROUP BY title "
                                          "ORDER BY count(*) DESC LIMIT 1")
            started = time.perf_counter()
            refreshed = await pipeline.run(IngestRequest(source=str(corpus), title=largest, force=True))
            refresh = {"title": largest, "state": refreshed["state"], "seconds": round(time.perf_counter() - started, 1),
                       "sections": refreshed["counts"].get("reused"), "timings_s": refreshed.get("timings")}
        finally:
            await pool.close()
    finally:
        await _drop_db(base_url, name)
    sections = record["counts"].get("added", 0)
    return {"state": record["state"], "sections": sections, "windows": windows, "seconds": round(seconds, 1),
            "sections_per_s": round(sections / seconds, 1), "timings_s": record.get("timings"),
            "embed_sections_per_s": round(sections / record["timings"]["embed"], 1) if record.get("timings") else None,
            "model_load_s": round(model_load_s, 1), "forced_refresh": refresh}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=ROOT / "data" / "corpus")
    parser.add_argument("--limit-sections", type=int, default=None, help="first N sections (default: all)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--refresh-sections", type=int, default=50)
    parser.add_argument("--embed-sections", type=int, default=None,
                        help="embed only every k-th section, N in all (default: every section). The load phase then "
                             "uses those real vectors resampled (+ small noise, renormalised) for the other "
                             "sections — reported as load.vectors = 'resampled'")
    parser.add_argument("--database-url", default=os.environ.get("REGS_DATABASE_URL"))
    parser.add_argument("--e2e", action="store_true",
                        help="only the end-to-end ingest of the whole corpus into an empty database, with the "
                             "pipeline's own stage timings")
    args = parser.parse_args()

    from shared.config import Settings

    if args.e2e:
        if not args.database_url:
            sys.exit("--e2e needs --database-url (or REGS_DATABASE_URL): a server it can create a scratch database on")
        print(json.dumps({"cpus": os.cpu_count(), "load_average": [round(x, 2) for x in os.getloadavg()],
                          "e2e": asyncio.run(bench_end_to_end(args.database_url, args.corpus))}, indent=2))
        return
    settings = Settings()
    sections, parse = bench_parse(args.corpus, args.limit_sections, args.repeats)
    embedded_sections = sections
    if args.embed_sections and args.embed_sections < len(sections):
        step = len(sections) / args.embed_sections
        embedded_sections = [sections[int(i * step)] for i in range(args.embed_sections)]
    vectors, embed = bench_embed(settings, embedded_sections)
    vector_kind = "embedded"
    if len(embedded_sections) < len(sections):
        vectors = resample_vectors(settings, sections, vectors)
        vector_kind = "resampled"

    server = None
    tmp = None
    base_url = args.database_url
    if not base_url:
        from shared.embedded import EmbeddedPostgres, free_port

        tmp = tempfile.mkdtemp(prefix="regs-bench-")
        server = EmbeddedPostgres(Path(tmp) / "pg", free_port())
        server.start()
        base_url = server.url
    try:
        dim = next(iter(vectors.values())).shape[1]
        load = asyncio.run(bench_load(base_url, sections, vectors, embed["model"], dim, args.repeats,
                                      args.refresh_sections))
    finally:
        if server is not None:
            server.stop()
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    load["vectors"] = vector_kind
    print(json.dumps({"limit_sections": args.limit_sections, "cpus": os.cpu_count(),
                      "load_average": [round(x, 2) for x in os.getloadavg()],
                      "parse": parse, "embed": embed, "load": load}, indent=2))


if __name__ == "__main__":
    main()
