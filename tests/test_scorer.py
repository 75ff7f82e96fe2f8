"""The scorer's gates and confidence, on real CFR text (tests/data/scorer_sections.json, from the 2024 eCFR
XML of 21 CFR) with real MiniLM similarities per question (tests/data/scorer_cases.json)."""
from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest

from shared.config import Settings
from shared.messages import (
    CallInfo,
    Citation,
    CitationRef,
    GenerateResult,
    Hit,
    PostGateRequest,
    PreGateRequest,
    ProgramRef,
    Quote,
    RetrieveResult,
    Scope,
)
from services.scorer.confidence import ScorerThresholds, citation_coverage, compute_confidence, retrieval_score
from shared.figures import extract_figures, find_cfr_refs, normalise_text
from services.scorer.gates import judgement_asked, pre_gate, verify_quote
from services.scorer.service import Scorer
from services.scorer.support import CorpusStats, split_sentences

DATA = Path(__file__).parent / "data"
SECTIONS = json.loads((DATA / "scorer_sections.json").read_text())["sections"]
CASES = json.loads((DATA / "scorer_cases.json").read_text())
GOUDA = SECTIONS["21 CFR 133.142"]["text"]


# --------------------------------------------------------------------------------------------
# builders
# --------------------------------------------------------------------------------------------
def make_hit(ref: str, similarity: float | None = 0.6, rank: int = 1, **kw) -> Hit:
    s = dict(SECTIONS[ref])
    s.pop("_constructed", None)
    s.pop("source", None)
    cfr_ref = ref.split("@")[0]
    fields = dict(
        cfr_ref=cfr_ref, title=s["title"], part=s["part"], section=s["section"], heading=s["heading"],
        score=1.0 / (60 + rank), similarity=similarity, rank=rank, text=s["text"], paragraphs=s["paragraphs"],
        kind=s["kind"], reserved=s["reserved"], removed=s["removed"], status=s["status"],
        version_id=s["version_id"], source_date=s["source_date"], source_note=s["source_note"],
        editorial_notes=s["editorial_notes"], matched_by=["dense", "fulltext"],
    )
    fields.update(kw)
    return Hit(**fields)


def retrieval_of(*hits: Hit, scope: Scope | None = None) -> RetrieveResult:
    """A retrieval of the given hits (gouda's standard, similarity 0.71, when none is given)."""
    return RetrieveResult(scope=scope or Scope(), hits=list(hits) or [make_hit("21 CFR 133.142", 0.71, 1)],
                          mode="hybrid", top_k=10, embedding_model="m")


def case_retrieval(name: str) -> tuple[str, RetrieveResult]:
    case = CASES[name]
    rows = sorted(case["hits"], key=lambda r: -r["similarity"])
    hits = [make_hit(r["ref"], r["similarity"], i + 1, dense_rank=r["dense_rank"], fulltext_rank=r["fulltext_rank"])
            for i, r in enumerate(rows)]
    sup = [make_hit(r["ref"], r["similarity"], i + 1) for i, r in enumerate(case.get("superseded", []))]
    scope = Scope(**case["scope"])
    return case["question"], RetrieveResult(scope=scope, hits=hits, superseded=sup, mode="hybrid", top_k=10,
                                            embedding_model="all-MiniLM-L6-v2")


def gen(step: str, text: str, quotes=(), citations=(), refused: bool = False) -> GenerateResult:
    return GenerateResult(
        step=step, text=text, quotes=list(quotes), citations=list(citations), refused=refused,
        call=CallInfo(step=step, provider="extractive", model="regs-extractive-1.0", requested_provider="anthropic",
                      requested_model="claude-haiku-4-5"),
    )


def cite(ref: str) -> Citation:
    title, _, section = ref.split(" ")
    return Citation(cfr_ref=ref, title=int(title), part=section.split(".")[0], section=section)


@pytest.fixture(scope="module")
def scorer() -> Scorer:
    from shared.embeddings import get_embedder

    settings = Settings()
    return Scorer(settings, embedder=get_embedder(settings))  # MiniLM loaded once for the module


def gouda_post(plain: str, legal: str, quotes=(), citations=("21 CFR 133.142",), plain_quotes=()) -> PostGateRequest:
    question, retrieval = case_retrieval("proceed_gouda")
    pre = pre_gate(question, retrieval)
    assert pre.proceed
    return PostGateRequest(
        question=question, retrieval=retrieval, sections=pre.sections,
        plain=gen("plain", plain, plain_quotes, [cite(c) for c in citations]),
        legal=gen("legal", legal, quotes, [cite(c) for c in citations]),
    )


GOUDA_QUOTE = "the minimum milkfat content is 46 percent by weight of the solids"
GOUDA_LEGAL = f"Under 21 CFR 133.142, “{GOUDA_QUOTE}”."
GOUDA_PLAIN = ("Gouda cheese must have at least 46 percent milkfat by weight of the solids and at most 45 percent "
               "moisture by weight (21 CFR 133.142).")


# --------------------------------------------------------------------------------------------
# pre-generation gate
# --------------------------------------------------------------------------------------------
def test_divergent_cheese_milkfat_asks_which_cheese():
    question, retrieval = case_retrieval("divergent_milkfat")
    res = pre_gate(question, retrieval)
    assert not res.proceed and res.refusal.reason == "divergent"
    msg = res.refusal.message
    assert msg.startswith("21 CFR part 133 sets different minimum milkfat levels for different cheeses")
    assert "cheddar 50 percent" in msg and "gouda 46 percent" in msg and "edam 40 percent" in msg
    assert msg.endswith("which cheese do you mean?")
    figures = {e.cfr_ref: e.figures for e in res.refusal.evidence}
    assert figures["21 CFR 133.113"] == ["50 percent"]
    assert figures["21 CFR 133.142"] == ["46 percent"]
    assert figures["21 CFR 133.149"] == ["45 percent"]
    assert figures["21 CFR 133.150"] == ["50 percent"]
    assert all(e.source_date == "2024-04-01" and e.status == "active" and e.version_id for e in res.refusal.evidence)
    assert res.signals["siblings"] >= 5 and res.signals["sibling_distinct_figures"] >= 3


def test_siblings_below_a_best_match_outside_their_family_are_not_divergent():
    question, retrieval = case_retrieval("divergent_milkfat")
    outsider = make_hit("21 CFR 101.9", 0.9, 1, dense_rank=1, fulltext_rank=1)
    retrieval.hits = [outsider] + [h.model_copy(update={"rank": h.rank + 1}) for h in retrieval.hits]
    res = pre_gate(question, retrieval)
    assert res.refusal is None or res.refusal.reason != "divergent"


def test_a_sibling_named_by_the_name_its_standard_gives_the_food_is_singled_out():
    from services.scorer.gates import declared_names

    cream = ("(c) Nomenclature. The name of the food is “Light cream”, or alternatively “Coffee cream” or "
             "“Table cream”.")
    assert declared_names(cream) == {"light cream", "coffee cream", "table cream"}
    question, retrieval = case_retrieval("divergent_milkfat")
    question = "What is the minimum milkfat for farmhouse cheese?"
    retrieval.hits = [h.model_copy(update={"text": h.text + " The name of the food is “Farmhouse cheese”."})
                      if h.cfr_ref == "21 CFR 133.142" else h for h in retrieval.hits]
    res = pre_gate(question, retrieval)
    assert res.proceed, res.refusal
    assert res.sections[0].cfr_ref == "21 CFR 133.142"
    assert "21 CFR 133.113" not in [s.cfr_ref for s in res.sections]


@pytest.mark.parametrize("question", [
    "To sell our wheel as gouda instead of cheddar, what is the minimum milkfat?",
    "What is the minimum milkfat if we label it gouda rather than cheddar cheese?",
])
def test_a_sibling_named_only_to_be_set_aside_is_not_the_one_asked_about(question):
    from shared.messages import SubjectMatch

    _, retrieval = case_retrieval("divergent_milkfat")
    # both headings named, as the scoping reports them (heldout32: "'asiago old' instead of medium")
    retrieval.scope = Scope(subjects=[SubjectMatch(term="cheddar", cfr_refs=["21 CFR 133.113"], specific=True),
                                      SubjectMatch(term="gouda", cfr_refs=["21 CFR 133.142"], specific=True)])
    res = pre_gate(question, retrieval)
    assert res.proceed, res.refusal
    refs = [s.cfr_ref for s in res.sections]
    assert refs[0] == "21 CFR 133.142" and "21 CFR 133.113" not in refs
    # without the contrast, the first subject the scoping reports is the one handed on, as before
    res = pre_gate("To sell our wheel as gouda or cheddar, what is the minimum milkfat?", retrieval)
    assert [s.cfr_ref for s in res.sections][:1] == ["21 CFR 133.113"]


def test_proceed_when_the_question_names_gouda():
    question, retrieval = case_retrieval("proceed_gouda")
    res = pre_gate(question, retrieval)
    assert res.proceed and res.refusal is None
    refs = [s.cfr_ref for s in res.sections]
    assert refs[0] == "21 CFR 133.142"
    assert "21 CFR 133.138" in refs  # gouda's text relies on the edam standard
    assert "21 CFR 133.113" not in refs and "21 CFR 133.150" not in refs  # other cheeses' figures kept out
    for key in ("top1_similarity", "term_coverage", "dense_fulltext_agreement", "subject_match", "relevance",
                "similarity_margin", "score_margin", "cited_exists"):
        assert key in res.signals
    assert res.signals["subject_match"] == 1.0


def test_a_section_the_named_sibling_relies_on_is_handed_on_once():
    # gouda's standard refers to § 133.5 (methods), which is no cheese standard: relied on and outside the family
    hits = [make_hit("21 CFR 133.142", 0.71, 1), make_hit("21 CFR 133.113", 0.69, 2), make_hit("21 CFR 133.138", 0.68, 3),
            make_hit("21 CFR 133.5", 0.55, 4), make_hit("21 CFR 101.9", 0.5, 5)]
    res = pre_gate("What is the minimum milkfat content of gouda cheese?", retrieval_of(*hits))
    refs = [s.cfr_ref for s in res.sections]
    assert res.proceed and refs[0] == "21 CFR 133.142"
    assert refs.count("21 CFR 133.5") == 1 and len(refs) == len(set(refs))


def test_proceed_when_the_name_is_only_in_the_heading_words():
    question, retrieval = case_retrieval("proceed_gouda")
    retrieval.scope.subjects = []  # no scope subject: the heading word "gouda" in the question singles it out
    res = pre_gate(question, retrieval)
    assert res.proceed and res.sections[0].cfr_ref == "21 CFR 133.142"


def test_siblings_that_agree_proceed():
    question, retrieval = case_retrieval("proceed_curing_agree")
    res = pre_gate(question, retrieval)
    assert res.proceed, res.refusal
    assert len(res.sections) == 4


def test_conflicting_pasteurization_temperatures():
    question, retrieval = case_retrieval("conflicting_pasteurized")
    res = pre_gate(question, retrieval)
    assert not res.proceed and res.refusal.reason == "conflicting"
    figs = {e.cfr_ref: e.figures for e in res.refusal.evidence}
    assert figs["21 CFR 131.3"] == ["145 °F"]
    assert figs["21 CFR 133.150"] == ["143 °F"] or figs.get("21 CFR 133.187") == ["143 °F"]
    assert "145 °F" in res.refusal.message and "143 °F" in res.refusal.message
    # the same two sections disagreeing below a best match that is neither: the answer does not rest on them
    outsider = make_hit("21 CFR 101.9", 0.95, 1, dense_rank=1, fulltext_rank=1)
    retrieval.hits = [outsider] + [h.model_copy(update={"rank": h.rank + 1}) for h in retrieval.hits]
    res = pre_gate(question, retrieval)
    assert res.refusal is None or res.refusal.reason != "conflicting"


def test_below_authority_for_a_reserved_section():
    question, retrieval = case_retrieval("below_authority_reserved")
    res = pre_gate(question, retrieval)
    assert not res.proceed and res.refusal.reason == "below_authority"
    assert res.refusal.evidence[0].cfr_ref == "21 CFR 201.311"
    assert "reserved" in res.refusal.message


def test_below_authority_for_an_unnamed_appendix_and_editorial_only_match():
    question = "What is the minimum milkfat content for gouda cheese?"
    appendix = make_hit("21 CFR 133.142", 0.79, 1, kind="appendix", section="Appendix A to Part 133",
                        cfr_ref="21 CFR Appendix A to Part 133")
    retrieval = RetrieveResult(scope=Scope(), hits=[appendix], mode="hybrid", top_k=10, embedding_model="m")
    res = pre_gate(question, retrieval)
    assert res.refusal.reason == "below_authority" and "appendix" in res.refusal.message
    # the same text, named by the question, is entitled
    named = pre_gate("Under appendix A to part 133, what is the minimum milkfat content for gouda cheese?", retrieval)
    assert named.proceed
    # a section whose only match is an editorial note
    note = make_hit("21 CFR 201.310", 0.5, 1, editorial_notes=["Gouda cheese minimum milkfat content: see part 133."])
    res = pre_gate(question, RetrieveResult(scope=Scope(), hits=[note], mode="hybrid", top_k=10, embedding_model="m"))
    assert res.refusal.reason == "below_authority" and "editorial" in res.refusal.message


def test_stale_when_the_question_names_an_earlier_date():
    question, retrieval = case_retrieval("stale_date")
    res = pre_gate(question, retrieval)
    assert not res.proceed and res.refusal.reason == "stale"
    ev = {(e.status, e.source_date): e for e in res.refusal.evidence}
    assert ("active", "2024-04-01") in ev and ("superseded", "1990-04-01") in ev
    assert ev[("active", "2024-04-01")].figures == ["46 percent"]
    assert ev[("superseded", "1990-04-01")].figures == ["48 percent"]
    assert "1991" in res.refusal.message and "1990-04-01" in res.refusal.message
    # a date after the current version's date proceeds
    later = pre_gate(question.replace("in 1991", "as of June 1, 2024"), retrieval)
    assert later.proceed, later.refusal
    # without a stored earlier version, the source note's last amendment (Jan. 21, 1983) is the boundary
    retrieval.superseded = []
    assert pre_gate(question, retrieval).proceed
    early = pre_gate(question.replace("1991", "1980"), retrieval)
    assert early.refusal.reason == "stale" and "January 21, 1983" in early.refusal.message
    # ... unless the text in force states the amount for that very year (a table of past years' premiums)
    retrieval.hits[0] = retrieval.hits[0].model_copy(
        update={"text": retrieval.hits[0].text + " (iii) In 1980, not less than 46 percent."})
    covered = pre_gate(question.replace("1991", "1980"), retrieval)
    assert covered.refusal is None or covered.refusal.reason != "stale"


def test_a_date_that_places_the_askers_own_event_is_not_a_question_about_old_rules():
    _, retrieval = case_retrieval("stale_date")
    res = pre_gate("I started making gouda cheese in 1991. What is the minimum milkfat content for gouda cheese?",
                   retrieval)
    assert res.refusal is None or res.refusal.reason != "stale"


def test_stale_when_the_superseded_version_matches_clearly_better():
    question, retrieval = case_retrieval("stale_superseded_better")
    res = pre_gate(question, retrieval)
    assert res.refusal.reason == "stale"
    assert res.refusal.evidence[0].status == "superseded" and res.refusal.evidence[0].source_date == "1990-04-01"


def test_stale_when_the_cited_section_exists_only_in_a_superseded_version():
    question = "What does 21 CFR 133.142 say about milkfat?"
    missing = CitationRef(raw="21 CFR 133.142", title=21, part="133", section="133.142", exists=False)
    retrieval = RetrieveResult(
        scope=Scope(citations=[missing], missing_citations=[missing]),
        hits=[make_hit("21 CFR 133.138", 0.5, 1)], superseded=[make_hit("21 CFR 133.142@1990", 0.7, 1)],
        mode="hybrid", top_k=10, embedding_model="m",
    )
    res = pre_gate(question, retrieval)
    assert res.refusal.reason == "stale" and "superseded" in res.refusal.message


def test_not_found_low_similarity_names_the_closest_section():
    question, retrieval = case_retrieval("not_found_speed")
    res = pre_gate(question, retrieval, corpus_titles=[7, 21, 42])
    assert not res.proceed and res.refusal.reason == "not_found"
    assert "searched titles 7, 21 and 42" in res.refusal.message
    assert "closest was 21 CFR 101.100, similarity 0.21" in res.refusal.message
    assert res.signals["relevance"] < res.signals["relevance_threshold"]


def test_not_found_for_a_missing_citation_and_an_unheld_title():
    missing = CitationRef(raw="21 CFR 133.999", title=21, part="133", section="133.999", exists=False)
    retrieval = RetrieveResult(scope=Scope(citations=[missing], missing_citations=[missing]),
                               hits=[make_hit("21 CFR 133.113", 0.45, 1)], mode="hybrid", top_k=10,
                               embedding_model="m")
    res = pre_gate("What does 21 CFR 133.999 require?", retrieval)
    assert res.refusal.reason == "not_found" and "21 CFR 133.999" in res.refusal.message
    retrieval = RetrieveResult(scope=Scope(unsupported_titles=[40]), hits=[make_hit("21 CFR 101.100", 0.31, 1)],
                               mode="hybrid", top_k=10, embedding_model="m")
    res = pre_gate("Under 40 CFR, what are the sulfur dioxide emission limits?", retrieval)
    assert res.refusal.reason == "not_found" and "title 40" in res.refusal.message


def test_not_found_for_a_program_whose_part_the_corpus_does_not_hold():
    from shared.scoping import Catalog, CatalogEntry, scope_question

    catalog = Catalog([CatalogEntry("42 CFR 407.47", 42, "407", "407.47", "Late enrollment penalty"),
                       CatalogEntry("7 CFR 272.1", 7, "272", "272.1", "General terms and conditions"),
                       CatalogEntry("42 CFR 406.12", 42, "406", "406.12", "Individuals under age 65")])

    def pre(question: str, top: str, similarity: float = 0.62):
        scope = scope_question(question, catalog)
        title, _, section = top.split()
        hit = make_hit("21 CFR 133.142", similarity, 1, cfr_ref=top, title=int(title), part=section.split(".")[0],
                       section=section, heading=catalog.by_ref[top].heading)
        return pre_gate(question, RetrieveResult(scope=scope, hits=[hit], mode="hybrid", top_k=10,
                                                 embedding_model="m"), corpus_titles=[7, 42])

    def not_for_a_program(res) -> bool:
        return res.refusal is None or "which this corpus does not hold" not in res.refusal.message

    # a near miss: the Part B penalty section is close in meaning, but the question is about Part D
    res = pre("What is the Medicare Part D late enrollment penalty?", "42 CFR 407.47")
    assert not res.proceed and res.refusal.reason == "not_found"
    assert "Medicare Part D" in res.refusal.message and "42 CFR part 423" in res.refusal.message
    assert res.refusal.evidence[0].cfr_ref == "42 CFR part 423"
    # SNAP eligibility limits live in 7 CFR 273, not in the SNAP parts held
    res = pre("What's the SNAP gross monthly income limit for a household of four?", "7 CFR 272.1")
    assert res.refusal is not None and "7 CFR part 273" in res.refusal.message
    # the held, general program is not refused; nor is an unheld one named beside a held one
    assert not_for_a_program(pre("How does Medicare Part B enrollment work?", "42 CFR 406.12"))
    assert not_for_a_program(pre("I get social security disability: when does my Medicare start?", "42 CFR 406.12"))


def test_not_found_names_a_name_no_section_mentions():
    hit = make_hit("21 CFR 133.142", 0.66, 1)
    scope = Scope(names=["Medicare Savings Programs"], absent_names=["Medicare Savings Programs"])
    res = pre_gate("What are the income limits for the Medicare Savings Programs?",
                   RetrieveResult(scope=scope, hits=[hit], mode="hybrid", top_k=10, embedding_model="m"),
                   corpus_titles=[21])
    assert res.refusal is not None and res.refusal.reason == "not_found"
    assert "No section of this corpus mentions “Medicare Savings Programs”" in res.refusal.message
    # a held program named beside it may still be answered from the held text ("Peace Corps" + Medicare)
    held = ProgramRef(name="Medicare", title=42, parts=["406"], said="Medicare", held=True)
    scope = Scope(names=["Peace Corps"], absent_names=["Peace Corps"], programs=[held])
    res = pre_gate("I was a Peace Corps volunteer: when can I enroll in Medicare?",
                   RetrieveResult(scope=scope, hits=[hit], mode="hybrid", top_k=10, embedding_model="m"))
    assert res.refusal is None or "mentions" not in res.refusal.message


def test_a_standard_asked_for_a_food_no_section_mentions_is_not_found_though_its_kind_is_held():
    """"Greek yogurt": the yogurt standard is held (a specific subject), but no section mentions the food whose
    standard is asked for."""
    hit = make_hit("21 CFR 133.142", 0.66, 1)
    question = "Is there an FDA standard for Greek yogurt, like a minimum protein content?"
    scope = Scope(names=["Greek yogurt"], absent_names=["Greek yogurt"],
                  subjects=[{"term": "gouda", "cfr_refs": ["21 CFR 133.142"], "specific": True, "coverage": [1.0]}])
    res = pre_gate(question, RetrieveResult(scope=scope, hits=[hit], mode="hybrid", top_k=10, embedding_model="m"))
    assert res.refusal is not None and res.refusal.reason == "not_found"
    assert "No section of this corpus mentions “Greek yogurt”" in res.refusal.message
    # a brand-like name beside a held specific subject is still answered from it
    res = pre_gate("How much milkfat is in Greek yogurt gouda?",
                   RetrieveResult(scope=scope, hits=[hit], mode="hybrid", top_k=10, embedding_model="m"))
    assert res.refusal is None or "mentions" not in res.refusal.message


@pytest.mark.parametrize("question, words", [
    ("FNS permanently disqualified my store for trafficking but we never did it. Do I have a case?", "Do I have a case"),
    ("Realistically, would we win an appeal of the disqualification?", "Realistically"),
    ("medicare advantage or original medicare - which is better for me?", "which is better"),
    ("Is melatonin or Benadryl safer for my 82 year old dad?", "safer"),
    ("best sunscreen spf for a toddler?", "best"),
    ("any chance FDA bans red dye 40 soon?", "any chance"),
    ("will egg prices go down next year?", "will egg prices go down"),
    ("With the new egg farm rules, are egg prices going to keep going up?", "going to keep going up"),
    ("Honestly, is the senior food box even worth the trouble of signing up?", "worth the trouble"),
    ("Mom was invited to join a drug trial. Is it worth the risk for her to enroll?", "worth the risk"),
    ("I'm 65 and still working. Should I sign up for Part B now or wait until I retire?", "Should I sign"),
    ("was the IRB's decision fair or should I fight it?", "or should I fight"),
    ("should i tell the snap office my roommate sells her ebt benefits?", "should i tell"),
    ("For my arthritis, which is easier on the stomach, aspirin or naproxen?", "which is easier"),
    ("What are the odds FDA grants our orphan-drug request?", "What are the odds"),
    ("Do you think FDA will ban titanium dioxide in candy?", "Do you think FDA will"),
    ("The pharmacist refused my early refill. Do I have grounds to sue the pharmacy?", "grounds to sue"),
    # heldout24 and heldout25's blind misses (session 11)
    ("Still covered at work. Would it be smarter to sign up for Part B at 65 or wait?", "Would it be smarter"),
    ("Would I be better off waiting until I retire?", "better off"),
    ("Is the store-brand antacid just as good a buy as the name brand?", "just as good"),
    ("We got a charge letter. Honestly, what are our odds if we fight it?", "our odds"),
    ("FDA pulled Red No. 3 from food. Do you think they'll ban it in cosmetics next?", "Do you think they'll"),
    ("will fda ban titanium dioxide in candy like europe did", "will fda ban"),
    ("Will USDA give our state more CSFP slots next year?", "Will USDA give our state more CSFP slots next year"),
    # heldout26's blind misses
    ("Which bottled water brand is safest for mixing my newborn's formula?", "safest"),
    ("If I take the disqualification to federal court, am I likely to win?", "likely to win"),
    ("I'm type 2 diabetic. Is white chocolate a better choice for me than milk chocolate?", "a better choice"),
    # heldout31's (session 14)
    ("Honestly, should I be worried about the aspartame in the diet soda I drink every day?", "should I be worried"),
    ("Do you get worried about BHA in snack mixes?", "Do you get worried"),
    ("Is my state going to switch our SNAP EBT cards to chip cards next year?",
     "Is my state going to switch our SNAP EBT cards to chip cards next year"),
    # heldout37's (session 15)
    ("Is it really fair that the store charges SNAP customers more?", "Is it really fair"),
    ("is that ethical for a trial sponsor to pay the IRB", "is that ethical"),
])
def test_a_judgement_recommendation_or_forecast_is_not_found_and_named(question, words):
    assert judgement_asked(question) == words
    hits = [make_hit("21 CFR 133.142", 0.80, 1), make_hit("21 CFR 133.113", 0.70, 2), make_hit("21 CFR 101.9", 0.6, 3)]
    res = pre_gate(question, retrieval_of(*hits))
    assert res.refusal is not None and res.refusal.reason == "not_found"
    assert f"asks for a judgement (“{words}”)" in res.refusal.message
    assert "21 CFR 133.142 and 21 CFR 133.113" in res.refusal.message  # the closest sections, named
    assert [e.cfr_ref for e in res.refusal.evidence] == ["(none)", "21 CFR 133.142", "21 CFR 133.113"]


@pytest.mark.parametrize("question", [
    "Is it okay for my diabetic mom to use an OTC ingrown toenail gel?",  # the label's warnings answer it
    "How long is a can of peaches good after the best-by date?",
    "How much notice should the agency give before it ends his CSFP certification?",
    "Which cheese is made from skim milk under part 133?",
    # a wh-word before the modal asks the rule; "should we keep/report/label" asks a duty
    "What's the dose of the nighttime sleep aid, and when should I stop taking it and see a doctor?",
    "Should we keep the pseudoephedrine logbook for two years?",
    "Should I report my new job to the SNAP office?",
    "Which is higher, the milkfat minimum for cheddar or for colby?",
    "Will the state agency give me a notice before my certification ends?",  # a duty, not a forecast
    "Will FDA accept an electronic signature on the registration?",
    "I'm worried we missed the deadline. How many days do we have to file the appeal?",
    "We are going to open a second store next year. Does it need its own SNAP authorization?",
    # the asker's reason, not the question (heldout33)
    "A buyer wants the turbot labeled 'Greenland halibut' because it sells better. Is that allowed?",
    "My friend says gruyere can be sold at 60 days old. Is that right under the standard?",
])
def test_a_question_about_rules_is_not_taken_for_a_judgement(question):
    assert judgement_asked(question) is None


def test_a_judgement_asked_about_a_cited_section_is_read_from_it():
    cited = CitationRef(raw="21 CFR 133.142", title=21, part="133", section="133.142", exists=True)
    retrieval = RetrieveResult(scope=Scope(citations=[cited]), hits=[make_hit("21 CFR 133.142", 0.8, 1)],
                               mode="hybrid", top_k=10, embedding_model="m")
    res = pre_gate("Under 21 CFR 133.142, which is better for a small creamery: whole or skim milk?", retrieval)
    assert res.refusal is None or "judgement" not in res.refusal.message


# 7 CFR 278.6(g), verbatim: the hardship penalty's ceiling is set in 7 CFR 3.91, a section this corpus does not hold
PENALTY_IN_LIEU = ("(g) Criteria for civil money penalty for hardship and transfer of ownership. FNS may, in lieu of a "
                   "disqualification, subject a firm to a civil money penalty of up to an amount specified in "
                   "§ 3.91(b)(3)(i) of this title for each violation if FNS determines that a disqualification would "
                   "cause hardship to participating households.")


def verbatim_section(cfr_ref: str, heading: str, text: str, similarity: float) -> Hit:
    """The best hit: a real section, quoted, outside the fixture's constructed ones."""
    title, _, section = cfr_ref.split()
    return make_hit("21 CFR 133.113", similarity, 1, cfr_ref=cfr_ref, title=int(title), part=section.split(".")[0],
                    section=section, heading=heading, text=text, paragraphs=[])


def _penalty_section() -> Hit:
    return verbatim_section("7 CFR 278.6", "Disqualification of retail food stores and wholesale food concerns, and "
                            "imposition of civil money penalties in lieu of disqualifications", PENALTY_IN_LIEU, 0.72)


def test_a_limit_the_section_leaves_to_a_section_not_held_is_not_found():
    held = CorpusStats.from_texts([PENALTY_IN_LIEU], refs=["7 CFR 278.6", "7 CFR 278.1"])
    question = "max civil money penalty per violation for a snap store instead of disqualification"
    res = pre_gate(question, retrieval_of(_penalty_section()), corpus_stats=held)
    assert res.refusal is not None and res.refusal.reason == "not_found"
    assert "this corpus does not hold 7 CFR 3.91" in res.refusal.message
    assert "“up to an amount specified in § 3.91(b)(3)(i) of this title”" in res.refusal.message
    assert [e.cfr_ref for e in res.refusal.evidence] == ["7 CFR 278.6", "7 CFR 3.91"]
    # held, the section the limit is left to answers it (generation gets both); not asked for the limit, the
    # section answers what it does say (that a penalty may replace the disqualification)
    with_391 = CorpusStats.from_texts([PENALTY_IN_LIEU], refs=["7 CFR 278.6", "7 CFR 3.91"])
    res = pre_gate(question, retrieval_of(_penalty_section()), corpus_stats=with_391)
    assert res.refusal is None or "3.91" not in res.refusal.message
    res = pre_gate("Can FNS charge my store a civil money penalty instead of a disqualification for hardship?",
                   retrieval_of(_penalty_section()), corpus_stats=held)
    assert res.refusal is None or "3.91" not in res.refusal.message


# 7 CFR 272.17(a), verbatim: what counts as "substantial" is defined in 7 CFR 273.11(r), which this corpus does not hold
LOTTERY = ("(a) General. Each State agency, to the maximum extent practicable, shall establish cooperative agreements "
           "with gaming entities within their State to identify members of certified households who have won "
           "substantial lottery or gambling winnings as defined in § 273.11(r).")


def test_a_figure_only_a_section_not_held_defines_is_not_found():
    section = verbatim_section("7 CFR 272.17", "Substantial lottery or gambling winnings", LOTTERY, 0.74)
    held = CorpusStats.from_texts([LOTTERY], refs=["7 CFR 272.17"])
    question = "How big a lottery win gets a SNAP household cut off?"
    res = pre_gate(question, retrieval_of(section), corpus_stats=held)
    assert res.refusal is not None and res.refusal.reason == "not_found"
    assert "it leaves it to “as defined in § 273.11(r)”" in res.refusal.message
    assert [e.cfr_ref for e in res.refusal.evidence] == ["7 CFR 272.17", "7 CFR 273.11"]
    # the section answers what it does say (that States match winnings with gaming entities), and a sentence about
    # the subject that states a figure is read, not deferred
    res = pre_gate("Does the state have to check SNAP households against lottery winners?", retrieval_of(section),
                   corpus_stats=held)
    assert res.refusal is None or "273.11" not in res.refusal.message
    stated = section.model_copy(update={"text": LOTTERY + " A household that wins a lottery prize of $4,250 or more loses eligibility."})
    res = pre_gate(question, retrieval_of(stated), corpus_stats=held)
    assert res.refusal is None or "273.11" not in res.refusal.message


# 21 CFR 17.2, verbatim: the maximum penalties are tabled in another title
PENALTY_TABLE = ("The maximum civil money penalties associated with the statutory provisions authorizing civil money "
                 "penalties under the Federal Food, Drug, and Cosmetic Act or the Public Health Service Act can be found "
                 "at 45 CFR part 102. The table of these maximum civil money penalties can be found at 45 CFR 102.3.")


def test_a_figure_tabled_in_another_title_is_not_found():
    section = verbatim_section("21 CFR 17.2", "Maximum penalty amounts", PENALTY_TABLE, 0.76)
    held = CorpusStats.from_texts([PENALTY_TABLE], refs=["21 CFR 17.2"])
    res = pre_gate("What is the maximum civil money penalty FDA can assess per violation against a food company?",
                   retrieval_of(section), corpus_stats=held)
    assert res.refusal is not None and res.refusal.reason == "not_found"
    assert "this corpus does not hold 45 CFR 102" in res.refusal.message


def test_a_cited_existing_section_is_never_not_found():
    cited = CitationRef(raw="21 CFR 133.142", title=21, part="133", section="133.142", exists=True)
    retrieval = RetrieveResult(scope=Scope(citations=[cited]), hits=[make_hit("21 CFR 133.142", 0.12, 1)],
                               mode="hybrid", top_k=10, embedding_model="m")
    assert pre_gate("Summarise 21 CFR 133.142.", retrieval).proceed


def test_a_question_citing_a_section_is_answered_from_it_only():
    # cheddar's and the nutrition label section match the question's words better, and gouda's standard refers to
    # edam's (§ 133.138) and to the methods of § 133.5, but the question asks about the section it cites
    cited = CitationRef(raw="21 CFR 133.142", title=21, part="133", section="133.142", exists=True)
    hits = [make_hit("21 CFR 133.113", 0.74, 1), make_hit("21 CFR 101.9", 0.70, 2), make_hit("21 CFR 133.5", 0.55, 3),
            make_hit("21 CFR 133.142", 0.52, 4), make_hit("21 CFR 133.138", 0.50, 5)]
    retrieval = RetrieveResult(scope=Scope(citations=[cited]), hits=hits, mode="hybrid", top_k=10, embedding_model="m")
    res = pre_gate("Explain 21 CFR 133.142 in plain English.", retrieval)
    assert res.proceed
    assert [h.cfr_ref for h in res.sections] == ["21 CFR 133.142"]
    # without the citation the same hits are all handed on, the best match first
    uncited = pre_gate("Explain the gouda standard in plain English.", retrieval_of(*hits))
    assert uncited.proceed and len(uncited.sections) == 5


def test_thresholds_come_from_settings_and_can_be_overridden():
    # a value set explicitly in the settings wins; the others keep the calibrated defaults
    th = ScorerThresholds.from_settings(Settings(not_found_min_similarity=0.95))
    assert th.not_found_min_similarity == 0.95
    assert th.weight_retrieval == ScorerThresholds().weight_retrieval and th.tier_high == ScorerThresholds().tier_high
    assert ScorerThresholds.from_settings(Settings(tier_high=0.7, confidence_weight_coverage=0.6)).tier_high == 0.7
    question, retrieval = case_retrieval("proceed_curing_agree")
    assert pre_gate(question, retrieval, th).refusal.reason == "not_found"
    assert pre_gate(question, retrieval, th.replace(not_found_min_similarity=0.3)).proceed


async def test_service_pre_is_async(scorer):
    question, retrieval = case_retrieval("proceed_gouda")
    res = await scorer.pre(PreGateRequest(question=question, retrieval=retrieval))
    assert res.proceed


# --------------------------------------------------------------------------------------------
# post-generation gate
# --------------------------------------------------------------------------------------------
async def test_post_gate_passes_a_grounded_answer(scorer):
    req = gouda_post(GOUDA_PLAIN, GOUDA_LEGAL, [Quote(text=GOUDA_QUOTE, cfr_ref="21 CFR 133.142")])
    res = await scorer.post(req)
    assert res.passed and res.refusal is None, res.refusal
    assert res.flags == []
    assert [q.verified for q in res.quotes] == [True]
    assert res.confidence.citation_coverage == 1.0
    assert all(s.supported for s in res.sentences)
    assert res.confidence.tier in ("high", "medium")


@pytest.mark.parametrize("declined_step", ["plain", "legal"])
async def test_post_gate_refuses_not_found_when_the_model_finds_the_sections_do_not_answer(scorer, declined_step):
    """A model's not_answered sentence (plain.v2 / legal.v2) is a not_found refusal naming that model, with the
    sections it read as evidence; when only call 2 declines, call 1's answer is withheld too (the safer reading)."""
    req = gouda_post(GOUDA_PLAIN, GOUDA_LEGAL, [Quote(text=GOUDA_QUOTE, cfr_ref="21 CFR 133.142")])
    sentence = "The sections give the milkfat of gouda but not how long it keeps once opened."
    declined = getattr(req, declined_step).model_copy(update={"text": "", "quotes": [], "citations": [],
                                                               "not_answered": sentence})
    req = req.model_copy(update={declined_step: declined})
    res = await scorer.post(req)
    assert not res.passed and res.refusal.reason == "not_found"
    assert res.refusal.message.startswith("The model (regs-extractive-1.0) read the ")
    assert res.refusal.message.endswith(sentence) and "21 CFR 133.142" in res.refusal.message
    assert res.refusal.evidence and res.refusal.evidence[0].cfr_ref == req.sections[0].cfr_ref
    assert res.plain_english == res.legal == "" and res.quotes == [] and res.citations == []
    assert res.confidence.tier == "not_found"


def test_post_gate_extractive_answer_is_fully_supported(scorer):
    sentences = split_sentences(GOUDA)
    req = gouda_post(GOUDA, GOUDA_LEGAL, [Quote(text=GOUDA_QUOTE, cfr_ref="21 CFR 133.142")])
    res = scorer.post_sync(req)
    assert res.passed
    assert len(res.sentences) == len(sentences) >= 1
    assert all(s.supported and s.support == 1.0 for s in res.sentences)
    assert res.confidence.signals["claim_support_share"] == 1.0


def test_made_up_figure_is_refused(scorer):
    req = gouda_post("Gouda needs 52% milkfat.", GOUDA_LEGAL, [Quote(text=GOUDA_QUOTE, cfr_ref="21 CFR 133.142")])
    res = scorer.post_sync(req)
    assert not res.passed and res.refusal.reason == "unsupported_figure"
    assert res.refusal.evidence[0].figures == ["52 percent"]
    assert "plain answer" in res.refusal.evidence[0].detail
    assert "52 percent" in res.refusal.message
    assert res.plain_english == "" and res.legal == ""  # nothing unsupported leaks


def test_figure_forms_are_normalised(scorer):
    plain = ("Gouda cheese needs a minimum milkfat content of 46% of the solids, with moisture of no more than "
             "forty-five percent, as set out in 21 CFR 133.142 and § 133.5(a)(1).")
    res = scorer.post_sync(gouda_post(plain, GOUDA_LEGAL, [Quote(text=GOUDA_QUOTE, cfr_ref="21 CFR 133.142")]))
    assert res.passed, res.refusal
    assert res.confidence.signals["figures_unsupported"] == 0


def test_fabricated_quote_is_stripped_and_flagged(scorer):
    fake = "gouda cheese shall be aged for not less than 90 days"
    legal = f"Under 21 CFR 133.142, “{GOUDA_QUOTE}”. The section also provides that “{fake}”."
    req = gouda_post(GOUDA_PLAIN, legal, [Quote(text=GOUDA_QUOTE, cfr_ref="21 CFR 133.142"),
                                          Quote(text=fake, cfr_ref="21 CFR 133.142")])
    res = scorer.post_sync(req)
    assert res.passed, res.refusal
    assert "stripped_quote" in res.flags
    assert [q.text for q in res.quotes] == [GOUDA_QUOTE] and res.quotes[0].verified
    assert "90 days" not in res.legal and GOUDA_QUOTE in res.legal


def test_only_fabricated_quotes_refuse(scorer):
    fake = "gouda cheese shall be aged for not less than 90 days"
    req = gouda_post(GOUDA_PLAIN, f"Under 21 CFR 133.142, “{fake}”.", [Quote(text=fake, cfr_ref="21 CFR 133.142")])
    res = scorer.post_sync(req)
    assert not res.passed and res.refusal.reason == "unverified_quote"
    assert res.refusal.evidence[0].cfr_ref == "21 CFR 133.142" and "not found verbatim" in res.refusal.evidence[0].detail


def test_quote_with_curly_quotes_and_extra_whitespace_is_verified():
    hit = make_hit("21 CFR 133.113")
    sections = {hit.cfr_ref: hit}
    quote = Quote(text="“The dairy  ingredients may be declared,\n in descending order or predominance, by the use of "
                       "the terms ‘milkfat and nonfat milk’ or ‘nonfat milk and milkfat’, as appropriate”",
                  cfr_ref="21 CFR 133.113")
    assert verify_quote(quote, sections)[0]
    elided = Quote(text="Cheddar cheese is the food prepared by the procedure … which produces a finished cheese",
                   cfr_ref="21 CFR 133.113")
    assert verify_quote(elided, sections)[0]
    assert not verify_quote(Quote(text="Cheddar cheese is aged for 90 days", cfr_ref="21 CFR 133.113"), sections)[0]
    assert not verify_quote(quote.model_copy(update={"cfr_ref": "21 CFR 133.142"}), sections)[0]


def test_citation_to_a_section_not_retrieved_is_stripped(scorer):
    plain = GOUDA_PLAIN + " Swiss cheese rules in 21 CFR 133.195 work the same way for holes."
    req = gouda_post(plain, GOUDA_LEGAL, [Quote(text=GOUDA_QUOTE, cfr_ref="21 CFR 133.142")],
                     citations=("21 CFR 133.142", "21 CFR 133.195"))
    res = scorer.post_sync(req)
    assert res.passed, res.refusal
    assert "stripped_citation" in res.flags
    assert "133.195" not in res.plain_english and [c.cfr_ref for c in res.citations] == ["21 CFR 133.142"]
    assert res.confidence.citation_coverage == 0.5  # 133.142 retrieved, 133.195 not


def test_mostly_unsupported_answer_is_refused(scorer):
    plain = ("Cheese makers must register every vat with the Department of Agriculture. Gouda wheels must be "
             "aged in oak barrels inside a licensed cave. Labels on imported wheels must be printed in red ink. "
             "Gouda cheese has a minimum milkfat content of 46 percent by weight of the solids.")
    res = scorer.post_sync(gouda_post(plain, GOUDA_LEGAL, [Quote(text=GOUDA_QUOTE, cfr_ref="21 CFR 133.142")]))
    assert not res.passed and res.refusal.reason == "unsupported_claims"
    flagged = [s for s in res.sentences if not s.supported]
    assert len(flagged) == 3 and res.sentences[-1].supported


def test_one_unsupported_sentence_is_flagged_not_refused(scorer):
    plain = GOUDA_PLAIN + " Gouda wheels must be aged in oak barrels inside a licensed cave."
    res = scorer.post_sync(gouda_post(plain, GOUDA_LEGAL, [Quote(text=GOUDA_QUOTE, cfr_ref="21 CFR 133.142")]))
    assert res.passed and "unsupported_sentence" in res.flags
    assert [s.supported for s in res.sentences] == [True, False]


def test_provider_refusal_is_named(scorer):
    question, retrieval = case_retrieval("proceed_gouda")
    req = PostGateRequest(question=question, retrieval=retrieval, sections=retrieval.hits[:1],
                          plain=gen("plain", "", refused=True), legal=gen("legal", "", refused=True))
    res = scorer.post_sync(req)
    assert res.refusal.reason == "provider_unavailable"


# --------------------------------------------------------------------------------------------
# confidence and figures
# --------------------------------------------------------------------------------------------
def test_confidence_arithmetic_is_exact():
    old = ScorerThresholds(weight_retrieval=0.35, weight_coverage=0.65, weight_evidence=0.0, tier_high=0.75,
                           tier_medium=0.5)
    conf = compute_confidence([0.8, 0.6, 0.4, 0.9], 1.0, old)
    assert conf.retrieval_score == pytest.approx(0.6)
    assert conf.score == pytest.approx(0.35 * 0.6 + 0.65 * 1.0) == pytest.approx(0.86)
    assert conf.tier == "high"
    assert compute_confidence([0.8, None, 0.4], 0.5, old).score == pytest.approx(0.35 * 0.4 + 0.65 * 0.5)
    assert compute_confidence([0.8, None, 0.4], 0.5, old).tier == "low"
    assert compute_confidence([0.6, 0.6, 0.6], 0.5, old).tier == "medium"  # 0.535
    assert compute_confidence([0.9], 1.0, not_found=True).tier == "not_found"
    # the calibrated composite: evidence = (relevance - not_found threshold) / span, clipped to 0..1
    d = ScorerThresholds()
    conf = compute_confidence([0.8, 0.6, 0.4], 1.0, d, relevance=d.not_found_min_similarity + d.evidence_span / 2)
    assert conf.signals["evidence"] == pytest.approx(0.5)
    assert conf.score == pytest.approx(d.weight_retrieval * 0.6 + d.weight_coverage + d.weight_evidence * 0.5)
    assert compute_confidence([0.8], 1.0, d, signals={"relevance": 5.0}).signals["evidence"] == 1.0
    assert compute_confidence([0.8], 1.0, d, relevance=0.0).signals["evidence"] == 0.0
    assert retrieval_score([]) == 0.0
    th = ScorerThresholds(weight_retrieval=0.5, weight_coverage=0.5, tier_high=0.9)
    assert compute_confidence([0.8, 0.6, 0.4], 1.0, th).tier == "medium"


def test_citation_coverage_falls_back_to_structured_fields():
    assert citation_coverage(["21 CFR 133.142", "21 CFR 9.1"], {"21 CFR 133.142"}) == (0.5, "text")
    assert citation_coverage([], {"21 CFR 133.142"}, structured_refs=["21 CFR 133.142"]) == (1.0, "structured")
    assert citation_coverage([], {"21 CFR 133.142"}) == (0.0, "none")
    assert citation_coverage(["21 CFR part 133"], set(), retrieved_parts={(21, "133")}) == (1.0, "text")


def test_figure_extraction_normalises_and_ignores_citations():
    keys = lambda t: [f.key for f in extract_figures(t)]  # noqa: E731
    assert keys("50 percent") == keys("50%") == ["50 percent"]
    assert keys("$1,000") == keys("1000 dollars") == ["$1000"]
    assert keys("thirty days") == keys("30 days") == ["30 days"]
    assert keys("under 21 CFR 133.150(a)(1) and § 133.5(a), (b), and (d), parts 101 and 130") == []
    assert keys("[48 FR 2744, Jan. 21, 1983]") == ["1983-01-21"]
    assert keys("85 to 90 percent") == ["85 percent", "90 percent"]
    assert keys("143 °F for 30 minutes") == ["143 °F", "30 minutes"]
    assert extract_figures("see 133.150", extra_refs={"133.150"}) == []
    refs = [r.cfr_ref for r in find_cfr_refs("21 CFR 133.142 and 133.138; § 133.5(a); 21 CFR part 133")]
    assert refs == ["21 CFR 133.142", "21 CFR 133.138", "21 CFR 133.5", "21 CFR part 133"]
    assert normalise_text("“a”\u00a0—  ‘b’") == "\"a\" - 'b'"


def test_answer_furniture_is_not_a_figure():
    text = "1. Under 21 CFR, gouda is covered.\n2) Title 21 CFR part 133 applies; see (b)(2) and 21 CFR 133.142(a)."
    assert extract_figures(text) == []
    assert [f.key for f in extract_figures("a 46-percent minimum")] == ["46 percent"]


def test_sibling_figures_only_matter_when_the_question_asks_for_one():
    question, retrieval = case_retrieval("divergent_milkfat")
    res = pre_gate("Which cheeses does part 133 cover?", retrieval)
    assert res.proceed and res.signals["asks_for_figure"] == 0.0
    question, retrieval = case_retrieval("conflicting_pasteurized")
    assert pre_gate("What does it mean for milk to be pasteurized?", retrieval).proceed


# --------------------------------------------------------------------------------------------
# false refusals found by calibration (eval/calibrate.py), on the shipped corpus's real text as the
# production retriever returned it (tests/data/scorer_calibration_cases.json)
# --------------------------------------------------------------------------------------------
CALIBRATION = json.loads((DATA / "scorer_calibration_cases.json").read_text())["cases"]


def calibration_case(name: str) -> tuple[str, RetrieveResult]:
    case = CALIBRATION[name]
    return case["question"], RetrieveResult.model_validate(case["retrieval"])


@pytest.mark.parametrize("name, first", [
    ("cited_section_not_conflicting", "42 CFR 406.21"),  # dates elsewhere are not conflicting figures
    ("cited_part_rate_not_conflicting", "7 CFR 277.4"),  # the cited section settles it
    ("specific_subject_not_conflicting", "21 CFR 131.150"),  # heavy cream named by a rare heading word
    ("different_terms_not_conflicting", "21 CFR 312.32"),  # 7 vs 10 days for different obligations
])
def test_figures_for_other_terms_or_a_named_section_are_not_conflicting(name, first):
    question, retrieval = calibration_case(name)
    res = pre_gate(question, retrieval)
    assert res.proceed, res.refusal
    assert res.sections[0].cfr_ref == first


def test_the_most_completely_named_sibling_is_singled_out():
    question, retrieval = calibration_case("named_sibling_most_specific")  # "Pasteurized process cheese food: …"
    res = pre_gate(question, retrieval)
    assert res.proceed, res.refusal
    assert [s.cfr_ref for s in res.sections][:1] == ["21 CFR 133.173"]
    assert "21 CFR 133.169" not in [s.cfr_ref for s in res.sections]  # process cheese, a sibling, dropped


def test_a_specifically_named_section_stays_first_ahead_of_a_sibling_family():
    question, retrieval = calibration_case("specific_subject_stays_first")  # half-and-half vs nutrient claims
    res = pre_gate(question, retrieval)
    assert res.proceed, res.refusal
    assert res.sections[0].cfr_ref == "21 CFR 131.180"


def test_a_conflict_still_needs_the_same_terms_in_both_clauses():
    question, retrieval = case_retrieval("conflicting_pasteurized")
    res = pre_gate(question, retrieval, ScorerThresholds(conflict_min_term_share=0.6))
    assert res.refusal is not None and res.refusal.reason == "conflicting"


@pytest.mark.parametrize("name", ["extractive_bare_refs_other_title", "extractive_copied_sentence_cut_figures"])
def test_extractive_answer_copied_from_the_sections_passes(scorer, name):
    """An extractive answer is copied word for word: a bare "§ 610.60" in a title-21 section's sentence is 21 CFR
    610.60 even when the first section is in title 42, and a copied sentence states its section's figures."""
    from services.scorer.gates import post_gate

    case = json.loads((DATA / "scorer_calibration_cases.json").read_text())["post_cases"][name]
    req = PostGateRequest(question=case["question"], retrieval=RetrieveResult.model_validate(case["retrieval"]),
                          sections=[Hit.model_validate(s) for s in case["sections"]],
                          plain=GenerateResult.model_validate(case["plain"]),
                          legal=GenerateResult.model_validate(case["legal"]))
    res = post_gate(req, ScorerThresholds(), scorer._support_cache())
    assert res.passed, res.refusal
    assert all(s.supported for s in res.sentences)
    assert all(q.verified for q in res.quotes)


def test_a_yearly_amount_the_text_does_not_state_is_not_found():
    from services.scorer.gates import yearly_amount_year

    assert yearly_amount_year("What is the Medicare Part B standard monthly premium for 2025?") == "2025"
    assert yearly_amount_year("What is the maximum SNAP allotment in fiscal year 2025?") == "2025"
    assert yearly_amount_year("puerto rico nutrition assistance grant amount fiscal year 2025") == "2025"
    assert yearly_amount_year("What is the FY2024 allotment for a household of one?") == "2024"
    # a point in time, or no amount asked for: the current rule answers it
    assert yearly_amount_year("Is psilocybin still Schedule I in 2025?") is None
    assert yearly_amount_year("As of 2025, how many refills are allowed on a Schedule IV prescription?") is None
    # the money amount named before the year it is asked for
    assert yearly_amount_year("What is the dollar income limit for one person to get CSFP in Ohio in 2024?") == "2024"
    assert yearly_amount_year("What income levels trigger the IRMAA surcharge in 2025?") == "2025"
    # a year that places the asker's own event, with the amount asked about the present
    assert yearly_amount_year("I had a kidney transplant in 2021; what is that premium based on?") is None
    # a day's date is a condition of the question, not the year of an amount (heldout32, blind)
    assert yearly_amount_year("If someone who turned 65 after January 1, 2023 enrolls in premium Part A during the "
                              "last four months of the initial enrollment period, when does entitlement start?") is None
    assert yearly_amount_year("What were the 2023 premium amounts?") == "2023"
    # "this year" is the current year: a quota, or a maximum adjusted every year (heldout15, blind)
    assert yearly_amount_year("What's DEA's aggregate production quota for oxycodone for this year?", 2026) == "2026"
    assert yearly_amount_year("The Medicaid copay limit for ER visits was $8 but gets adjusted for inflation every "
                              "year. What's the actual maximum this year?", 2026) == "2026"
    assert yearly_amount_year("I turned 65 this year. How long is my enrollment window?", 2026) is None
    # the amount named a few words after the year or after "this year's" (heldout20)
    assert yearly_amount_year("2025 part b monthly premium amount") == "2025"
    assert yearly_amount_year("What is this year's Medicare Part A inpatient hospital deductible?", 2026) == "2026"
    # "this fiscal year", and an income cutoff (heldout19, heldout20)
    assert yearly_amount_year("How much is FDA's application user fee this fiscal year?", 2026) == "2026"
    assert yearly_amount_year("CSFP income cutoff in dollars for a single senior this year?", 2026) == "2026"
    assert yearly_amount_year("What's the income cutoff for the USDA senior food box program?", 2026) is None

    hit = make_hit("21 CFR 133.142", 0.71, 1)
    question = "How much milkfat did gouda need for 2025, in percent?"
    res = pre_gate(question, RetrieveResult(scope=Scope(), hits=[hit], mode="hybrid", top_k=10,
                                            embedding_model="m"))
    assert res.refusal is not None and res.refusal.reason == "not_found"
    assert "2025 amount" in res.refusal.message and res.refusal.evidence[0].cfr_ref == "21 CFR 133.142"


def test_another_countrys_law_is_not_found_and_said_to_be_outside_federal_regulation():
    from shared.scoping import Catalog, CatalogEntry, scope_question

    catalog = Catalog([CatalogEntry("21 CFR 101.9", 21, "101", "101.9", "Nutrition labeling of food")])
    question = "What font size rules apply to the Nutrition Facts table on food sold in Canada?"
    scope = scope_question(question, catalog)
    res = pre_gate(question, RetrieveResult(scope=scope, hits=[make_hit("21 CFR 133.142", 0.7, 1)], mode="hybrid",
                                            top_k=10, embedding_model="m"), corpus_titles=[21])
    assert res.refusal is not None and res.refusal.reason == "not_found"
    assert "no federal regulation governs" in res.refusal.message
    assert res.refusal.evidence[0].detail.endswith("not U.S. federal regulation")


def test_a_citation_without_a_title_belongs_to_the_agency_the_question_names():
    from shared.scoping import Catalog, CatalogEntry, scope_question

    catalog = Catalog([CatalogEntry("21 CFR 107.10", 21, "107", "107.10", "Nutrient information")])
    scope = scope_question("Under the FAA's Part 107 rules, when can I fly a small drone over people?", catalog)
    assert scope.citations == [] and [(c.title, c.part) for c in scope.missing_citations] == [(14, "107")]
    # with no agency named, the held part is the one meant
    scope = scope_question("What does part 107 require on an infant formula label?", catalog)
    assert [(c.title, c.part) for c in scope.citations] == [(21, "107")]


def test_the_rarest_question_word_in_the_top_hit_counts_for_relevance():
    from services.scorer.gates import compute_signals
    from services.scorer.support import CorpusStats

    hit = make_hit("21 CFR 133.142", 0.45, 1)
    texts = [hit.text] + [f"Schedule {n}: other controlled substances and their listing." for n in range(50)]
    stats = CorpusStats.from_texts(texts)
    th = ScorerThresholds()
    retrieval = RetrieveResult(scope=Scope(), hits=[hit], mode="hybrid", top_k=10, embedding_model="m")
    anchored = compute_signals("Where is gouda scheduled?", retrieval, th, stats)
    loose = compute_signals("Where is the controlled substance scheduled?", retrieval, th, stats)
    assert anchored["rare_anchor"] == 1.0 and loose["rare_anchor"] == 0.0
    assert anchored["relevance"] > loose["relevance"]


def test_a_year_counts_as_stated_only_beside_an_amount():
    from services.scorer.gates import states_amount_for_year

    assert states_amount_for_year("For fiscal year 2025 the maximum allotment is $975 for four persons.", "2025")
    assert states_amount_for_year("In 2025 the penalty rises to 12 percent.", "2025")
    assert not states_amount_for_year("This section is effective October 1, 2025. " + "x " * 80 + "$5", "2025")
    assert not states_amount_for_year("The premium is figured as described in paragraph (b).", "2025")


def test_a_states_own_figure_is_not_found_unless_a_section_names_the_state():
    from shared.programs import states_named

    assert states_named("How many CSFP slots did USDA assign to Michigan this year?") == ["Michigan"]
    assert states_named("What is the Medicaid income limit for new york, and Texas's?") == ["New York", "Texas"]
    # where the asker is, or a product's word: the federal rule applies there as everywhere
    assert states_named("I own a pharmacy in Ohio: what is the daily pseudoephedrine limit?") == []
    assert states_named("Food spoiled after the storm in Louisiana; how long do I have to report it?") == []
    assert states_named("Why are some Florida oranges dyed, and how much dye is allowed?") == []
    assert states_named("What is the limit for Ohio residents?") == []
    # the territories set their own figures as States do; their Medicaid rules themselves are federal (part 436)
    assert states_named("What's the medically needy income limit on Medicaid in the U.S. Virgin Islands?") == [
        "U.S. Virgin Islands"]
    assert states_named("Medicaid asset limit for the medically needy in Puerto Rico?") == ["Puerto Rico"]
    assert states_named("In Guam or Puerto Rico Medicaid, can the income limit for three be below the one for two?") == []
    res = pre_gate("What is the medically needy income limit in the U.S. Virgin Islands?", retrieval_of())
    assert res.refusal is not None and "the U.S. Virgin Islands' own figure" in res.refusal.message
    question = "How much milkfat must gouda have for Wisconsin?"
    res = pre_gate(question, retrieval_of())
    assert res.refusal is not None and res.refusal.reason == "not_found"
    assert "Wisconsin's own figure" in res.refusal.message and res.refusal.evidence[0].cfr_ref == "21 CFR 133.142"
    # the same question where the section names the State: the section answers for it
    named = make_hit("21 CFR 133.142", 0.71, 1, text=GOUDA + " Wisconsin cheese makers are not excepted.")
    res = pre_gate(question, retrieval_of(named))
    assert res.refusal is None or "Wisconsin" not in res.refusal.message
    # no figure asked for: the State is not asked about for a figure
    res = pre_gate("What is Ohio's view of gouda cheese?", retrieval_of())
    assert res.refusal is None or "Ohio" not in res.refusal.message


def test_a_fine_asked_for_is_a_dollar_amount():
    from services.scorer.gates import _ASKS_FOR_DOLLARS

    assert _ASKS_FOR_DOLLARS.search("The egg case was running at 50°F. How much is the fine for that?")
    assert _ASKS_FOR_DOLLARS.search("how much would the penalty be?")
    assert not _ASKS_FOR_DOLLARS.search("How much is the fine powder allowed in the mix?")
    assert _ASKS_FOR_DOLLARS.search("We're opening a wholesale drug distributor. What does the state license cost?")
    # what a failure costs the agency is not a price
    assert not _ASKS_FOR_DOLLARS.search("FNS did not answer in time. What does that failure to answer cost FNS?")


def test_a_dollar_amount_the_best_section_does_not_state_is_not_found():
    question = "What dollar amount of milkfat makes a cheese gouda?"
    res = pre_gate(question, retrieval_of())
    assert res.refusal is not None and res.refusal.reason == "not_found"
    assert "dollar amount" in res.refusal.message and "21 CFR 133.142" in res.refusal.message
    priced = make_hit("21 CFR 133.142", 0.71, 1, text=GOUDA + " The fee is $25 per lot.")
    res = pre_gate(question, retrieval_of(priced))
    assert res.refusal is None or "dollar amount" not in res.refusal.message


def test_a_substance_no_section_lists_is_not_found_even_under_a_held_program():
    from shared.scoping import substance_words

    assert substance_words("Is xylazine or Semaglutide scheduled? What about gouda?") == ["xylazine", "semaglutide"]
    assert substance_words("Do we need to examine the determine the routine medicine?") == []
    question = "Is xylazine a DEA controlled substance, and which schedule?"
    scope = Scope(names=["xylazine"], absent_names=["xylazine"],
                  programs=[ProgramRef(name="DEA controlled substance rules", title=21, parts=["1308"],
                                       home="21 CFR part 1308", said="DEA", held=True)])
    res = pre_gate(question, retrieval_of(scope=scope), corpus_titles=[21])
    assert res.refusal is not None and res.refusal.reason == "not_found" and "“xylazine”" in res.refusal.message
    # an absent proper name under a held program is left to the held text, as before
    scope.absent_names = scope.names = ["Acme Dairy"]
    res = pre_gate(question.replace("xylazine", "Acme Dairy"), retrieval_of(scope=scope), corpus_titles=[21])
    assert res.refusal is None or "Acme Dairy" not in res.refusal.message


def test_an_absent_name_that_only_glosses_a_held_one_does_not_sink_the_question():
    from services.scorer.gates import glossed

    question = "what does ONDCP (the White House drug policy office) charge per hour to search for FOIA records?"
    assert glossed(question, "White House", ["White House"])
    assert not glossed(question, "ONDCP", ["ONDCP"])
    # the word glossed is itself absent: the gloss does not rescue it
    assert not glossed("Is BZP (the party drug benzylpiperazine) scheduled?", "benzylpiperazine", ["BZP", "benzylpiperazine"])
    scope = Scope(names=["ONDCP", "White House"], absent_names=["White House"])
    res = pre_gate(question, retrieval_of(make_hit("21 CFR 133.142", 0.7, 1), scope=scope), corpus_titles=[21])
    assert res.refusal is None or "White House" not in res.refusal.message
    scope = Scope(names=["White House"], absent_names=["White House"])
    res = pre_gate("What does the White House charge for FOIA searches?",
                   retrieval_of(make_hit("21 CFR 133.142", 0.7, 1), scope=scope), corpus_titles=[21])
    assert res.refusal is not None and "“White House”" in res.refusal.message


def test_an_inflation_adjusted_amount_the_text_does_not_state_is_not_found():
    question = "What is the inflation-adjusted maximum milkfat penalty for gouda, in dollars?"
    res = pre_gate(question, retrieval_of())
    assert res.refusal is not None and res.refusal.reason == "not_found"
    assert "inflation-adjusted amount" in res.refusal.message
    # a text that says its amount is adjusted for inflation gives the base, not this year's figure ...
    method = make_hit("21 CFR 133.142", 0.71, 1, text=GOUDA + " The penalty is $100, adjusted for inflation as "
                                                            "published each year.")
    res = pre_gate(question, retrieval_of(method))
    assert res.refusal is not None and "inflation-adjusted amount" in res.refusal.message
    # ... a text that states this year's figure answers it
    year = datetime.date.today().year
    adjusted = make_hit("21 CFR 133.142", 0.71, 1, text=GOUDA + f" For {year}, the penalty adjusted for inflation "
                                                              f"is $112.")
    res = pre_gate(question, retrieval_of(adjusted))
    assert res.refusal is None or "inflation-adjusted" not in res.refusal.message


def test_a_measure_none_of_the_best_sections_gives_is_not_found():
    from services.scorer.gates import asked_measure, gives_measure

    assert asked_measure("How many calories are in a tablespoon of mayonnaise?") == "calories"
    assert asked_measure("What is the action level for aflatoxin in peanut butter, in parts per billion?") == \
        "concentration"
    assert asked_measure("How many gallons of sap make a gallon of maple syrup?") == "volume"
    assert asked_measure("How many hours should I fast before a blood test?") == "time"
    # "how long" is answered in words as often as in figures ("the eighth consecutive month"): not a measure
    assert asked_measure("How long is the special enrollment period?") is None
    assert asked_measure("What is the minimum milkfat of gouda?") is None
    # an age: a person's ("60 years of age", "children under 12 years") or a food's ("cured for 60 days")
    assert asked_measure("how old do you have to be to donate blood") == "age"
    assert asked_measure("What's the minimum age for gruyere?") == "age"
    assert gives_measure("Persons 60 years of age and older are eligible.", "age")
    assert gives_measure("Children under 12 years: ask a doctor.", "age")
    assert gives_measure("Swiss cheese is at least 60 days old.", "age")
    assert gives_measure("The cheese is held for 3 weeks at 50 °F.", "age")
    assert not gives_measure("The donor must not have donated within the past 8 weeks.", "age")
    assert gives_measure(GOUDA, "concentration") is False and gives_measure("at most 20 ppb", "concentration")
    # acidity: any mention of pH asks for one, and a section that never says "pH" sets none
    assert asked_measure("what ph does salsa need to be to sell it shelf stable") == "pH"
    assert asked_measure("Is there a required pH range for a nasal spray?") == "pH"
    assert asked_measure("Does the lab director need a PhD?") is None
    assert gives_measure("acidified to a finished equilibrium pH of 4.6 or below", "pH")
    assert not gives_measure(GOUDA, "pH")
    res = pre_gate("What pH does gouda have to reach?", retrieval_of())
    assert res.refusal is not None and res.refusal.reason == "not_found" and "asks for a pH" in res.refusal.message
    res = pre_gate("How many calories are in a slice of gouda?", retrieval_of())
    assert res.refusal is not None and res.refusal.reason == "not_found"
    assert "a number of calories" in res.refusal.message and res.refusal.evidence[0].cfr_ref == "21 CFR 133.142"
    assert "the best-matching section, 21 CFR 133.142, states none" in res.refusal.message
    res = pre_gate("How many calories are in a slice of gouda?",
                   retrieval_of(make_hit("21 CFR 133.142", 0.72, 1), make_hit("21 CFR 133.113", 0.70, 2)))
    assert "none of the best-matching sections (21 CFR 133.142 and 21 CFR 133.113) states one" in res.refusal.message
    counted = make_hit("21 CFR 133.142", 0.71, 1, text=GOUDA + " A 1-ounce serving provides 110 calories.")
    res = pre_gate("How many calories are in a slice of gouda?", retrieval_of(counted))
    assert res.refusal is None or "calories" not in res.refusal.message


def test_a_dollar_figure_in_an_example_is_not_an_amount_stated():
    from services.scorer.gates import states_dollars

    # 42 CFR 436.811(b): an example's "$400" is not the income standard
    assert not states_dollars("The standard may not diminish by the number of persons in the unit (for example, if the "
                              "income level in the standard for an assistance unit of two is set at $400, the income "
                              "level for a unit of three may not be less than $400).")
    assert not states_dollars("Income is counted monthly. For example, a household paid $200 weekly has $866 a month.")
    assert states_dollars("The penalty is $1,000 for each violation (for example, a sale to a minor).")


def test_a_states_own_rule_is_not_found_unless_a_section_names_the_state():
    from shared.programs import states_ruling

    assert states_ruling("Does Texas make seniors get a doctor's note before they can get CSFP food boxes?") == \
        ["Texas"]
    assert states_ruling("Is it legal for me to sell raw milk at my farm stand in Pennsylvania?") == ["Pennsylvania"]
    # where the asker is: the federal rule applies there as everywhere
    assert states_ruling("Is it legal for my pharmacy in Ohio to sell 9 grams of pseudoephedrine a month?") == []
    assert states_ruling("Does the federal rule require a doctor's note in Texas clinics?") == []
    res = pre_gate("Does Wisconsin require gouda to be aged?", retrieval_of())
    assert res.refusal is not None and res.refusal.reason == "not_found"
    assert "Wisconsin's own rule" in res.refusal.message
    named = make_hit("21 CFR 133.142", 0.71, 1, text=GOUDA + " Wisconsin cheese makers are not excepted.")
    res = pre_gate("Does Wisconsin require gouda to be aged?", retrieval_of(named))
    assert res.refusal is None or "Wisconsin" not in res.refusal.message


def test_a_program_asked_for_is_not_found_when_only_the_askers_own_program_is_held():
    from services.scorer.gates import asked_to_join

    question = "I'm pregnant and already on Medicaid. Does that automatically make me income-eligible for WIC?"
    assert asked_to_join(question, "WIC") and not asked_to_join(question, "Medicaid")
    programs = [ProgramRef(name="Medicaid", title=42, parts=["436"], home="42 CFR part 436", said="Medicaid",
                           held=True),
                ProgramRef(name="WIC", title=7, parts=["246"], home="7 CFR part 246", said="WIC", held=False)]
    res = pre_gate(question, retrieval_of(scope=Scope(programs=programs)), corpus_titles=[7, 21, 42])
    assert res.refusal is not None and res.refusal.reason == "not_found" and "7 CFR part 246" in res.refusal.message
    # the held program asked for, the unheld one the asker's situation: the held text may answer
    question = "I already get WIC. Am I eligible for Medicaid too?"
    res = pre_gate(question, retrieval_of(scope=Scope(programs=programs)), corpus_titles=[7, 21, 42])
    assert res.refusal is None or "7 CFR part 246" not in res.refusal.message


def test_whether_a_benefit_is_taxable_is_tax_law_too():
    from shared.programs import asks_tax_treatment

    assert asks_tax_treatment("Do I have to report my SNAP benefits as income on my federal tax return?")
    assert asks_tax_treatment("Are WIC vouchers taxable?")
    assert asks_tax_treatment("Do I pay income tax on Medicaid waiver payments for caring for my mother?")
    # a sales tax at the register is a store's question under SNAP's rules (7 CFR 278.2)
    assert not asks_tax_treatment("Can a grocery store charge sales tax on items I pay for with SNAP benefits?")
    assert not asks_tax_treatment("customer is paying with SNAP at my register - am I supposed to add sales tax?")


def test_a_tax_credit_is_tax_law_whatever_benefit_it_is_asked_beside():
    from shared.programs import asks_tax_treatment

    assert asks_tax_treatment("Will my Medicaid coverage change the EITC I get?")
    assert asks_tax_treatment("if my family gets SNAP can i still claim the child tax credit")
    assert asks_tax_treatment("Do we list WIC checks on our taxes?")
    assert not asks_tax_treatment("Does SNAP count the earned income of a student in the household?")


def test_a_form_of_an_agency_not_held_is_that_agencys_question():
    from services.scorer.gates import asks_for_form_of

    assert asks_for_form_of("Which SSA form do I fill out to have my Part B premium withheld?", "SSA")
    assert asks_for_form_of("what's the form number from the IRS for reporting Medicaid waiver pay", "IRS")
    assert not asks_for_form_of("Does SSA deduct the Part B premium from my check?", "SSA")
    # the held text names that agency's form: it answers
    verification = make_hit("21 CFR 133.142", 0.7, 1, cfr_ref="7 CFR 272.11", text="The State agency shall request verification of an alien "
                            "applicant by completing USCIS Form G-845 and submitting photocopies of such documents.")
    assert not asks_for_form_of("Which USCIS form does the caseworker send?", "USCIS", [verification])
    programs = [ProgramRef(name="Medicare", title=42, parts=["407"], home="42 CFR part 407", said="Part B", held=True),
                ProgramRef(name="federal employment (OPM)", title=5, parts=["890"], home="5 CFR part 890", said="OPM",
                           held=False)]
    question = "What OPM form stops my Part B premium coming out of my annuity?"
    res = pre_gate(question, retrieval_of(scope=Scope(programs=programs)), corpus_titles=[7, 21, 42])
    assert res.refusal is not None and res.refusal.reason == "not_found" and "5 CFR part 890" in res.refusal.message
    # naming the agency as the one who deducts is the held program's rule
    question = "Does OPM take my Part B premium out of my annuity?"
    res = pre_gate(question, retrieval_of(scope=Scope(programs=programs)), corpus_titles=[7, 21, 42])
    assert res.refusal is None or "5 CFR part 890" not in res.refusal.message


def test_whether_an_expense_is_tax_deductible_is_tax_law_whatever_program_it_is_for():
    medicare = ProgramRef(name="Medicare", title=42, parts=["408"], home="42 CFR part 408", said="Medicare",
                          held=True, family="medicare")
    question = "Can Medicare Part B premiums be deducted as a medical expense on a federal income tax return?"
    irs = ProgramRef(name="federal tax rules (IRS)", title=26, home="26 CFR", said="income tax", held=False,
                     family="irs")
    res = pre_gate(question, retrieval_of(scope=Scope(programs=[medicare, irs])), corpus_titles=[7, 21, 42])
    assert res.refusal is not None and res.refusal.reason == "not_found" and "26 CFR" in res.refusal.message
    # the tax status of the asker is their situation, not the question
    question = "We're a tax-exempt food bank under Medicare's rules. Can we also get Part B enrollment forms?"
    irs = irs.model_copy(update={"said": "tax-exempt"})
    res = pre_gate(question, retrieval_of(scope=Scope(programs=[medicare, irs])), corpus_titles=[7, 21, 42])
    assert res.refusal is None or "26 CFR" not in res.refusal.message


def homes(question: str) -> set[tuple[str, int]]:
    """(family, title) of each program, agency or law the question names."""
    from shared.programs import named_homes

    return {(home.family, home.title) for home, _ in named_homes(question)}


def families(question: str) -> set[str]:
    return {family for family, _ in homes(question)}


def test_general_knowledge_about_a_held_subject_and_a_companys_history_have_no_cfr_home():
    assert "general-knowledge" in families("What's the half-life of diphenhydramine in a nighttime sleep aid?")
    assert "general-knowledge" in families("How long does pseudoephedrine stay in your system?")
    assert "events" in families("Has the FDA ever sent Blue Bell Creameries a warning letter?")
    assert "events" not in families("What must a warning statement on a dietary supplement say?")
    question = "What's the half-life of diphenhydramine in a nighttime sleep aid?"
    programs = [ProgramRef(name="OTC nighttime sleep-aids", title=21, parts=["338"], home="21 CFR part 338",
                           said="sleep aid", held=True),
                ProgramRef(name="pharmacology", title=0, home="no part of the CFR", said="half-life", held=False,
                           family="general-knowledge")]
    res = pre_gate(question, retrieval_of(scope=Scope(programs=programs)), corpus_titles=[21])
    assert res.refusal is not None and res.refusal.reason == "not_found"
    assert "no federal regulation governs" in res.refusal.message


def test_coverage_also_counts_what_is_asked_without_the_askers_circumstances():
    from services.scorer.support import asked_part

    assert asked_part("I own a small-town pharmacy. For pseudoephedrine, what's the most I can sell a day?") == \
        "For pseudoephedrine, what's the most I can sell a day?"
    # a statement that is not the asker's own circumstance stays; a single sentence is the question itself
    assert asked_part("Gouda is a cheese. What is its minimum milkfat?") == \
        "Gouda is a cheese. What is its minimum milkfat?"
    assert asked_part("My mom is 62, is she old enough?") == "My mom is 62, is she old enough?"


def test_year_bound_amounts_named_with_more_words():
    from services.scorer.gates import yearly_amount_year

    assert yearly_amount_year("What is the 2024 federal poverty guideline for a household of three?") == "2024"
    assert yearly_amount_year("How much is the Medicare Part A hospital inpatient deductible in 2024?") == "2024"


def test_processing_times_statistics_home_storage_and_nutrition_science_have_no_cfr_home():
    from shared.programs import states_named

    assert "general-knowledge" in families("How long does DEA usually take in practice to approve a registration?")
    assert "general-knowledge" in families("How many people are enrolled in CSFP nationwide right now?")
    assert "general-knowledge" in families("What's the best way to store homemade maple syrup after I open it?")
    assert "general-knowledge" in families("Which cheeses are naturally lowest in lactose?")
    assert "events" in families("Which pharmacies in Ohio were fined by the DEA last year?")
    # the rule's own deadline, a count the rule sets, a storage rule for a business: the CFR may answer
    assert "general-knowledge" not in families("How long does FNS have to decide a store's appeal?")
    assert "general-knowledge" not in families("How many people can serve on an IRB?")
    assert "general-knowledge" not in families("How must a warehouse store shell eggs?")
    # a food truck is where a seller sells; its permits are the locality's
    assert "state-law" not in families("I sell pseudoephedrine from a food truck: what is the daily limit?")
    assert "state-law" in families("Do I need a food truck permit to sell tamales?")
    # the State a figure is asked for, at the end of the question
    assert states_named("What's the Medicaid copay for a regular doctor's office visit in Georgia?") == ["Georgia"]
    assert states_named("What's the CSFP income limit for a single senior in Texas this year?") == ["Texas"]


def test_heldout11_wording_irmaa_brackets_shelf_life_interactions_and_feeding_age():
    # the brackets are the Social Security Administration's (20 CFR 418); 42 CFR 408.28 only applies them
    assert homes("How much is the IRMAA surcharge on Part B for a married couple with $250,000 of income?") == \
        {("medicare", 20)}
    assert ("medicare", 20) not in homes("Which section explains how IRMAA is applied to the Part B premium?")
    assert ("general-knowledge", 0) in homes("How long is an unopened can of peaches still good after the date?")
    assert ("general-knowledge", 0) in homes("Is it safe to take melatonin together with a sleep aid?")
    assert ("general-knowledge", 0) in homes("At what age should I start giving my baby peanut butter?")
    assert ("general-knowledge", 0) not in homes("What must the label of a nighttime sleep aid warn about?")


def test_an_absent_initialism_does_not_sink_a_well_matched_question():
    question = "Does gouda made with DHA need a milkfat statement?"
    scope = Scope(names=["DHA"], absent_names=["DHA"])
    strong = pre_gate(question, retrieval_of(make_hit("21 CFR 133.142", 0.75, 1), scope=scope), corpus_titles=[21])
    assert strong.refusal is None or "“DHA”" not in strong.refusal.message
    weak = pre_gate(question, retrieval_of(make_hit("21 CFR 133.142", 0.30, 1), scope=scope), corpus_titles=[21])
    assert weak.refusal is not None and weak.refusal.reason == "not_found" and "“DHA”" in weak.refusal.message


def test_coverage_also_reads_the_cfr_words_for_everyday_ones():
    from services.scorer.gates import compute_signals

    hit = make_hit("21 CFR 133.142", 0.45, 1, text="The commodity supplemental food program serves persons at "
                                                   "least 60 years of age.")
    retrieval = RetrieveResult(scope=Scope(), hits=[hit], mode="hybrid", top_k=10, embedding_model="m")
    th = ScorerThresholds()
    everyday = compute_signals("Who can get the senior food box?", retrieval, th)
    plain = compute_signals("Who can get the box?", retrieval, th)
    assert everyday["idf_coverage"] > plain["idf_coverage"]


def test_heldout12_wording_pet_treats_pesticide_applicators_poverty_guidelines_local_law():
    assert ("animal-drugs", 21) in homes("What do I need on a dog treat label?")
    assert ("epa", 40) in homes("Do I need a certification to spray restricted-use pesticides on my farm?")
    assert ("school-meals", 7) in homes("How much does USDA reimburse a school for each free lunch it serves?")
    assert ("general-knowledge", 0) in homes("What are the current federal poverty guidelines for a household of 3?")
    assert ("general-knowledge", 0) in homes("How long can I keep an opened jar of mayonnaise in the fridge?")
    assert ("events", 0) in homes("Does Hershey's milk chocolate bar actually meet the federal standard?")
    assert ("state-law", 0) in homes("We're a restaurant chain in NYC: when do we add the sodium warning icon?")
    # the rule's own terms: the CFR answers
    assert ("general-knowledge", 0) not in homes("How is the federal poverty level used for CSFP income limits?")
    assert ("events", 0) not in homes("What must milk chocolate contain to meet the federal standard?")


def test_heldout13_wording_health_advice_locators_state_programs_and_this_years_amounts():
    from services.scorer.gates import asks_for_figure, yearly_amount_year
    from shared.programs import states_named

    assert ("general-knowledge", 0) in homes("Is whole milk or skim milk healthier for my 2-year-old?")
    assert ("general-knowledge", 0) in homes("Is it safe to eat canned tuna while pregnant?")
    assert ("general-knowledge", 0) in homes("Which grocery stores near downtown Cleveland take SNAP EBT cards?")
    assert ("ssa", 20) in homes("How much can I earn while collecting Social Security before 67?")
    assert ("irs", 26) in homes("I work from a spare bedroom. Can I deduct my home office?")
    # the asker's store "near me" is where they shop, not a locator question
    assert ("general-knowledge", 0) not in homes("The corner store near me says I must spend $5 to use EBT. Legal?")
    assert ("general-knowledge", 0) not in homes("What makes a food 'healthy' under the nutrient content claim rules?")
    assert states_named("How much is the copay New York Medicaid charges for a generic prescription?") == ["New York"]
    assert asks_for_figure("What does Florida Medicaid pay pediatricians for an office visit?")
    assert yearly_amount_year("What is the Medicare Part A deductible per benefit period this year?", 2026) == "2026"
    assert yearly_amount_year("What will next year's Part B premium be?", 2026) == "2027"
    assert yearly_amount_year("How long is the enrollment period this year?", 2026) is None


# --------------------------------------------------------------------------------------------
# divergent needs siblings stating one requirement, not a part's sections sharing a heading word
# --------------------------------------------------------------------------------------------
CORPUS_DIR = Path(__file__).resolve().parents[1] / "data" / "corpus"


def parsed_hits(file_name: str, *sections: str) -> list[Hit]:
    """Hits for real sections parsed from a shipped corpus file, in the order given (similarity 0.6 to 0.5)."""
    from services.ingest.parsing import parse_file

    parsed = {s.section: s for s in parse_file(CORPUS_DIR / file_name) if s.section in sections}
    return [Hit(cfr_ref=parsed[n].cfr_ref, title=parsed[n].title, part=parsed[n].part, section=n,
                heading=parsed[n].heading, text=parsed[n].text, score=1.0 / (61 + i), similarity=0.6 - 0.02 * i,
                rank=i + 1, status="active", version_id=i + 1, source_date=parsed[n].source_date,
                matched_by=["dense", "fulltext"])
            for i, n in enumerate(sections)]


@pytest.mark.parametrize("question, file_name, sections", [
    ("My state's Medicaid charges copays on prescriptions. Our family income is a bit over 150% of poverty and one "
     "of my meds is non-preferred. How much can they charge me for it, and is there any overall cap on what my "
     "family pays?", "TheAxiomFoundation_axiom-corpus__title-42-part-447.xml.gz", ("447.52", "447.53", "447.56")),
    ("When I turn 65, how long is my first window to sign up for Medicare Part B?",
     "TheAxiomFoundation_axiom-corpus__title-42-part-406.xml.gz", ("406.21", "406.11", "406.22")),
])
def test_sections_of_one_part_stating_figures_for_different_things_are_not_divergent(question, file_name, sections):
    hits = parsed_hits(file_name, *sections)
    res = pre_gate(question, RetrieveResult(scope=Scope(), hits=hits, mode="hybrid", top_k=10, embedding_model="m"))
    assert res.refusal is None or res.refusal.reason != "divergent", res.refusal.message


def test_a_cheese_standard_worded_differently_is_still_a_divergent_sibling():
    from services.scorer.gates import same_requirement

    cheddar = ["The minimum milkfat content is 50 percent by weight of the solids"]
    hard = ["and their solids contain not less than 50 percent of milkfat, as determined by the methods "
            "prescribed in § 133.5 (a), (b)"]
    gruyere = ["The minimum milkfat content is 45 percent by weight of the solids and the maximum moisture content "
               "is 39 percent by weight, as determined by the methods described in § 133.5"]
    copays = ["Non-Preferred Drugs | 8 | 20% of the cost the agency pays."]
    assert same_requirement(hard, gruyere, {"hard"}, {"gruyer"}, 0.3)
    assert same_requirement(cheddar, gruyere, {"cheddar"}, {"gruyer"}, 0.3)
    assert not same_requirement(cheddar, copays, {"cheddar"}, {"drug"}, 0.3)


def test_a_heading_word_every_sibling_shares_does_not_single_one_out():
    """"appeal" is in both headings ("Filing appeals for QC claims of less than $50,000" / "... of $50,000 or
    more"): it named the shorter heading's section and dropped the one that answers."""
    hits = parsed_hits("TheAxiomFoundation_axiom-corpus__title-7-part-283.xml.gz", "283.25", "283.4", "283.6")
    question = ("Our state SNAP agency just got a quality control liability bill from FNS for about $38,000. How long "
                "do we have to file a notice of appeal?")
    res = pre_gate(question, RetrieveResult(scope=Scope(), hits=hits, mode="hybrid", top_k=10, embedding_model="m"))
    assert res.proceed
    assert [s.cfr_ref for s in res.sections][:2] == ["7 CFR 283.25", "7 CFR 283.4"]


def test_a_dye_named_by_its_number_singles_out_its_listing():
    from services.scorer.gates import Family, numbered_named

    reds = [make_hit("21 CFR 133.142", 0.6, i + 1).model_copy(update={"cfr_ref": f"21 CFR 74.{n}", "heading": h})
            for i, (n, h) in enumerate([("340", "FD&C Red No. 40."), ("1330", "D&C Red No. 30."),
                                        ("1333", "D&C Red No. 33.")])]
    family = Family(word="red", surface="red", members=reds)
    for question in ("lead limit red 40 dye", "What's the lead limit in Red #40?", "red no. 40 lead"):
        assert [m.cfr_ref for m in numbered_named(family, question)] == ["21 CFR 74.340"], question
    assert numbered_named(family, "lead limit for red dyes, up to 40 ppm?") == []
    assert numbered_named(family, "lead limit in red 400") == []


def test_a_dye_named_by_its_letter_singles_out_its_listing():
    from services.scorer.gates import Family, numbered_named

    oranges = [make_hit("21 CFR 133.142", 0.6, i + 1).model_copy(update={"cfr_ref": f"21 CFR 74.{n}", "heading": h})
               for i, (n, h) in enumerate([("250", "Orange B."), ("1254", "D&C Orange No. 4."),
                                           ("1255", "D&C Orange No. 5.")])]
    family = Family(word="orange", surface="orange", members=oranges)
    assert [m.cfr_ref for m in numbered_named(family, "How much Orange B can color hot dog casings?")] == ["21 CFR 74.250"]
    # "a" is a word, not a letter-name; an orange named by its number is not Orange B
    assert numbered_named(family, "Is orange a permitted color for sausage casings?") == []
    assert [m.cfr_ref for m in numbered_named(family, "orange no. 5 in lipstick")] == ["21 CFR 74.1255"]


def test_a_quoted_claim_worded_in_a_section_is_not_an_absent_name():
    from services.scorer.gates import worded_in

    hit = make_hit("21 CFR 133.142", 0.6, 1).model_copy(update={
        "heading": "Drug products marketed as over-the-counter (OTC) daytime sedatives.",
        "text": "Products labeled for relief of nervous tension, with claims such as calming or relaxing ..."})
    question = "I want to sell an OTC 'daytime calming' tablet. Is there an approved monograph ingredient?"
    assert worded_in(question, "daytime calming", [hit])
    # a proper name is not reworded, however many of its words a section has; nor is a word missing from it
    assert not worded_in("Does the Department of Energy set it?", "Department of Energy",
                         [hit.model_copy(update={"text": "the Department ... energy"})])
    assert not worded_in("Can I sell a 'Greek yogurt'?", "Greek yogurt", [hit])


def test_sections_stating_figures_for_different_things_do_not_conflict():
    from services.scorer.gates import worded_apart

    fpl = ["(A) 150 percent FPL (for premiums) or 133 percent FPL (for cost sharing)"]
    premiums = ["(1) Pregnant women described in paragraph (a)(1)(ii) of this section may be charged premiums that do "
                "not exceed 10 percent of the amount by which their family income exceeds 150 percent of the FPL."]
    assert worded_apart(fpl, premiums, {"limit", "premium", "cost", "share"}, {"premium"}, 0.3)
    # one requirement in like words, or a table row too short to tell, may conflict
    held = ["Milk shall be deemed to have been pasteurized if it has been held at a temperature of not less than "
            "143 °F for a period of not less than 30 minutes"]
    held_too = ["milk is pasteurized when held at a temperature of not less than 145 °F for not less than 30 minutes"]
    assert not worded_apart(held, held_too, {"cheddar"}, {"milk"}, 0.3)
    assert not worded_apart(["145 °F 1 | 30 minutes"], held, {"milk"}, {"cheddar"}, 0.3)


@pytest.mark.parametrize("question, words", [
    # heldout29/30's blind misses: advice as know-how, taste, tips and prices
    ("my homemade mozzarella curd keeps breaking instead of stretching, what am I doing wrong?", "what am I doing wrong"),
    ("Any tricks to get a picky 6-year-old to actually swallow the pinworm medicine?", "Any tricks"),
    ("Is it better to take my vitamin D in the morning or at night?", "Is it better to"),
    ("Cheddar or gouda on a smash burger: which one melts and tastes better?", "tastes better"),
    ("What's a fair price to charge for a pint of sorghum syrup at a craft fair?", "fair price"),
])
def test_know_how_taste_and_prices_are_judgements(question, words):
    assert judgement_asked(question) == words


@pytest.mark.parametrize("question", [
    "Is it required to take the sample before the product is shipped?",
    "Which cheese has the higher minimum milkfat, cheddar or gouda?",
    "What price must a SNAP retailer charge SNAP customers compared with other customers?",
    "How long must a pharmacy keep records of tips received by its staff?",
])
def test_rule_questions_near_those_forms_are_not_judgements(question):
    assert judgement_asked(question) is None


def test_a_judgement_word_inside_a_term_the_sections_use_is_not_a_judgement():
    from services.scorer.gates import termed_in

    hit = make_hit("21 CFR 133.142", 0.6, 1).model_copy(update={
        "cfr_ref": "42 CFR 447.510", "heading": "Requirements for manufacturers.",
        "text": "(a) Quarterly reports. A manufacturer must report product and pricing information for covered "
                "outpatient drugs to CMS not later than 30 days after the end of the rebate period, including AMP and "
                "best price."})
    question = "How soon after a quarter ends does a drug maker have to report AMP and best price to CMS?"
    assert judgement_asked(question) == "best" and termed_in(question, "best", [hit])
    assert not termed_in("Which is the best price comparison app for Medicaid drugs?", "best", [hit.model_copy(
        update={"text": "price comparisons"})])
    assert not termed_in("what's the best way to report it", "best", [hit.model_copy(update={"text": "the best way"})])
