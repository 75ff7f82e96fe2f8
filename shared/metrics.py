"""Prometheus metrics, named once. Dashboards and alert rules (ops/) rely on these names."""
from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, start_http_server

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

# --- bus (every worker) ---------------------------------------------------------------------
STREAM_MESSAGES = Counter(
    "regs_stream_messages_total", "Stream entries handled by a worker", ["stream", "outcome"]
)  # outcome: ok, error, dead_letter, duplicate, expired
STREAM_HANDLE_SECONDS = Histogram(
    "regs_stream_handle_seconds", "Time a worker spent on one entry", ["stream"], buckets=LATENCY_BUCKETS
)
STREAM_BACKLOG = Gauge("regs_stream_backlog", "Entries not yet delivered to the group (lag)", ["stream", "group"])
STREAM_PENDING = Gauge("regs_stream_pending", "Entries delivered but not acknowledged", ["stream", "group"])
STREAM_CONSUMERS = Gauge("regs_stream_consumers", "Live consumers in the group", ["stream", "group"])
DLQ_DEPTH = Gauge("regs_dlq_depth", "Entries in a dead-letter stream", ["stream"])

# --- gateway --------------------------------------------------------------------------------
REQUESTS = Counter("regs_requests_total", "HTTP requests by route and status code", ["route", "status"])
STAGE_SECONDS = Histogram(
    "regs_stage_seconds", "Latency per fan-out stage", ["stage"], buckets=LATENCY_BUCKETS
)  # stage: retrieve, pre_gate, generate_plain, generate_legal, post_gate, total
ANSWERS = Counter("regs_answers_total", "Query outcomes", ["status"])  # answered, refused
REFUSALS = Counter("regs_refusals_total", "Refusals by reason", ["reason"])
MODEL_DECLINED = Counter("regs_model_declined_total", "Questions the pre-generation gate let through whose sections the generation model found do not answer them (refused not_found)", ["model"])
ANSWERING_MODEL = Counter("regs_answering_model_total", "Generation calls by the model that answered", ["model"])
FALLBACKS = Counter("regs_generation_fallbacks_total", "Generation calls that fell back", ["reason"])
CONFIDENCE_TIER = Counter("regs_confidence_tier_total", "Answers by confidence tier", ["tier"])
CONFIDENCE_ROLLING = Gauge("regs_confidence_rolling_mean", "Mean confidence of the last 100 answers")
RATE_LIMITED = Counter("regs_rate_limited_total", "Requests refused with 429")

# --- scorer ---------------------------------------------------------------------------------
ANSWER_READER_PROBABILITY = Histogram(
    "regs_answer_reader_probability", "Best passage's probability of stating an answer, per question the answer reader read",
    buckets=(0.05, 0.1, 0.15, 0.2, 0.22, 0.25, 0.3, 0.35, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
)  # the share below REGS_READER_MIN_PROBABILITY is the share it refused
STRICT_READER_PROBABILITY = Histogram(
    "regs_strict_reader_probability", "The strict reader's best passage probability, per question it read",
    buckets=(0.02, 0.05, 0.08, 0.1, 0.12, 0.15, 0.2, 0.3, 0.5, 0.7, 0.9, 1.0),
)  # the share below REGS_READER_STRICT_MIN_PROBABILITY is the share it refused

# --- ingest ---------------------------------------------------------------------------------
INGEST_RUNS = Counter("regs_ingest_runs_total", "Ingest runs by outcome", ["outcome"])
INGEST_SECTIONS = Counter("regs_ingest_sections_total", "Sections per ingest outcome", ["change"])
# change: added, changed, removed, unchanged
INGEST_STAGE_SECONDS = Histogram("regs_ingest_stage_seconds", "Seconds per ingest stage and title", ["stage"],
                                 buckets=(0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800))
ACTIVE_SECTIONS = Gauge("regs_active_sections", "Active sections per title", ["title"])


def serve_metrics(port: int) -> None:
    """Workers serve /metrics on their own port (the gateway serves it on its HTTP port)."""
    start_http_server(port, addr="0.0.0.0")
