"""Generator: the extractive answerer on real CFR text, and the Anthropic / OpenAI-compatible providers
against real HTTP fakes (the real SDKs talk to them): labels, tokens, retries and every fallback reason."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from pydantic import SecretStr

from services.generator.providers.extractive import MODEL as EXTRACTIVE_MODEL
from services.generator.providers.extractive import ExtractiveProvider
from services.generator.service import Generator
from services.generator.text import (
    build_citations,
    is_paragraph_heading,
    paragraph_at,
    parse_json_reply,
    refs_in_text,
    split_units,
    strip_designation,
    MalformedReply,
)
from shared.config import Settings
from shared.messages import GenerateRequest, Hit, ParagraphSpan

try:  # importable as tests.fakes (repo root on sys.path) or as fakes (tests/ on sys.path, pytest's default)
    from tests.fakes import FABRICATED_QUOTE, NOT_ANSWERED, OTHER_SECTION
    from tests.fakes.anthropic_server import FakeAnthropic
    from tests.fakes.openai_server import FakeOpenAI
except ImportError:  # pragma: no cover
    from fakes import FABRICATED_QUOTE, NOT_ANSWERED, OTHER_SECTION  # type: ignore[no-redef]
    from fakes.anthropic_server import FakeAnthropic  # type: ignore[no-redef]
    from fakes.openai_server import FakeOpenAI  # type: ignore[no-redef]

DATA = Path(__file__).parent / "data" / "generator_sections.json"
GOUDA_Q = "What is the minimum milkfat content of gouda cheese?"
CHEDDAR_Q = "What is the maximum moisture content of cheddar cheese?"
RETRIES = 1
TIMEOUT = 0.5


# --------------------------------------------------------------------------------------------
# fixtures
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def hits() -> list[Hit]:
    """21 CFR 133.142 Gouda, 133.138 Edam, 133.150 Hard cheeses, 133.113 Cheddar (CFR 2024, title 21 vol 2)."""
    return [Hit(**h) for h in json.loads(DATA.read_text(encoding="utf-8"))["sections"]]


@pytest.fixture(scope="module")
def extractive() -> ExtractiveProvider:
    provider = ExtractiveProvider(Settings(_env_file=None))
    provider.warm()  # MiniLM loads once per module
    return provider


@pytest.fixture(scope="module")
def fake_anthropic():
    with FakeAnthropic() as server:
        yield server


@pytest.fixture(scope="module")
def fake_openai():
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def anthropic(fake_anthropic):
    fake_anthropic.reset("ok")
    return fake_anthropic


@pytest.fixture
def openai_fake(fake_openai):
    fake_openai.reset("ok")
    return fake_openai


def settings(**kw) -> Settings:
    base = dict(generation_retries=RETRIES, generation_timeout_s=TIMEOUT, anthropic_api_key=None, openai_api_key=None,
                anthropic_base_url=None, openai_base_url=None)
    base.update(kw)
    return Settings(_env_file=None, **base)


def anthropic_settings(server, **kw) -> Settings:
    kw.setdefault("anthropic_api_key", SecretStr("sk-ant-test"))
    return settings(generation_provider="anthropic", generation_model="claude-haiku-4-5",
                    anthropic_base_url=server.url, **kw)


def openai_settings(server, **kw) -> Settings:
    return settings(generation_provider="openai", generation_model="llama3.1:8b",
                    openai_base_url=f"{server.url}/v1", **kw)


def plain(question: str, sections: list[Hit]) -> GenerateRequest:
    return GenerateRequest(step="plain", question=question, sections=sections)


def legal(question: str, sections: list[Hit], plain_answer: str) -> GenerateRequest:
    return GenerateRequest(step="legal", question=question, sections=sections, plain_answer=plain_answer)


def by_ref(hits: list[Hit]) -> dict[str, Hit]:
    return {h.cfr_ref: h for h in hits}


def assert_extractive_label(result, requested_provider: str, requested_model: str, reason_prefix: str | None):
    assert result.refused is False
    assert result.call.provider == "extractive"
    assert result.call.model == EXTRACTIVE_MODEL == "regs-extractive-1.0"
    assert result.call.requested_provider == requested_provider
    assert result.call.requested_model == requested_model
    if reason_prefix is None:
        assert result.call.fallback_reason is None
    else:
        assert result.call.fallback_reason is not None and result.call.fallback_reason.startswith(reason_prefix), (
            result.call.fallback_reason
        )
    assert result.text


# --------------------------------------------------------------------------------------------
# text helpers
# --------------------------------------------------------------------------------------------
def test_units_are_exact_substrings_with_designations(hits):
    cheddar = by_ref(hits)["21 CFR 133.113"]
    units = split_units(cheddar)
    assert all(cheddar.text[u.start : u.end] == u.text for u in units)
    moisture = next(u for u in units if "maximum moisture content is 39 percent" in u.text)
    assert paragraph_at(cheddar, moisture.start) == "(a)(1)"
    peroxide = next(u for u in units if u.text.startswith("The weight of the hydrogen peroxide"))
    assert paragraph_at(cheddar, peroxide.start) == "(b)(3)(v)"
    # "90 °F. and so handled" is not a sentence end; "§ 133.5." is
    edam = by_ref(hits)["21 CFR 133.138"]
    assert any("heated to about 90 °F. and so handled" in u.text for u in split_units(edam))


def test_parse_json_reply_is_robust():
    assert parse_json_reply('Sure, here it is:\n```json\n{"answer": "x", "cited": []}\n```\nHope it helps.')["answer"] == "x"
    assert parse_json_reply('Answer follows {"answer": "y {braces} ok", "quotes": []} trailing')["answer"] == "y {braces} ok"
    with pytest.raises(MalformedReply):
        parse_json_reply("Gouda needs 46 percent milkfat.")
    with pytest.raises(MalformedReply):
        parse_json_reply('{"text": "no answer key"}')


def test_a_not_answered_reply_is_read_as_the_model_declining(hits):
    """plain.v2 / legal.v2: {"answer": "", "not_answered": "..."} is a decline, not a malformed reply; an answer
    given beside a decline is withheld (the safer reading); a non-string decline is malformed."""
    from services.generator.providers.base import ProviderFailure, interpret_reply

    req = GenerateRequest(step="plain", question=GOUDA_Q, sections=hits)
    reply = interpret_reply(req, json.dumps({"answer": "", "cited": [], "not_answered": "  They do not say.  "}))
    assert (reply.answer, reply.quotes, reply.cited, reply.not_answered) == ("", [], [], "They do not say.")
    both = interpret_reply(req, json.dumps({"answer": "Gouda has 46 percent [21 CFR 133.142].",
                                             "cited": ["21 CFR 133.142"], "not_answered": "They do not say."}))
    assert both.answer == "" and both.cited == [] and both.not_answered == "They do not say."
    answered = interpret_reply(req, json.dumps({"answer": "Gouda [21 CFR 133.142].", "cited": [], "not_answered": ""}))
    assert answered.not_answered is None and answered.answer == "Gouda [21 CFR 133.142]."
    long = interpret_reply(req, json.dumps({"answer": "", "not_answered": "They do not  say. " * 100}))
    assert len(long.not_answered) <= 400 and long.not_answered.endswith("…") and "  " not in long.not_answered
    for bad in ({"answer": "", "cited": []}, {"answer": "", "not_answered": ["no"]}):
        with pytest.raises(ProviderFailure, match="malformed_reply"):
            interpret_reply(req, json.dumps(bad))


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_model_declining_is_passed_on_with_its_sentence_and_label(hits, extractive, openai_fake, anthropic,
                                                                          provider):
    fake, make = (openai_fake, openai_settings) if provider == "openai" else (anthropic, anthropic_settings)
    fake.reset("not_answered")
    gen = Generator(make(fake), extractive=extractive)
    for step in ("plain", "legal"):
        r = await gen.generate(plain(GOUDA_Q, hits) if step == "plain" else legal(GOUDA_Q, hits, "(none)"))
        assert r.not_answered == NOT_ANSWERED and r.text == "" and not r.quotes and not r.citations
        assert r.call.provider == provider and r.call.fallback_reason is None  # a decline is not a failure
        assert r.call.model == fake.replies[-1]["model"]


def test_citations_are_restricted_to_request_sections(hits):
    refs = refs_in_text("See 21 CFR 133.113(a)(1), 21 C.F.R. § 133.150(c)(2), 21 CFR 101.9(c) and 21 CFR 133.142.")
    assert refs == [("21 CFR 133.113", "(a)(1)"), ("21 CFR 133.150", "(c)(2)"), ("21 CFR 101.9", "(c)"),
                    ("21 CFR 133.142", None)]
    cits = build_citations(hits, refs + [("21 CFR 133.113", None), ("21 CFR 133.113", "(z)(9)")])
    pairs = [(c.cfr_ref, c.paragraph) for c in cits]
    assert ("21 CFR 101.9", "(c)") not in pairs and all(ref != "21 CFR 101.9" for ref, _ in pairs)
    # a pinpoint the section does not have is not kept; a section cited with a pinpoint keeps only that
    assert pairs == [("21 CFR 133.113", "(a)(1)"), ("21 CFR 133.150", "(c)(2)"), ("21 CFR 133.142", None)]
    cheddar = next(c for c in cits if c.cfr_ref == "21 CFR 133.113")
    assert (cheddar.title, cheddar.part, cheddar.section, cheddar.heading) == (21, "133", "133.113", "Cheddar cheese")


# --------------------------------------------------------------------------------------------
# extractive
# --------------------------------------------------------------------------------------------
async def test_empty_sections_raise(extractive):
    gen = Generator(settings(generation_provider="extractive"), extractive=extractive)
    with pytest.raises(ValueError, match="no sections"):
        await gen.generate(plain(GOUDA_Q, []))


async def test_extractive_answers_gouda_verbatim_and_deterministically(hits, extractive):
    gen = Generator(settings(generation_provider="extractive"), extractive=extractive)
    gouda = by_ref(hits)["21 CFR 133.142"]
    runs = []
    for _ in range(3):
        p = await gen.generate(plain(GOUDA_Q, hits))
        lg = await gen.generate(legal(GOUDA_Q, hits, p.text))
        runs.append((p.model_dump(exclude={"call": {"ms"}}), lg.model_dump(exclude={"call": {"ms"}})))
    assert all(r == runs[0] for r in runs), "extractive output must be deterministic"

    assert_extractive_label(p, "extractive", EXTRACTIVE_MODEL, None)
    assert p.text.startswith("According to 21 CFR 133.142 (Gouda cheese)")
    assert "the minimum milkfat content is 46 percent by weight of the solids" in p.text
    assert "[21 CFR 133.142]" in p.text
    # every extracted sentence is verbatim section text (the frame and the bracketed citations aside)
    body = p.text.split(":", 1)[1]
    for piece in [s.strip() for s in body.replace("]", "]\n").split("\n") if s.strip()]:
        sentence = piece.rsplit(" [", 1)[0]
        assert any(sentence in h.text for h in hits), sentence
    assert ("21 CFR 133.142", None) in [(c.cfr_ref, c.paragraph) for c in p.citations]
    assert p.call.tokens_in > 1000 and 0 < p.call.tokens_out < 200  # word counts

    assert_extractive_label(lg, "extractive", EXTRACTIVE_MODEL, None)
    assert lg.quotes, "legal answer must carry quotes"
    first = lg.quotes[0]
    assert first.cfr_ref == "21 CFR 133.142" and first.paragraph is None  # 133.142 has no designated paragraphs
    assert "46 percent" in first.text
    for q in lg.quotes:
        hit = by_ref(hits)[q.cfr_ref]
        at = hit.text.find(q.text)
        assert at >= 0, f"quote not verbatim: {q.text!r}"
        assert q.paragraph == paragraph_at(hit, at)
        assert f'"{q.text}"' in lg.text
    assert lg.text.startswith('21 CFR 133.142 provides: "Gouda cheese conforms')
    assert gouda.text.find(first.text) >= 0


async def test_extractive_pinpoints_cheddar_paragraph(hits, extractive):
    gen = Generator(settings(generation_provider="extractive"), extractive=extractive)
    p = await gen.generate(plain(CHEDDAR_Q, hits))
    assert p.text.startswith("According to 21 CFR 133.113 (Cheddar cheese)")
    assert "the maximum moisture content is 39 percent by weight" in p.text
    assert "[21 CFR 133.113(a)(1)]" in p.text
    assert "Gouda" not in p.text  # another cheese's standard is not an answer about cheddar
    lg = await gen.generate(legal(CHEDDAR_Q, hits, p.text))
    q = lg.quotes[0]
    assert (q.cfr_ref, q.paragraph) == ("21 CFR 133.113", "(a)(1)")
    assert q.text in by_ref(hits)["21 CFR 133.113"].text
    assert lg.text.startswith('21 CFR 133.113(a)(1) provides: "The minimum milkfat content is 50 percent')
    assert ("21 CFR 133.113", "(a)(1)") in [(c.cfr_ref, c.paragraph) for c in lg.citations]


async def test_extractive_list_item_keeps_its_lead_in(hits, extractive):
    gen = Generator(settings(generation_provider="extractive"), extractive=extractive)
    lg = await gen.generate(legal("How may enzymes be declared on the label of edam cheese?", hits, ""))
    pairs = [(q.cfr_ref, q.paragraph) for q in lg.quotes]
    assert ("21 CFR 133.138", "(d)(1)") in pairs
    assert ("21 CFR 133.138", "(d)") in pairs  # "... shall be declared ..., except that:"
    assert pairs.index(("21 CFR 133.138", "(d)")) < pairs.index(("21 CFR 133.138", "(d)(1)"))


CSFP_PURPOSE = (  # 7 CFR 247.2 (a)-(b), eCFR: plain-language rules head their paragraphs with questions
    "(a) How does CSFP help participants? Through CSFP, the Department provides nutritious USDA Foods to help State "
    "and local agencies meet the nutritional needs of low-income participants. Participants are offered the "
    "opportunity to receive nutrition education.\n(b) How many persons may be served in CSFP? State agencies may "
    "serve eligible persons up to the caseload limit assigned to them by FNS.")


async def test_extractive_never_answers_with_a_paragraph_heading_put_as_a_question(extractive):
    b = CSFP_PURPOSE.index("(b)")
    hit = Hit(cfr_ref="7 CFR 247.2", title=7, part="247", section="247.2", heading="The purpose and scope of CSFP",
              text=CSFP_PURPOSE, score=0.1, similarity=0.62, rank=1,
              paragraphs=[ParagraphSpan(designation="(a)", start=0, end=b - 1),
                          ParagraphSpan(designation="(b)", start=b, end=len(CSFP_PURPOSE))])
    gen = Generator(settings(generation_provider="extractive"), extractive=extractive)
    p = await gen.generate(plain("How many persons may be served in CSFP?", [hit]))
    assert "?" not in p.text  # the heading repeats the question; it answers nothing
    assert "State agencies may serve eligible persons up to the caseload limit assigned to them by FNS. " \
           "[7 CFR 247.2(b)]" in p.text


DETENTION_PERIOD = (  # 21 CFR 1.379 (How long may FDA detain an article of food?), CFR 2024
    "(a) FDA may detain an article of food for a reasonable period that may not exceed 20 calendar days after the "
    "detention order is issued. However, an article may be detained for 10 additional calendar days if a greater "
    "period of time is required to institute a seizure or injunction action. The authorized FDA representative may "
    "approve the additional 10-calendar day detention period at the time the detention order is issued, or at any "
    "time within the 20-calendar day period by amending the detention order.\n(b) The entire detention period may "
    "not exceed 30 calendar days.\n(c) An authorized FDA representative may, in accordance with § 1.384, terminate "
    "a detention order before the expiration of the detention period.")


def detention_hit() -> Hit:
    b, c = DETENTION_PERIOD.index("(b)"), DETENTION_PERIOD.index("(c)")
    return Hit(cfr_ref="21 CFR 1.379", title=21, part="1", section="1.379",
               heading="How long may FDA detain an article of food?", text=DETENTION_PERIOD, score=0.1,
               similarity=0.66, rank=1,
               paragraphs=[ParagraphSpan(designation="(a)", start=0, end=b - 1),
                           ParagraphSpan(designation="(b)", start=b, end=c - 1),
                           ParagraphSpan(designation="(c)", start=c, end=len(DETENTION_PERIOD))])


async def test_extractive_answers_how_long_with_the_sentences_that_state_the_periods(extractive):
    hit = detention_hit()
    gen = Generator(settings(generation_provider="extractive"), extractive=extractive)
    p = await gen.generate(plain("How long can FDA hold our imported food shipment once it's put under an "
                                 "administrative detention order?", [hit]))
    assert "may not exceed 20 calendar days after the detention order is issued. [21 CFR 1.379(a)]" in p.text
    assert "The entire detention period may not exceed 30 calendar days. [21 CFR 1.379(b)]" in p.text


async def test_extractive_answers_from_the_paragraph_the_question_cites(extractive):
    hit = detention_hit()
    gen = Generator(settings(generation_provider="extractive"), extractive=extractive)
    for question in ("What does 21 CFR 1.379(c) say?", "what does § 1.379(c) say about ending a detention early"):
        p = await gen.generate(plain(question, [hit]))
        first = p.text.split(": ", 1)[1]
        assert first.startswith("An authorized FDA representative may, in accordance with § 1.384, terminate"), question


def test_a_paragraphs_own_heading_is_no_answer_sentence_but_a_short_list_item_is():
    text = ("(4) Effect on previously accrued late enrollment penalties. Individuals who enrolled during the PHE are "
            "eligible to have late enrollment penalties reimbursed.\n(5) Cover sheet (Form FDA-1571). A cover sheet "
            "for the application.\n(ii) Benzoyl peroxide, 2.5 to 10 percent.\n(iii) Sulfur and resorcinol.")
    starts = [text.index(d) for d in ("(4)", "(5)", "(ii)", "(iii)")] + [len(text) + 1]
    hit = Hit(cfr_ref="42 CFR 407.23", title=42, part="407", section="407.23", heading="Special enrollment periods",
              text=text, score=0.1, similarity=0.6, rank=1,
              paragraphs=[ParagraphSpan(designation=d, start=a, end=b - 1)
                          for d, a, b in zip(("(4)", "(5)", "(ii)", "(iii)"), starts, starts[1:])])
    headings = {strip_designation(u.text) for u in split_units(hit, 0)
                if is_paragraph_heading(hit, u, strip_designation(u.text))}
    # the heading of (4) is dropped; (5)'s names a number; (ii) and (iii) are whole list items
    assert headings == {"Effect on previously accrued late enrollment penalties."}


# --------------------------------------------------------------------------------------------
# anthropic
# --------------------------------------------------------------------------------------------
async def test_anthropic_ok_labels_the_returned_model(hits, extractive, anthropic):
    gen = Generator(anthropic_settings(anthropic), extractive=extractive)
    p = await gen.generate(plain(GOUDA_Q, hits))
    assert p.call.provider == "anthropic" and p.call.fallback_reason is None
    assert p.call.model == "claude-haiku-4-5-20251001" == anthropic.replies[-1]["model"]
    assert p.call.requested_model == "claude-haiku-4-5" != p.call.model
    usage = anthropic.replies[-1]["usage"]
    assert (p.call.tokens_in, p.call.tokens_out) == (usage["input_tokens"], usage["output_tokens"])
    assert p.call.ms > 0
    assert ("21 CFR 133.142", None) in [(c.cfr_ref, c.paragraph) for c in p.citations]

    sent = anthropic.requests[-1]
    headers = sent["headers"]  # this SDK sends the key as a bearer token; older ones as x-api-key
    assert "sk-ant-test" in (headers.get("x-api-key", ""), headers.get("authorization", "").removeprefix("Bearer "))
    body = sent["json"]
    assert body["model"] == "claude-haiku-4-5" and body["max_tokens"] == 1024
    docs = [b for b in body["messages"][0]["content"] if b["type"] == "document"]
    assert [d["title"].split(" — ")[0] for d in docs] == [h.cfr_ref for h in hits]
    assert all(d["citations"] == {"enabled": True} and d["source"]["data"] == h.text for d, h in zip(docs, hits))
    prompt = FakeAnthropic.prompt_text(sent)
    assert "ONLY" in prompt and all(h.cfr_ref in prompt and h.heading in prompt for h in hits)

    lg = await gen.generate(legal(GOUDA_Q, hits, p.text))
    assert lg.call.provider == "anthropic" and lg.call.model == "claude-haiku-4-5-20251001"
    legal_prompt = FakeAnthropic.prompt_text(anthropic.requests[-1])
    assert p.text in legal_prompt, "call 2 must be conditioned on call 1's answer"
    assert "verbatim" in legal_prompt
    # quotes come from the API's citations: cited_text is verbatim document text
    assert lg.quotes and all(q.text in by_ref(hits)[q.cfr_ref].text for q in lg.quotes)
    assert lg.quotes[0].cfr_ref == "21 CFR 133.142"
    assert len(anthropic.requests) == 2


async def test_anthropic_citation_of_unprovided_section_is_dropped(hits, extractive, anthropic):
    anthropic.reset("cites_other")
    gen = Generator(anthropic_settings(anthropic), extractive=extractive)
    p = await gen.generate(plain(GOUDA_Q, hits))
    assert OTHER_SECTION in p.text  # the text is the model's ...
    assert all(c.cfr_ref in by_ref(hits) for c in p.citations)  # ... the citations are only provided sections
    assert [c.cfr_ref for c in p.citations] == ["21 CFR 133.142"]


async def test_anthropic_fabricated_quote_is_passed_on_for_the_scorer(hits, extractive, anthropic):
    anthropic.reset("quote_not_in_context")
    gen = Generator(anthropic_settings(anthropic), extractive=extractive)
    lg = await gen.generate(legal(GOUDA_Q, hits, "x"))
    assert lg.call.provider == "anthropic" and lg.call.model == "claude-haiku-4-5-20251001"
    assert [q.text for q in lg.quotes] == [FABRICATED_QUOTE]
    assert lg.quotes[0].verified is None  # the scorer verifies
    assert not any(FABRICATED_QUOTE in h.text for h in hits)


@pytest.mark.parametrize(
    "behaviour, reason, attempts",
    [
        ("401", "auth_failed: 401", 1),  # not retried
        ("429", "rate_limited: 429", RETRIES + 1),
        ("529", "overloaded: 529", RETRIES + 1),
        ("500", "server_error: 500", RETRIES + 1),
        ("503", "server_error: 503", RETRIES + 1),
    ],
)
async def test_anthropic_http_errors_fall_back_to_extractive(hits, extractive, anthropic, behaviour, reason, attempts):
    anthropic.reset(behaviour)
    gen = Generator(anthropic_settings(anthropic), extractive=extractive)
    r = await gen.generate(plain(GOUDA_Q, hits))
    assert_extractive_label(r, "anthropic", "claude-haiku-4-5", reason)
    assert r.call.fallback_reason == reason
    assert len(anthropic.requests) == attempts
    if attempts > 1:
        assert anthropic.requests[-1]["headers"].get("x-stainless-retry-count") == str(RETRIES)
    assert r.text.startswith("According to 21 CFR 133.142 (Gouda cheese)")


async def test_anthropic_timeout_falls_back(hits, extractive, anthropic):
    anthropic.reset("slow")
    anthropic.slow_s = 3.0
    gen = Generator(anthropic_settings(anthropic), extractive=extractive)
    r = await gen.generate(plain(GOUDA_Q, hits))
    assert_extractive_label(r, "anthropic", "claude-haiku-4-5", "timeout")
    assert len(anthropic.requests) == RETRIES + 1  # the SDK retries a timeout too
    assert r.call.ms < 1000 * (RETRIES + 1) * (TIMEOUT + 1.5)


@pytest.mark.parametrize(
    "behaviour, detail",
    [("garbage", "body is not"), ("not_json_text", "no JSON object"), ("wrong_shape", "quotes not a list")],
)
async def test_anthropic_malformed_reply_falls_back(hits, extractive, anthropic, behaviour, detail):
    anthropic.reset(behaviour)
    gen = Generator(anthropic_settings(anthropic), extractive=extractive)
    r = await gen.generate(legal(GOUDA_Q, hits, "plain"))
    assert_extractive_label(r, "anthropic", "claude-haiku-4-5", "malformed_reply")
    assert detail in r.call.fallback_reason
    assert r.quotes and all(q.text in by_ref(hits)[q.cfr_ref].text for q in r.quotes)


async def test_no_api_key_sends_nothing(hits, extractive, anthropic):
    gen = Generator(anthropic_settings(anthropic, anthropic_api_key=None), extractive=extractive)
    r = await gen.generate(plain(GOUDA_Q, hits))
    assert_extractive_label(r, "anthropic", "claude-haiku-4-5", "no_api_key")
    assert r.call.fallback_reason == "no_api_key"
    assert anthropic.requests == []


async def test_a_missing_key_is_warned_about_once_not_per_call(hits, extractive, anthropic, caplog):
    gen = Generator(anthropic_settings(anthropic, anthropic_api_key=None), extractive=extractive)
    with caplog.at_level(logging.DEBUG, logger="services.generator.service"):
        for _ in range(3):
            r = await gen.generate(plain(GOUDA_Q, hits))
            assert r.call.fallback_reason == "no_api_key"
    warnings = [rec for rec in caplog.records if rec.levelno == logging.WARNING]
    assert len(warnings) == 1 and "no_api_key" in warnings[0].getMessage()
    assert sum("fallback: no_api_key" in rec.getMessage() for rec in caplog.records if rec.levelno == logging.INFO) == 3


async def test_fallback_refuse_names_no_model(hits, extractive, anthropic):
    anthropic.reset("529")
    gen = Generator(anthropic_settings(anthropic, generation_fallback="refuse"), extractive=extractive)
    r = await gen.generate(plain(GOUDA_Q, hits))
    assert r.refused is True and r.text == "" and r.quotes == [] and r.citations == []
    assert (r.call.provider, r.call.model) == ("none", "none")
    assert (r.call.requested_provider, r.call.requested_model) == ("anthropic", "claude-haiku-4-5")
    assert r.call.fallback_reason == "overloaded: 529"
    r2 = await Generator(anthropic_settings(anthropic, anthropic_api_key=None, generation_fallback="refuse"),
                         extractive=extractive).generate(plain(GOUDA_Q, hits))
    assert r2.refused and r2.call.model == "none" and r2.call.fallback_reason == "no_api_key"


async def test_each_call_is_labelled_on_its_own(hits, extractive, anthropic):
    gen = Generator(anthropic_settings(anthropic), extractive=extractive)
    anthropic.reset("529")
    p = await gen.generate(plain(GOUDA_Q, hits))
    assert_extractive_label(p, "anthropic", "claude-haiku-4-5", "overloaded")
    anthropic.reset("ok")
    lg = await gen.generate(legal(GOUDA_Q, hits, p.text))  # step 2 tries the configured provider again
    assert lg.call.provider == "anthropic" and lg.call.model == "claude-haiku-4-5-20251001"
    assert lg.call.fallback_reason is None
    assert p.text in FakeAnthropic.prompt_text(anthropic.requests[-1])


# --------------------------------------------------------------------------------------------
# openai-compatible
# --------------------------------------------------------------------------------------------
async def test_openai_compatible_ok(hits, extractive, openai_fake):
    gen = Generator(openai_settings(openai_fake), extractive=extractive)
    p = await gen.generate(plain(GOUDA_Q, hits))
    assert p.call.provider == "openai" and p.call.fallback_reason is None
    assert p.call.model == "llama3.1:8b-instruct-q4_K_M" == openai_fake.replies[-1]["model"]
    assert p.call.requested_model == "llama3.1:8b"
    usage = openai_fake.replies[-1]["usage"]
    assert (p.call.tokens_in, p.call.tokens_out) == (usage["prompt_tokens"], usage["completion_tokens"])
    prompt = FakeOpenAI.prompt_text(openai_fake.requests[-1])
    assert all(f"[{h.cfr_ref}] {h.heading}" in prompt for h in hits)
    lg = await gen.generate(legal(GOUDA_Q, hits, p.text))
    assert p.text in FakeOpenAI.prompt_text(openai_fake.requests[-1])
    assert lg.quotes and lg.quotes[0].cfr_ref == "21 CFR 133.142"
    assert lg.quotes[0].text in by_ref(hits)["21 CFR 133.142"].text
    assert openai_fake.requests[-1]["json"]["max_tokens"] == 1024


@pytest.mark.parametrize("behaviour, reason", [("500", "server_error: 500"), ("401", "auth_failed: 401"),
                                               ("not_json_text", "malformed_reply"), ("slow", "timeout")])
async def test_openai_compatible_failures_fall_back(hits, extractive, openai_fake, behaviour, reason):
    openai_fake.reset(behaviour)
    gen = Generator(openai_settings(openai_fake), extractive=extractive)
    r = await gen.generate(plain(GOUDA_Q, hits))
    assert_extractive_label(r, "openai", "llama3.1:8b", reason)


async def test_openai_without_key_or_base_url_sends_nothing(hits, extractive, openai_fake):
    gen = Generator(settings(generation_provider="openai", generation_model="gpt-4o-mini"), extractive=extractive)
    r = await gen.generate(plain(GOUDA_Q, hits))
    assert_extractive_label(r, "openai", "gpt-4o-mini", "no_api_key")
    assert openai_fake.requests == []


def test_cached_vectors_survive_eviction_by_other_requests():
    """A call's cached vectors evicted by newer entries before it stacks them (what concurrent requests do to a full
    cache) must not break the call: the extractive generator failed so ("all input arrays must have the same
    shape") and dead-lettered requests."""
    import numpy as np

    from shared.embeddings import EmbeddingCache

    class CountingEmbedder:
        def __init__(self):
            self.calls: list[list[str]] = []

        def embed_queries(self, texts):
            self.calls.append(list(texts))
            return [np.full(4, float(len(t)), dtype=np.float32) for t in texts]

    embedder = CountingEmbedder()
    cache = EmbeddingCache(embedder, max_items=3)
    cache.embed(["a", "bb"])
    vectors = cache.embed(["a", "bb", "ccc", "dddd", "a"])  # its own insertions evict "a" and "bb"
    assert vectors.shape == (5, 4)
    assert vectors[:, 0].tolist() == [1.0, 2.0, 3.0, 4.0, 1.0]
    assert embedder.calls == [["a", "bb"], ["ccc", "dddd"]]  # "a" and "bb" came from the cache, once each
    assert len(cache) == 3
    assert cache.embed([]).shape == (0, 0)
