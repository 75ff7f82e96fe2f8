"""Embedding providers: the local MiniLM backends (agreement with the sentence-transformers reference on real
CFR text, normalisation, determinism, semantic sanity), section windows, and the OpenAI provider against a
real fake HTTP server on 127.0.0.1."""
from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from shared.config import REPO_ROOT, Settings
from shared.embeddings import (
    EmbeddingError,
    LocalEmbedder,
    OpenAIEmbedder,
    get_embedder,
    native_bf16,
    onnx_available,
    resolve_backend,
    section_windows,
)
from shared.embeddings import _spread
from tests.fakes import FakeServer

os.environ.setdefault("HF_HUB_OFFLINE", "1")

CORPUS = REPO_ROOT / "data" / "corpus"
FILES = ["Athish49_FDACompliance__CFR-2024-title21-vol2-chapI.xml.gz",
         "Athish49_FDACompliance__CFR-2024-title21-vol9-chapII.xml.gz"]
REFS = ["21 CFR 133.142", "21 CFR 1308.12", "21 CFR 101.9", "21 CFR 133.113", "21 CFR 1308.13", "21 CFR 1301.11"]


@pytest.fixture(scope="module")
def windows() -> dict[str, list[str]]:
    """Real CFR sections (gouda, Schedule II, nutrition labeling, ...) as the windows ingest embeds."""
    from services.ingest.parsing import parse_file

    found: dict[str, list[str]] = {}
    for name in FILES:
        for s in parse_file(CORPUS / name):
            if s.cfr_ref in REFS:
                found[s.cfr_ref] = section_windows(s.breadcrumb(), s.heading, s.text, words=150, stride=120,
                                                   max_windows=6)
    assert set(found) == set(REFS)
    return found


@pytest.fixture(scope="module")
def texts(windows) -> list[str]:
    return [w for ref in REFS for w in windows[ref]]


@pytest.fixture(scope="module")
def reference(texts) -> np.ndarray:
    return LocalEmbedder(backend="torch").embed_documents(texts)


@pytest.fixture(scope="module")
def default_embedder(tmp_path_factory) -> LocalEmbedder:
    settings = Settings(data_dir=tmp_path_factory.mktemp("emb-data"))
    return get_embedder(settings)


# --------------------------------------------------------------------------------------------- local
def test_default_backend_records_the_plain_model_name(default_embedder):
    assert default_embedder.backend in ("torch-bf16", "onnx", "torch")
    assert default_embedder.model_name == "all-MiniLM-L6-v2"
    if native_bf16():
        assert default_embedder.backend == "torch-bf16"
    assert resolve_backend("onnx-int8") == "onnx-int8"
    with pytest.raises(EmbeddingError):
        resolve_backend("tensorrt")


def test_vectors_normalised_384_and_deterministic(default_embedder, texts):
    a = default_embedder.embed_documents(texts)
    b = default_embedder.embed_documents(texts)
    q = default_embedder.embed_queries(texts[:1])
    assert a.shape == (len(texts), 384) and a.dtype == np.float32
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(a, b)
    assert np.allclose(q[0], a[0], atol=2e-3)  # same backend for queries; batch padding may differ slightly
    assert default_embedder.embed_documents([]).shape == (0, 384)
    odd = default_embedder.embed_documents(["", "x" * 5000, "gouda"])
    assert np.allclose(np.linalg.norm(odd, axis=1), 1.0, atol=1e-5)


def test_default_backend_agrees_with_torch(default_embedder, texts, reference):
    vectors = default_embedder.embed_documents(texts)
    cos = (vectors * reference).sum(1)
    assert cos.min() >= 0.999, cos


def test_bf16_agrees_with_torch(texts, reference):
    vectors = LocalEmbedder(backend="torch-bf16").embed_documents(texts)
    cos = (vectors * reference).sum(1)
    assert cos.min() >= 0.999, cos


@pytest.mark.skipif(not onnx_available(), reason="onnxruntime/onnx not installed")
def test_onnx_backends_export_once_and_agree(tmp_path, texts, reference):
    results: list[Any] = []

    def build():
        results.append(LocalEmbedder(backend="onnx-int8", cache_dir=tmp_path))

    threads = [threading.Thread(target=build) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 2  # two racing loaders, one export (file lock), both load
    files = sorted(p.name for p in tmp_path.rglob("*.onnx"))
    assert files == ["model-int8.onnx", "model.onnx"], files
    int8 = results[0]
    assert int8.model_name == "all-MiniLM-L6-v2-int8"  # int8 vectors are recorded as a different model
    cos8 = (int8.embed_documents(texts) * reference).sum(1)
    assert cos8.mean() >= 0.99 and cos8.min() >= 0.97, cos8

    fp32 = LocalEmbedder(backend="onnx", cache_dir=tmp_path)  # reuses the cached export
    assert fp32.model_name == "all-MiniLM-L6-v2"
    cos = (fp32.embed_documents(texts) * reference).sum(1)
    assert cos.min() >= 0.9999, cos


@pytest.mark.skipif(not native_bf16(), reason="torch-bf16 needs a CPU with native bf16")
def test_batches_side_by_side_give_the_vectors_of_one_thread(texts):
    """Two one-thread batches at a time (the ingest default on 2 cores) embed what one thread embeds, also
    when callers overlap and when a single small batch is cut in halves for the two cores."""
    serial = LocalEmbedder(backend="torch-bf16", threads=1, batch_tokens=512)
    parallel = LocalEmbedder(backend="torch-bf16", threads=2, batch_tokens=512)
    expected = serial.embed_documents(texts)
    assert np.allclose(parallel.embed_documents(texts), expected, atol=1e-6)
    results: dict[int, np.ndarray] = {}
    callers = [threading.Thread(target=lambda i=i: results.__setitem__(i, parallel.embed_documents(texts[i::2])))
               for i in range(2)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join()
    # other texts in a batch pad it differently, which moves bf16 results in the last digits only
    for i in range(2):
        assert ((results[i] * expected[i::2]).sum(1) >= 0.9999).all()
    few = parallel.embed_queries(texts[:3])  # one batch of three: split 1 + 2
    assert ((few * expected[:3]).sum(1) >= 0.9999).all()


def test_spread_gives_every_worker_a_batch_and_every_row_once():
    rows = np.arange(5)
    mask = np.zeros((5, 48), dtype=np.int64)
    for r, n in enumerate((3, 40, 7, 20, 33)):
        mask[r, :n] = 1
    batches = _spread([(rows, mask.copy(), mask)], 2)
    assert len(batches) == 2
    assert sorted(int(r) for b in batches for r in b[0]) == [0, 1, 2, 3, 4]
    for b_rows, ids, b_mask in batches:
        assert ids.shape == b_mask.shape and ids.shape[1] % 16 == 0
        assert (b_mask.sum(1) == mask[b_rows].sum(1)).all()  # no token cut off
    single = _spread([(np.arange(1), mask[:1], mask[:1])], 2)
    assert len(single) == 1


def test_semantic_sanity(default_embedder, windows):
    gouda = default_embedder.embed_documents(windows["21 CFR 133.142"][:1])[0]
    schedule = default_embedder.embed_documents(windows["21 CFR 1308.12"][:1])[0]
    q = default_embedder.embed_queries(["What is the minimum milkfat content of gouda cheese?",
                                        "Is fentanyl a Schedule II controlled substance?"])
    assert q[0] @ gouda > q[0] @ schedule + 0.1
    assert q[1] @ schedule > q[1] @ gouda + 0.1


def test_local_rejects_other_models():
    with pytest.raises(EmbeddingError):
        LocalEmbedder("bge-small-en", backend="torch-bf16")


# ------------------------------------------------------------------------------------ section windows
def test_short_text_is_one_window():
    assert section_windows("Title 21 > Part 133", "Gouda cheese", "Gouda is a cheese.", words=150, stride=120,
                           max_windows=24) == ["Title 21 > Part 133\nGouda cheese\nGouda is a cheese."]


def test_long_text_windows_overlap_and_cover_the_end():
    body = " ".join(f"w{i}" for i in range(400))
    out = section_windows("B", "H", body, words=150, stride=120, max_windows=24)
    assert len(out) == 4  # starts 0, 120, 240, 360: the window at 240 stops at w389
    assert all(w.startswith("B\nH\n") for w in out)
    first, second, _, last = (w.split("\n")[2].split() for w in out)
    assert len(first) == 150 and first[0] == "w0" and second[0] == "w120"
    assert set(first) & set(second) == {f"w{i}" for i in range(120, 150)}  # 30 words of overlap
    assert last[0] == "w360" and last[-1] == "w399" and len(last) == 40


def test_windows_are_capped():
    body = " ".join(f"w{i}" for i in range(10000))
    out = section_windows("B", "H", body, words=150, stride=120, max_windows=24)
    assert len(out) == 24
    assert out[-1].split("\n")[2].split()[0] == f"w{23 * 120}"


# ------------------------------------------------------------------------------------ openai provider
class FakeEmbeddings(FakeServer):
    """POST /v1/embeddings: deterministic 1536-d vectors; behaviour '429once' answers 429 to the first call."""

    def _routes(self, app: FastAPI) -> None:
        @app.post("/v1/embeddings")
        async def embeddings(request: Request):
            body = await request.json()
            self.record(request, body)
            if self.behaviour == "429once":
                self.behaviour = "ok"
                return JSONResponse({"error": {"message": "slow down", "type": "rate_limit_error", "code": None}},
                                    status_code=429, headers={"retry-after-ms": "10"})
            if self.behaviour.isdigit():
                return JSONResponse({"error": {"message": "bad key", "type": "invalid_request_error", "code": None}},
                                    status_code=int(self.behaviour))
            inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
            data = []
            for i, text in enumerate(inputs):
                rng = np.random.default_rng(abs(hash(text)) % (2**32))
                data.append({"object": "embedding", "index": i, "embedding": rng.normal(size=1536).tolist()})
            data.reverse()  # the client must order by index
            return {"object": "list", "data": data, "model": body["model"],
                    "usage": {"prompt_tokens": 5, "total_tokens": 5}}


@pytest.fixture(scope="module")
def fake_openai():
    with FakeEmbeddings() as server:
        yield server


def _openai_settings(server: FakeServer, **kw: Any) -> Settings:
    return Settings(embedding_provider="openai", embedding_model="text-embedding-3-small",
                    openai_api_key="sk-test", openai_base_url=server.url + "/v1", **kw)


def test_openai_batches_and_orders(fake_openai):
    fake_openai.reset()
    embedder = OpenAIEmbedder(_openai_settings(fake_openai, embedding_batch_size=3))
    texts = [f"text {i}" for i in range(7)] + ["   "]
    vectors = embedder.embed_documents(texts)
    assert vectors.shape == (8, 1536) and embedder.dim == 1536
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    sizes = [len(r["json"]["input"]) for r in fake_openai.requests]
    assert sizes == [3, 3, 2]
    again = embedder.embed_queries(["text 4"])
    assert np.allclose(again[0], vectors[4], atol=1e-6)  # order restored from the shuffled response


def test_openai_retries_429(fake_openai):
    fake_openai.reset("429once")
    vectors = OpenAIEmbedder(_openai_settings(fake_openai)).embed_documents(["gouda"])
    assert vectors.shape == (1, 1536)
    assert len(fake_openai.requests) == 2


def test_openai_401_and_missing_key(fake_openai):
    fake_openai.reset("401")
    with pytest.raises(EmbeddingError, match="OpenAI embeddings failed"):
        OpenAIEmbedder(_openai_settings(fake_openai)).embed_documents(["gouda"])
    assert len(fake_openai.requests) == 1  # 401 is not retried
    fake_openai.reset()
    with pytest.raises(EmbeddingError, match="REGS_OPENAI_API_KEY"):
        get_embedder(Settings(embedding_provider="openai", embedding_model="text-embedding-3-small",
                              openai_api_key=None, openai_base_url=fake_openai.url + "/v1"))
