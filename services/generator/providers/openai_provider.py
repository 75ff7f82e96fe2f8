"""Any OpenAI-compatible chat endpoint (OpenAI, vLLM, Ollama, llama.cpp) through the official async SDK.

The label is the ``model`` field of the response (servers often answer with a more specific name than
the one asked for, e.g. a quantisation tag).
"""
from __future__ import annotations

from typing import Any

from shared.config import Settings
from shared.messages import GenerateRequest

from .anthropic_provider import failure_from_status
from .base import ProviderFailure, ProviderOutput, interpret_reply, load_prompt, render_context

# local OpenAI-compatible servers (vLLM, Ollama, llama.cpp) ignore the key, but the SDK needs one
LOCAL_PLACEHOLDER_KEY = "EMPTY"


class OpenAIProvider:
    name = "openai"

    def __init__(self, settings: Settings):
        self.settings = settings
        self._client: Any = None

    @property
    def model(self) -> str:
        return self.settings.generation_model

    def _api_key(self) -> str | None:
        key = self.settings.openai_api_key.get_secret_value() if self.settings.openai_api_key else None
        if key:
            return key
        # a self-hosted endpoint without auth: the configured base_url is the operator's explicit choice
        return LOCAL_PLACEHOLDER_KEY if self.settings.openai_base_url else None

    def _get_client(self) -> Any:
        if self._client is None:
            from openai import AsyncOpenAI

            self._client = AsyncOpenAI(
                api_key=self._api_key(),
                base_url=self.settings.openai_base_url,
                max_retries=self.settings.generation_retries,
                timeout=self.settings.generation_timeout_s,
            )
        return self._client

    def warm(self) -> None:
        """Import the SDK and build the client now rather than inside the first request."""
        import openai  # noqa: F401

        if self._api_key() is not None:
            self._get_client()

    def build_messages(self, request: GenerateRequest) -> list[dict[str, str]]:
        prompt = load_prompt(request.step)
        user = prompt.render_user(
            question=request.question, context=render_context(request.sections), plain_answer=request.plain_answer
        )
        return [{"role": "system", "content": prompt.system}, {"role": "user", "content": user}]

    async def generate(self, request: GenerateRequest) -> ProviderOutput:
        import openai

        if self._api_key() is None:
            raise ProviderFailure("no_api_key")
        try:
            response = await self._get_client().chat.completions.create(
                model=self.model,
                messages=self.build_messages(request),
                max_tokens=self.settings.generation_max_tokens,
                temperature=0.0,
            )
        except openai.APITimeoutError as exc:
            raise ProviderFailure("timeout", f"{self.settings.generation_timeout_s:g}s") from exc
        except openai.APIConnectionError as exc:
            raise ProviderFailure("unreachable", type(exc.__cause__ or exc).__name__) from exc
        except openai.APIStatusError as exc:
            raise failure_from_status(exc.status_code, str(getattr(exc, "message", ""))) from exc
        except openai.OpenAIError as exc:
            raise ProviderFailure("malformed_reply", type(exc).__name__) from exc
        except ValueError as exc:
            raise ProviderFailure("malformed_reply", "body is not JSON") from exc
        return self._read(request, response)

    def _read(self, request: GenerateRequest, response: Any) -> ProviderOutput:
        if isinstance(response, str) or not getattr(response, "choices", None):
            raise ProviderFailure("malformed_reply", "body is not a chat completion")
        model = getattr(response, "model", None)
        if not isinstance(model, str) or not model:
            raise ProviderFailure("malformed_reply", "reply names no model")
        choice = response.choices[0]
        message = getattr(choice, "message", None)
        raw = getattr(message, "content", None) or ""
        if getattr(choice, "finish_reason", None) == "content_filter":
            raise ProviderFailure("model_refused", "content_filter")
        try:
            reply = interpret_reply(request, raw)
        except ProviderFailure as exc:
            if getattr(choice, "finish_reason", None) == "length":
                raise ProviderFailure("malformed_reply", "truncated at max_tokens") from exc
            raise
        usage = getattr(response, "usage", None)
        return ProviderOutput(
            text=reply.answer, model=model, quotes=reply.quotes, cited=reply.cited, not_answered=reply.not_answered,
            tokens_in=int(getattr(usage, "prompt_tokens", 0) or 0),
            tokens_out=int(getattr(usage, "completion_tokens", 0) or 0),
        )
