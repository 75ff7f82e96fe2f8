"""What every generation provider shares: the prompt files, the context, the reply contract, the failures."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

from shared.messages import GenerateRequest, Hit, Quote

from ..text import MalformedReply, normalise_ref, parse_json_reply, quote_from_model, refs_in_text

PROMPT_DIR = Path(__file__).resolve().parent.parent / "prompts"
PROMPT_VERSIONS = {"plain": "plain.v2", "legal": "legal.v2"}
MAX_NOT_ANSWERED_CHARS = 400


class ProviderFailure(Exception):
    """The provider did not produce a usable answer. ``reason`` is machine-readable: "<code>" or "<code>: <detail>".

    Codes: no_api_key, auth_failed, rate_limited, overloaded, server_error, timeout, unreachable,
    bad_request, api_error, malformed_reply, model_refused.
    """

    def __init__(self, code: str, detail: str | None = None):
        self.code = code
        self.detail = detail
        super().__init__(self.reason)

    @property
    def reason(self) -> str:
        return f"{self.code}: {self.detail}" if self.detail else self.code


@dataclass
class ProviderOutput:
    text: str
    model: str  # the model that produced the text, as the provider reported it
    quotes: list[Quote] = field(default_factory=list)
    cited: list[tuple[str, str | None]] = field(default_factory=list)  # (cfr_ref, paragraph) the answer names
    tokens_in: int = 0
    tokens_out: int = 0
    not_answered: str | None = None  # the model found the sections do not answer the question (text is empty)


class Provider(Protocol):
    name: str

    @property
    def model(self) -> str: ...

    def warm(self) -> None: ...

    async def generate(self, request: GenerateRequest) -> ProviderOutput: ...


# --------------------------------------------------------------------------------------------
# prompts
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Prompt:
    version: str
    system: str
    user: str

    def render_user(self, *, question: str, context: str, plain_answer: str | None) -> str:
        return (
            self.user.replace("{{question}}", question.strip())
            .replace("{{context}}", context)
            .replace("{{plain_answer}}", (plain_answer or "(none)").strip())
        )


@lru_cache(maxsize=None)
def load_prompt(step: str) -> Prompt:
    version = PROMPT_VERSIONS[step]
    raw = (PROMPT_DIR / f"{version}.txt").read_text(encoding="utf-8")
    parts: dict[str, list[str]] = {}
    current = None
    for line in raw.splitlines():
        if line.strip() in ("### system", "### user"):
            current = line.strip()[4:]
            parts[current] = []
        elif current is not None:
            parts[current].append(line)
    if set(parts) != {"system", "user"}:
        raise RuntimeError(f"prompt {version} needs a '### system' and a '### user' part")
    return Prompt(version, "\n".join(parts["system"]).strip(), "\n".join(parts["user"]).strip())


def section_label(hit: Hit) -> str:
    return f"[{hit.cfr_ref}] {hit.heading}".strip()


def render_context(sections: list[Hit]) -> str:
    """The sections as text, each labelled with its cfr_ref and heading."""
    blocks = [f"--- {section_label(h)} ---\n{h.text.strip()}" for h in sections]
    return "CFR sections provided:\n\n" + "\n\n".join(blocks)


# --------------------------------------------------------------------------------------------
# the reply contract
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Reply:
    answer: str
    quotes: list[Quote]
    cited: list[tuple[str, str | None]]
    # the model's one sentence on why the sections do not answer the question (its answer is then withheld)
    not_answered: str | None = None


def interpret_reply(request: GenerateRequest, raw: str) -> Reply:
    """The answer text, quotes and cited refs of a model's JSON reply, or its ``not_answered`` sentence when it
    found that the sections do not answer the question; raises ProviderFailure(malformed_reply)."""
    try:
        obj: dict[str, Any] = parse_json_reply(raw)
        declined = obj.get("not_answered")
        if declined is not None and not isinstance(declined, str):
            raise MalformedReply("not_answered not a string")
        if declined and declined.strip():
            # an answer given beside it is the model contradicting itself: the decline is the safer reading
            declined = " ".join(declined.split())
            if len(declined) > MAX_NOT_ANSWERED_CHARS:  # it is shown in the refusal: one sentence, not an essay
                declined = declined[: MAX_NOT_ANSWERED_CHARS - 1].rsplit(" ", 1)[0] + "…"
            return Reply("", [], [], declined)
        answer = obj.get("answer")
        if not isinstance(answer, str) or not answer.strip():
            raise MalformedReply("empty answer")
        quotes: list[Quote] = []
        cited: list[tuple[str, str | None]] = []
        if request.step == "legal":
            items = obj.get("quotes", [])
            if items is None:
                items = []
            if not isinstance(items, list):
                raise MalformedReply("quotes not a list")
            quotes = [quote_from_model(request.sections, item) for item in items]
        raw_cited = obj.get("cited", [])
        if raw_cited is None:
            raw_cited = []
        if not isinstance(raw_cited, list):
            raise MalformedReply("cited not a list")
        for ref in raw_cited:
            norm = normalise_ref(ref) if isinstance(ref, str) else None
            if norm:
                cited.append(norm)
    except MalformedReply as exc:
        raise ProviderFailure("malformed_reply", str(exc)) from exc
    return Reply(answer.strip(), quotes, cited + refs_in_text(answer))
