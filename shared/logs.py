"""Structured (JSON-lines) logs that carry the request id and trace id across services."""
from __future__ import annotations

import contextvars
import json
import logging
import sys
import time

_request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)
_trace_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("trace_id", default=None)


def bind_request(request_id: str | None, trace_id: str | None = None) -> None:
    _request_id.set(request_id)
    _trace_id.set(trace_id or request_id)


def current_request_id() -> str | None:
    return _request_id.get()


class JsonFormatter(logging.Formatter):
    def __init__(self, service: str):
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "service": self.service,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if (rid := _request_id.get()) is not None:
            entry["request_id"] = rid
        if (tid := _trace_id.get()) is not None:
            entry["trace_id"] = tid
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def setup_logging(service: str, level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(service))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("httpx", "httpcore", "sentence_transformers", "transformers", "faststream", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
