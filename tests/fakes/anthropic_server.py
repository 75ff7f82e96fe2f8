"""A fake Anthropic Messages API (POST /v1/messages) on 127.0.0.1; see ``tests.fakes`` for the behaviours.

The ok reply is the JSON the prompt asks for, split into text blocks so that the cited sentence is its own
block carrying a ``char_location`` citation (``cited_text`` copied from the request's document, with
``document_index``, ``document_title`` and character offsets), as the real API does with citations enabled.
The reply's ``model`` is ``answer_model`` ("claude-haiku-4-5-20251001"), not the alias asked for.
"""
from __future__ import annotations

import uuid
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from . import FakeServer, answer_for

ERRORS = {
    400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
    429: "rate_limit_error", 500: "api_error", 503: "api_error", 529: "overloaded_error",
}


def _documents(body: dict[str, Any]) -> list[dict[str, Any]]:
    docs = []
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, list):
            docs.extend(b for b in content if isinstance(b, dict) and b.get("type") == "document")
    return docs


def _system_text(body: dict[str, Any]) -> str:
    system = body.get("system") or ""
    if isinstance(system, list):
        return " ".join(b.get("text", "") for b in system if isinstance(b, dict))
    return system


def _prompt_text(body: dict[str, Any]) -> str:
    """System + every text block of the request (what the model was told)."""
    parts = [_system_text(body)]
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            for b in content:
                if b.get("type") == "text":
                    parts.append(b.get("text", ""))
                elif b.get("type") == "document":
                    parts.append(f"{b.get('title', '')}\n{b.get('source', {}).get('data', '')}")
    return "\n".join(parts)


class FakeAnthropic(FakeServer):
    def __init__(self, behaviour: str = "ok", *, answer_model: str = "claude-haiku-4-5-20251001", **kw: Any):
        super().__init__(behaviour, answer_model=answer_model, **kw)

    @staticmethod
    def prompt_text(recorded: dict[str, Any]) -> str:
        return _prompt_text(recorded["json"])

    def _routes(self, app: FastAPI) -> None:
        @app.post("/v1/messages")
        async def messages(request: Request):
            body = await request.json()
            self.record(request, body)
            behaviour = self.behaviour
            if behaviour.isdigit():
                status = int(behaviour)
                headers = {"request-id": f"req_{uuid.uuid4().hex[:12]}"}
                if self.retry_after_ms is not None and (status == 429 or status >= 500):
                    headers["retry-after-ms"] = str(self.retry_after_ms)
                kind = ERRORS.get(status, "api_error")
                return JSONResponse(
                    {"type": "error", "error": {"type": kind, "message": f"fake {kind}"}}, status_code=status,
                    headers=headers,
                )
            if behaviour == "slow":
                if await self.sleep_unless_disconnected(request, self.slow_s):
                    return PlainTextResponse("", status_code=499)
                behaviour = "ok"
            if behaviour == "garbage":
                return PlainTextResponse("<html><body>502 upstream hiccup</body></html>", status_code=200)
            reply = self._message(body, behaviour)
            self.replies.append(reply)
            return JSONResponse(reply)

    def _message(self, body: dict[str, Any], behaviour: str) -> dict[str, Any]:
        docs = _documents(body)
        step = "legal" if '"quotes"' in _system_text(body) else "plain"
        sections = [((d.get("title") or "").split(" — ")[0], d.get("source", {}).get("data", "")) for d in docs]
        content: list[dict[str, Any]]
        if behaviour == "not_json_text":
            content = [{"type": "text", "text": "Gouda has to have 46 percent milkfat, roughly."}]
        else:
            obj, sentence, index = answer_for(step, sections, behaviour)
            content = []
            for piece, cited in self.split_for_citation(obj, sentence):
                block: dict[str, Any] = {"type": "text", "text": piece}
                if cited and docs:
                    data = docs[index]["source"]["data"]
                    start = data.find(sentence)
                    block["citations"] = [{
                        "type": "char_location", "cited_text": sentence, "document_index": index,
                        "document_title": docs[index].get("title"), "start_char_index": start,
                        "end_char_index": start + len(sentence),
                    }]
                content.append(block)
        words_in = len(_prompt_text(body).split())
        words_out = sum(len(b["text"].split()) for b in content)
        return {
            "id": f"msg_{uuid.uuid4().hex[:24]}", "type": "message", "role": "assistant", "model": self.answer_model,
            "content": content, "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": int(words_in * 1.3) + 7, "output_tokens": int(words_out * 1.3) + 3},
        }
