"""A fake OpenAI-compatible chat endpoint (POST /v1/chat/completions) on 127.0.0.1; see ``tests.fakes``.

It reads the sections from the user message (``--- [21 CFR ...] heading ---`` blocks) and answers like a
local vLLM/Ollama server would: its ``model`` is ``answer_model`` (a more specific tag than the one asked).
"""
from __future__ import annotations

import json
import re
import time
import uuid
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from . import FakeServer, answer_for

_BLOCK = re.compile(r"^--- \[(?P<ref>[^\]]+)\][^\n]*---\n(?P<text>.*?)(?=\n\n--- \[|\n\nPlain-English answer|\n\nAnswer the|\n\nWrite the|\Z)", re.S | re.M)


def _messages_text(body: dict[str, Any], role: str | None = None) -> str:
    out = []
    for m in body.get("messages", []):
        if role is None or m.get("role") == role:
            c = m.get("content")
            out.append(c if isinstance(c, str) else json.dumps(c))
    return "\n".join(out)


class FakeOpenAI(FakeServer):
    def __init__(self, behaviour: str = "ok", *, answer_model: str = "llama3.1:8b-instruct-q4_K_M", **kw: Any):
        super().__init__(behaviour, answer_model=answer_model, **kw)

    @staticmethod
    def prompt_text(recorded: dict[str, Any]) -> str:
        return _messages_text(recorded["json"])

    def _routes(self, app: FastAPI) -> None:
        @app.post("/v1/chat/completions")
        async def completions(request: Request):
            body = await request.json()
            self.record(request, body)
            behaviour = self.behaviour
            if behaviour.isdigit():
                status = int(behaviour)
                headers = {}
                if self.retry_after_ms is not None and (status == 429 or status >= 500):
                    headers["retry-after-ms"] = str(self.retry_after_ms)
                return JSONResponse(
                    {"error": {"message": f"fake error {status}", "type": "server_error" if status >= 500 else "invalid_request_error", "code": None}},
                    status_code=status, headers=headers,
                )
            if behaviour == "slow":
                if await self.sleep_unless_disconnected(request, self.slow_s):
                    return PlainTextResponse("", status_code=499)
                behaviour = "ok"
            if behaviour == "garbage":
                return PlainTextResponse("<html><body>502 upstream hiccup</body></html>", status_code=200)
            reply = self._completion(body, behaviour)
            self.replies.append(reply)
            return JSONResponse(reply)

    def _completion(self, body: dict[str, Any], behaviour: str) -> dict[str, Any]:
        user = _messages_text(body, "user")
        step = "legal" if '"quotes"' in _messages_text(body, "system") else "plain"
        sections = [(m.group("ref"), m.group("text")) for m in _BLOCK.finditer(user)]
        if behaviour == "not_json_text":
            content = "Gouda has to have 46 percent milkfat, roughly."
        else:
            obj, _, _ = answer_for(step, sections, behaviour)
            content = "Here is the answer:\n```json\n" + json.dumps(obj, ensure_ascii=False) + "\n```"
        words_in = len(_messages_text(body).split())
        prompt_tokens, completion_tokens = int(words_in * 1.3) + 5, int(len(content.split()) * 1.3) + 1
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:20]}", "object": "chat.completion", "created": int(time.time()),
            "model": self.answer_model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }
