"""The generator worker: consumes regs.generate.requests (one call per entry: 'plain' or 'legal')."""
from __future__ import annotations

import asyncio

from services.generator.service import Generator
from shared import metrics
from shared.bus import BadRequest
from shared.config import Settings
from shared.messages import Envelope, GenerateRequest, GenerateResult
from shared.streams import GENERATE
from shared.worker import ServiceDefinition


async def setup(settings: Settings):
    generator = Generator(settings)
    await asyncio.to_thread(generator.warm)

    async def handle(kind: str, request: GenerateRequest, envelope: Envelope) -> GenerateResult:
        if not request.sections:
            raise BadRequest("no sections: the scorer's gate decides not_found before generation")
        result = await generator.generate(request)
        metrics.ANSWERING_MODEL.labels(f"{result.call.provider}/{result.call.model}").inc()
        if result.call.fallback_reason:
            metrics.FALLBACKS.labels(result.call.fallback_reason.split(":", 1)[0]).inc()
        return result

    return handle


SERVICE = ServiceDefinition("generator", GENERATE, setup)
