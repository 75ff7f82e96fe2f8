"""Typed contracts of every stream and of the public API, defined once.

Wire format of a stream entry (what other systems produce): one field ``json`` holding an
``Envelope`` serialised as JSON. Replies are ``Reply`` objects in the same ``json`` field, added to the
stream named by ``reply_to``. See ``shared/streams.py`` for the stream names and groups.
"""
from __future__ import annotations

import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Mode = Literal["hybrid", "dense", "fulltext"]
Tier = Literal["high", "medium", "low", "not_found"]
RefusalReason = Literal[
    "not_found",
    "below_authority",
    "divergent",
    "conflicting",
    "stale",
    "unverified_quote",
    "unsupported_figure",
    "unsupported_claims",
    "provider_unavailable",
]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def new_id() -> str:
    return uuid.uuid4().hex


# --------------------------------------------------------------------------------------------
# envelope and reply
# --------------------------------------------------------------------------------------------
class Envelope(BaseModel):
    """Every request on every stream."""

    request_id: str = Field(default_factory=new_id, description="Idempotency key: one answer per request_id.")
    trace_id: str = Field(default_factory=new_id, description="Carried across services and log lines.")
    deadline: float = Field(
        default_factory=lambda: time.time() + 60.0, description="Unix time after which nobody awaits the reply."
    )
    reply_to: str | None = Field(None, description="Stream to XADD the Reply to; None for fire-and-forget.")
    kind: str = Field(..., description="Payload type name, e.g. 'retrieve'.")
    payload: dict[str, Any]

    def expired(self) -> bool:
        return time.time() > self.deadline


class ErrorInfo(BaseModel):
    code: str  # "bad_request", "expired", "internal", "dead_letter", "unavailable"
    message: str


class Reply(BaseModel):
    request_id: str
    trace_id: str
    kind: str
    ok: bool
    error: ErrorInfo | None = None
    payload: dict[str, Any] = Field(default_factory=dict)
    worker: str | None = None  # consumer name that produced the reply


# --------------------------------------------------------------------------------------------
# retrieval
# --------------------------------------------------------------------------------------------
class CitationRef(BaseModel):
    raw: str  # as written in the question
    title: int | None
    part: str | None
    section: str | None  # None for a whole-part citation
    paragraph: str | None = None  # "(c)(1)" when the question pinpoints one
    exists: bool = False  # the corpus holds it (active)


class SubjectMatch(BaseModel):
    term: str  # the words of the question that named it
    cfr_refs: list[str]  # sections whose heading names it
    coverage: list[float] = Field(default_factory=list)  # per section: how much of its heading the question names
    specific: bool = False  # named by a word (pair) found in at most two headings: the question is about it


class ProgramRef(BaseModel):
    """A program, agency rule or law the question names, with the CFR part that governs it."""
    name: str
    title: int
    parts: list[str] = Field(default_factory=list)  # empty: the whole title
    said: str  # the words of the question that named it
    held: bool  # whether the corpus holds (one of) those parts
    home: str = ""  # where the rule lives, for people: "42 CFR part 423"; "no part of the CFR" (title 0: a
    #                 country's or a state's own law)
    family: str = ""  # shared.programs family ("medicare", "general-knowledge", ...)


class Scope(BaseModel):
    citations: list[CitationRef] = Field(default_factory=list)
    missing_citations: list[CitationRef] = Field(default_factory=list)
    titles: list[int] = Field(default_factory=list)  # hinted titles (agency / explicit)
    parts: list[str] = Field(default_factory=list)  # explicitly named parts
    subjects: list[SubjectMatch] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)  # human-readable account of what scoping did
    unsupported_titles: list[int] = Field(default_factory=list)  # titles named that the corpus does not hold
    programs: list[ProgramRef] = Field(default_factory=list)  # programs named, held or not (shared.programs)
    names: list[str] = Field(default_factory=list)  # proper names and acronyms the question uses
    absent_names: list[str] = Field(default_factory=list)  # ... that no active section contains (retriever)


class ParagraphSpan(BaseModel):
    designation: str
    start: int
    end: int


class Hit(BaseModel):
    cfr_ref: str
    title: int
    part: str
    section: str
    heading: str
    score: float  # fused score
    similarity: float | None  # cosine similarity of the section (best window) to the question
    rank: int
    dense_rank: int | None = None
    fulltext_rank: int | None = None
    matched_by: list[str] = Field(default_factory=list)  # "citation", "subject", "dense", "fulltext"
    kind: str = "section"
    reserved: bool = False
    removed: bool = False
    status: str = "active"
    version_id: int | None = None
    source_date: str | None = None
    agency: str | None = None
    subpart: str | None = None
    text: str = ""
    paragraphs: list[ParagraphSpan] = Field(default_factory=list)
    source_note: str | None = None
    editorial_notes: list[str] = Field(default_factory=list)


class RetrieveRequest(Strict):
    question: str
    top_k: int | None = None
    mode: Mode | None = None
    scoping: bool | None = None
    include_superseded: bool = False  # the scorer's stale check asks for superseded matches too
    include_text: bool = True  # the sections' text and paragraphs; a result list (POST /v1/search) needs neither


class RetrieveResult(BaseModel):
    scope: Scope
    hits: list[Hit]
    superseded: list[Hit] = Field(default_factory=list)
    mode: Mode
    top_k: int
    embedding_model: str
    empty_reason: str | None = None  # why there are no results, when there are none


# --------------------------------------------------------------------------------------------
# generation
# --------------------------------------------------------------------------------------------
class Quote(BaseModel):
    text: str
    cfr_ref: str
    paragraph: str | None = None
    verified: bool | None = None  # set by the scorer


class Citation(BaseModel):
    cfr_ref: str
    title: int
    part: str
    section: str
    paragraph: str | None = None
    heading: str | None = None


class CallInfo(BaseModel):
    step: Literal["plain", "legal"]
    provider: str  # the provider that produced the text
    model: str  # the model that produced the text (the API's own answer, or extractive's name+version)
    requested_provider: str
    requested_model: str
    tokens_in: int = 0
    tokens_out: int = 0
    ms: float = 0.0
    fallback_reason: str | None = None  # why the requested provider did not answer


class GenerateRequest(Strict):
    step: Literal["plain", "legal"]
    question: str
    sections: list[Hit]
    plain_answer: str | None = None  # call 1's answer, given to call 2


class GenerateResult(BaseModel):
    step: Literal["plain", "legal"]
    text: str
    quotes: list[Quote] = Field(default_factory=list)
    citations: list[Citation] = Field(default_factory=list)
    call: CallInfo
    refused: bool = False  # the fallback was `refuse`: no text was produced
    # the model read the sections and found they do not answer the question (its one sentence; text is empty)
    not_answered: str | None = None


# --------------------------------------------------------------------------------------------
# scoring
# --------------------------------------------------------------------------------------------
class Evidence(BaseModel):
    cfr_ref: str
    heading: str | None = None
    version_id: int | None = None
    source_date: str | None = None
    status: str | None = None
    figures: list[str] = Field(default_factory=list)
    detail: str | None = None


class Refusal(BaseModel):
    reason: RefusalReason
    message: str  # one plain sentence a compliance analyst would say out loud
    evidence: list[Evidence] = Field(default_factory=list)


class Confidence(BaseModel):
    score: float
    tier: Tier
    retrieval_score: float
    citation_coverage: float
    signals: dict[str, float] = Field(default_factory=dict)


class PreGateRequest(Strict):
    question: str
    retrieval: RetrieveResult


class PreGateResult(BaseModel):
    proceed: bool
    refusal: Refusal | None = None
    sections: list[Hit] = Field(default_factory=list)  # the evidence generation may use
    signals: dict[str, float] = Field(default_factory=dict)
    confidence: Confidence | None = None  # set when refused: the answer's confidence without generation


class PostGateRequest(Strict):
    question: str
    retrieval: RetrieveResult
    sections: list[Hit]
    plain: GenerateResult
    legal: GenerateResult


class SentenceSupport(BaseModel):
    sentence: str
    supported: bool
    support: float
    cfr_ref: str | None = None


class PostGateResult(BaseModel):
    passed: bool
    refusal: Refusal | None = None
    plain_english: str
    legal: str
    quotes: list[Quote]
    citations: list[Citation]
    confidence: Confidence
    flags: list[str] = Field(default_factory=list)  # "stripped_quote", "unsupported_sentence", ...
    sentences: list[SentenceSupport] = Field(default_factory=list)


# --------------------------------------------------------------------------------------------
# ingest
# --------------------------------------------------------------------------------------------
class IngestRequest(Strict):
    title: int | None = None  # None: every title found in the source
    source: str = "shipped"  # "shipped", a file/dir path, or "ecfr:YYYY-MM-DD"
    parts: list[str] | None = None
    force: bool = False  # re-ingest even when nothing changed
    run_id: str | None = None


class IngestEvent(BaseModel):
    run_id: str
    state: Literal["queued", "running", "progress", "succeeded", "failed"]
    message: str = ""
    done: int = 0
    total: int = 0
    counts: dict[str, int] = Field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# the public answer (gateway /v1/query, and the reply on regs.query.requests)
# --------------------------------------------------------------------------------------------
class QueryRequest(Strict):
    question: str
    top_k: int | None = Field(None, ge=1, le=50)
    mode: Mode | None = None


class ModelLabel(BaseModel):
    requested: str  # "anthropic/claude-haiku-4-5"
    answered: str | None  # the model(s) that produced the text, e.g. "extractive/regs-extractive-1.0"
    fallback_reason: str | None = None
    calls: list[dict[str, Any]] = Field(default_factory=list)


class RetrievedItem(BaseModel):
    cfr_ref: str
    heading: str
    score: float
    similarity: float | None
    rank: int


class CitationOut(BaseModel):
    cfr_ref: str
    title: int
    part: str
    section: str
    paragraph: str | None = None
    heading: str | None = None


class QueryResult(BaseModel):
    id: str
    status: Literal["answered", "refused"]
    question: str
    plain_english: str | None = None
    legal: str | None = None
    quotes: list[Quote] = Field(default_factory=list)
    citations: list[CitationOut] = Field(default_factory=list)
    confidence: Confidence
    refusal: Refusal | None = None
    model: ModelLabel
    retrieved: list[RetrievedItem] = Field(default_factory=list)
    scope: Scope | None = None
    flags: list[str] = Field(default_factory=list)
    timings_ms: dict[str, float] = Field(default_factory=dict)
