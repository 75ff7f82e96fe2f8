"""Smoke test of bench/bench_search.py on a tiny synthetic corpus: the scale-up builder, the in-process and queue
paths at two concurrency levels, the per-part breakdown, the EXPLAIN capture and the report. No timing asserts."""
from __future__ import annotations

import hashlib
import uuid
from urllib.parse import urlparse, urlunparse

import numpy as np

WORDS = ("cheese milk moisture fat labeling cream butter whey pasteurized cheddar ripened curd salt enzymes "
         "medicare entitlement premium enrollment environmental assessment impact statement agency review").split()


class TinyEmbedder:
    model_name = "bench-smoke-model"
    dim = 8
    backend = "fake"

    def embed_queries(self, texts):
        out = []
        for text in texts:
            seed = int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)
            v = np.random.default_rng(seed).normal(size=self.dim)
            out.append(v / np.linalg.norm(v))
        return np.asarray(out, dtype=np.float32)

    embed_documents = embed_queries


def _base_corpus():
    from bench.bench_search import BaseCorpus

    rng = np.random.default_rng(1)
    embedder = TinyEmbedder()
    sections, windows = [], {}
    for n in range(1, 13):
        words = [WORDS[int(i)] for i in rng.integers(0, len(WORDS), 60)]
        text = ". ".join(" ".join(words[i:i + 10]).capitalize() for i in range(0, 60, 10)) + "."
        part = str(130 + n % 3)
        sections.append({
            "id": n, "version_id": 1, "status": "active", "title": 21, "chapter": "I", "subchapter": None,
            "part": part, "part_heading": f"Part {part}", "subpart": None, "subject_group": None,
            "section": f"{part}.{n}", "kind": "section", "heading": f"{words[0]} {words[1]}".capitalize(),
            "agency": "FDA", "cfr_ref": f"21 CFR {part}.{n}", "text": text, "paragraphs": [], "source_note": None,
            "editorial_notes": [], "reserved": False, "removed": False, "content_hash": uuid.uuid4().hex,
            "source": "smoke", "source_date": None, "embedding": None, "embedding_model": embedder.model_name,
        })
        windows[n] = embedder.embed_documents([text[:80], text[80:160]])
        sections[-1]["embedding"] = windows[n].mean(axis=0)
    versions = [{"version_id": 1, "title": 21, "source": "smoke", "source_date": None,
                 "embedding_model": embedder.model_name, "embedding_dim": embedder.dim}]
    return BaseCorpus(versions, sections, windows, embedder.model_name, embedder.dim), embedder


async def test_bench_search_smoke(migrated, tmp_path):
    from bench import bench_search as bs
    from services.retriever.search import Searcher
    from shared import db
    from shared.bus import BusClient, StreamWorker
    from shared.messages import RetrieveRequest
    from shared.streams import RETRIEVE

    base, embedder = _base_corpus()
    name = f"regs_bench_smoke_{uuid.uuid4().hex[:8]}"
    build = await bs.build_corpus(base, migrated.database_url, name, 30, maintenance_work_mem="64MB")
    assert build["sections"] == 30 and build["copies"] == 3 and build["titles"] == 3
    url = bs.db_url(migrated.database_url, name)
    # a Redis DB index of its own, so no other test's retriever consumes these requests
    redis_url = urlunparse(urlparse(migrated.redis_url)._replace(path="/7"))
    settings = migrated.model_copy(update={"database_url": url, "redis_url": redis_url})
    await bs.flush_redis(redis_url)
    pool = await db.create_pool(url, max_size=4)
    worker = bus = None
    try:
        async with pool.acquire() as conn:
            assert await conn.fetchval("SELECT count(DISTINCT title) FROM sections WHERE status = 'active'") == 3
            assert await conn.fetchval("SELECT count(*) FROM corpus_versions WHERE status = 'active'") == 3
        questions = ["What moisture may cheddar cheese hold?", "Medicare premium enrollment?",
                     "environmental impact statement review", "21 CFR 131.3 labeling"]
        cold = await bs.cold_catalog(pool, settings, embedder)
        assert cold["entries"] == 30 and cold["lexemes"] > 0
        searcher = Searcher(pool, settings, embedder)

        async def inproc(q):
            return await searcher.search(RetrieveRequest(question=q))

        levels = await bs.run_path("inproc", inproc, questions, [1, 3], requests=4, warmup=2)
        assert levels["3"]["requests"] >= 4 and levels["3"]["errors"] == 0
        parts = await bs.breakdown(searcher, embedder, questions)
        assert parts["searches"] == 4 and "embed_query" in parts["parts"]
        assert embedder.embed_queries.__func__ is TinyEmbedder.embed_queries  # the probe put everything back

        explain = await bs.explain_retrieval(pool, settings, embedder, searcher, questions, recall_questions=2)
        for key in ("dense_window_search", "dense_section_search", "fulltext_search"):
            assert explain[key]["as_issued"]["nodes"], key
        assert "generic_forced" in explain["dense_window_search"]
        assert explain["dense_section_search"]["executed"] and explain["fulltext_search"]["executed"]
        assert explain["dense_section_search"]["literal_limit"]["rows_returned"] > 0

        async def handle(kind, request, envelope):
            return await searcher.search(request)

        worker = StreamWorker(RETRIEVE, handle, settings)
        await worker.start()
        bus = BusClient(settings, name=f"bench-smoke-{uuid.uuid4().hex[:6]}")
        await bus.start()

        async def queue(q):
            return await bus.request(RETRIEVE, "retrieve", RetrieveRequest(question=q), timeout=30)

        queued = await bs.run_path("queue", queue, questions, [1, 2], requests=4, warmup=1)
        assert queued["2"]["errors"] == 0
        pair = await bs.paired({"inproc": inproc, "queue": queue}, questions[:2])
        assert pair["questions"] == 2 and "queue_over_inproc_median_ratio" in pair
        corpora = {"smoke": {"sections": 30, "search": {"inproc": levels, "queue": queued},
                             "ratios_c1": bs.ratios({"inproc": levels, "queue": queued})}}
        assert "queue_over_inproc_p50" in corpora["smoke"]["ratios_c1"]
        assert bs.verdict(corpora)["smoke"]["queue_overhead_ratio_c1"] is not None
        bs.plot(corpora, tmp_path / "smoke.png")  # no-op without matplotlib
    finally:
        if bus is not None:
            await bus.close()
        if worker is not None:
            await worker.stop()
        await pool.close()
        await bs.drop_database(migrated.database_url, name)


def test_questions_and_perturbation():
    from bench import bench_search as bs

    questions = bs.load_questions(50)
    assert len(questions) == 50 and len(set(questions)) == 50
    rng = np.random.default_rng(0)
    text = "First sentence here. Second sentence follows; Third clause stands. Fourth one closes."
    out = bs.perturb_text(text, rng, ["zebra"])
    assert out != text and len(out.split()) == len(text.split())
    assert bs.parse_size("85k", 3824) == 85000 and bs.parse_size("small", 3824) == 3824
