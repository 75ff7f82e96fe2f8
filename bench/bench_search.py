"""Search and query latency benchmark, on a copy of the shipped corpus and on a synthetic scale-up.

    regs bench search [--sizes small,85k] [--concurrency 1,8,32] [--requests 100] [--keep] [--reuse]
    regs bench query  [--query-concurrency 1,8] [--query-requests 40]
    .venv/bin/python -m bench.bench_search --what search,query ...

Corpora (each its own database on the PostgreSQL server of ``--source-url``, never the source itself):
- ``small``: the active rows of the source database (the shipped corpus, 3,824 sections) copied as they are
  into ``regs_bench_small``;
- ``85k`` (or any ``<N>k`` / ``<N>``): ``regs_bench_85k``, the shipped rows plus perturbed copies up to N
  sections. Copy k (k ≥ 1) lives in fake title ``title + 100·k`` (one active ``corpus_versions`` row per fake
  title) with parts ``<part>x<k>``; its text has two sentences swapped and a few words replaced by corpus words,
  a third of the headings have one word replaced, and its window vectors are the real ones plus Gaussian noise
  (σ = ``--noise`` per dimension) renormalised — no embedding of 85k texts. COPY with the secondary indexes
  dropped, then the btree/GIN indexes, the partial HNSW indexes (``shared.db.ensure_vector_indexes``) and
  VACUUM ANALYZE.

Paths, each at every ``--concurrency`` (``--requests`` requests per level after a warm-up; the ~50 questions are
every k-th ``question`` of eval/dataset.jsonl):
- ``inproc``: ``Searcher(pool, settings).search`` in this process (query embedding included, pool of 10 like the
  retriever's);
- ``queue``: ``BusClient.request`` on regs.retrieve.requests to a retriever process of our own;
- ``gateway``: ``POST /v1/search`` on a gateway process of our own (then the queue, then the retriever).
Our processes run against our database and ``--redis-url`` (a separate Redis DB index; flushed first) on free
ports, started with tests/conftest.py's ``start_stack``. Also: the cold catalog load (in process, and the first
request a fresh retriever serves), a per-part time breakdown of in-process searches at concurrency 1 (wrappers
around the shared.db calls, the scoping and the query embedding — in this process only), and EXPLAIN (ANALYZE)
of the retriever's SQL through asyncpg: as issued, without ``hnsw.iterative_scan``, as a forced generic plan of
a prepared statement, and the plan the plan cache settles on after repeated executions; plus the recall of the
HNSW top windows against an exact scan.

Query (``POST /v1/query``, full fan-out with the extractive generator) on ``small``: p50/p95 per concurrency and
the p50 of each stage of the response's ``timings_ms``.

Writes ``--out`` (JSON, default bench/results/search.json or query.json) and ``--plot`` (PNG of p50/p95 against
concurrency per path and corpus). The databases are dropped at the end unless ``--keep``; ``--reuse`` keeps an
existing database with the right number of active sections instead of rebuilding it.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import re
import statistics
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable
from urllib.parse import urlparse, urlunparse

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

RESULTS = ROOT / "bench" / "results"
DEFAULT_REDIS = "redis://127.0.0.1:63790/5"
SEARCH_TARGET_P50_MS = 25.0
QUEUE_OVERHEAD_TARGET = 1.5


def default_source_url() -> str:
    url = os.environ.get("REGS_DATABASE_URL")
    if url:
        return url
    try:
        from shared.config import get_settings
        from shared.supervisor import read_state

        state = read_state(get_settings().resolved_data_dir())
        if state and state.get("database_url"):
            return state["database_url"]
    except Exception:  # noqa: BLE001 - fall back to the embedded default
        pass
    return "postgresql://postgres@127.0.0.1:54329/regs"


def load_questions(n: int, path: Path = ROOT / "eval" / "dataset.jsonl") -> list[str]:
    """Every k-th question of the eval set (all kinds: facts, siblings, citations, not-found, multi)."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    questions = [r["question"] for r in rows if r.get("question")]
    if n >= len(questions):
        return questions
    return [questions[int(i * len(questions) / n)] for i in range(n)]


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# --------------------------------------------------------------------------------------------
# latency runs
# --------------------------------------------------------------------------------------------
def summarize(latencies: list[float], wall_s: float, errors: int) -> dict[str, Any]:
    ms = np.asarray(latencies) * 1000 if latencies else np.asarray([math.nan])
    return {
        "requests": len(latencies), "errors": errors,
        "p50_ms": round(float(np.percentile(ms, 50)), 1), "p95_ms": round(float(np.percentile(ms, 95)), 1),
        "p99_ms": round(float(np.percentile(ms, 99)), 1), "mean_ms": round(float(ms.mean()), 1),
        "max_ms": round(float(ms.max()), 1), "throughput_rps": round(len(latencies) / wall_s, 2) if wall_s else None,
        "wall_s": round(wall_s, 2), "load_average": load_average(),
    }


async def run_level(call: Callable[[str], Awaitable[Any]], questions: list[str], concurrency: int, requests: int,
                    keep: Callable[[Any], None] | None = None) -> dict[str, Any]:
    """``requests`` calls (cycling through the questions) by ``concurrency`` workers; client-side latency."""
    latencies: list[float] = []
    errors: list[str] = []
    counter = iter(range(requests))

    async def worker() -> None:
        for n in counter:
            question = questions[n % len(questions)]
            started = time.perf_counter()
            try:
                result = await call(question)
            except Exception as exc:  # noqa: BLE001 - counted, and the first few kept
                errors.append(f"{type(exc).__name__}: {exc}"[:300])
                continue
            latencies.append(time.perf_counter() - started)
            if keep is not None:
                keep(result)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    out = summarize(latencies, time.perf_counter() - started, len(errors))
    out["concurrency"] = concurrency
    if errors:
        out["first_errors"] = errors[:3]
    return out


async def run_path(name: str, call, questions: list[str], levels: list[int], requests: int, warmup: int,
                   keep_factory: Callable[[int], Callable[[Any], None]] | None = None) -> dict[str, Any]:
    if warmup:
        await run_level(call, questions[::-1], min(4, max(levels)), warmup)
    out = {}
    for c in levels:
        n = max(requests, 4 * c)
        out[str(c)] = await run_level(call, questions, c, n, keep_factory(c) if keep_factory else None)
        print(f"  {name:<8} c={c:<3} p50 {out[str(c)]['p50_ms']:>8.1f} ms  p95 {out[str(c)]['p95_ms']:>8.1f} ms  "
              f"{out[str(c)]['throughput_rps']:>7.1f} req/s  errors {out[str(c)]['errors']}  "
              f"load {out[str(c)]['load_average'][0]}", flush=True)
    return out


# --------------------------------------------------------------------------------------------
# corpora
# --------------------------------------------------------------------------------------------
@dataclass
class BaseCorpus:
    versions: list[dict]
    sections: list[dict]
    windows: dict[int, np.ndarray]  # section id -> (n_windows, dim) in window_no order
    model: str
    dim: int


async def read_corpus(source_url: str) -> BaseCorpus:
    """The active rows of the source database (one read; nothing is written there)."""
    from services.ingest.pipeline import SECTION_COPY_COLUMNS
    from shared import db

    conn = await db.connect(source_url)
    try:
        versions = [dict(r) for r in await conn.fetch(
            "SELECT version_id, title, source, source_date, embedding_model, embedding_dim FROM corpus_versions "
            "WHERE status = 'active' ORDER BY version_id")]
        sections = [dict(r) for r in await conn.fetch(
            f"SELECT {', '.join(SECTION_COPY_COLUMNS)} FROM sections WHERE status = 'active' ORDER BY id")]
        windows: dict[int, list] = defaultdict(list)
        for r in await conn.fetch("SELECT section_id, embedding FROM section_windows WHERE status = 'active' "
                                  "ORDER BY section_id, window_no"):
            windows[r["section_id"]].append(_as_array(r["embedding"]))
    finally:
        await conn.close()
    if not sections:
        raise SystemExit(f"the source database {source_url} has no active sections: ingest first (`regs up`)")
    models = {v["embedding_model"] for v in versions}
    if len(models) != 1:
        raise SystemExit(f"the source corpus mixes embedding models {sorted(models)}")
    stacked = {sid: np.stack(v) for sid, v in windows.items()}
    dim = next(iter(stacked.values())).shape[1]
    return BaseCorpus(versions, sections, stacked, models.pop(), dim)


def _as_array(value) -> np.ndarray:
    """A pgvector value as float32 numpy (the codec returns ``pgvector.Vector`` or numpy depending on version)."""
    return np.asarray(value.to_numpy() if hasattr(value, "to_numpy") else value, dtype=np.float32)


_SENTENCE = re.compile(r"(?<=[.;])\s+(?=[A-Z(])")


def perturb_text(text: str, rng: np.random.Generator, vocab: list[str], words: int = 3) -> str:
    """Two neighbouring sentences swapped and ``words`` words replaced by corpus words."""
    parts = _SENTENCE.split(text)
    if len(parts) >= 3:
        i = int(rng.integers(0, len(parts) - 1))
        parts[i], parts[i + 1] = parts[i + 1], parts[i]
    tokens = " ".join(parts).split(" ")
    candidates = [j for j, t in enumerate(tokens) if len(t) >= 4 and t.isalpha()]
    if candidates:
        for j in rng.choice(candidates, size=min(words, len(candidates)), replace=False):
            tokens[int(j)] = vocab[int(rng.integers(len(vocab)))]
    return " ".join(tokens)


def corpus_vocab(sections: list[dict], limit: int = 5000, seed: int = 3) -> list[str]:
    words = sorted({w.lower() for s in sections[:2000] for w in (s["text"] or "").split()[:400]
                    if len(w) >= 4 and w.isalpha()})
    rng = np.random.default_rng(seed)
    return [words[i] for i in rng.choice(len(words), size=min(limit, len(words)), replace=False)] or ["regulation"]


def synthetic_copy(base: BaseCorpus, k: int, count: int, first_id: int, version_of: dict[int, int],
                   rng: np.random.Generator, vocab: list[str], noise: float):
    """Section and window COPY records of copy ``k`` (k = 0: the base rows as they are) of the first ``count``
    base sections, ids from ``first_id``."""
    from services.ingest.pipeline import SECTION_COPY_COLUMNS

    section_rows, window_rows = [], []
    chosen = base.sections[:count]
    stacked = [base.windows.get(s["id"]) for s in chosen]
    present = [w for w in stacked if w is not None]
    all_windows = np.concatenate(present) if present else np.zeros((0, base.dim), np.float32)
    if k and len(all_windows):
        all_windows = all_windows + rng.normal(scale=noise, size=all_windows.shape).astype(np.float32)
        all_windows /= np.linalg.norm(all_windows, axis=1, keepdims=True)
    offset = 0
    for n, (s, w) in enumerate(zip(chosen, stacked)):
        row = dict(s)
        new_id = first_id + n
        row["id"] = new_id
        row["version_id"] = version_of[s["version_id"]]
        vecs = None
        if w is not None:
            vecs = all_windows[offset: offset + len(w)]
            offset += len(w)
        if k:
            part = f"{s['part']}x{k}"
            row["title"] = s["title"] + 100 * k
            row["part"] = part
            section = s["section"]
            row["section"] = (part + section[len(s["part"]):]) if section.startswith(s["part"]) \
                else section.replace(s["part"], part, 1) if s["part"] in section else f"{section}x{k}"
            row["cfr_ref"] = f"{row['title']} CFR {row['section']}"
            row["text"] = perturb_text(s["text"] or "", rng, vocab)
            if rng.random() < 0.33:
                row["heading"] = perturb_text(s["heading"], rng, vocab, words=1)
            row["content_hash"] = uuid.uuid4().hex
            row["source"] = f"bench-synthetic-copy-{k}"
            if vecs is not None:
                mean = vecs.mean(axis=0)
                row["embedding"] = (mean / (np.linalg.norm(mean) or 1.0)).astype(np.float32)
        section_rows.append(tuple(row[c] for c in SECTION_COPY_COLUMNS))
        if vecs is not None:
            for window_no, v in enumerate(vecs):
                window_rows.append((new_id, row["version_id"], "active", row["title"], window_no, base.model, v))
    return section_rows, window_rows


def db_url(base_url: str, name: str) -> str:
    return urlunparse(urlparse(base_url)._replace(path="/" + name))


async def active_section_count(url: str) -> int | None:
    import asyncpg

    try:
        conn = await asyncpg.connect(url)
    except asyncpg.InvalidCatalogNameError:
        return None
    try:
        return await conn.fetchval("SELECT count(*) FROM sections WHERE status = 'active'")
    except asyncpg.UndefinedTableError:
        return None
    finally:
        await conn.close()


async def drop_database(admin_url: str, name: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(admin_url)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


async def build_corpus(base: BaseCorpus, admin_url: str, name: str, n_sections: int, *, noise: float = 0.02,
                       seed: int = 11, maintenance_work_mem: str = "2GB") -> dict[str, Any]:
    """A fresh database ``name`` holding ``n_sections`` active sections: the base rows, then perturbed copies."""
    import asyncpg

    from services.ingest.pipeline import SECTION_COPY_COLUMNS, WINDOW_COPY_COLUMNS
    from shared import db

    await drop_database(admin_url, name)
    conn = await asyncpg.connect(admin_url)
    await conn.execute(f'CREATE DATABASE "{name}"')
    await conn.close()
    url = db_url(admin_url, name)
    await db.migrate(url)
    timings: dict[str, float] = {}
    rng = np.random.default_rng(seed)
    vocab = corpus_vocab(base.sections)
    conn = await db.connect(url)
    try:
        indexes = await conn.fetch(
            "SELECT i.indexname, i.indexdef FROM pg_indexes i WHERE i.schemaname = 'public' AND i.tablename IN "
            "('sections', 'section_windows', 'section_lexemes') AND NOT EXISTS (SELECT 1 FROM pg_constraint c "
            "WHERE c.conname = i.indexname)")
        for r in indexes:
            await conn.execute(f'DROP INDEX "{r["indexname"]}"')
        await conn.execute("SET session_replication_role = replica")  # no FK trigger per window row
        started = time.perf_counter()
        copies = math.ceil(n_sections / len(base.sections))
        next_id, next_version, sections_total, windows_total = 1, 1, 0, 0
        for k in range(copies):
            count = min(len(base.sections), n_sections - sections_total)
            version_of = {}
            for v in base.versions:
                version_of[v["version_id"]] = next_version
                await conn.execute(
                    "INSERT INTO corpus_versions (version_id, title, status, source, source_date, embedding_model, "
                    "embedding_dim, section_count, activated_at) VALUES ($1, $2, 'active', $3, $4, $5, $6, $7, now())",
                    next_version, v["title"] + 100 * k, v["source"] if k == 0 else f"bench-synthetic-copy-{k}",
                    v["source_date"], v["embedding_model"], v["embedding_dim"],
                    sum(1 for s in base.sections[:count] if s["version_id"] == v["version_id"]))
                next_version += 1
            section_rows, window_rows = synthetic_copy(base, k, count, next_id, version_of, rng, vocab, noise)
            async with conn.transaction():
                await conn.copy_records_to_table("sections", records=section_rows, columns=SECTION_COPY_COLUMNS)
                await conn.copy_records_to_table("section_windows", records=window_rows, columns=WINDOW_COPY_COLUMNS)
            next_id += count
            sections_total += count
            windows_total += len(window_rows)
            if copies > 1:
                print(f"  copy {k + 1}/{copies}: {sections_total} sections, {windows_total} windows "
                      f"({time.perf_counter() - started:.0f} s)", flush=True)
        timings["copy_s"] = time.perf_counter() - started
        started = time.perf_counter()
        for version_id in range(1, next_version):  # the full-text postings, as ingest writes them at activation
            await db.index_lexemes(conn, version_id)
        timings["lexeme_postings_s"] = time.perf_counter() - started
        await conn.execute("RESET session_replication_role")
        await conn.execute("SELECT setval('sections_id_seq', $1)", next_id)
        await conn.execute("SELECT setval('corpus_versions_version_id_seq', $1)", next_version)
        await conn.execute(f"SET maintenance_work_mem = '{maintenance_work_mem}'")
        started = time.perf_counter()
        for r in indexes:
            await conn.execute(r["indexdef"])
        timings["btree_gin_indexes_s"] = time.perf_counter() - started
        started = time.perf_counter()
        await db.ensure_vector_indexes(conn, base.model, base.dim)
        timings["hnsw_indexes_s"] = time.perf_counter() - started
        started = time.perf_counter()
        await conn.execute("VACUUM ANALYZE sections")
        await conn.execute("VACUUM ANALYZE section_windows")
        await conn.execute("VACUUM ANALYZE corpus_versions")
        await conn.execute("VACUUM ANALYZE section_lexemes")
        timings["vacuum_analyze_s"] = time.perf_counter() - started
        size = await conn.fetchval("SELECT pg_database_size(current_database())")
    finally:
        await conn.close()
    return {"database": name, "sections": sections_total, "windows": windows_total,
            "titles": len(base.versions) * copies, "copies": copies, "noise_sigma": noise if copies > 1 else None,
            "size_mb": round(size / 2**20), **{k: round(v, 2) for k, v in timings.items()},
            "load_average": load_average()}


def parse_size(size: str, base_sections: int) -> int:
    if size == "small":
        return base_sections
    match = re.fullmatch(r"(\d+)(k?)", size.lower())
    if not match:
        raise SystemExit(f"bad corpus size {size!r}: small, 85k or a number of sections")
    return int(match.group(1)) * (1000 if match.group(2) else 1)


# --------------------------------------------------------------------------------------------
# in-process search, its breakdown and the cold catalog
# --------------------------------------------------------------------------------------------
TIMED_DB_CALLS = ("dense_window_search", "dense_section_search", "question_lexemes", "fulltext_search",
                  "section_similarities", "active_ids_for_refs", "lexeme_presence", "active_sections_by_id",
                  "latest_superseded", "active_signature", "catalog_rows", "lexeme_document_frequencies",
                  "active_embedding_models")


_MISSING = object()


class Probe:
    """Wall time of the parts of a search, by wrapping the module attributes ``Searcher.search`` calls through
    (shared.db functions, the scoping function, the embedder). Meaningful at concurrency 1 only."""

    def __init__(self, embedder) -> None:
        self.embedder = embedder
        self.current: dict[str, float] = defaultdict(float)
        self._saved: list[tuple[Any, str, Any]] = []

    def _timed_async(self, name: str, fn):
        async def wrapper(*args, **kwargs):
            started = time.perf_counter()
            try:
                return await fn(*args, **kwargs)
            finally:
                self.current[name] += (time.perf_counter() - started) * 1000
        return wrapper

    def _timed_sync(self, name: str, fn):
        def wrapper(*args, **kwargs):
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.current[name] += (time.perf_counter() - started) * 1000
        return wrapper

    def _patch(self, owner, attr: str, replacement) -> None:
        # what the owner itself held (an instance usually holds no method of its own: the class provides it)
        self._saved.append((owner, attr, vars(owner).get(attr, _MISSING)))
        setattr(owner, attr, replacement)

    def __enter__(self) -> "Probe":
        from services.retriever import search as search_module
        from shared import db

        for name in TIMED_DB_CALLS:
            self._patch(db, name, self._timed_async(name, getattr(db, name)))
        self._patch(search_module, "scope_question", self._timed_sync("scope", search_module.scope_question))
        self._patch(search_module, "Catalog", self._timed_sync("catalog_build", search_module.Catalog))
        self._patch(self.embedder, "embed_queries", self._timed_sync("embed_query", self.embedder.embed_queries))
        return self

    def __exit__(self, *exc) -> None:
        for owner, attr, original in reversed(self._saved):
            if original is _MISSING:
                delattr(owner, attr)
            else:
                setattr(owner, attr, original)
        self._saved.clear()

    def take(self) -> dict[str, float]:
        out, self.current = dict(self.current), defaultdict(float)
        return out


async def cold_catalog(pool, settings, embedder) -> dict[str, Any]:
    """A fresh Searcher's first catalog load: the active sections' metadata and ts_stat's lexeme statistics."""
    from services.retriever.search import Searcher

    searcher = Searcher(pool, settings, embedder)
    with Probe(embedder) as probe:
        started = time.perf_counter()
        catalog = await searcher.catalog()
        total = (time.perf_counter() - started) * 1000
        parts = probe.take()
    return {"total_ms": round(total, 1), "catalog_rows_ms": round(parts.get("catalog_rows", 0), 1),
            "ts_stat_ms": round(parts.get("lexeme_document_frequencies", 0), 1),
            "catalog_build_ms": round(parts.get("catalog_build", 0), 1), "entries": len(catalog.entries),
            "lexemes": len(searcher._lexeme_df)}


async def breakdown(searcher, embedder, questions: list[str], repeats: int = 1) -> dict[str, Any]:
    """p50 / mean of each part of an in-process search at concurrency 1."""
    from shared.messages import RetrieveRequest

    samples: dict[str, list[float]] = defaultdict(list)
    with Probe(embedder) as probe:
        for _ in range(repeats):
            for q in questions:
                probe.take()
                started = time.perf_counter()
                await searcher.search(RetrieveRequest(question=q))
                total = (time.perf_counter() - started) * 1000
                parts = probe.take()
                parts.pop("active_signature", None)
                for name, value in parts.items():
                    samples[name].append(value)
                samples["total"].append(total)
                samples["other (python: scoring, fusion, pool, thread hop)"].append(total - sum(parts.values()))
    n = len(samples["total"])
    out = {}
    for name, values in sorted(samples.items(), key=lambda kv: -sum(kv[1])):
        values = values + [0.0] * (n - len(values))  # a part a search skipped took 0 ms
        out[name] = {"p50_ms": round(statistics.median(values), 2), "mean_ms": round(statistics.mean(values), 2)}
    return {"searches": n, "parts": out}


# --------------------------------------------------------------------------------------------
# EXPLAIN through asyncpg
# --------------------------------------------------------------------------------------------
class ExplainConn:
    """Stands in for the asyncpg connection a shared.db query function is given: the SQL it sends is run as
    EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) with its own parameters, then as itself (its rows are returned);
    ``overrides`` replace the function's own SET LOCAL values, ``extra`` adds SET LOCALs before the query."""

    def __init__(self, conn, overrides: dict[str, str] | None = None, extra: dict[str, str] | None = None,
                 analyze: bool = True, rewrite: Callable[[str, tuple], tuple[str, tuple]] | None = None):
        self.conn = conn
        self.rewrite = rewrite
        self.overrides = overrides or {}
        self.extra = extra or {}
        self.analyze = analyze
        self.captured: list[tuple[str, tuple]] = []
        self.plans: list[Any] = []

    def transaction(self):
        return self.conn.transaction()

    async def execute(self, sql: str, *args):
        match = re.match(r"\s*SET LOCAL ([\w.]+) = (.+)", sql)
        if match and match.group(1) in self.overrides:
            sql = f"SET LOCAL {match.group(1)} = {self.overrides[match.group(1)]}"
        return await self.conn.execute(sql, *args)

    async def fetch(self, sql: str, *args):
        for name, value in self.extra.items():
            await self.conn.execute(f"SET LOCAL {name} = {value}")
        if self.rewrite is not None:
            sql, args = self.rewrite(sql, args)
        self.captured.append((sql, args))
        options = "ANALYZE, BUFFERS, FORMAT JSON" if self.analyze else "FORMAT JSON"
        plan = await self.conn.fetchval(f"EXPLAIN ({options}) {sql}", *args)
        self.plans.append(json.loads(plan) if isinstance(plan, str) else plan)
        return await self.conn.fetch(sql, *args)


def plan_summary(plan: Any) -> dict[str, Any]:
    """The nodes of a JSON plan (type, index, rows), its times, and whether an index of each kind was used."""
    top = plan[0] if isinstance(plan, list) else plan
    nodes = []

    def walk(node: dict, depth: int) -> None:
        entry = {"depth": depth, "node": node.get("Node Type")}
        for key, label in (("Index Name", "index"), ("Relation Name", "relation"), ("Actual Rows", "rows"),
                           ("Plan Rows", "est_rows"), ("Actual Total Time", "ms"), ("Filter", "filter"),
                           ("Rows Removed by Filter", "removed_by_filter"), ("Index Cond", "index_cond"),
                           ("Order By", "order_by"), ("Subplan Name", "subplan"), ("Recheck Cond", "recheck")):
            if key in node:
                value = node[key]
                # a query vector literal is 5 kB of digits: keep the shape of the expression only
                entry[label] = re.sub(r"'\[[^\]]{40,}\]'", "'[…query vector…]'", value) \
                    if isinstance(value, str) else value
        nodes.append(entry)
        for child in node.get("Plans", []):
            walk(child, depth + 1)

    walk(top["Plan"], 0)
    indexes = sorted({n["index"] for n in nodes if "index" in n})
    return {"planning_ms": top.get("Planning Time"), "execution_ms": top.get("Execution Time"),
            "indexes": indexes, "hnsw_used": any("hnsw" in i for i in indexes),
            "seq_scans": sorted({n.get("relation", "?") for n in nodes if n["node"] == "Seq Scan"}),
            "rows": top["Plan"].get("Actual Rows"), "nodes": nodes}


@contextlib.asynccontextmanager
async def auto_explain(conn):
    """The plans of the statements ``conn`` really executes (asyncpg's prepared statements, custom or generic as
    the plan cache decides), sent back as NOTICEs by auto_explain. Yields the list the plans are appended to."""
    plans: list[dict] = []

    def listener(_conn, message) -> None:
        text = message.message
        if "\n" in text and "Query Text" in text:
            with contextlib.suppress(ValueError):
                plans.append(json.loads(text.split("\n", 1)[1]))

    await conn.execute("LOAD 'auto_explain'")
    for key, value in (("log_min_duration", "0"), ("log_analyze", "on"), ("log_buffers", "on"),
                       ("log_format", "json"), ("log_level", "notice"), ("log_nested_statements", "on")):
        await conn.execute(f"SET auto_explain.{key} = '{value}'")
    conn.add_log_listener(listener)
    try:
        yield plans
    finally:
        conn.remove_log_listener(listener)
        await conn.execute("SET auto_explain.log_min_duration = '-1'")


async def executed_plans(conn, call: Callable[[Any], Awaitable[Any]], needle: str, executions: int = 8
                         ) -> list[dict[str, Any]]:
    """``call(conn)`` run ``executions`` times as the retriever runs it; the plan of each execution of the
    statement whose text holds ``needle`` (auto_explain), summarised."""
    out = []
    async with auto_explain(conn) as plans:
        for n in range(executions):
            plans.clear()
            started = time.perf_counter()
            rows = await call(conn)
            elapsed = (time.perf_counter() - started) * 1000
            mine = [p for p in plans if needle in p.get("Query Text", "")]
            if mine:
                summary = plan_summary(mine[-1])
                out.append({"execution": n + 1, "rows_returned": len(rows), "client_ms": round(elapsed, 1),
                            "execution_ms": summary["execution_ms"], "indexes": summary["indexes"],
                            "hnsw_used": summary["hnsw_used"], "seq_scans": summary["seq_scans"],
                            "top_nodes": [x["node"] for x in summary["nodes"][:4]]})
    return out


def _literal_limit(limit: int, position: int):
    """A rewrite that puts the LIMIT in the SQL text (``LIMIT ${position}`` → ``LIMIT <n>``)."""
    def rewrite(sql: str, args: tuple) -> tuple[str, tuple]:
        assert position == len(args), "the LIMIT must be the last parameter"
        return sql.replace(f"LIMIT ${position}", f"LIMIT {int(limit)}"), args[:-1]
    return rewrite


def _vector_literal(vector) -> str:
    return "[" + ",".join(f"{float(x):.7g}" for x in vector) + "]"


def _literal(value) -> str:
    if isinstance(value, np.ndarray):
        return f"'{_vector_literal(value)}'"
    if isinstance(value, (list, tuple)):
        inner = ",".join('"' + str(v).replace('"', '\\"') + '"' for v in value)
        return "'{" + inner + "}'"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return str(value)


async def prepared_plans(conn, sql: str, args: tuple, sets: dict[str, str], executions: int = 8) -> dict[str, Any]:
    """The statement PREPAREd server-side (what asyncpg's statement cache amounts to): the forced generic plan,
    and the plan the plan cache settles on (``plan_cache_mode = auto``) after ``executions`` executions."""
    name = f"bench_{uuid.uuid4().hex[:8]}"
    literal_args = ", ".join(_literal(a) for a in args)
    out = {}
    await conn.execute(f"PREPARE {name} AS {sql}")
    try:
        for mode in ("force_generic_plan", "auto"):
            async with conn.transaction():
                for key, value in sets.items():
                    await conn.execute(f"SET LOCAL {key} = {value}")
                await conn.execute(f"SET LOCAL plan_cache_mode = {mode}")
                if mode == "auto":
                    for _ in range(executions):
                        await conn.execute(f"EXECUTE {name}({literal_args})")
                plan = await conn.fetchval(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE {name}({literal_args})")
                summary = plan_summary(json.loads(plan) if isinstance(plan, str) else plan)
                rows = await conn.fetch(f"EXECUTE {name}({literal_args})")
                summary["rows_returned"] = len(rows)
                out["generic_forced" if mode == "force_generic_plan" else f"auto_after_{executions}_executions"] = \
                    summary
    finally:
        await conn.execute(f"DEALLOCATE {name}")
    return out


async def explain_retrieval(pool, settings, embedder, searcher, questions: list[str], recall_questions: int = 10
                            ) -> dict[str, Any]:
    """Plans of the dense (windows and sections) and full-text queries as the retriever issues them."""
    from shared import db

    model, w = embedder.model_name, searcher.weights
    vectors = embedder.embed_queries(questions)
    question = questions[0]
    vector = vectors[0].astype(np.float32)
    dim = len(vector)
    ef = settings.hnsw_ef_search
    out: dict[str, Any] = {"question": question, "ef_search": ef, "dense_windows_limit": w.dense_windows,
                           "sections_limit": w.candidates}
    async with pool.acquire() as conn:
        out["index_definitions"] = {r["indexname"]: r["indexdef"] for r in await conn.fetch(
            "SELECT indexname, indexdef FROM pg_indexes WHERE indexname LIKE '%hnsw%'")}
        out["server"] = {r["name"]: r["setting"] for r in await conn.fetch(
            "SELECT name, setting FROM pg_settings WHERE name IN ('shared_buffers', 'work_mem', 'jit', "
            "'effective_cache_size', 'random_page_cost', 'plan_cache_mode', 'max_parallel_workers_per_gather')")}
        variants = {
            "as_issued": ({}, {}),
            "iterative_scan_off": ({"hnsw.iterative_scan": "off"}, {}),
            "iterative_scan_strict_order": ({"hnsw.iterative_scan": "strict_order"}, {}),
        }
        for label, fn, args in (
            ("dense_window_search", db.dense_window_search, (w.dense_windows, ef)),
            ("dense_section_search", db.dense_section_search, (w.candidates, ef)),
        ):
            entry: dict[str, Any] = {}
            for variant, (overrides, extra) in variants.items():
                proxy = ExplainConn(conn, overrides, extra)
                rows = await fn(proxy, vector, model, dim, *args)
                entry[variant] = {**plan_summary(proxy.plans[0]), "rows_returned": len(rows)}
            sql, sql_args = proxy.captured[0]
            entry["sql"] = " ".join(sql.split())
            entry.update(await prepared_plans(conn, sql, sql_args, {"hnsw.ef_search": str(ef),
                                                                    "hnsw.iterative_scan": "relaxed_order"}))
            # the LIMIT written into the SQL instead of passed as $2: the planner then costs the first n rows
            proxy = ExplainConn(conn, rewrite=_literal_limit(args[0], 2))
            rows = await fn(proxy, vector, model, dim, *args)
            entry["literal_limit"] = {**plan_summary(proxy.plans[0]), "rows_returned": len(rows)}
            entry["executed"] = await executed_plans(
                conn, lambda c, fn=fn, args=args: fn(c, vector, model, dim, *args),
                "FROM section_windows" if label == "dense_window_search" else "FROM sections s")
            out[label] = entry
        # full text: the lexemes the retriever would keep for the question
        lexemes, idfs = searcher._weighted_lexemes(await db.question_lexemes(conn, question))
        proxy = ExplainConn(conn)
        async with conn.transaction():
            rows = await db.fulltext_search(proxy, lexemes, idfs, w.candidates)
        entry = {"lexemes": lexemes, "as_issued": {**plan_summary(proxy.plans[0]), "rows_returned": len(rows)}}
        sql, sql_args = proxy.captured[0]
        entry["sql"] = " ".join(sql.split())
        entry.update(await prepared_plans(conn, sql, sql_args, {}))
        entry["executed"] = await executed_plans(
            conn, lambda c: db.fulltext_search(c, lexemes, idfs, w.candidates), "FROM section_lexemes")
        out["fulltext_search"] = entry
        # recall of the HNSW window list (as issued) against an exact scan, and the full-text candidate counts
        overlaps, exact_ms, hnsw_ms, matches = [], [], [], []
        for q, vec in list(zip(questions, vectors))[:recall_questions]:
            vec = vec.astype(np.float32)
            started = time.perf_counter()
            approx = await db.dense_window_search(conn, vec, model, dim, w.dense_windows, ef)
            hnsw_ms.append((time.perf_counter() - started) * 1000)
            proxy = ExplainConn(conn, extra={"enable_indexscan": "off"}, analyze=False)
            started = time.perf_counter()
            exact = await db.dense_window_search(proxy, vec, model, dim, w.dense_windows, ef)
            exact_ms.append((time.perf_counter() - started) * 1000)
            top = {r["section_id"] for r in exact[: w.candidates]}
            got = {r["section_id"] for r in approx[: w.candidates]}
            overlaps.append(len(top & got) / max(len(top), 1))
            lex, _ = searcher._weighted_lexemes(await db.question_lexemes(conn, q))
            if lex:
                matches.append(await conn.fetchval(
                    "SELECT count(*) FROM sections s WHERE s.status = 'active' AND s.tsv @@ "
                    "array_to_string(ARRAY(SELECT quote_literal(x) FROM unnest($1::text[]) x), ' | ')::tsquery", lex))
        out["dense_recall"] = {
            "questions": len(overlaps), "recall_at_candidates_mean": round(statistics.mean(overlaps), 3),
            "recall_min": round(min(overlaps), 3), "hnsw_query_ms_p50": round(statistics.median(hnsw_ms), 1),
            "exact_scan_ms_p50 (EXPLAIN-free, plan-only overhead included)": round(statistics.median(exact_ms), 1)}
        out["fulltext_matching_sections"] = {"questions": len(matches),
                                             "p50": statistics.median(matches) if matches else None,
                                             "max": max(matches) if matches else None}
    return out


# --------------------------------------------------------------------------------------------
# our own service processes
# --------------------------------------------------------------------------------------------
async def flush_redis(url: str) -> None:
    import redis.asyncio as aioredis

    if urlparse(url).path.strip("/") in ("", "0"):
        raise SystemExit(f"refusing to flush Redis DB 0 ({url}): give --redis-url a DB index of its own (…/5)")
    client = aioredis.from_url(url)
    try:
        await client.flushdb()
    finally:
        await client.aclose()


@dataclass
class Stack:
    url: str
    procs: dict
    env: dict
    tmp: Path
    retriever_ready_s: float


def start_services(settings, tmp: Path) -> Stack:
    """All five services (the gateway's /readyz wants a live consumer in every group) against our servers."""
    import httpx

    from tests.conftest import start_stack, wait_until_ready

    extra = {"REGS_GENERATION_PROVIDER": "extractive", "REGS_LOG_LEVEL": "WARNING",
             "REGS_RATE_LIMIT_PER_MINUTE": "1000000"}
    started = time.perf_counter()
    url, procs, env = start_stack(settings, tmp, extra_env=extra)
    retriever = f"http://127.0.0.1:{int(env['REGS_METRICS_PORT_BASE']) + 1}/readyz"
    ready_s = None
    try:
        deadline = time.time() + 300
        while time.time() < deadline and ready_s is None:
            if procs["retriever"].poll() is not None:
                raise RuntimeError("retriever exited:\n" + (tmp / "logs" / "retriever.log").read_text()[-3000:])
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(retriever, timeout=2).status_code == 200:
                    ready_s = time.perf_counter() - started
                    break
            time.sleep(0.2)
        wait_until_ready(url, procs, tmp, timeout=300)
    except BaseException:
        from tests.conftest import stop_stack

        stop_stack(procs)
        raise
    return Stack(url, procs, env, tmp, round(ready_s or math.nan, 2))


def stop_services(stack: Stack) -> None:
    from tests.conftest import stop_stack

    stop_stack(stack.procs)


# --------------------------------------------------------------------------------------------
# one corpus
# --------------------------------------------------------------------------------------------
async def bench_corpus(size: str, base: BaseCorpus, args, questions: list[str], what: set[str]) -> dict[str, Any]:
    import httpx

    from services.retriever.search import Searcher
    from shared import db
    from shared.bus import BusClient
    from shared.config import Settings
    from shared.embeddings import get_embedder
    from shared.messages import RetrieveRequest
    from shared.streams import RETRIEVE

    n_sections = parse_size(size, len(base.sections))
    name = f"regs_bench_{size.lower()}"
    url = db_url(args.source_url, name)
    result: dict[str, Any] = {"size": size, "target_sections": n_sections, "database": name}
    existing = await active_section_count(url) if args.reuse else None
    if existing == n_sections:
        print(f"[{size}] reusing {name} ({existing} active sections)", flush=True)
        result["build"] = {"reused": True, "sections": existing}
    else:
        print(f"[{size}] building {name}: {n_sections} sections", flush=True)
        result["build"] = await build_corpus(base, args.source_url, name, n_sections, noise=args.noise)
        print(f"[{size}] built: {json.dumps(result['build'])}", flush=True)
    settings = Settings(database_url=url, redis_url=args.redis_url, stage_deadline_s=60.0,
                        generation_provider="extractive", data_dir=Path(tempfile.gettempdir()) / "regs-bench-data")
    levels = args.concurrency
    try:
        pool = await db.create_pool(url, max_size=10)  # the retriever's pool size
        try:
            async with pool.acquire() as conn:
                result["windows"] = await conn.fetchval("SELECT count(*) FROM section_windows WHERE status = 'active'")
                result["sections"] = await conn.fetchval("SELECT count(*) FROM sections WHERE status = 'active'")
            started = time.perf_counter()
            embedder = get_embedder(settings)
            embedder.embed_queries(["warm up"])
            result["embedder"] = {"model": embedder.model_name, "backend": getattr(embedder, "backend", None),
                                  "load_s": round(time.perf_counter() - started, 2)}
            if what & {"search", "explain"}:
                result["catalog_cold_inproc"] = await cold_catalog(pool, settings, embedder)
                print(f"[{size}] cold catalog: {result['catalog_cold_inproc']}", flush=True)
                searcher = Searcher(pool, settings, embedder)
                await searcher.catalog()
            if "search" in what:

                async def inproc(q: str):
                    return await searcher.search(RetrieveRequest(question=q))

                search: dict[str, Any] = {}
                if "inproc" in args.paths:
                    search["inproc"] = await run_path("inproc", inproc, questions, levels, args.requests, args.warmup)
                result["breakdown_inproc_c1"] = await breakdown(searcher, embedder, questions)
                print(f"[{size}] breakdown: " + ", ".join(f"{k} {v['p50_ms']}" for k, v in
                                                         result['breakdown_inproc_c1']['parts'].items()), flush=True)
            if args.explain and what & {"search", "explain"}:
                result["explain"] = await explain_retrieval(pool, settings, embedder, searcher, questions)
                print(f"[{size}] explain: " + json.dumps({k: {v2: (result['explain'][k][v2].get('indexes'),
                                                                   result['explain'][k][v2].get('execution_ms'))
                                                              for v2 in result['explain'][k]
                                                              if isinstance(result['explain'][k][v2], dict)
                                                              and 'indexes' in result['explain'][k][v2]}
                                                          for k in ('dense_window_search', 'dense_section_search',
                                                                    'fulltext_search')}), flush=True)
            if "search" in what:
                result["search"] = search
        except BaseException:
            await pool.close()
            raise
        need_stack = ("search" in what and {"queue", "gateway"} & set(args.paths)) or \
            ("query" in what and size in args.query_sizes)
        if need_stack:
            await flush_redis(args.redis_url)
            tmp = Path(tempfile.mkdtemp(prefix=f"regs-bench-{size}-"))
            stack = start_services(settings, tmp)
            try:
                result["retriever_startup"] = {"process_ready_s": stack.retriever_ready_s}
                bus = BusClient(settings, name=f"bench-{uuid.uuid4().hex[:6]}")
                await bus.start()
                try:
                    async def queue(q: str):
                        return await bus.request(RETRIEVE, "retrieve", RetrieveRequest(question=q), timeout=120)

                    started = time.perf_counter()
                    await queue(questions[0])  # the worker loads its catalog on its first request
                    result["retriever_startup"]["first_request_ms"] = round((time.perf_counter() - started) * 1000, 1)
                    started = time.perf_counter()
                    await queue(questions[0])
                    result["retriever_startup"]["second_request_ms"] = round((time.perf_counter() - started) * 1000, 1)
                    print(f"[{size}] retriever startup: {result['retriever_startup']}", flush=True)
                    async with httpx.AsyncClient(base_url=stack.url, timeout=180, limits=httpx.Limits(
                            max_connections=100, max_keepalive_connections=100)) as http:
                        async def gateway(q: str):
                            response = await http.post("/v1/search", json={"question": q})
                            if response.status_code != 200:
                                raise RuntimeError(f"{response.status_code}: {response.text[:200]}")
                            return response

                        if "search" in what:
                            if "queue" in args.paths:
                                result["search"]["queue"] = await run_path("queue", queue, questions, levels,
                                                                           args.requests, args.warmup)
                            if "gateway" in args.paths:
                                result["search"]["gateway"] = await run_path("gateway", gateway, questions, levels,
                                                                             args.requests, args.warmup)
                            if args.paired and "search" in what:
                                result["paired_c1"] = await paired(
                                    {"inproc": inproc, "queue": queue, "gateway": gateway}, questions)
                                print(f"[{size}] paired c=1: {json.dumps(result['paired_c1'])}", flush=True)
                        if "query" in what and size in args.query_sizes:
                            result["query"] = await bench_query(http, questions, args)
                finally:
                    await bus.close()
            finally:
                stop_services(stack)
        await pool.close()
        if "search" in what:
            result["ratios_c1"] = ratios(result.get("search", {}))
    finally:
        if not args.keep:
            await drop_database(args.source_url, name)
            result["dropped"] = True
    return result


async def paired(calls: dict[str, Callable[[str], Awaitable[Any]]], questions: list[str]) -> dict[str, Any]:
    """Concurrency 1, every question through every path back to back (the order rotating), so a change of the
    machine's load hits all paths alike: p50 per path and the median of the per-question ratios to inproc."""
    names = list(calls)
    samples: dict[str, list[float]] = {n: [] for n in names}
    for i, q in enumerate(questions):
        order = names[i % len(names):] + names[: i % len(names)]
        for name in order:
            started = time.perf_counter()
            await calls[name](q)
            samples[name].append((time.perf_counter() - started) * 1000)
    out: dict[str, Any] = {"questions": len(questions), "load_average": load_average()}
    for name in names:
        out[f"{name}_p50_ms"] = round(statistics.median(samples[name]), 1)
        if name != "inproc" and "inproc" in samples:
            ratios_ = [a / b for a, b in zip(samples[name], samples["inproc"])]
            added = [a - b for a, b in zip(samples[name], samples["inproc"])]
            out[f"{name}_over_inproc_median_ratio"] = round(statistics.median(ratios_), 2)
            out[f"{name}_added_median_ms"] = round(statistics.median(added), 1)
    return out


def ratios(search: dict[str, Any]) -> dict[str, Any]:
    def p50(path: str) -> float | None:
        return search.get(path, {}).get("1", {}).get("p50_ms")

    out = {}
    if p50("inproc") and p50("queue"):
        out["queue_over_inproc_p50"] = round(p50("queue") / p50("inproc"), 2)
        out["queue_added_p50_ms"] = round(p50("queue") - p50("inproc"), 1)
    if p50("inproc") and p50("gateway"):
        out["gateway_over_inproc_p50"] = round(p50("gateway") / p50("inproc"), 2)
        out["gateway_added_p50_ms"] = round(p50("gateway") - p50("inproc"), 1)
    return out


async def bench_query(http, questions: list[str], args) -> dict[str, Any]:
    """POST /v1/query: client latency per concurrency, and the p50 of each stage of timings_ms."""
    out: dict[str, Any] = {}
    for c in args.query_concurrency:
        stages: dict[str, list[float]] = defaultdict(list)
        statuses: dict[str, int] = defaultdict(int)

        def keep(body: dict) -> None:
            statuses[body.get("status", "?")] += 1
            for stage, ms in (body.get("timings_ms") or {}).items():
                stages[stage].append(ms)

        async def query(q: str):
            response = await http.post("/v1/query", json={"question": q})
            if response.status_code != 200:
                raise RuntimeError(f"{response.status_code}: {response.text[:200]}")
            return response.json()

        if not out:
            await run_level(query, questions[::-1], 2, args.warmup)
        level = await run_level(query, questions, c, max(args.query_requests, 2 * c), keep)
        level["stage_p50_ms"] = {k: round(statistics.median(v), 1) for k, v in stages.items()}
        level["stage_p95_ms"] = {k: round(float(np.percentile(v, 95)), 1) for k, v in stages.items()}
        level["stage_counts"] = {k: len(v) for k, v in stages.items()}
        level["statuses"] = dict(statuses)
        out[str(c)] = level
        print(f"  query    c={c:<3} p50 {level['p50_ms']:>8.1f} ms  p95 {level['p95_ms']:>8.1f} ms  "
              f"{level['throughput_rps']:>6.2f} req/s  stages p50 {level['stage_p50_ms']}  {dict(statuses)}",
              flush=True)
    return out


# --------------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------------
def verdict(corpora: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for size, r in corpora.items():
        gateway = r.get("search", {}).get("gateway", {}).get("1", {}).get("p50_ms")
        ratio = r.get("paired_c1", {}).get("queue_over_inproc_median_ratio") or \
            r.get("ratios_c1", {}).get("queue_over_inproc_p50")
        out[size] = {
            "gateway_search_p50_ms_c1": gateway,
            "gateway_search_p50_target_ms": SEARCH_TARGET_P50_MS,
            "gateway_search_p50_met": None if gateway is None else gateway <= SEARCH_TARGET_P50_MS,
            "queue_overhead_ratio_c1": ratio, "queue_overhead_target": QUEUE_OVERHEAD_TARGET,
            "queue_overhead_met": None if ratio is None else ratio <= QUEUE_OVERHEAD_TARGET,
        }
    return out


def plot(corpora: dict[str, Any], path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install -e '.[bench]'): no plot", file=sys.stderr)
        return None
    if not any(r.get("search") or r.get("query") for r in corpora.values()):
        return None  # nothing timed (``--what explain``)
    panels = [("inproc", "in-process Searcher.search"), ("queue", "BusClient → retriever (queue)"),
              ("gateway", "POST /v1/search (gateway + queue)")]
    has_query = any("query" in r for r in corpora.values())
    fig, axes = plt.subplots(1, len(panels) + has_query, figsize=(5 * (len(panels) + has_query), 4.2),
                             squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (key, label) in zip(axes[0], panels):
        for n, (size, r) in enumerate(corpora.items()):
            levels = r.get("search", {}).get(key)
            if not levels:
                continue
            xs = [int(c) for c in levels]
            ax.plot(xs, [levels[c]["p50_ms"] for c in levels], "-o", color=colors[n],
                    label=f"{size} ({r.get('sections', '?'):,} sections) p50")
            ax.plot(xs, [levels[c]["p95_ms"] for c in levels], "--s", color=colors[n], alpha=0.7,
                    label=f"{size} p95")
        if key == "gateway":
            ax.axhline(SEARCH_TARGET_P50_MS, color="grey", lw=0.8, ls=":", label="p50 target 25 ms")
        ax.set_title(label, fontsize=10)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("concurrency")
        ax.set_ylabel("latency (ms)")
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    if has_query:
        ax = axes[0][-1]
        for n, (size, r) in enumerate(corpora.items()):
            levels = r.get("query")
            if not levels:
                continue
            xs = [int(c) for c in levels]
            ax.plot(xs, [levels[c]["p50_ms"] for c in levels], "-o", color=colors[n], label=f"{size} p50")
            ax.plot(xs, [levels[c]["p95_ms"] for c in levels], "--s", color=colors[n], alpha=0.7, label=f"{size} p95")
        ax.set_title("POST /v1/query (full fan-out, extractive)", fontsize=10)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency")
        ax.set_ylabel("latency (ms)")
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.suptitle(f"regs search/query latency — {os.cpu_count()} CPUs, load average {load_average()[0]} "
                 f"({time.strftime('%Y-%m-%d')})", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _csv(kind):
    return lambda text: [kind(x) for x in text.split(",") if x.strip()]


def parse_args(argv: list[str] | None = None, default_what: str = "search") -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--what", type=_csv(str), default=_csv(str)(default_what),
                        help="search,query (explain: only the database, the cold catalog and the plans)")
    parser.add_argument("--sizes", type=_csv(str), default=None,
                        help="corpora: small and/or <N>k (default: small,85k for search; small for query)")
    parser.add_argument("--paths", type=_csv(str), default=["inproc", "queue", "gateway"])
    parser.add_argument("--concurrency", type=_csv(int), default=[1, 8, 32])
    parser.add_argument("--requests", type=int, default=100, help="requests per concurrency level (at least 4×c)")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--questions", type=int, default=50)
    parser.add_argument("--query-sizes", type=_csv(str), default=["small"])
    parser.add_argument("--query-concurrency", type=_csv(int), default=[1, 8])
    parser.add_argument("--query-requests", type=int, default=40)
    parser.add_argument("--no-explain", dest="explain", action="store_false")
    parser.add_argument("--no-paired", dest="paired", action="store_false",
                        help="skip the interleaved concurrency-1 comparison of the three paths")
    parser.add_argument("--noise", type=float, default=0.02, help="σ per dimension of the synthetic copies' noise")
    parser.add_argument("--source-url", default=default_source_url(),
                        help="the database holding the shipped corpus; our databases go on the same server")
    parser.add_argument("--redis-url", default=DEFAULT_REDIS, help="a Redis DB index of our own (flushed)")
    parser.add_argument("--keep", action="store_true", help="keep the bench databases")
    parser.add_argument("--reuse", action="store_true", help="reuse a bench database of the right size")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--plot", type=Path, default=None)
    args = parser.parse_args(argv)
    what = set(args.what)
    if args.sizes is None:
        args.sizes = ["small", "85k"] if what & {"search", "explain"} else list(args.query_sizes)
    stem = "search" if "search" in what else "query" if "query" in what else "explain"
    args.out = args.out or RESULTS / f"{stem}.json"
    args.plot = args.plot or RESULTS / f"{stem}.png"
    return args


async def run(args) -> dict[str, Any]:
    questions = load_questions(args.questions)
    what = set(args.what)
    started = time.time()
    report: dict[str, Any] = {
        "benchmark": "search" if "search" in what else "query", "what": sorted(what),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "machine": {"cpus": os.cpu_count(), "load_average_start": load_average(), "python": sys.version.split()[0]},
        "questions": len(questions), "concurrency": args.concurrency, "requests_per_level": args.requests,
        "source_url": args.source_url, "redis_url": args.redis_url, "corpora": {},
    }
    base = await read_corpus(args.source_url)
    print(f"source: {len(base.sections)} active sections, {sum(len(w) for w in base.windows.values())} windows, "
          f"{base.model} ({base.dim}); load {load_average()}", flush=True)
    for size in args.sizes:
        report["corpora"][size] = await bench_corpus(size, base, args, questions, what)
        write(report, args)  # partial results survive a later failure
    report["machine"]["load_average_end"] = load_average()
    report["elapsed_s"] = round(time.time() - started, 1)
    if "search" in what:
        report["targets"] = verdict(report["corpora"])
    return report


def write(report: dict[str, Any], args) -> None:
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, default=str) + "\n")


def main(argv: list[str] | None = None, default_what: str | None = None) -> dict[str, Any]:
    if default_what is None:  # `regs bench query` runs this module as bench/query.py
        default_what = "query" if Path(sys.argv[0]).stem == "query" else "search"
    args = parse_args(argv, default_what)
    report = asyncio.run(run(args))
    write(report, args)
    plotted = plot(report["corpora"], args.plot)
    print(f"wrote {args.out}" + (f" and {plotted}" if plotted else ""))
    if "targets" in report:
        print(json.dumps(report["targets"], indent=2))
    return report


if __name__ == "__main__":
    main()
