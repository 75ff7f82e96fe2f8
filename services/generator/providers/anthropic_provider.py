"""Anthropic Messages API (production default: Claude Haiku 4.5) through the official async SDK.

The sections go to the model as ``document`` content blocks (plain text, titled with cfr_ref and heading)
with citations enabled. The reply is the JSON object the prompt asks for; on top of that, every
``char_location`` citation the API attaches to the text carries ``cited_text`` taken by the API from our
document, so those quotes are verifiable by construction and their offsets give the paragraph.

The label is the ``model`` field the API returned, never the configured name.
"""
from __future__ import annotations

import logging
from typing import Any

from shared.config import Settings
from shared.messages import GenerateRequest, Hit, Quote

from ..text import paragraph_at
from .base import ProviderFailure, ProviderOutput, interpret_reply, load_prompt

log = logging.getLogger(__name__)


def document_title(hit: Hit) -> str:
    return f"{hit.cfr_ref} — {hit.heading}" if hit.heading else hit.cfr_ref


def failure_from_status(status: int, message: str = "") -> ProviderFailure:
    """The fallback reason of an HTTP error status (after the SDK's own retries)."""
    if status in (401, 403):
        return ProviderFailure("auth_failed", str(status))
    if status == 429:
        return ProviderFailure("rate_limited", str(status))
    if status == 529:
        return ProviderFailure("overloaded", str(status))
    if status == 408 or status == 504:
        return ProviderFailure("timeout", f"{status}")
    if status >= 500:
        return ProviderFailure("server_error", str(status))
    if status in (400, 413, 422):
        return ProviderFailure("bad_request", f"{status} {message[:80]}".strip())
    return ProviderFailure("api_error", f"{status} {message[:80]}".strip())


class AnthropicProvider:
    name = "anthropic"

    def __init__(self, settings: Settings):
        self.settings = settings
        self._client: Any = None

    @property
    def model(self) -> str:
        return self.settings.generation_model

    def _get_client(self) -> Any:
        if self._client is None:
            from anthropic import AsyncAnthropic

            self._client = AsyncAnthropic(
                api_key=self.settings.anthropic_api_key.get_secret_value(),
                base_url=self.settings.anthropic_base_url,
                max_retries=self.settings.generation_retries,
                timeout=self.settings.generation_timeout_s,
            )
        return self._client

    def warm(self) -> None:
        """Import the SDK (~1.8 s) and build the client now rather than inside the first request."""
        import anthropic  # noqa: F401

        if self.settings.anthropic_api_key is not None and self.settings.anthropic_api_key.get_secret_value():
            self._get_client()

    def build_messages(self, request: GenerateRequest) -> tuple[str, list[dict[str, Any]]]:
        prompt = load_prompt(request.step)
        documents = [
            {
                "type": "document",
                "source": {"type": "text", "media_type": "text/plain", "data": hit.text},
                "title": document_title(hit),
                "context": f"{hit.cfr_ref} ({hit.heading}); paragraphs start with their designation, e.g. (a), (1).",
                "citations": {"enabled": True},
            }
            for hit in request.sections
        ]
        names = "; ".join(f"{h.cfr_ref} ({h.heading})" for h in request.sections)
        context = (
            f"The CFR sections provided are attached above as documents, one per section, each titled with its "
            f"citation and heading: {names}."
        )
        user_text = prompt.render_user(question=request.question, context=context, plain_answer=request.plain_answer)
        return prompt.system, [{"role": "user", "content": [*documents, {"type": "text", "text": user_text}]}]

    async def generate(self, request: GenerateRequest) -> ProviderOutput:
        import anthropic

        if self.settings.anthropic_api_key is None or not self.settings.anthropic_api_key.get_secret_value():
            raise ProviderFailure("no_api_key")
        system, messages = self.build_messages(request)
        try:
            response = await self._get_client().messages.create(
                model=self.model,
                max_tokens=self.settings.generation_max_tokens,
                system=system,
                messages=messages,
            )
        except anthropic.APITimeoutError as exc:
            raise ProviderFailure("timeout", f"{self.settings.generation_timeout_s:g}s") from exc
        except anthropic.APIConnectionError as exc:
            raise ProviderFailure("unreachable", type(exc.__cause__ or exc).__name__) from exc
        except anthropic.APIStatusError as exc:
            raise failure_from_status(exc.status_code, str(getattr(exc, "message", ""))) from exc
        except anthropic.AnthropicError as exc:  # response validation and the like
            raise ProviderFailure("malformed_reply", type(exc).__name__) from exc
        except ValueError as exc:  # a 200 whose body claims JSON but is not
            raise ProviderFailure("malformed_reply", "body is not JSON") from exc
        return self._read(request, response)

    def _read(self, request: GenerateRequest, response: Any) -> ProviderOutput:
        if isinstance(response, str) or not hasattr(response, "content"):
            raise ProviderFailure("malformed_reply", "body is not a Messages API object")
        model = getattr(response, "model", None)
        if not isinstance(model, str) or not model:
            raise ProviderFailure("malformed_reply", "reply names no model")
        stop_reason = getattr(response, "stop_reason", None)
        if stop_reason == "refusal":
            raise ProviderFailure("model_refused", "stop_reason refusal")
        blocks = [b for b in (response.content or []) if getattr(b, "type", None) == "text"]
        raw = "".join(getattr(b, "text", "") or "" for b in blocks)
        try:
            reply = interpret_reply(request, raw)
        except ProviderFailure as exc:
            if stop_reason == "max_tokens":
                raise ProviderFailure("malformed_reply", "truncated at max_tokens") from exc
            raise
        api_quotes, api_cited = self._citations(request, blocks)
        quotes, cited = reply.quotes, reply.cited
        if reply.not_answered:
            api_quotes, api_cited = [], []
        elif request.step == "legal":
            quotes = _merge_quotes(api_quotes, quotes)
        usage = getattr(response, "usage", None)
        tokens_in = int(getattr(usage, "input_tokens", 0) or 0)
        tokens_in += int(getattr(usage, "cache_read_input_tokens", 0) or 0)
        tokens_in += int(getattr(usage, "cache_creation_input_tokens", 0) or 0)
        return ProviderOutput(
            text=reply.answer, model=model, quotes=quotes, cited=api_cited + cited, tokens_in=tokens_in,
            not_answered=reply.not_answered,
            tokens_out=int(getattr(usage, "output_tokens", 0) or 0),
        )

    @staticmethod
    def _citations(request: GenerateRequest, blocks: list[Any]) -> tuple[list[Quote], list[tuple[str, str | None]]]:
        """Quotes from the API's char_location citations (cited_text is the API's copy of our document)."""
        quotes: list[Quote] = []
        cited: list[tuple[str, str | None]] = []
        for block in blocks:
            for c in getattr(block, "citations", None) or []:
                if getattr(c, "type", None) != "char_location":
                    continue
                index = getattr(c, "document_index", None)
                if not isinstance(index, int) or not 0 <= index < len(request.sections):
                    continue
                hit = request.sections[index]
                cited_text = (getattr(c, "cited_text", "") or "").strip()
                start = getattr(c, "start_char_index", None)
                paragraph = None
                if cited_text:
                    # the offset is the API's; the paragraph is ours (the first non-space character of the quote)
                    at = hit.text.find(cited_text, max(0, (start or 0) - 2)) if isinstance(start, int) else -1
                    if at < 0:
                        at = hit.text.find(cited_text)
                    paragraph = paragraph_at(hit, at) if at >= 0 else None
                    quotes.append(Quote(text=cited_text, cfr_ref=hit.cfr_ref, paragraph=paragraph))
                cited.append((hit.cfr_ref, paragraph))
        return quotes, cited


def _merge_quotes(first: list[Quote], second: list[Quote]) -> list[Quote]:
    out: list[Quote] = []
    for q in first + second:
        if any(q.cfr_ref == o.cfr_ref and (q.text in o.text or o.text in q.text) for o in out):
            continue
        out.append(q)
    return out
