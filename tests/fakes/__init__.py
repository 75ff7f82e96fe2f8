"""Fake LLM provider servers for tests: real HTTP servers on 127.0.0.1 (FastAPI + uvicorn in a thread).

- ``tests.fakes.anthropic_server.FakeAnthropic``: POST /v1/messages (Messages API, with citations)
- ``tests.fakes.openai_server.FakeOpenAI``: POST /v1/chat/completions

Both take a ``behaviour`` (constructor argument, attribute, or POST /_control {"behaviour": ...}):

    ok                  a well-formed answer built from the request's own sections
    401 / 429 / 500 / 503 / 529   that HTTP error (the SDK retries 429 and 5xx)
    slow                sleeps ``slow_s`` seconds before answering ok (longer than the client timeout)
    garbage             200 with a body that is not JSON
    not_json_text       200, a well-formed API object whose text is prose, not the requested JSON
    wrong_shape         200, JSON text whose "quotes" is not a list
    quote_not_in_context  200, an answer whose quote (and figure) appears in no section
    cites_other         200, ok plus a citation of a section that was not provided

Every request is recorded in ``requests`` (path, headers, json) so tests can read the prompt and count retries.
The answering model is ``answer_model`` (deliberately not the model asked for, to prove the label is the
returned one).
"""
from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
from typing import Any

import uvicorn
from fastapi import FastAPI, Request

FABRICATED_QUOTE = "Gouda cheese shall be ripened for not less than 90 days at a temperature of 52 °F."
OTHER_SECTION = "21 CFR 101.9"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def first_sentence(text: str) -> str:
    """The first full sentence of a section body (leading designation kept out), verbatim."""
    for line in text.split("\n"):
        body = re.sub(r"^(?:\([0-9a-zA-Z]{1,5}\)\s*(?:[A-Z][A-Za-z ,/-]{0,60}\.\s+(?=\())?)+", "", line).strip()
        if len(body.split()) < 5:
            continue
        m = re.search(r"(?<=[a-z0-9%)”\"])\.(?=\s+[A-Z(])", body)
        return body[: m.end()] if m else body
    return text.strip()[:200]


NOT_ANSWERED = ("The sections set the standard of identity for the cheese but do not say how long it keeps once opened.")


def answer_for(step: str, sections: list[tuple[str, str]], behaviour: str) -> tuple[dict[str, Any], str | None, int]:
    """(the JSON object the model 'writes', the verbatim sentence it cites, its section index)."""
    cfr_ref, text = sections[0] if sections else ("21 CFR 0.0", "")
    sentence = first_sentence(text)
    if behaviour == "quote_not_in_context":
        if step == "legal":
            return (
                {"answer": f'{cfr_ref} provides: "{FABRICATED_QUOTE}"',
                 "quotes": [{"text": FABRICATED_QUOTE, "cfr_ref": cfr_ref, "paragraph": None}]},
                None, 0,
            )
        return {"answer": f"{FABRICATED_QUOTE} [{cfr_ref}]", "cited": [cfr_ref]}, None, 0
    if behaviour == "not_answered":  # the model reads the sections and finds they do not answer the question
        empty = "quotes" if step == "legal" else "cited"
        return {"answer": "", empty: [], "not_answered": NOT_ANSWERED}, None, 0
    if behaviour == "wrong_shape":
        return {"answer": f"{cfr_ref} provides it.", "quotes": "see above", "cited": "all of them"}, None, 0
    if step == "legal":
        obj = {"answer": f'{cfr_ref} provides: "{sentence}"', "quotes": [{"text": sentence, "cfr_ref": cfr_ref, "paragraph": None}]}
    else:
        obj = {"answer": f"{sentence} [{cfr_ref}]", "cited": [cfr_ref]}
    if behaviour == "cites_other":
        obj["answer"] += f" See also {OTHER_SECTION}(c)."
        obj.setdefault("cited", []).append(OTHER_SECTION)
    return obj, sentence, 0


class FakeServer:
    """Base: behaviour switch, request log, uvicorn in a daemon thread."""

    error_bodies: dict[int, tuple[str, str]] = {}

    def __init__(self, behaviour: str = "ok", *, answer_model: str = "fake-model", slow_s: float = 3.0,
                 retry_after_ms: int | None = 10):
        self.behaviour = behaviour
        self.answer_model = answer_model
        self.slow_s = slow_s
        self.retry_after_ms = retry_after_ms  # keeps SDK retries fast in tests; None: the SDK's own backoff
        self.requests: list[dict[str, Any]] = []
        self.replies: list[dict[str, Any]] = []  # the 200 bodies sent (JSON ones)
        self.port = free_port()
        self.app = FastAPI()
        self._routes(self.app)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

        @self.app.post("/_control")
        async def control(request: Request) -> dict[str, Any]:
            body = await request.json()
            for key in ("behaviour", "answer_model", "slow_s"):
                if key in body:
                    setattr(self, key, body[key])
            if body.get("reset"):
                self.requests.clear()
            return {"behaviour": self.behaviour, "requests": len(self.requests)}

    # subclasses add the API route
    def _routes(self, app: FastAPI) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def reset(self, behaviour: str = "ok") -> None:
        self.behaviour = behaviour
        self.requests.clear()
        self.replies.clear()

    def record(self, request: Request, body: Any) -> None:
        self.requests.append({"path": request.url.path, "headers": dict(request.headers), "json": body, "t": time.time()})

    @staticmethod
    async def sleep_unless_disconnected(request: Request, seconds: float) -> bool:
        """Sleep ``seconds``; True as soon as the client has gone (it timed out), so shutdown never waits."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if await request.is_disconnected():
                return True
            await asyncio.sleep(0.05)
        return False

    def start(self) -> "FakeServer":
        config = uvicorn.Config(
            self.app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off",
            timeout_graceful_shutdown=1, access_log=False,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name=f"fake-{self.port}", daemon=True)
        self._thread.start()
        deadline = time.time() + 10
        while not self._server.started:
            if time.time() > deadline:
                raise RuntimeError("fake server did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "FakeServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def split_for_citation(self, obj: dict[str, Any], sentence: str | None) -> list[tuple[str, bool]]:
        """The JSON text cut so that the (escaped) cited sentence is its own piece: [(text, is_cited)]."""
        full = json.dumps(obj, ensure_ascii=False)
        if not sentence:
            return [(full, False)]
        esc = json.dumps(sentence, ensure_ascii=False)[1:-1]
        at = full.find(esc)
        if at < 0:
            return [(full, False)]
        return [(full[:at], False), (full[at : at + len(esc)], True), (full[at + len(esc) :], False)]
