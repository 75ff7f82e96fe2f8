"""The streams of the bus: names, consumer groups, and the typed payloads each carries.

Other systems may produce to any request stream: XADD <stream> MAXLEN ~ 10000 * json '<Envelope JSON>'
with ``kind`` and ``payload`` as listed here, and ``reply_to`` naming a stream they read (XREAD) for the
``Reply``. See README "Streams" and the AsyncAPI document served at /asyncapi.
"""
from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from shared import messages as m


@dataclass(frozen=True)
class Operation:
    kind: str
    request: type[BaseModel]
    response: type[BaseModel] | None  # None: fire-and-forget (progress goes to an event stream)


@dataclass(frozen=True)
class StreamSpec:
    name: str
    group: str
    description: str
    operations: tuple[Operation, ...]
    max_workers: int = 4  # entries one process handles concurrently

    @property
    def dlq(self) -> str:
        return f"{self.name}.dlq"

    def operation(self, kind: str) -> Operation | None:
        return next((op for op in self.operations if op.kind == kind), None)


INGEST = StreamSpec(
    "regs.ingest.requests",
    "ingest",
    "Ingest CFR XML (shipped corpus, a path, or an eCFR date) into a new staged corpus version and swap it in.",
    (Operation("ingest", m.IngestRequest, m.IngestEvent),),
    max_workers=1,
)
RETRIEVE = StreamSpec(
    "regs.retrieve.requests",
    "retriever",
    "Scope a question and return the ranked active sections (hybrid dense + full-text).",
    (Operation("retrieve", m.RetrieveRequest, m.RetrieveResult),),
    max_workers=8,
)
GENERATE = StreamSpec(
    "regs.generate.requests",
    "generator",
    "One generation call: step 'plain' (call 1) or 'legal' (call 2, given call 1's answer).",
    (Operation("generate", m.GenerateRequest, m.GenerateResult),),
    max_workers=8,
)
SCORE = StreamSpec(
    "regs.score.requests",
    "scorer",
    "The evidence gates and confidence: 'pre_gate' before generation, 'post_gate' after it.",
    (
        Operation("pre_gate", m.PreGateRequest, m.PreGateResult),
        Operation("post_gate", m.PostGateRequest, m.PostGateResult),
    ),
    max_workers=8,
)
QUERY = StreamSpec(
    "regs.query.requests",
    "gateway",
    "A whole question from another system: the gateway runs the full fan-out and replies with a QueryResult.",
    (Operation("query", m.QueryRequest, m.QueryResult),),
    max_workers=8,
)

ALL_STREAMS: tuple[StreamSpec, ...] = (INGEST, RETRIEVE, GENERATE, SCORE, QUERY)
WORKER_STREAMS: tuple[StreamSpec, ...] = (INGEST, RETRIEVE, GENERATE, SCORE)
INGEST_EVENTS = "regs.ingest.events"  # IngestEvent entries (progress and results), no consumer group
REPLY_PREFIX = "regs.replies."  # + requester id; each requester reads its own reply stream


def by_name(name: str) -> StreamSpec:
    for spec in ALL_STREAMS:
        if spec.name == name:
            return spec
    raise KeyError(name)
