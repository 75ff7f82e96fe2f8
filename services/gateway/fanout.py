"""One question through the streams: retrieve → pre-generation gate → generate plain → generate legal →
post-generation gate and confidence. A refusal at the first gate returns without any generation call."""
from __future__ import annotations

import time
import uuid
from typing import Awaitable, Callable

from shared import metrics
from shared.bus import BusClient
from shared.config import Settings
from shared.messages import (
    CallInfo,
    CitationOut,
    Confidence,
    GenerateRequest,
    GenerateResult,
    ModelLabel,
    PostGateRequest,
    PostGateResult,
    PreGateRequest,
    PreGateResult,
    QueryResult,
    Refusal,
    RetrievedItem,
    RetrieveRequest,
    RetrieveResult,
)
from shared.streams import GENERATE, RETRIEVE, SCORE

StatusCallback = Callable[[str], Awaitable[None]]
_recent_confidence: list[float] = []


async def _noop(_: str) -> None:
    return None


def model_label(settings: Settings, calls: list[CallInfo]) -> ModelLabel:
    """Name the model(s) that produced the text, never the configured one unless it answered."""
    requested = f"{settings.generation_provider}/{settings.generation_model}"
    answered = list(dict.fromkeys(f"{c.provider}/{c.model}" for c in calls if c.provider != "none"))
    reasons = [c.fallback_reason for c in calls if c.fallback_reason]
    return ModelLabel(
        requested=requested,
        answered=", ".join(answered) if answered else None,
        fallback_reason=reasons[0] if reasons else None,
        calls=[{"step": c.step, "provider": c.provider, "model": c.model, "requested_model": c.requested_model,
                "tokens_in": c.tokens_in, "tokens_out": c.tokens_out, "ms": round(c.ms, 1),
                "fallback_reason": c.fallback_reason} for c in calls],
    )


def _retrieved(retrieval: RetrieveResult) -> list[RetrievedItem]:
    return [RetrievedItem(cfr_ref=h.cfr_ref, heading=h.heading, score=h.score, similarity=h.similarity, rank=h.rank)
            for h in retrieval.hits]


def _record(result: QueryResult) -> None:
    metrics.ANSWERS.labels(result.status).inc()
    if result.refusal is not None:
        metrics.REFUSALS.labels(result.refusal.reason).inc()
    metrics.CONFIDENCE_TIER.labels(result.confidence.tier).inc()
    _recent_confidence.append(result.confidence.score)
    del _recent_confidence[:-100]
    metrics.CONFIDENCE_ROLLING.set(sum(_recent_confidence) / len(_recent_confidence))


async def answer(
    question: str, bus: BusClient, settings: Settings, *, top_k: int | None = None, mode: str | None = None,
    query_id: str | None = None, on_status: StatusCallback = _noop,
) -> QueryResult:
    query_id = query_id or uuid.uuid4().hex
    deadline = settings.stage_deadline_s
    timings: dict[str, float] = {}
    started = time.perf_counter()

    async def stage(name: str, coro):
        t0 = time.perf_counter()
        try:
            return await coro
        finally:
            elapsed = time.perf_counter() - t0
            timings[name] = round(elapsed * 1000, 1)
            metrics.STAGE_SECONDS.labels(name).observe(elapsed)

    await on_status("retrieving")
    retrieval = RetrieveResult.model_validate(await stage("retrieve", bus.request(
        RETRIEVE, "retrieve", RetrieveRequest(question=question, top_k=top_k, mode=mode, include_superseded=True),
        timeout=deadline, stage="retrieve", request_id=f"{query_id}-retrieve", trace_id=query_id)))
    pre = PreGateResult.model_validate(await stage("pre_gate", bus.request(
        SCORE, "pre_gate", PreGateRequest(question=question, retrieval=retrieval), timeout=deadline,
        stage="pre_gate", request_id=f"{query_id}-pre", trace_id=query_id)))
    label = model_label(settings, [])
    if not pre.proceed:
        result = QueryResult(
            id=query_id, status="refused", question=question, refusal=pre.refusal,
            confidence=pre.confidence or Confidence(score=0.0, tier="not_found", retrieval_score=0.0,
                                                    citation_coverage=0.0),
            model=label, retrieved=_retrieved(retrieval), scope=retrieval.scope,
        )
        return _finish(result, timings, started)

    await on_status("generating plain")
    plain = GenerateResult.model_validate(await stage("generate_plain", bus.request(
        GENERATE, "generate", GenerateRequest(step="plain", question=question, sections=pre.sections),
        timeout=deadline, stage="generate_plain", request_id=f"{query_id}-plain", trace_id=query_id)))
    if plain.not_answered:
        # the model found the sections do not answer the question: no legal text to write; the scorer refuses
        metrics.MODEL_DECLINED.labels(plain.call.model).inc()
        legal = GenerateResult(step="legal", text="", not_answered=plain.not_answered, call=CallInfo(
            step="legal", provider="none", model="none", requested_provider=plain.call.requested_provider,
            requested_model=plain.call.requested_model))
        label = model_label(settings, [plain.call])
    else:
        await on_status("generating legal")
        legal = GenerateResult.model_validate(await stage("generate_legal", bus.request(
            GENERATE, "generate", GenerateRequest(step="legal", question=question, sections=pre.sections,
                                                  plain_answer=plain.text),
            timeout=deadline, stage="generate_legal", request_id=f"{query_id}-legal", trace_id=query_id)))
        label = model_label(settings, [plain.call, legal.call])
    if plain.refused or legal.refused:
        reason = plain.call.fallback_reason or legal.call.fallback_reason or "provider failed"
        result = QueryResult(
            id=query_id, status="refused", question=question,
            refusal=Refusal(reason="provider_unavailable",
                            message=f"The configured model ({label.requested}) did not answer ({reason}) and the "
                                    f"fallback is set to refuse, so no answer was produced."),
            confidence=Confidence(score=0.0, tier="low", retrieval_score=0.0, citation_coverage=0.0),
            model=label, retrieved=_retrieved(retrieval), scope=retrieval.scope,
        )
        return _finish(result, timings, started)

    await on_status("scoring")
    post = PostGateResult.model_validate(await stage("post_gate", bus.request(
        SCORE, "post_gate", PostGateRequest(question=question, retrieval=retrieval, sections=pre.sections,
                                            plain=plain, legal=legal),
        timeout=deadline, stage="post_gate", request_id=f"{query_id}-post", trace_id=query_id)))
    headings = {h.cfr_ref: h.heading for h in pre.sections}
    citations = [CitationOut(cfr_ref=c.cfr_ref, title=c.title, part=c.part, section=c.section, paragraph=c.paragraph,
                             heading=c.heading or headings.get(c.cfr_ref)) for c in post.citations]
    result = QueryResult(
        id=query_id, status="answered" if post.passed else "refused", question=question,
        plain_english=post.plain_english if post.passed else None, legal=post.legal if post.passed else None,
        quotes=post.quotes if post.passed else [], citations=citations if post.passed else [],
        confidence=post.confidence, refusal=post.refusal, model=label, retrieved=_retrieved(retrieval),
        scope=retrieval.scope, flags=post.flags,
    )
    return _finish(result, timings, started)


def _finish(result: QueryResult, timings: dict[str, float], started: float) -> QueryResult:
    timings["total"] = round((time.perf_counter() - started) * 1000, 1)
    metrics.STAGE_SECONDS.labels("total").observe(timings["total"] / 1000)
    result.timings_ms = timings
    _record(result)
    return result
