"""The generator: one call per request (step "plain" = call 1, step "legal" = call 2), honestly labelled.

``Generator(settings).generate(request)`` asks the configured provider; when it fails (no key, 401, 429,
5xx/529 after the SDK's retries, timeout, malformed reply) the configured fallback answers instead:
``extractive`` writes the text and the label says so, ``refuse`` returns ``refused=True`` with no text.
``call.model`` is always the model that produced ``text``: the API's own ``model`` field, or
``regs-extractive-1.0``. Each call is labelled on its own (a step-1 fallback does not stop step 2 from trying
the configured provider again).
"""
from __future__ import annotations

import logging
import time

from shared.config import Settings
from shared.messages import CallInfo, GenerateRequest, GenerateResult

from .providers.anthropic_provider import AnthropicProvider
from .providers.base import PROMPT_VERSIONS, Provider, ProviderFailure, ProviderOutput
from .providers.extractive import ExtractiveProvider
from .providers.openai_provider import OpenAIProvider
from .text import build_citations

log = logging.getLogger(__name__)


class Generator:
    def __init__(self, settings: Settings, *, extractive: ExtractiveProvider | None = None):
        self.settings = settings
        self.extractive = extractive or ExtractiveProvider(settings)
        self.primary: Provider = self._make_primary(settings)
        self._told_no_key = False

    def _make_primary(self, settings: Settings) -> Provider:
        if settings.generation_provider == "anthropic":
            return AnthropicProvider(settings)
        if settings.generation_provider == "openai":
            return OpenAIProvider(settings)
        if settings.generation_provider == "extractive":
            return self.extractive
        raise ValueError(f"unknown generation provider {settings.generation_provider!r}")

    @property
    def requested(self) -> tuple[str, str]:
        """(provider, model) as configured; extractive names itself whatever generation_model says."""
        if self.primary is self.extractive:
            return self.extractive.name, self.extractive.model
        return self.primary.name, self.primary.model

    def warm(self) -> None:
        """Load the local embedder (extractive needs it; ~6 s) and the provider's SDK now, not on first use.

        Blocking; call it once at worker start-up (e.g. ``await asyncio.to_thread(generator.warm)``).
        """
        self.extractive.warm()
        if self.primary is not self.extractive:
            self.primary.warm()

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        if not request.sections:
            raise ValueError("no sections")
        requested_provider, requested_model = self.requested
        started = time.perf_counter()
        provider: Provider = self.primary
        fallback_reason: str | None = None
        try:
            out = await self.primary.generate(request)
        except ProviderFailure as failure:
            fallback_reason = failure.reason
            # a missing key is configuration, not an incident: said once, then every call's label and its info
            # line carry it (a warning per call was 44,000 lines in one eval day)
            no_key = fallback_reason == "no_api_key"
            level = logging.DEBUG if no_key and self._told_no_key else logging.WARNING
            self._told_no_key = self._told_no_key or no_key
            log.log(
                level, "generation %s: %s/%s failed (%s); fallback %s%s", request.step, requested_provider,
                requested_model, fallback_reason, self.settings.generation_fallback,
                "; said once: every call without a key falls back the same way" if no_key and level == logging.WARNING
                else "",
            )
            if self.settings.generation_fallback == "refuse" or self.primary is self.extractive:
                return self._refused(request, requested_provider, requested_model, fallback_reason, started)
            provider = self.extractive
            try:
                out = await self.extractive.generate(request)
            except ProviderFailure as second:
                return self._refused(
                    request, requested_provider, requested_model, f"{fallback_reason}; extractive {second.reason}",
                    started,
                )
        ms = (time.perf_counter() - started) * 1000.0
        result = self._result(request, provider, out, requested_provider, requested_model, fallback_reason, ms)
        log.info(
            "generation %s by %s/%s (requested %s/%s, prompt %s) in %.0f ms, tokens %d/%d%s",
            request.step, result.call.provider, result.call.model, requested_provider, requested_model,
            PROMPT_VERSIONS[request.step], ms, out.tokens_in, out.tokens_out,
            f", fallback: {fallback_reason}" if fallback_reason else "",
        )
        return result

    @staticmethod
    def _result(
        request: GenerateRequest, provider: Provider, out: ProviderOutput, requested_provider: str,
        requested_model: str, fallback_reason: str | None, ms: float,
    ) -> GenerateResult:
        refs = list(out.cited) + [(q.cfr_ref, q.paragraph) for q in out.quotes]
        return GenerateResult(
            step=request.step,
            text=out.text,
            quotes=out.quotes,
            citations=build_citations(request.sections, refs),
            not_answered=out.not_answered,
            call=CallInfo(
                step=request.step, provider=provider.name, model=out.model, requested_provider=requested_provider,
                requested_model=requested_model, tokens_in=out.tokens_in, tokens_out=out.tokens_out, ms=round(ms, 1),
                fallback_reason=fallback_reason,
            ),
        )

    @staticmethod
    def _refused(
        request: GenerateRequest, requested_provider: str, requested_model: str, reason: str, started: float
    ) -> GenerateResult:
        return GenerateResult(
            step=request.step,
            text="",
            refused=True,
            call=CallInfo(
                step=request.step, provider="none", model="none", requested_provider=requested_provider,
                requested_model=requested_model, ms=round((time.perf_counter() - started) * 1000.0, 1),
                fallback_reason=reason,
            ),
        )
