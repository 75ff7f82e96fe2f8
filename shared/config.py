"""The one settings object. Every process reads its configuration from here (env prefix ``REGS_``)."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

REPO_ROOT = Path(__file__).resolve().parent.parent


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="REGS_", env_file=".env", extra="ignore")

    # --- servers -------------------------------------------------------------------------------
    database_url: str | None = Field(
        None, description="PostgreSQL (with pgvector) URL. Unset: `regs up` starts an embedded server."
    )
    redis_url: str | None = Field(None, description="Redis URL. Unset: `regs up` starts an embedded redis-server.")
    data_dir: Path = Field(Path(".regs"), description="Where embedded servers, logs and caches live.")
    corpus_dir: Path = Field(REPO_ROOT / "data" / "corpus", description="The CFR XML shipped with the product.")
    embedded_pg_port: int = Field(54329, description="Port of the embedded PostgreSQL on 127.0.0.1.")
    embedded_redis_port: int = Field(63790, description="Port of the embedded Redis on 127.0.0.1.")
    ecfr_base_url: str = Field(
        "https://www.ecfr.gov", description="eCFR API base URL used by `ecfr:DATE` ingests (tests point it at a fake)."
    )

    # --- ports ---------------------------------------------------------------------------------
    gateway_host: str = Field("127.0.0.1", description="Interface the gateway listens on.")
    gateway_port: int = Field(8000, description="Gateway HTTP port (API, web page, /metrics).")
    metrics_port_base: int = Field(
        9101, description="Workers serve /metrics on base+0 ingest, +1 retriever, +2 generator, +3 scorer."
    )

    # --- embeddings ----------------------------------------------------------------------------
    embedding_provider: Literal["local", "openai"] = Field("local", description="`local` (offline) or `openai`.")
    embedding_model: str = Field(
        "all-MiniLM-L6-v2", description="Model name; local: all-MiniLM-L6-v2, openai: text-embedding-3-small."
    )
    embedding_batch_size: int = Field(64, description="Texts per embedding batch.")
    embedding_window_words: int = Field(150, description="Words per embedding window of a long section.")
    embedding_window_stride: int = Field(120, description="Words between window starts (overlap = size - stride).")
    embedding_max_windows: int = Field(24, description="Cap on windows per section.")
    embedding_backend: Literal["auto", "torch", "torch-bf16", "onnx", "onnx-int8"] = Field(
        "auto",
        description="Local provider runtime. `torch`: sentence-transformers fp32 (the reference). `torch-bf16`: "
        "MiniLM in bfloat16 on oneDNN (fused GELU/residual, AMX or AVX512-BF16 CPUs; same vectors to ~1e-4). "
        "`onnx`: ONNX Runtime fp32. `onnx-int8`: ONNX Runtime, int8 weights (vectors differ: recorded as "
        "all-MiniLM-L6-v2-int8). `auto`: torch-bf16 where the CPU has native bf16, else onnx, else torch; "
        "never int8, so `auto` always records all-MiniLM-L6-v2.",
    )
    embedding_threads: int = Field(
        0, description="CPU cores of the local embedder (that many batches run side by side, one runtime thread "
        "each); 0 = every core available (the retriever: one, so PostgreSQL keeps a core for the searches it runs "
        "alongside the query embedding)."
    )
    embedding_batch_tokens: int = Field(
        8192, description="Local embedder: cap on padded tokens per batch (texts are sorted by token length)."
    )
    openai_api_key: SecretStr | None = Field(None, description="OpenAI (or compatible) API key.")
    openai_base_url: str | None = Field(None, description="OpenAI-compatible base URL (vLLM, Ollama, llama.cpp).")

    # --- generation ----------------------------------------------------------------------------
    generation_provider: Literal["anthropic", "openai", "extractive"] = Field(
        "anthropic", description="Configured generation provider."
    )
    generation_model: str = Field("claude-haiku-4-5", description="Model asked of the configured provider.")
    generation_fallback: Literal["extractive", "refuse"] = Field(
        "extractive", description="What answers when the configured provider fails."
    )
    generation_max_tokens: int = Field(1024, description="Output-token budget per generation call.")
    generation_timeout_s: float = Field(30.0, description="Per-call provider timeout.")
    generation_retries: int = Field(2, description="Provider retries on 429/5xx before falling back.")
    anthropic_api_key: SecretStr | None = Field(None, description="Anthropic API key.")
    anthropic_base_url: str | None = Field(None, description="Anthropic API base URL (tests point it at a fake).")

    # --- retrieval -----------------------------------------------------------------------------
    top_k: int = Field(10, description="Sections returned per search.")
    retrieval_mode: Literal["hybrid", "dense", "fulltext"] = Field("hybrid", description="Default search mode.")
    scoping: bool = Field(True, description="Scope the question (citations, titles, subjects) before searching.")
    hnsw_ef_search: int = Field(200, description="pgvector hnsw.ef_search for dense search.")

    # --- confidence / gates --------------------------------------------------------------------
    # defaults calibrated on the evaluation set (eval/README.md "Calibration"); composite =
    # w_r·retrieval + w_c·coverage + 0.50·evidence (ScorerThresholds.weight_evidence), evidence from the pre-gate relevance
    confidence_weight_retrieval: float = Field(0.20, description="Weight of retrieval_score (mean top-3 cosine).")
    confidence_weight_coverage: float = Field(0.30, description="Weight of citation_coverage in the composite.")
    tier_high: float = Field(0.85, description="Composite score at or above which the tier is high.")
    tier_medium: float = Field(0.60, description="Composite score at or above which the tier is medium.")
    not_found_min_similarity: float = Field(
        0.50, description="Relevance (top-1 cosine adjusted by term coverage and full-text agreement) below "
                          "which nothing relevant was retrieved: refuse as not_found."
    )
    answer_reader: bool = Field(
        True, description="Refuse as not_found when no passage of the sections handed to generation reads as an "
                          "answer to the question (the scorer's answer reader, a local cross-encoder)."
    )
    reader_min_probability: float = Field(
        0.22, ge=0.0, le=1.0, description="Answer reader: the best passage's probability below which the question "
                                          "is refused as not_found."
    )
    reader_strict_min_probability: float = Field(
        0.10, ge=0.0, le=1.0, description="Answer reader: the strict reader's best-passage probability below which "
                                          "the question is refused as not_found, at any relevance."
    )

    # --- bus -----------------------------------------------------------------------------------
    stream_maxlen: int = Field(10000, description="Approximate MAXLEN of every stream.")
    stream_keep_acked_s: float = Field(
        60.0, ge=0, description="Entries every group has been given and has acknowledged are trimmed from a request "
                                "stream once older than this (entries not yet delivered, or pending, always stay).")
    max_deliveries: int = Field(3, description="Deliveries of one entry before it goes to <stream>.dlq.")
    reclaim_idle_ms: int = Field(15000, description="Pending entries idle this long are reclaimed by another consumer.")
    reply_ttl_s: int = Field(600, description="Lifetime of a gateway's reply stream and of cached replies.")

    # --- gateway -------------------------------------------------------------------------------
    stage_deadline_s: float = Field(60.0, description="Deadline per fan-out stage before 504 naming the stage.")
    admin_token: SecretStr | None = Field(None, description="Bearer token for /v1/admin/*. Unset: admin routes off.")
    rate_limit_per_minute: int = Field(60, description="Requests per client per minute (Redis-backed).")
    cors_origins: list[str] = Field(default_factory=list, description="Allowed CORS origins (JSON list).")
    question_min_chars: int = Field(3, description="Shortest accepted question.")
    question_max_chars: int = Field(2000, description="Longest accepted question.")

    log_level: str = Field("INFO", description="Log level of every process.")

    @field_validator("database_url", "redis_url", "openai_api_key", "openai_base_url", "anthropic_api_key",
                     "anthropic_base_url", "admin_token", mode="before")
    @classmethod
    def _empty_is_unset(cls, value):
        """An empty environment variable means "not set" (an empty admin token must not enable admin routes)."""
        if isinstance(value, str) and not value.strip():
            return None
        return value

    def resolved_data_dir(self) -> Path:
        return self.data_dir if self.data_dir.is_absolute() else (Path.cwd() / self.data_dir)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
