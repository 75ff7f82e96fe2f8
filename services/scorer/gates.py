"""The evidence gates: before generation (``pre_gate``) and after it (``post_gate``).

Both are plain functions of their inputs and a ``ScorerThresholds`` (see ``confidence.py``), so the eval
harness can call and recalibrate them without the bus. Every refusal names its reason, says one plain
sentence, and carries its evidence (cfr_ref, version_id, source_date, status, the figures involved).

Pre-gate order (first that applies wins):

1. the question cites only sections/parts the corpus does not hold -> ``stale`` when a superseded version
   of the cited section is stored (removed since), else ``not_found`` naming the citation;
2. the question names a CFR title the corpus does not hold, or a program or a substance no held part covers, or
   asks for a judgement, a recommendation or a forecast (``judgement_asked``) -> ``not_found`` naming it;
3. nothing retrieved -> ``not_found`` (or ``stale`` when only superseded text matches);
4. the best superseded match is clearly better than the best active hit -> ``stale``;
5. the relevance signal (top-1 cosine, question-term coverage, dense/full-text agreement, margin) is below
   threshold and no cited section / heading-named subject backs the retrieval -> ``not_found``;
6. the question names a date before the top section's current text took effect -> ``stale``;
7. the only relevant support is not entitled to settle it (reserved, removed, editorial-only, unnamed
   appendix) -> ``below_authority``;
8. near-identical sibling sections, none singled out by the question, give different figures for the
   question's terms -> ``divergent`` (asks which one);
9. two strongly matched, non-sibling active sections give different figures for the same term ->
   ``conflicting``;
10. with the answer reader: no passage of the first handed sections reads as an answer -> ``not_found``;
11. otherwise proceed with the entitled sections (a named sibling first, other siblings dropped).
"""
from __future__ import annotations

import datetime
import itertools
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from shared.messages import (
    Citation,
    Evidence,
    Hit,
    PostGateRequest,
    PostGateResult,
    PreGateResult,
    Quote,
    Refusal,
    RetrieveResult,
    SentenceSupport,
)
from shared.programs import asks_tax_treatment, states_named, states_ruling
from shared.scoping import cfr_wording, defined_names, substance_words

from services.scorer.confidence import ScorerThresholds, citation_coverage, compute_confidence
from shared.figures import (
    DURATION_UNITS,
    asks_for_figure,
    Figure,
    extract_figures,
    find_cfr_refs,
    format_figure,
    latest_date,
    normalise_text,
)
from shared.embeddings import EmbeddingCache
from services.scorer.support import (
    QUESTION_FRAME,
    asked_part,
    STOPWORDS,
    UNIT_WORDS,
    CorpusStats,
    claim_body,
    claim_support,
    content_words,
    idf_coverage,
    split_sentences,
    stem,
    question_key_stems,
    stem_set,
    term_coverage,
    tokens,
)

from services.scorer.reader import passage_body

if TYPE_CHECKING:
    from services.scorer.reader import AnswerReader, Reading

# heading words that never make a family of sibling sections
_GENERIC_HEADING = frozenset(
    stem(w)
    for w in """general definitions definition provisions provision applicability scope purpose requirements
    requirement specific other related certain special miscellaneous exemptions exemption procedures procedure
    products product""".split()
)


# --------------------------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------------------------
def _sim(hit: Hit) -> float:
    return float(hit.similarity) if hit.similarity is not None else 0.0


def _evidence(hit: Hit, figures: list[str] | None = None, detail: str | None = None) -> Evidence:
    return Evidence(
        cfr_ref=hit.cfr_ref, heading=hit.heading, version_id=hit.version_id, source_date=hit.source_date,
        status=hit.status, figures=figures or [], detail=detail,
    )


def _join(items: list[str], conj: str = "and") -> str:
    items = [i for i in items if i]
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + f" {conj} " + items[-1]


def _citation_ref(c) -> str:
    if c.title is None:
        return c.raw
    if c.section:
        return f"{c.title} CFR {c.section}"
    if c.part:
        return f"{c.title} CFR part {c.part}"
    return f"title {c.title}"


def _short_question(question: str, limit: int = 90) -> str:
    q = re.sub(r"\s+", " ", question).strip().rstrip("?.! ")
    if len(q) > limit:
        q = q[: limit - 1].rsplit(" ", 1)[0] + "…"
    return f"“{q}”"


def _refuse(reason: str, message: str, evidence: list[Evidence], signals: dict[str, float]) -> PreGateResult:
    return PreGateResult(proceed=False, refusal=Refusal(reason=reason, message=message, evidence=evidence),
                         sections=[], signals=signals)


def _not_found_beside(closest: Hit, message: str, detail: str, signals: dict[str, float]) -> PreGateResult:
    """not_found with the closest section as the evidence of what the corpus does say."""
    return _refuse("not_found", message, [_evidence(closest, detail=detail)], signals)


def _iso(date: str | None) -> str | None:
    return date[:10] if date else None


def _human_date(iso: str | None) -> str:
    if not iso:
        return "an unknown date"
    months = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
              "November", "December"]
    try:
        y, m, d = (int(x) for x in iso[:10].split("-"))
        return f"{months[m - 1]} {d}, {y}"
    except (ValueError, IndexError):
        return iso


# --------------------------------------------------------------------------------------------
# entitlement: which text may settle a question
# --------------------------------------------------------------------------------------------
def appendix_named(question: str, hit: Hit) -> bool:
    """An appendix is guidance unless the question names it ("appendix B to part 101")."""
    q = question.lower()
    if "appendix" not in q and "appendices" not in q:
        return False
    m = re.search(r"appendix\s+([a-z0-9]+)", hit.section.lower())
    letter = m.group(1) if m else ""
    named_letter = re.findall(r"appendix\s+([a-z0-9]+)\b", q)
    if letter and named_letter:
        return letter in named_letter and (hit.part in q or "part" not in q)
    return hit.part in q or not named_letter


def entitlement(hit: Hit, question: str, th: ScorerThresholds) -> str | None:
    """None when the hit may settle the question, else why not."""
    if hit.status != "active":
        return "superseded"
    if hit.removed:
        return "removed"
    if hit.reserved or re.fullmatch(r"\s*\[?reserved\]?\.?\s*", hit.text or "", re.I) and (
        not hit.text.strip() or "reserved" in hit.text.lower()
    ):
        return "reserved"
    body = (hit.text or "").strip()
    notes = " ".join(hit.editorial_notes + ([hit.source_note] if hit.source_note else []))
    if not body:
        return "editorial" if notes else "empty"
    if hit.kind == "appendix" and not appendix_named(question, hit):
        return "appendix"
    if notes:
        cov_text = term_coverage(question, f"{hit.heading}\n{body}")
        cov_notes = term_coverage(question, notes)
        if cov_text < th.editorial_only_text_coverage and cov_notes >= th.editorial_only_notes_coverage:
            return "editorial"
    return None


_ENTITLEMENT_WORDS = {
    "reserved": "is reserved and holds no rule text",
    "removed": "has been removed",
    "editorial": "matches only in its editorial notes or source citation, not in its rule text",
    "empty": "holds no rule text",
    "appendix": "is an appendix, which is guidance rather than a rule",
    "superseded": "is superseded",
}


# --------------------------------------------------------------------------------------------
# figures relevant to a question inside a section
# --------------------------------------------------------------------------------------------
_CLAUSE_SPLIT = re.compile(r";\s+|,\s+(?=(?:and|but|or|except|provided|unless|whichever)\b)|(?<=[a-z0-9)%])\.\s+(?=[A-Z(])")


@dataclass
class FigureHit:
    figure: Figure
    overlap: int  # question terms (and anchor figures) the clause shares
    anchored: bool
    clause: str


def _clauses(text: str) -> list[tuple[str, str]]:
    """(clause, context) pairs; table rows take the preceding prose line as context."""
    out = []
    context = ""
    for line in (text or "").split("\n"):
        line = line.strip()
        if not line:
            continue
        if " | " in line:
            out.append((line, context))
            continue
        context = line
        for clause in _CLAUSE_SPLIT.split(line):
            if clause.strip():
                out.append((clause.strip(), ""))
    return out


def relevant_figures(text: str, key_stems: set[str], anchors: list[Figure], window: int = 10) -> list[FigureHit]:
    """Figures of ``text`` that answer the question's key terms.

    A clause containing one of the question's own figures (an anchor, e.g. "30 minutes") gives its other
    figures; otherwise each key-term occurrence takes the nearest figure with a unit within ``window``
    tokens (after it preferred).
    """
    hits: list[FigureHit] = []
    for clause, context in _clauses(text):
        figs = [f for f in extract_figures(clause) if f.unit and f.unit not in ("year",)]
        if not figs:
            continue
        words = [(m.start(), stem(m.group(0))) for m in re.finditer(r"[A-Za-z][A-Za-z'\-]*", clause)]
        clause_stems = {s for _, s in words} | (stem_set(context) if context else set())
        anchor_figs = [f for f in figs if any(f.matches(a) and f.unit == a.unit for a in anchors)]
        overlap = len(key_stems & clause_stems) + len(anchor_figs)
        if anchor_figs:
            for f in figs:
                if f not in anchor_figs:
                    hits.append(FigureHit(f, overlap, True, clause))
            continue
        if not key_stems & clause_stems:
            continue
        if context and not key_stems & {s for _, s in words}:
            # table row without anchors: the row's figures all belong to the context's terms
            for f in figs:
                hits.append(FigureHit(f, overlap, False, clause))
            continue
        # token index of each figure and each key term
        tok_pos = [m.start() for m in re.finditer(r"\S+", clause)]

        def tok_index(char: int) -> int:
            lo = 0
            for i, p in enumerate(tok_pos):
                if p <= char:
                    lo = i
            return lo

        fig_idx = [(tok_index(f.start), tok_index(max(f.start, f.end - 1)), f) for f in figs]
        chosen: set[int] = set()
        for start, s in words:
            if s not in key_stems:
                continue
            k = tok_index(start)
            best = None
            for j, (fs, fe, f) in enumerate(fig_idx):
                if fs > k:
                    d = fs - k
                    score = d
                else:
                    d = k - fe
                    score = d + 0.5  # figures after the term win ties
                if d <= window and (best is None or score < best[0]):
                    best = (score, j)
            if best is not None:
                chosen.add(best[1])
        for j in sorted(chosen):
            hits.append(FigureHit(fig_idx[j][2], overlap, False, clause))
    return hits


def primary_hits(text: str, key_stems: set[str], anchors: list[Figure], window: int = 10) -> list[FigureHit]:
    """The figure hits of the best-matching clauses (highest overlap; clauses holding the question's own figure
    first)."""
    found = relevant_figures(text, key_stems, anchors, window)
    if any(h.anchored for h in found):
        found = [h for h in found if h.anchored]
    best = max((h.overlap for h in found), default=0)
    return [h for h in found if h.overlap == best]


def _distinct_figures(hits: list[FigureHit]) -> list[Figure]:
    out: list[Figure] = []
    for h in hits:
        if not any(h.figure.key == o.key for o in out):
            out.append(h.figure)
    return out


def primary_figures(text: str, key_stems: set[str], anchors: list[Figure], window: int = 10,
                    min_overlap: int = 1) -> tuple[list[Figure], int]:
    """The figures of the best-matching clauses (highest overlap), de-duplicated, and that overlap."""
    hits = primary_hits(text, key_stems, anchors, window)
    best = hits[0].overlap if hits else 0
    if best < min_overlap:
        return [], best
    return _distinct_figures(hits), best


def _wording(clause: str, own_name: set[str]) -> set[str]:
    """A clause's words without its figures and without the words naming its own section's subject."""
    return {s for s in stem_set(clause) if not any(ch.isdigit() for ch in s)} - own_name


def same_requirement(a: list[str], b: list[str], own_a: set[str], own_b: set[str], min_share: float) -> bool:
    """Whether two sections state their figures in clauses worded alike once their names are set aside, as
    sibling standards do ("the minimum milkfat content is 50 percent by weight of the solids" in Cheddar, "... 46
    percent ..." in Gouda), unlike sections of one part that state figures for different things (the cost-sharing
    sections' 100 percent of poverty and 20 percent of the cost of a drug)."""
    wordings_b = [w for w in (_wording(c, own_b) for c in b) if w]
    for wa in (_wording(c, own_a) for c in a):
        if wa and any(len(wa & wb) / len(wa | wb) >= min_share for wb in wordings_b):
            return True
    return False


def _clauses_stating(text: str, key_stems: set[str], anchors: list[Figure], th: ScorerThresholds, unit: str,
                     value: float) -> list[str]:
    """The clauses of ``text`` that state ``value`` in ``unit`` for the question's terms: two sections conflict only
    when they state their figures for one requirement in like words (not 447.56's "133 percent" of the poverty line
    against 447.55's premiums capped at "10 percent" of income)."""
    return [h.clause for h in relevant_figures(text, key_stems, anchors, th.figure_window_tokens)
            if h.figure.unit == unit and h.figure.value == value]


def worded_apart(a: list[str], b: list[str], own_a: set[str], own_b: set[str], min_share: float,
                 min_words: int = 3) -> bool:
    """Whether two sections' clauses plainly state their figures for different things: every clause worded (a
    table row, "145 °F | 30 minutes", has too few words to tell) and no pair sharing ``min_share`` of its words."""
    if not a or not b or any(len(_wording(c, set())) < min_words for c in a + b):
        return False
    return not same_requirement(a, b, own_a, own_b, min_share)


def term_figures(text: str, key_stems: set[str], anchors: list[Figure], th: ScorerThresholds) -> dict:
    """Figures of ``text`` for the question's terms, grouped by the question terms their clause holds
    (``frozenset`` of stems, or ``{"#anchor"}`` for clauses holding the question's own figure); only clauses that
    hold at least ``conflict_min_term_share`` of the key terms (and ``conflict_min_term_overlap`` of them), and
    no calendar dates."""
    need = max(th.conflict_min_term_overlap, math.ceil(th.conflict_min_term_share * len(key_stems)))
    out: dict[frozenset, list[Figure]] = {}
    for h in relevant_figures(text, key_stems, anchors, th.figure_window_tokens):
        if h.figure.unit in ("date", "year"):
            continue
        if h.anchored:
            terms = frozenset({"#anchor"})
        else:
            terms = frozenset(key_stems & stem_set(h.clause))
            if len(terms) < need:
                continue
        figs = out.setdefault(terms, [])
        if not any(f.key == h.figure.key for f in figs):
            figs.append(h.figure)
    return out


def _fig_text(figs: list[Figure]) -> str:
    return _join([f.key for f in figs], "or")


# --------------------------------------------------------------------------------------------
# question analysis
# --------------------------------------------------------------------------------------------
@dataclass
class QuestionTerms:
    stems: set[str]  # all content stems
    key: set[str]  # content stems minus framing and unit words
    anchors: list[Figure]  # the question's own figures with units
    surface: list[str]  # lower-case words in order (for phrasing messages)


def analyse_question(question: str) -> QuestionTerms:
    stems = set(content_words(question))
    key = set(content_words(question, drop=QUESTION_FRAME | UNIT_WORDS))
    anchors = [f for f in extract_figures(question) if f.unit and f.unit not in ("date", "year")]
    return QuestionTerms(stems, key, anchors, tokens(question))


_ASKS_FOR_DOLLARS = re.compile(
    r"\b(?:what|which)\s+(?:dollar|\$)|\bdollar\s+(?:[a-z-]+\s+){0,2}(?:amounts?|figures?|thresholds?|limits?|values?|"
    r"caps?)\b|"
    r"\bhow\s+(?:much|many)\s+(?:money|dollars)\b|\bin\s+dollars\b|"
    r"\bhow\s+much\s+(?:is|are|would(?:\s+be)?|will(?:\s+be)?)\s+(?:the|a|my|our)\s+(?:fines?|penalt(?:y|ies))"
    r"(?=\s*(?:be\b|for\b|per\b|if\b|on\b|when\b|that\b|[?,.!]|$))|"
    # the price of something one pays for: "what does the state license cost"
    r"\b(?:what|how\s+much)\s+(?:does|do|will|would)\s+(?:the\s+|a\s+|an\s+|my\s+|our\s+|this\s+|that\s+)?"
    r"(?:[\w-]+\s+){0,4}?(?:licen[cs]es?|permits?|registrations?|certifications?|applications?|fees?|kiosks?|"
    r"inspections?|renewals?|cards?|premiums?|envelopes?|tests?)\s+cost\b",
    re.I,
)
_STATES_DOLLARS = re.compile(r"\$\s?\d|\bdollars?\b", re.I)
# an illustration is not an amount: "(for example, if the income level ... is set at $400, ...)"
_EXAMPLE = re.compile(r"\((?:for example|for instance|e\.g\.)[^()]*\)|(?:^|(?<=[.;:]\s))(?:for example|for instance|"
                      r"example)\b[^.]*\.", re.I)


def states_dollars(text: str) -> bool:
    """Whether the text states a dollar amount other than in an example."""
    return bool(_STATES_DOLLARS.search(_EXAMPLE.sub(" ", text)))


# a measure the question asks for by its unit ("how many calories", "in parts per billion"), and the
# canonical units (shared.figures) a section's figure must have to give it
_MEASURES: dict[str, frozenset[str]] = {
    "calories": frozenset({"calories"}),
    "weight": frozenset({"mg", "mcg", "g", "kg", "pounds", "ounces"}),
    "volume": frozenset({"fl oz", "gallons", "quarts", "pints", "ml", "liters", "ounces"}),
    "concentration": frozenset({"ppm", "ppb"}),
    "temperature": frozenset({"°F", "°C", "degrees"}),
    "length": frozenset({"inches", "feet", "mm", "cm", "meters"}),
    "time": DURATION_UNITS,
}
_MEASURE_WORDS = [
    ("calories", r"calories|kcals?|kilocalories"),
    ("weight", r"milligrams|micrograms|grams|kilograms|pounds|ounces|mg|mcg"),
    ("volume", r"gallons|quarts|pints|liters|litres|milliliters|fluid ounces"),
    ("concentration", r"parts per (?:million|billion)|ppm|ppb"),
    ("temperature", r"degrees"),
    ("length", r"inches|feet|centimeters|millimeters|meters"),
]
_ASKS_FOR_MEASURE = [
    (measure, re.compile(rf"\bhow (?:many|much) (?:{words})\b|\b(?:in|into) (?:{words})\b(?=[^.]*\?|\s*$)|"
                         rf"\bnumber of (?:{words})\b", re.I))
    for measure, words in _MEASURE_WORDS
] + [("temperature", re.compile(r"\bwhat temperature\b|\bhow (?:hot|cold)\b", re.I)),
     # not "how long": a rule gives durations in words as often as in figures ("the eighth consecutive month")
     ("time", re.compile(r"\bhow many (?:days|weeks|months|years|hours|minutes)\b", re.I)),
     # acidity is stated as "pH 4.6" or "a pH of 4.6 or below"; a section that never says pH sets none
     ("pH", re.compile(r"\bph\b(?!\.?d\b)", re.I)),
     ("age", re.compile(r"\bhow old\b|\b(?:minimum|maximum|what|which|legal|youngest|oldest) age\b|"
                        r"\bage (?:limit|requirement|cut-?off|minimum|restriction)s?\b|\bold enough\b", re.I))]
# an age a section sets: "65 years of age", "age 18", "children under 12 years", "adults 12 years and over"
_STATES_AGE = re.compile(
    r"\b(?:age[ds]?|age of)\s+\d+|\bage\b[^.]{0,40}?\b\d+\s*(?:years?|months?)\b|"
    r"\b\d+\s*(?:years?|yrs?\.?|months?|weeks?|days?)(?:\s+of\s+age|\s+old|\s+(?:or|and)\s+(?:older|over|"
    r"above|younger|under))|\b(?:under|over|younger than|older than|below|above)\s+(?:the\s+age\s+of\s+)?\d+\s*"
    r"(?:years?|months?)\b|\b\d+\s+(?:to|through|-)\s+(?:under\s+)?\d+\s+years?\b|"
    r"\b(?:birthday|minors?|juveniles?)\b|"
    # how old a food must be: "cured for not less than 60 days"
    r"\b(?:cured|ripened|aged|stored|held)\b[^.]{0,40}?\b\d+\s*(?:days?|weeks?|months?)\b", re.I)


def asked_measure(question: str) -> str | None:
    """The kind of measure the question asks for by its unit: "calories", "weight", "time", ... or None."""
    return next((measure for measure, pattern in _ASKS_FOR_MEASURE if pattern.search(question)), None)


def gives_measure(text: str, measure: str) -> bool:
    """Whether the text states a figure in one of the measure's units."""
    if measure == "age":
        return bool(_STATES_AGE.search(text))
    if measure == "pH":
        return re.search(r"\bpH\b", text) is not None
    units = _MEASURES[measure]
    return any(f.unit in units for f in extract_figures(text))


_INITIALISM = re.compile(r"[A-Z]{2,5}s?")
# families whose naming is the question's ask whatever held program it mentions: "the half-life of
# diphenhydramine in a sleep aid", "which pharmacies were fined by the DEA"
ASKED_AS_SUCH = frozenset({"general-knowledge", "events", "statutes", "incentives"})
_JOINING = re.compile(
    r"\b(?:eligible|eligibility|qualify|qualified|qualifies|apply|applying|enroll|enrolling|sign(?:ed|ing)? up|"
    r"get|getting|receive|receiving|benefits?|approved)\s+(?:for|in|into|from|to)\s+(?:the\s+)?(?:[\w-]+\s+){0,2}$",
    re.I,
)


_PARENTHESIS = re.compile(r"(?P<before>[\w.-]+)\s*\((?P<inside>[^()]*)\)")


def glossed(question: str, name: str, absent: list[str]) -> bool:
    """Whether ``name`` only explains another word of the question in parentheses, a word the corpus does have:
    "ONDCP (the White House drug policy office)" asks about ONDCP."""
    for match in _PARENTHESIS.finditer(question):
        if name.lower() in match.group("inside").lower():
            before = match.group("before")
            return not any(before.lower() in a.lower().split() for a in absent)
    return False


def worded_in(question: str, name: str, hits: list[Hit]) -> bool:
    """Whether ``name`` is a claim the user quotes in their own words, every word of which one of ``hits`` has,
    though not as a phrase ("a 'daytime calming' tablet" against "... daytime sedatives ... calming"): it names
    what the section is about. A proper name ("Department of Energy") is not reworded, nor is one word."""
    words = stem_set(name)
    quoted = re.search(rf"[\"“‘']{re.escape(name)}[\"”’']", question, re.I) is not None
    return quoted and len(words) > 1 and any(words <= stem_set(f"{h.heading} {h.text}") for h in hits)


def asked_to_join(question: str, said: str) -> bool:
    """Whether the program the question names with ``said`` is the one it asks to qualify for, apply to or get
    ("am I eligible for WIC", "can I sign up for Medigap"), not the asker's situation ("I'm on Medicaid")."""
    at = question.lower().find(said.lower())
    return at >= 0 and bool(_JOINING.search(question[max(0, at - 60):at]))


_TEMPORAL_BEFORE = re.compile(
    r"(?:\b(?:in|as of|before|during|on|prior to|until|back in|circa|effective|of|from|for)\s+(?:(?:early|late|mid)[\s-]+)?"
    r"(?:the\s+)?(?:year\s+)?)$",
    re.I,
)
_TEMPORAL_AFTER = re.compile(r"^\s*(?:version|edition|rule|rules|regulation|regulations|standard|text|cfr|amendment)\b", re.I)


_YEARLY_AMOUNT = re.compile(
    r"\b(?:(?:for|in) (?:the )?)?(?:fiscal|calendar|plan|crop|school|program|benefit) year (?P<a>(?:19|20)\d\d)\b"
    r"|\b(?:fy|cy|py) ?(?P<b>(?:19|20)\d\d)\b"
    r"|\bfor (?P<c>(?:19|20)\d\d)\b"
    # (a day's date, "after January 1, 2023 enrolls in premium Part A", is a condition, not the year of an amount)
    r"|(?<!\d, )(?<!\d,)\b(?P<d>(?:19|20)\d\d)(?:[-\u2013/]\d\d)? (?:\w+ ){0,4}(?:premiums?|allotments?|amounts?|"
    r"limits?|rates?|deductibles?|thresholds?|fees?|levels?|figures?|caps?|maximums?|payments?|adjustments?|guidelines?|grants?)\b"
    # a money amount named before the year it is asked for ("the income limit … in 2024", "IRMAA surcharge in 2025")
    r"|\b(?:dollars?|income limits?|premiums?|surcharges?|allotments?|penalt(?:y|ies)|co-?pays?|co-?payments?|prices?|"
    r"brackets?|allowances?|deductibles?|coinsurance|poverty (?:guidelines?|levels?|lines?)|income thresholds?)\b[^.?!]{0,80}?\b(?:in|for|during) (?:(?:fiscal|calendar) year )?(?P<e>(?:19|20)\d\d)\b",
    re.I,
)
# amounts adjusted for inflation every year are published by notice; the CFR text gives the base amount or the method
_INFLATION_ADJUSTED = re.compile(r"\binflation[- ]adjust\w*|\badjust\w* for inflation\b", re.I)


_ASKS_ABOUT_THE_PAST = re.compile(
    r"\b(?:was|were|did|had to|used to|back (?:in|then)|as of|at the time|prior to|in effect|in force|previously|"
    r"formerly|earlier|historical(?:ly)?|originally|old(?:er)? (?:rules?|versions?|text)|then)\b",
    re.I,
)


_THIS_YEAR = r"(?:this|next|the current|the coming) (?:fiscal |calendar |crop |school |plan )?year"
_THIS_YEARS_AMOUNT = re.compile(
    r"\b(?:premiums?|deductibles?|allotments?|co-?pays?|co-?payments?|coinsurance|income (?:limits?|cut-?offs?|"
    r"thresholds?)|surcharges?|penalt(?:y|ies)|fees?|rates?|quotas?)\b[^.?!]{0,80}?\b(?:for |in )?" + _THIS_YEAR + r"\b|"
    r"\b(?:this|next) (?:fiscal |calendar )?year'?s\s+(?:\w+\s+){0,5}"
    r"(?:premiums?|deductibles?|allotments?|co-?pays?|income limits?|surcharges?|penalt(?:y|ies)|fees?|rates?|quotas?)\b|"
    # "the limit is adjusted for inflation every year. What's the actual maximum this year?"
    r"\b(?:maximum|minimum|limit|cap|amount)\s+(?:is\s+|for\s+|in\s+)?" + _THIS_YEAR + r"\b",
    re.I,
)


# what a regulation never settles: a judgement on the asker's own case or chances, a comparison or recommendation
# of products, plans or programs, a forecast. "Is it safe/okay to ..." is not among them: an OTC label's warnings
# ("Do not use if you have diabetes") answer it
_JUDGEMENT = re.compile("|".join((
    r"\bdo (?:i|we|they) (?:even |really )?have a (?:good |strong |real )?case\b",
    r"\bchances? (?:of|that) (?:winning|getting|being|we|i)\b",
    r"\b(?:any|what are (?:my|our|the)|good) chances?\b",
    r"\brealistically\b",
    r"\b(?:safer|healthier|safest|healthiest)\b",
    r"\b(?:likely|going) to win\b|\bwould (?:i|we|they) win\b",
    r"\b(?:a|the) better (?:choice|option|buy|pick|bet)\b",
    # an evaluative comparison, not "which is higher, the cheddar or the colby minimum"
    r"\bwhich (?:\w+ )?(?:is|works|would be|one is|would do|are) (?:(?:a lot|much|any) )?(?:better|worse|safer|best|"
    r"more for|easier|harder|gentler|rougher|cheaper|stronger|weaker|riskier|less risky|more effective|less effective|"
    r"smarter|wiser|nicer|tastier)\b",
    r"\bwhich is better\b",
    r"\bis it (?:better|smarter|wiser|cheaper) to\b",
    r"\b(?:melts?|tastes?|works?|looks?|sells?|lasts?) (?:better|best)\b",
    # troubleshooting and tips are know-how, and a price to ask is the seller's to set
    r"\bwhat am i doing wrong\b|\bany (?:tips|tricks)\b|\b(?:tips|tricks) (?:to|for) (?:get|getting|make|making)\b",
    r"\bfair price\b|\bhow much should (?:i|we) (?:charge|ask|sell)\b|\bwhat (?:price )?should (?:i|we) charge\b",
    r"\bbest\b(?![- ](?:by|if|before|used))",
    r"\b(?:likely|going|expected) to (?:\w+ )?(?:ban|go(?:ing)? up|go(?:ing)? down|rise|fall|increase|decrease|drop|"
    r"be cut|be banned)\b",
    r"\bprices? (?:go|going|will go|to go) (?:up|down)\b",
    r"\bwill \w+(?: \w+)? (?:go up|go down|rise|fall|drop)\b",
    r"\bany chance\b",
    r"\b(?:the|what are the|any|good|bad|our|my|his|her|their) odds\b|\bodds (?:of|that|are)\b",
    r"\bdo you think\b[^.?!]*\b(?:will|would|is going|\w+'ll)\b|\bin your (?:opinion|view)\b",
    # advice as a comparison of choices: "would it be smarter to sign up now", "would I be better off waiting",
    # "is the store brand just as good a buy"
    r"\bwould (?:it|that) be (?:smarter|wiser|better|cheaper|safer|a (?:good|bad|smart|better) (?:idea|move|choice))\b",
    r"\bbetter off\b",
    r"\bjust as (?:good|effective|safe|strong)\b|\bas good (?:a (?:buy|deal|choice|value|product) )?as\b",
    # a forecast of what an agency will do, or of anything next year
    r"\bwill (?:the )?(?:fda|usda|dea|cms|fns|hhs|congress|the government|government)\s+(?:ever\s+|eventually\s+|"
    r"soon\s+|also\s+)?(?:ban|approve|change|raise|lower|increase|cut|lift|expand|extend|drop|end|stop|add|outlaw|"
    r"restrict|allow)\b",
    r"\bwill\b[^.?!]{0,60}\bnext year\b",
    # asked of someone else ("is my state going to ... next year"), not the asker's own plan ("we are going to")
    r"\b(?:is|are) (?:my |our |the |this |that )?[\w-]+(?: [\w-]+)? going to\b[^.?!]{0,60}\bnext year\b",
    # a private suit: the regulations here set what an agency does, not whether a pharmacy or a store can be sued
    r"\bgrounds (?:to sue|for a (?:lawsuit|suit))\b|\b(?:sue|suing) (?:the|my|our|that|this|a|them|him|her)\b",
    r"\bdoing a good job\b",
    r"\bis (?:it|that|this) (?:really )?(?:fair|unfair|ethical|unethical|moral|immoral)\b",
    # worry is the asker's to weigh: "should I be worried about the aspartame in my diet soda"
    r"\b(?:should|do|must) (?:i|we|you) (?:\w+ )?(?:be|get) (?:worried|concerned|scared|afraid|alarmed|nervous)\b|"
    r"\bworth worrying\b",
    r"\bworth (?:it|the (?:trouble|hassle|effort|money|cost|time|risks?))\b",
    # advice asked as a yes/no "should I/we …", not a rule's "how much notice should he get" or "when should I
    # stop taking it" (a wh-word before the modal), nor a duty asked as "should we keep/report/label …"
    r"(?:^|[.?!;:]\s+|,\s*|\b(?:or|and|so|then|but)\s+)(?:(?:honestly|really|just|now),?\s+)?should\s+(?:i|we)\s+"
    r"(?:(?:just|still|really|even|also)\s+)?(?!(?:report|keep|file|notify|label|register|submit|record|retain|declare|"
    r"list|disclose|include|call|use|pay|charge|apply|be|have|tell\s+(?:the\s+)?(?:customers?|buyers?|patients?))\b)\w+",
)), re.I)


# a judgement given as the asker's reason is not asked: "labeled 'Greenland halibut' because it sells better"
_GIVEN_REASON = re.compile(r"\b(?:because|since|cause|as)\s+(?:[\w'-]+\s+){0,3}$", re.I)


def _form_of(said: str) -> re.Pattern:
    name = re.escape(said)
    return re.compile(rf"\b{name}\s+forms?\b|\bforms?\b[^.?!]{{0,15}}\b(?:from|of|does)\s+(?:the\s+)?{name}\b", re.I)


def asks_for_form_of(question: str, said: str, hits: list[Hit] = ()) -> bool:
    """Whether the question asks for a form of the agency it names, one none of ``hits`` names: "what OPM form do I
    use" asks about OPM's process, however much of it is about a held program's premium, while SNAP's rules do name
    the "USCIS Form G-845" a caseworker sends."""
    form = _form_of(said)
    return form.search(question) is not None and not any(form.search(h.text) for h in hits)


def judgement_asked(question: str) -> str | None:
    """The words by which the question asks for a judgement, a recommendation or a forecast, if it does."""
    for match in _JUDGEMENT.finditer(question):
        if not _GIVEN_REASON.search(question[:match.start()]):
            return match.group(0).strip(" .,;:?!")
    return None


_FUNCTION_WORDS = frozenset("a an the to for of in on at by with and or but if than then that this it is are be as "
                            "way ways one ones thing things".split())


def termed_in(question: str, judgement: str, hits: list[Hit]) -> bool:
    """Whether the judgement's word is part of a term one of ``hits`` uses: "report AMP and best price" names
    Medicaid's "best price", not the best of anything."""
    match = re.search(rf"\b{re.escape(judgement)}\s+([a-z][\w-]*)", question, re.I)
    if not match or match.group(1).lower() in _FUNCTION_WORDS:
        return False
    term = re.sub(r"\s+", " ", match.group(0)).lower()
    return any(re.search(rf"\b{re.escape(term)}\b", re.sub(r"\s+", " ", h.text).lower()) for h in hits)


# a limit the section leaves to another: "a civil money penalty of up to an amount specified in § 3.91(b)(3)(i) of
# this title for each violation"
_LIMIT_ELSEWHERE = re.compile(
    r"(?:up to|not (?:to )?exceed|maximum of|no more than)\s+(?:an?\s+|the\s+)?(?:amounts?|limits?|figures?|rates?|"
    r"levels?|sums?)\s+(?:as\s+)?(?:specified|set forth|set out|established|prescribed|provided|published|listed|"
    r"stated|determined)\s+(?:in|under|at|by)\s+§+\s*(?P<section>\d+[a-z]?\.\d+[a-z]?)(?:\([^)]*\))*"
    r"(?:\s+of\s+this\s+(?:title|chapter))?",
    re.I,
)
# what the section leaves to another to define or set: "substantial lottery or gambling winnings as defined in
# § 273.11(r)"; "The table of these maximum civil money penalties can be found at 45 CFR 102.3"
_DEFINED_ELSEWHERE = re.compile(
    r"(?:(?:as\s+)?(?:defined|specified|set forth|set out|established|prescribed|determined)|can be found|are found|"
    r"are listed|is listed|are published|is published)\s+(?:in|under|at)\s+"
    r"(?:(?P<title>\d+)\s+CFR\s+(?:part\s+)?|§+\s*)(?P<section>\d+[a-z]?(?:\.\d+[a-z]?)?)(?:\([^)]*\))*"
    r"(?:\s+of\s+this\s+(?:title|chapter))?",
    re.I,
)
_ASKS_FOR_AN_AMOUNT = re.compile(
    r"\bhow (?:much|many|big|large|high|low)\b|\b(?:dollars?|cut-?offs?|thresholds?|limits?|amounts?|maximum|minimum|"
    r"caps?)\b", re.I)
_ASKS_FOR_A_LIMIT = re.compile(r"\b(?:max(?:imum)?|cap|upper limit|most|highest|up to|how much (?:can|could|may|will))\b",
                               re.I)


def limit_held_elsewhere(question: str, hit: Hit, key: set[str], held: frozenset[str]) -> tuple[str, str] | None:
    """(the section not held, the words that refer to it) when the hit leaves the figure asked for to a section
    this corpus does not hold: a limit set "up to an amount specified in § 3.91", or a subject that only a section
    not held defines ("substantial lottery or gambling winnings as defined in § 273.11(r)", with no figure in any
    sentence about it)."""
    sentences = split_sentences(hit.text)
    if _ASKS_FOR_A_LIMIT.search(question):
        for sentence in sentences:
            for match in _LIMIT_ELSEWHERE.finditer(sentence):
                target = f"{hit.title} CFR {match.group('section')}"
                if target not in held and len(key & stem_set(sentence)) >= 2:
                    return target, match.group(0)
    # the figure asked is in what the section leaves to another: every sentence about the question's subject
    # states no figure, and one of them defers to a section not held ("how is the rate set" asks the method, which
    # the section may well give)
    if not _ASKS_FOR_AN_AMOUNT.search(question):
        return None
    about = [sentence for sentence in sentences if len(key & stem_set(sentence)) >= 2]
    if not about or any(extract_figures(sentence) for sentence in about):
        return None
    for sentence in about:
        for match in _DEFINED_ELSEWHERE.finditer(sentence):
            target = f"{match.group('title') or hit.title} CFR {match.group('section')}"
            part_held = "." not in target and any(ref.startswith(target + ".") for ref in held)
            if target not in held and not part_held:
                return target, match.group(0)
    return None


def yearly_amount_year(question: str, this_year: int | None = None) -> str | None:
    """The year of a year-bound amount the question asks for ("the Part B premium for 2025", "the FY2025
    allotment", "the Part A deductible this year"): such amounts are announced each year by notice, while the CFR
    text says how they are figured."""
    if not asks_for_figure(question):
        return None
    match = _YEARLY_AMOUNT.search(question)
    if match:
        return next((g for g in match.groups() if g), None)
    if _THIS_YEARS_AMOUNT.search(question):
        year = this_year or datetime.date.today().year
        return str(year + 1) if re.search(r"\bnext year", question, re.I) else str(year)
    return None


def states_amount_for_year(text: str, year: str, reach: int = 100) -> bool:
    """Whether the text gives an amount for the year: the year within ``reach`` characters of a dollar or
    percent figure (an effective date or an amendment note that names the year states no amount for it)."""
    for match in re.finditer(rf"\b{re.escape(year)}\b", text):
        near = text[max(0, match.start() - reach): match.end() + reach]
        if re.search(r"\$\s?\d|\d\s?(?:%|percent)", near):
            return True
    return False


def question_dates(question: str) -> list[str]:
    """Point-in-time dates the question asks about ("in 1991", "as of March 1, 2015", "the 2010 rule"), ISO.

    A bare year is taken as its last day (a question about 1991 is before a 1993 amendment, not before a
    1991-06 one), except with "before"/"prior to".
    """
    out = []
    for f in extract_figures(question):
        if f.unit not in ("date", "year"):
            continue
        before = question[max(0, f.start - 30):f.start]
        after = question[f.end:f.end + 20]
        if not (_TEMPORAL_BEFORE.search(before) or _TEMPORAL_AFTER.match(after)):
            continue
        strict_before = bool(re.search(r"\b(?:before|prior to|until)\s+$", before, re.I))
        if f.unit == "year":
            y = int(f.value)
            out.append(f"{y:04d}-01-01" if strict_before else f"{y:04d}-12-31")
        else:
            v = int(f.value)
            y, m, d = v // 10000, (v // 100) % 100, v % 100
            out.append(f"{y:04d}-{m:02d}-{d if d else 28:02d}")
    return out


# --------------------------------------------------------------------------------------------
# siblings
# --------------------------------------------------------------------------------------------
@dataclass
class Family:
    word: str  # stem
    surface: str  # "cheese"
    members: list[Hit]
    named: list[Hit] = field(default_factory=list)


def _heading_stems(hit: Hit) -> set[str]:
    return {s for s in content_words(hit.heading) if s not in _GENERIC_HEADING and len(s) > 2}


def find_family(pool: list[Hit], th: ScorerThresholds) -> Family | None:
    """Sibling sections among the pool: same title and part, headings sharing a family word (the largest such
    group holding at least two of the top three hits)."""
    if len(pool) < th.min_siblings:
        return None
    groups: dict[tuple[int, str, str], list[Hit]] = {}
    for h in pool:
        for w in _heading_stems(h):
            groups.setdefault((h.title, h.part, w), []).append(h)
    top3 = {h.cfr_ref for h in pool[:3]}
    best: Family | None = None
    best_rank: tuple = ()
    for (title, part, w), members in groups.items():
        if len(members) < th.min_siblings or len({m.cfr_ref for m in members} & top3) < min(2, len(top3)):
            continue
        if pool[0].cfr_ref not in {m.cfr_ref for m in members}:
            continue  # the best match is not one of them: the question is not about this family
        # the largest group; between groups as large, the one holding the better-ranked hits, then by word, so that
        # the choice does not follow the hash order of a set
        rank = (len(members), -sum(pool.index(m) for m in members), w)
        if best is None or rank > best_rank:
            best_rank = rank
            surfaces = [t for m in members for t in tokens(m.heading) if stem(t) == w]
            surface = min(surfaces, key=len) if surfaces else w
            best = Family(w, surface, members)
    return best


def names_a_kind_of(hit: Hit, word: str) -> bool:
    """Whether the heading names a kind of ``word`` ("Cheddar cheese", "Hard cheeses"), as sibling standards are
    headed, rather than a matter concerning it ("Effect of month of enrollment on entitlement")."""
    words = [w for w in content_words(hit.heading) if w not in _GENERIC_HEADING]
    return bool(words) and words[-1] == word


def _member_name(hit: Hit, family: Family) -> str:
    words = [t for t in re.findall(r"[\w'’-]+", hit.heading) if stem(t.lower()) != family.word]
    name = " ".join(words).strip().lower()
    name = re.sub(r"^(?:and|or)\s+|\s+(?:and|or)$", "", name)
    return name or hit.heading.lower()


_DECLARED_NAME = re.compile(r"\bname of the (?:food|product|article)\s+is\s+(.{0,240})", re.I | re.S)
_QUOTED = re.compile(r"[\"\u201c]([^\"\u201d]{3,60})[\"\u201d]")


def declared_names(text: str) -> set[str]:
    """The names a standard of identity gives its food ("the name of the food is “coffee cream”"), lower-cased."""
    return {n.strip().lower() for m in _DECLARED_NAME.finditer(text) for n in _QUOTED.findall(m.group(1))}


def _distinguishing(hit: Hit, family: Family) -> set[str]:
    """The heading words that tell a member from its siblings: not the family word, nor a word every member's
    heading has ("appeals" in "Filing appeals for QC claims of less than $50,000" and "... of $50,000 or more")."""
    common = set.intersection(*(_heading_stems(m) for m in family.members))
    return _heading_stems(hit) - {family.word} - common


# a sibling named only to be set aside: "to call our wheel 'asiago old' instead of medium"
_SET_ASIDE = re.compile(r"\b(?:instead of|rather than|as opposed to|in place of)\s+(?:(?:the|an?|our|its|plain)\s+)?"
                        r"((?:[\w'-]+\s+){0,2}[\w'-]+)", re.I)


def set_aside_by_contrast(family: Family, question: str) -> list[Hit]:
    """The family's members every distinguishing word of which the question names only after "instead of", "rather
    than" (there, the sibling it compares with, not the one it asks about)."""
    contrasted = {w for m in _SET_ASIDE.finditer(question) for w in content_words(m.group(1))}
    asked = set(content_words(_SET_ASIDE.sub(" ", question)))
    return [m for m in family.members
            if (dist := _distinguishing(m, family)) and dist <= contrasted and not dist & asked]


def named_members(family: Family, question: str, retrieval: RetrieveResult, q: QuestionTerms) -> list[Hit]:
    """Members the question singles out: by citation, by a heading-named subject, or by heading words."""
    refs = {m.cfr_ref: m for m in family.members}
    cited = [refs[_citation_ref(c)] for c in retrieval.scope.citations if c.exists and _citation_ref(c) in refs]
    if cited:
        return cited
    contrasted = {m.cfr_ref for m in set_aside_by_contrast(family, question)}
    for subject in retrieval.scope.subjects:
        matched = [refs[r] for r in subject.cfr_refs if r in refs and r not in contrasted]
        if matched and len(matched) < len(family.members):
            return _best_named(matched, family, q) or matched
    named = [m for m in family.members if _distinguishing(m, family) & q.stems and m.cfr_ref not in contrasted] \
        or numbered_named(family, question)
    if not named:
        # a name the standard itself gives the food besides its heading ("Light cream" ... the name of the food
        # is "coffee cream" or "table cream")
        lowered = question.lower()
        by_name = [m for m in family.members if any(n in lowered for n in declared_names(m.text))]
        return by_name if 0 < len(by_name) < len(family.members) else []
    best = _best_named(named, family, q)
    # every member shares a named word ("process cheese food" vs "process cheese"): the ones whose heading the
    # question names most completely are singled out, unless that is all of them
    return [] if len(best) == len(family.members) else best


_NUMBERED_NAME = re.compile(r"\b([a-z]+)\s+no\.\s*(\d+)\b", re.I)
# a name lettered the same way: "Orange B" (not "A" or "I", which a question uses as words)
_LETTERED_NAME = re.compile(r"\b([A-Za-z]{3,})\s+([B-HJ-Z])\b(?![.,]?\s*(?:No\.|\d))")


def numbered_named(family: Family, question: str) -> list[Hit]:
    """Members named by the number or letter their heading gives them: "red 40" or "Red #40" names
    "FD&C Red No. 40", "orange b" names "Orange B" (the words alone, "red", "orange", are every red's)."""
    found = []
    for member in family.members:
        numbered = [rf"\b{re.escape(word)}\s*(?:no\.?\s*|number\s*|#\s*)?{number}\b"
                    for word, number in _NUMBERED_NAME.findall(member.heading)]
        lettered = [rf"\b{re.escape(word)}\s+{letter}\b" for word, letter in _LETTERED_NAME.findall(member.heading)]
        if any(re.search(pattern, question, re.I) for pattern in numbered + lettered):
            found.append(member)
    return found if len(found) < len(family.members) else []


def _best_named(named: list[Hit], family: Family, q: QuestionTerms) -> list[Hit]:
    """Among named members, those whose distinguishing heading words the question covers best."""
    def share(h: Hit) -> float:
        dist = _distinguishing(h, family)
        return len(dist & q.stems) / len(dist) if dist else 0.0

    def named_words(h: Hit) -> int:
        return len(_distinguishing(h, family) & q.stems)

    # the best-covered heading wins; among fully named ones the most specific (most words named) does
    scores = {h.cfr_ref: (round(share(h), 9), named_words(h)) for h in named}
    top = max(scores.values())
    return [h for h in named if scores[h.cfr_ref] == top]


# --------------------------------------------------------------------------------------------
# the pre-generation gate
# --------------------------------------------------------------------------------------------
def _searched_titles(retrieval: RetrieveResult, corpus_titles: list[int] | None) -> str:
    titles = retrieval.scope.titles or corpus_titles or sorted({h.title for h in retrieval.hits + retrieval.superseded})
    if not titles:
        return "the whole corpus"
    names = [str(t) for t in sorted(set(titles))]
    return ("title " if len(names) == 1 else "titles ") + _join(names)


def compute_signals(question: str, retrieval: RetrieveResult, th: ScorerThresholds,
                    corpus_stats: CorpusStats | None = None) -> dict[str, float]:
    hits = retrieval.hits
    scope = retrieval.scope
    sims = sorted((_sim(h) for h in hits), reverse=True)
    s1 = sims[0] if sims else 0.0
    s2 = sims[1] if len(sims) > 1 else 0.0
    any_similarity = any(h.similarity is not None for h in hits)
    cov = 0.0
    closest = max(hits, key=_sim) if hits else None
    for h in [x for x in (hits[:1] + ([closest] if closest else [])) if x is not None]:
        cov = max(cov, term_coverage(question, f"{h.heading}\n{h.text}"))
    n = th.agreement_top_n
    agreement = any(
        h.dense_rank is not None and h.fulltext_rank is not None and h.dense_rank <= n and h.fulltext_rank <= n
        for h in hits[: max(n, 1)]
    )
    # the fused top hit is also near the top of the full-text ranking: the question's words, not only its
    # meaning, point at it
    fulltext_top = bool(hits) and hits[0].fulltext_rank is not None and hits[0].fulltext_rank <= n
    # IDF-weighted question-term coverage of the best of the top hits: a rare question word no top section
    # holds ("EMTALA", "glyphosate") weighs most
    # also without the asker's circumstances ("I own a small-town pharmacy."), which no section need cover; but
    # the circumstances may name the subject ("setting up an IRB."), so the better of the two
    # and with the CFR's words for the everyday ones the retriever also searched for ("senior food box": commodity
    # supplemental food program)
    asked = asked_part(question)
    phrasings = list(dict.fromkeys((question, asked, " ".join([asked, *cfr_wording(question)]))))
    idf_cov = max((idf_coverage(phrasings, "\n".join([h.heading, h.text, *h.editorial_notes]), corpus_stats)
                   for h in hits[: th.coverage_top_n]), default=0.0)
    # the question's rarest word that the corpus has at all ("zolpidem": one section) is in the top hit: the
    # words point at one section however loosely the whole question's meaning matches it
    rare_anchor = False
    if hits and corpus_stats is not None:
        present = [(corpus_stats.df[w], w) for w in question_key_stems(question) if corpus_stats.df.get(w, 0)]
        if present:
            df, rarest = min(present)
            rare_anchor = df <= th.rare_anchor_df and rarest in stem_set(f"{hits[0].heading}\n{hits[0].text}")
    score_margin = 0.0
    if len(hits) > 1 and hits[0].score:
        score_margin = (hits[0].score - hits[1].score) / abs(hits[0].score)
    hit_refs = {h.cfr_ref for h in hits}
    subject_match = any(set(s.cfr_refs) & hit_refs for s in scope.subjects)
    specific_subject = any(set(s.cfr_refs) & hit_refs for s in scope.subjects if s.specific)
    cited_exists = any(c.exists for c in scope.citations)
    cited_missing = len(scope.missing_citations) + sum(1 for c in scope.citations if not c.exists and c not in scope.missing_citations)
    if any_similarity:
        relevance = (s1 + th.coverage_weight * (idf_cov - th.coverage_center) + th.agreement_bonus * fulltext_top
                     + th.specific_subject_bonus * specific_subject + th.margin_weight * (s1 - s2)
                     + th.rare_anchor_bonus * rare_anchor)
    else:  # full-text only: question-term coverage carries it
        relevance = th.not_found_min_similarity + th.coverage_weight * 2 * (idf_cov - 0.6)
    sup_best = max((_sim(h) for h in retrieval.superseded), default=0.0)
    return {
        "top1_similarity": s1,
        "top2_similarity": s2,
        "similarity_margin": s1 - s2,
        "score_margin": score_margin,
        "term_coverage": cov,
        "idf_coverage": idf_cov,
        "dense_fulltext_agreement": float(agreement),
        "fulltext_top": float(fulltext_top),
        "rare_anchor": float(rare_anchor),
        "subject_match": float(subject_match),
        "specific_subject": float(specific_subject),
        "cited_exists": float(cited_exists),
        "cited_missing": float(cited_missing),
        "unsupported_titles": float(len(scope.unsupported_titles)),
        "hits": float(len(hits)),
        "superseded_top_similarity": sup_best,
        "relevance": relevance,
        "relevance_threshold": th.not_found_min_similarity,
    }


def _not_found_message(question: str, retrieval: RetrieveResult, corpus_titles, closest: Hit | None) -> str:
    where = _searched_titles(retrieval, corpus_titles)
    tail = f"; closest was {closest.cfr_ref}, similarity {_sim(closest):.2f}" if closest is not None else ""
    return f"No regulation in this corpus addresses {_short_question(question)} (searched {where}{tail})."


def _active_since(hit: Hit, superseded: list[Hit]) -> str | None:
    """When the active text took its current form: the source note's last amendment, else the version date."""
    old = [s for s in superseded if s.cfr_ref == hit.cfr_ref and s.source_date]
    amended = latest_date(hit.source_note)
    if old:
        newest_old = max(_iso(s.source_date) for s in old)
        if amended and amended > newest_old:
            return amended
        return _iso(hit.source_date) or amended
    return amended or None


def pre_gate(question: str, retrieval: RetrieveResult, th: ScorerThresholds | None = None, *,
             corpus_titles: list[int] | None = None, corpus_stats: CorpusStats | None = None,
             reader: "AnswerReader | None" = None) -> PreGateResult:
    """Refuse before generation with a named reason, or proceed with the sections generation may use.

    ``reader`` (the answer reader, ``services.scorer.reader``) adds the last check: that some passage of those
    sections reads as an answer to the question. Without it the gate is the lexical and similarity rules alone.
    """
    th = th or ScorerThresholds()
    scope = retrieval.scope
    hits = [h for h in retrieval.hits if h.status == "active"]
    superseded = sorted(retrieval.superseded, key=_sim, reverse=True)
    signals = compute_signals(question, retrieval, th, corpus_stats)
    q = analyse_question(question)
    readings: dict[tuple[str, ...], "Reading"] = {}

    def best_reading(sections: list[Hit]) -> "Reading":
        """The reader's best passage of ``sections``; a rescued question's hits are often its handed sections."""
        key = tuple(h.cfr_ref for h in sections)
        if key not in readings:
            readings[key] = reader.read(question, sections, th.reader_passages_per_section)
        return readings[key]

    # 1. citations the corpus does not hold ---------------------------------------------------------
    cited_existing = [c for c in scope.citations if c.exists]
    missing = list(scope.missing_citations) + [c for c in scope.citations if not c.exists and c not in scope.missing_citations]
    if missing and not cited_existing:
        for c in missing:
            ref = _citation_ref(c)
            old = [s for s in superseded if s.cfr_ref == ref]
            if old:
                s = old[0]
                return _refuse(
                    "stale",
                    f"{ref} exists only in a superseded version (source date {_iso(s.source_date)}); "
                    f"it is no longer in force, so it cannot answer the question.",
                    [_evidence(s, detail="superseded version; no active version of this section is held")],
                    signals,
                )
        refs = _join([_citation_ref(c) for c in missing])
        where = _searched_titles(retrieval, corpus_titles)
        return _refuse(
            "not_found",
            f"This corpus does not hold {refs}, so no regulation here answers the question (searched {where}).",
            [Evidence(cfr_ref=_citation_ref(c), detail=f"cited in the question as “{c.raw}”; not in the corpus")
             for c in missing],
            signals,
        )

    # 2. titles the corpus does not hold ------------------------------------------------------------
    if scope.unsupported_titles and not cited_existing and not scope.titles:
        names = _join([str(t) for t in scope.unsupported_titles])
        plural = "s" if len(scope.unsupported_titles) > 1 else ""
        return _refuse(
            "not_found",
            f"The question is about CFR title{plural} {names}, which this corpus does not hold "
            f"(searched {_searched_titles(retrieval, corpus_titles)}).",
            [Evidence(cfr_ref=f"{t} CFR", detail="title not in the corpus") for t in scope.unsupported_titles],
            signals,
        )

    # 2b. a program whose rules live in parts the corpus does not hold -------------------------------------
    # (unless the question also names a program that is held or cites a held section: then the held text may
    # well answer it). A heading-named section does not count: "late enrollment penalty" names the Part B
    # section, which is exactly the near miss for a Part D question.
    unheld = [p for p in scope.programs if not p.held]
    held_named = bool(cited_existing) or any(p.held for p in scope.programs)
    # ... unless what the question asks to get is the program held nowhere here ("I'm on Medicaid; am I eligible
    # for WIC?" names Medicaid only as the asker's situation), or it asks for general knowledge about a held
    # subject ("the half-life of diphenhydramine" in a nighttime sleep-aid)
    if unheld and held_named and not cited_existing:
        unheld = [p for p in unheld if p.family in ASKED_AS_SUCH or asked_to_join(question, p.said)
                  or asks_for_form_of(question, p.said, hits[:3]) or (p.family == "irs" and asks_tax_treatment(question))]
        held_named = not unheld
    if unheld and not held_named:
        federal = [p for p in unheld if p.title]
        other = [p for p in unheld if not p.title]  # a country's or a state's own law: no CFR part at all
        clauses = []
        if federal:
            clauses.append(f"about {_join([f'{p.name}, governed by {p.home}' for p in federal])}, which this corpus "
                           f"does not hold")
        if other:
            clauses.append(f"about {_join([f'{p.name} (“{p.said}”)' for p in other])}, which no federal regulation "
                           f"governs")
        return _refuse(
            "not_found",
            f"The question is {' and '.join(clauses)}, so no regulation here answers it "
            f"(searched {_searched_titles(retrieval, corpus_titles)}).",
            [Evidence(cfr_ref=p.home if p.title else "(none)",
                      detail=f"named in the question as “{p.said}”; " + ("not in the corpus" if p.title else
                                                                          "not U.S. federal regulation"))
             for p in unheld],
            signals,
        )

    # 2c. a name the question turns on that no section of the corpus mentions ---------------------------
    # (a held program named beside it may answer around the name; a drug or chemical no section lists cannot be
    # answered for: "which schedule is xylazine in" is not settled by the DEA parts that never name it)
    # an initialism the text spells out instead ("DHA": dihydroxyacetone) does not sink a question whose other words
    # match a section well enough to pass the not_found rule on their own
    absent = [n for n in scope.absent_names
              if not (_INITIALISM.fullmatch(n) and signals["relevance"] >= th.not_found_min_similarity)
              and not glossed(question, n, scope.absent_names) and not worded_in(question, n, hits[:3])]
    absent_substances = [n for n in absent if substance_words(n) == [n.lower()]]
    # the food whose standard is asked for ("is there a standard for Greek yogurt") is not held if no section
    # mentions it, however well its broader subject ("Yogurt") is held
    absent_defined = [n for n in absent if n in defined_names(question)]
    if absent and ((absent_substances or not held_named) and not signals["specific_subject"] or absent_defined):
        names = _join([f"“{n}”" for n in absent])
        return _refuse(
            "not_found",
            f"No section of this corpus mentions {names}, so no regulation here addresses "
            f"{_short_question(question)} (searched {_searched_titles(retrieval, corpus_titles)}).",
            [Evidence(cfr_ref="(none)", detail=f"“{n}”: in no active section of titles "
                                                  f"{_join([str(t) for t in (corpus_titles or [])]) or 'held'}")
             for n in absent],
            signals,
        )

    # 2d. a judgement, a recommendation or a forecast -------------------------------------------------------
    # the sections on the subject state the rules around it, and generation would answer from them as if they
    # settled "do I have a case" or "which plan is better"; a question citing a section asks what it says
    judgement = judgement_asked(question)
    if judgement and hits and not cited_existing and not termed_in(question, judgement, hits[:3]):
        closest = sorted(hits, key=_sim, reverse=True)[:2]
        return _refuse(
            "not_found",
            f"The question asks for a judgement (“{judgement}”) that no regulation makes: regulations state rules, "
            f"not advice, comparisons or forecasts. The closest sections here ({_join([h.cfr_ref for h in closest])}) "
            f"state the rules around the subject, not an answer to {_short_question(question)}.",
            [Evidence(cfr_ref="(none)", detail=f"asks for a judgement: “{judgement}”")]
            + [_evidence(h, detail="closest section: states rules, not this judgement") for h in closest],
            signals,
        )

    best_active = max(hits, key=_sim) if hits else None
    best_active_sim = _sim(best_active) if best_active else 0.0

    # 3./4. superseded text matches better than anything active ---------------------------------------
    if superseded:
        s = superseded[0]
        if _sim(s) >= th.not_found_min_similarity and _sim(s) >= best_active_sim + th.stale_similarity_margin:
            current = next((h for h in hits if h.cfr_ref == s.cfr_ref), best_active)
            ev = [_evidence(s, detail="superseded version: the best match for the question")]
            key_figs = primary_figures(s.text, q.key, q.anchors, th.figure_window_tokens)[0]
            ev[0].figures = [f.key for f in key_figs]
            if current is not None:
                cur_figs = primary_figures(current.text, q.key, q.anchors, th.figure_window_tokens)[0]
                ev.append(_evidence(current, [f.key for f in cur_figs], detail="active version"))
                if current.cfr_ref == s.cfr_ref:
                    msg = (f"The best match is the superseded version of {s.cfr_ref} (source date "
                           f"{_iso(s.source_date)}), not the version in force (source date {_iso(current.source_date)}), "
                           f"so an answer from the old text would be out of date.")
                else:
                    msg = (f"The best match is a superseded version of {s.cfr_ref} (source date {_iso(s.source_date)}) "
                           f"with no version in force here, and the closest text in force, {current.cfr_ref}, matches "
                           f"far less well, so an answer would rest on out-of-date text.")
            else:
                msg = (f"The only matching text is a superseded version of {s.cfr_ref} (source date "
                       f"{_iso(s.source_date)}), so it cannot answer for the rules now in force.")
            return _refuse("stale", msg, ev, signals)

    if not hits:
        return _refuse("not_found", _not_found_message(question, retrieval, corpus_titles, None), [], signals)

    # 5. nothing relevant -------------------------------------------------------------------------------
    # only a cited section or a subject named by a rare heading word backs retrieval on its own; a common heading
    # word ("enrollment", "labeling") names sections about a neighbouring rule as often as the right one
    backed = signals["cited_exists"] > 0 or signals["specific_subject"] > 0
    weak = signals["top1_similarity"] < th.hard_floor_similarity and any(h.similarity is not None for h in hits)
    # ... unless reading the best sections finds a passage that plainly answers it: a story-shaped question ("our
    # fridge died in a power outage and we lost the food we bought with SNAP ...") matches its section loosely as a
    # whole while one passage answers it (eval/README.md, "Session 8": 8 answerable questions of the nineteen sets
    # answered for 2 not_found ones let through)
    if not backed and (weak or signals["relevance"] < th.not_found_min_similarity):
        rescued = False
        if reader is not None and not weak:
            reading = best_reading(hits[: th.reader_top_n])
            signals["rescue_probability"] = reading.probability
            rescued = reading.probability >= th.reader_rescue_probability
        if not rescued:
            closest = best_active if best_active is not None and best_active.similarity is not None else hits[0]
            return _refuse(
                "not_found",
                _not_found_message(question, retrieval, corpus_titles, closest),
                [_evidence(closest, detail=f"closest match, similarity {_sim(closest):.2f}; relevance "
                                           f"{signals['relevance']:.2f} below {th.not_found_min_similarity:.2f}")],
                signals,
            )

    # 6. a date before the current text ----------------------------------------------------------------
    # only when the question asks what applied then ("what was the premium in 1993"), not when the date places an
    # event of the asker's ("I had a transplant in 2021 ... when does my coverage end")
    dates = question_dates(question) if _ASKS_ABOUT_THE_PAST.search(question) else []
    if dates:
        cited_hits = [h for h in hits if any(c.exists and _citation_ref(c) == h.cfr_ref for c in scope.citations)]
        target = cited_hits[0] if cited_hits else hits[0]
        since = _active_since(target, superseded)
        asked = min(dates)
        # a text in force now that itself states the amount for the year asked about answers for that year
        # ("the Part B premium in 1993": 42 CFR 408.20 lists the premiums year by year)
        covered = any(states_amount_for_year(h.text, asked[:4]) for h in hits[: th.pool_size])
        if since and asked < since and not covered:
            old = [s for s in superseded if s.cfr_ref == target.cfr_ref]
            ev = [_evidence(target, [f.key for f in primary_figures(target.text, q.key, q.anchors)[0]],
                            detail=f"active version; current text in force since {since}")]
            for s in old[:2]:
                ev.append(_evidence(s, [f.key for f in primary_figures(s.text, q.key, q.anchors)[0]],
                                    detail="superseded version"))
            when = f"in {asked[:4]}" if asked.endswith("-12-31") or asked.endswith("-01-01") else f"on {_human_date(asked)}"
            if old:
                msg = (f"The question asks what applied {when}, but the text of {target.cfr_ref} in force now "
                       f"(source date {_iso(target.source_date)}) replaced the version of {_iso(old[0].source_date)}, "
                       f"which is superseded, so the current text cannot answer for that date.")
            else:
                msg = (f"{target.cfr_ref} was last amended on {_human_date(since)}, after the date the question asks "
                       f"about ({when[3:]}), and the earlier text is not held in this corpus, so it cannot say what "
                       f"applied then.")
            return _refuse("stale", msg, ev, signals)

    # 6b. a yearly amount the text does not state -----------------------------------------------------------
    year = yearly_amount_year(question)
    if year and not any(states_amount_for_year(h.text, year) for h in hits[: th.pool_size]):
        top = hits[0]
        return _not_found_beside(
            top,
            f"The question asks for the {year} amount, and no section here states one: amounts like this are "
            f"set for each year by notice (in the Federal Register), while the regulation's text gives only how "
            f"they are figured (closest: {top.cfr_ref}).",
            f"closest match; states no figure for {year}",
            signals,
        )

    # 6b'. an inflation-adjusted amount the text does not state -----------------------------------------------
    # a section that says its amount is "adjusted for inflation" gives the base and the method, not this year's figure
    figure_question = asks_for_figure(question)
    this_year = str(datetime.date.today().year)
    if (figure_question and _INFLATION_ADJUSTED.search(question)
            and not any(states_amount_for_year(h.text, this_year) for h in hits[: th.pool_size])):
        top = hits[0]
        return _not_found_beside(
            top,
            f"The question asks for an inflation-adjusted amount, and no matching section states one for "
            f"{this_year}: such "
            f"amounts are adjusted each year by notice (in the Federal Register), while the regulation's text gives "
            f"the base amount or the method (closest: {top.cfr_ref}).",
            "closest match; states no inflation-adjusted figure",
            signals,
        )

    # 6b''. a figure the best section leaves to a section not held --------------------------------------------
    if figure_question and corpus_stats is not None and corpus_stats.refs:
        elsewhere = limit_held_elsewhere(question, hits[0], q.key, corpus_stats.refs)
        if elsewhere:
            target, words = elsewhere
            return _refuse(
                "not_found",
                f"The question asks for a figure that {hits[0].cfr_ref} does not state itself: it leaves it to “{words}”, "
                f"and this corpus does not hold {target}, so no regulation here gives the figure.",
                [_evidence(hits[0], detail=f"best match; gives the figure only as “{words}”"),
                 Evidence(cfr_ref=target, detail="where the figure is set; not in this corpus")],
                signals,
            )

    # 6c. a State's own figure or rule ---------------------------------------------------------------------------
    # the federal text says how a State's amount, limit or caseload is set, not what Michigan's is, nor what Texas
    # has chosen to require; only a section that names the State can answer for it
    holders = states_named(question) if figure_question else []
    for state in dict.fromkeys(holders + states_ruling(question)):
        if not any(re.search(rf"\b{re.escape(state)}\b", h.text, re.I) for h in hits[: th.pool_size]):
            top = hits[0]
            what = "figure" if state in holders else "rule"
            whose = f"the {state}'" if state.endswith("Islands") else f"{state}'s"
            return _not_found_beside(
                top,
                f"The question asks for {whose} own {what}, and no matching section names {state}: the "
                f"regulations here say what applies in every State and territory, not what one has decided for "
                f"itself (closest: {top.cfr_ref}).",
                f"closest match; does not mention {state}",
                signals,
            )

    # 6d. a dollar amount the best section does not state ------------------------------------------------------
    if _ASKS_FOR_DOLLARS.search(question) and not states_dollars(hits[0].text):
        top = hits[0]
        return _not_found_beside(
            top,
            f"The question asks for a dollar amount, and the best-matching section, {top.cfr_ref}, states none: "
            f"it sets the rule, not the amount, which is set elsewhere or by notice.",
            "best match; states no dollar figure",
            signals,
        )

    # 6e. a measure none of the best sections gives ------------------------------------------------------------
    # "how many calories are in mayonnaise" lands on the mayonnaise standard, which sets ingredients, not calories;
    # a section that answers "how long", "how many grams" or "in parts per billion" states a figure in that unit
    measure = asked_measure(question)
    if measure and not any(gives_measure(h.text, measure) for h in hits[: th.measure_top_n]):
        read = hits[: th.measure_top_n]
        wanted = {"time": "a length of time", "calories": "a number of calories", "age": "an age", "pH": "a pH"}.get(
            measure, f"a {measure}")
        where = (f"the best-matching section, {read[0].cfr_ref}, states none" if len(read) == 1 else
                 f"none of the best-matching sections ({_join([h.cfr_ref for h in read])}) states one")
        return _refuse(
            "not_found",
            f"The question asks for {wanted}, and {where}, so no regulation here gives that figure.",
            [_evidence(h, detail=f"states no {measure} figure") for h in read[:3]],
            signals,
        )

    # 7. authority ----------------------------------------------------------------------------------------
    why = {h.cfr_ref: entitlement(h, question, th) for h in hits}
    entitled = [h for h in hits if why[h.cfr_ref] is None]
    unentitled = [h for h in hits if why[h.cfr_ref] is not None]
    signals["entitled_hits"] = float(len(entitled))
    cited_hits = [h for h in hits if any(c.exists and _citation_ref(c) == h.cfr_ref for c in scope.citations)]
    signals["cited_hits"] = float(len(cited_hits))
    cited_all_unentitled = bool(cited_hits) and all(why[h.cfr_ref] for h in cited_hits)
    below = not entitled or cited_all_unentitled
    if not below and unentitled and not signals["cited_exists"]:
        best_ent = max(entitled, key=_sim)
        top_un = max(unentitled, key=_sim)
        ent_relevance = (_sim(best_ent) + th.coverage_weight
                         * (term_coverage(question, f"{best_ent.heading}\n{best_ent.text}") - th.coverage_center))
        signals["entitled_relevance"] = ent_relevance
        if (_sim(top_un) - _sim(best_ent) >= th.authority_margin and ent_relevance < th.not_found_min_similarity
                and not signals["subject_match"]):
            below = True
    if below:
        shown = (cited_hits if cited_all_unentitled else unentitled)[:3]
        ev = [_evidence(h, detail=f"{h.cfr_ref} {_ENTITLEMENT_WORDS[why[h.cfr_ref]]}") for h in shown]
        first = shown[0]
        return _refuse(
            "below_authority",
            f"The only support is {first.cfr_ref}, which {_ENTITLEMENT_WORDS[why[first.cfr_ref]]}, so it is not "
            f"entitled to settle the question.",
            ev,
            signals,
        )

    # 8. siblings: divergent, or the one the question names ----------------------------------------------
    pool = entitled[: th.pool_size]
    signals["asks_for_figure"] = float(figure_question)
    family = find_family(pool, th)
    sections = list(entitled)
    key = set(q.key)
    if family is not None:
        key -= {family.word}
        named = named_members(family, question, retrieval, q)
        family.named = named
        signals["siblings"] = float(len(family.members))
        signals["siblings_named"] = float(len(named))
        key -= {s for m in family.members for s in _heading_stems(m)}
        candidates = named if len(named) > 1 else ([] if named else family.members)
        sims = [m.similarity for m in candidates if m.similarity is not None]
        if sims:  # near-identical siblings score alike; one far ahead of the rest is singled out already
            candidates = [m for m in candidates
                          if m.similarity is None or m.similarity >= max(sims) - th.sibling_similarity_window]
        per_member = []
        clauses: dict[str, list[str]] = {}
        for m in candidates:
            hits_m = primary_hits(m.text, key, q.anchors, th.figure_window_tokens)
            if hits_m:
                per_member.append((m, _distinct_figures(hits_m)))
                clauses[m.cfr_ref] = list(dict.fromkeys(h.clause for h in hits_m))
        if len(per_member) >= 2 and figure_question:
            # siblings diverge on one requirement; a part's sections that share a heading word and state figures
            # for different things ("Cost sharing", "Cost sharing for drugs") are not a choice between siblings
            kinds = [(m, figs) for m, figs in per_member if names_a_kind_of(m, family.word)]
            per_member = [(m, figs) for m, figs in kinds
                          if any(same_requirement(clauses[m.cfr_ref], clauses[o.cfr_ref], _heading_stems(m),
                                                  _heading_stems(o), th.sibling_min_shared_wording)
                                 for o, _ in kinds if o is not m)]
        if len(per_member) >= 2 and figure_question:
            units = Counter(f.unit for _, figs in per_member for f in figs)
            unit = units.most_common(1)[0][0]
            values = {}
            for m, figs in per_member:
                vals = tuple(sorted({f.value for f in figs if f.unit == unit}))
                if vals:
                    values[m.cfr_ref] = vals
            signals["sibling_distinct_figures"] = float(len(set(values.values())))
            if len(set(values.values())) > 1:
                listed = [(m, [f for f in figs if f.unit == unit]) for m, figs in per_member if m.cfr_ref in values]
                parts = sorted({m.part for m, _ in listed})
                title = listed[0][0].title
                phrase = _term_phrase(question, key) or "figures"
                plural = family.surface if family.surface.endswith("s") else family.surface + "s"
                items = [f"{_member_name(m, family)} {_fig_text(figs)}" for m, figs in listed[:6]]
                more = ", …" if len(listed) > 6 else ""
                where = f"{title} CFR part{'s' if len(parts) > 1 else ''} {_join(parts)}"
                return _refuse(
                    "divergent",
                    f"{where} sets different {phrase} levels for different {plural} — {', '.join(items)}{more} — "
                    f"which {family.surface} do you mean?",
                    [_evidence(m, [f.key for f in figs], detail=f"{m.heading}: {_fig_text(figs)}") for m, figs in listed],
                    signals,
                )
        sections = _sections_for(entitled, family, named)
    sections = _question_named_first(sections, retrieval)

    # 9. conflicting --------------------------------------------------------------------------------------
    # Two strongly matched sections that state different figures for the SAME term the question asks about:
    # each figure's clause must hold most of the question's key terms (or the question's own figure), the two
    # clauses the same ones, and neither section may be singled out by the question (a cited section or a
    # specifically named subject settles it). Dates are not requirements that conflict.
    top_sim = max((_sim(h) for h in sections), default=0.0)
    strong = [h for h in sections[: th.pool_size]
              if _sim(h) >= top_sim - th.conflict_similarity_window
              and _sim(h) >= th.not_found_min_similarity + th.conflict_min_similarity_over_threshold][:5]
    specific_refs = {r for sub in scope.subjects if sub.specific for r in sub.cfr_refs}
    settled = bool(cited_hits) or any(h.cfr_ref in specific_refs for h in hits[:3])
    signals["conflict_settled_by_question"] = float(settled)
    if not figure_question or settled:
        strong = []
    family_refs = {m.cfr_ref for m in family.members} if family else set()
    conflict_key = set(q.key) - ({family.word} if family else set())
    figs_of = {h.cfr_ref: term_figures(h.text, conflict_key, q.anchors, th) for h in strong}
    for a, b in itertools.combinations(strong, 2):
        if sections and sections[0].cfr_ref not in (a.cfr_ref, b.cfr_ref):
            continue  # the answer rests on the best match; two other sections disagreeing do not touch it
        if a.cfr_ref in family_refs and b.cfr_ref in family_refs:
            continue  # siblings are a divergence question, settled above
        if a.kind != b.kind:
            continue
        if (_heading_stems(a) & conflict_key) != (_heading_stems(b) & conflict_key):
            continue  # the question's words name one of them by its heading: they answer different questions
        for terms in sorted(set(figs_of[a.cfr_ref]) & set(figs_of[b.cfr_ref]), key=lambda t: (-len(t), sorted(t))):
            fa, fb = figs_of[a.cfr_ref][terms], figs_of[b.cfr_ref][terms]
            for unit in sorted({f.unit for f in fa} & {f.unit for f in fb}):
                va = sorted({f.value for f in fa if f.unit == unit})
                vb = sorted({f.value for f in fb if f.unit == unit})
                if len(va) == 1 and len(vb) == 1 and va != vb and not worded_apart(
                        _clauses_stating(a.text, conflict_key, q.anchors, th, unit, va[0]),
                        _clauses_stating(b.text, conflict_key, q.anchors, th, unit, vb[0]),
                        _heading_stems(a), _heading_stems(b), th.sibling_min_shared_wording):
                    ka, kb = format_figure(va[0], unit), format_figure(vb[0], unit)
                    signals["conflict_pairs"] = signals.get("conflict_pairs", 0.0) + 1
                    return _refuse(
                        "conflicting",
                        f"{a.cfr_ref} says {ka} and {b.cfr_ref} says {kb} for the same requirement, and neither "
                        f"section outranks the other, so the corpus cannot settle which figure applies.",
                        [_evidence(a, [ka], detail=f"{a.heading}: {ka}"),
                         _evidence(b, [kb], detail=f"{b.heading}: {kb}")],
                        signals,
                    )

    # 10. no passage reads as an answer -----------------------------------------------------------------
    # the questions every rule above lets through are about a held subject and ask what no section states ("which
    # companies are registered with DEA to grow marijuana for research" finds the DEA registration sections); a
    # section the question cites is what the asker wants read, whatever it says
    def unanswered(read: list[Hit], reading: "Reading", by: str, threshold: float) -> PreGateResult:
        refs = _join([h.cfr_ref for h in read])
        closest = next(h for h in read if h.cfr_ref == reading.cfr_ref)
        return _refuse(
            "not_found",
            f"The best-matching sections ({refs}) touch on the question's subject, but none of them states an "
            f"answer to {_short_question(question)}, so no regulation here answers it.",
            [_evidence(closest, detail=f"closest passage, read as an answer{by} with probability "
                                       f"{reading.probability:.2f} (below {threshold:.2f}): "
                                       f"{_short_question(passage_body(closest, reading.passage), 200)}")]
            + [_evidence(h, detail="also read; states no answer") for h in read if h is not closest],
            signals,
        )

    if reader is not None and sections and not cited_hits:
        read = sections[: th.reader_top_n]
        if th.reader_max_relevance is None or signals["relevance"] < th.reader_max_relevance:
            reading = best_reading(read)
            signals["answer_probability"] = reading.probability
            if reading.probability < th.reader_min_probability:
                return unanswered(read, reading, "", th.reader_min_probability)
        # the strict reader reads every question handed on, the well-matched ones too ("the maximum sodium in canned
        # tomato juice" matches its standard in every word), and refuses only far below an answer
        strict = reader.read_strict(question, read, th.reader_passages_per_section)
        if strict is not None and strict.cfr_ref is not None:
            signals["strict_answer_probability"] = strict.probability
            if strict.probability < th.reader_strict_min_probability:
                return unanswered(read, strict, " by the strict reader", th.reader_strict_min_probability)

    signals["sections"] = float(len(sections))
    return PreGateResult(proceed=True, refusal=None, sections=sections, signals=signals)


def _sections_for(entitled: list[Hit], family: Family | None, named: list[Hit]) -> list[Hit]:
    """The sections generation gets: with a named sibling, the named member(s), the siblings their text relies
    on, and the non-siblings; otherwise every entitled hit."""
    if family is None or not named:
        return list(entitled)
    member_refs = {m.cfr_ref for m in family.members}
    named_refs = {m.cfr_ref for m in named}
    relied = {r.cfr_ref for m in named for r in find_cfr_refs(m.text, m.title)}
    return (named + [h for h in entitled if h.cfr_ref in relied and h.cfr_ref not in named_refs]
            + [h for h in entitled if h.cfr_ref not in member_refs and h.cfr_ref not in relied])


def _question_named_first(sections: list[Hit], retrieval: RetrieveResult) -> list[Hit]:
    """The sections a question that cites sections is answered from: those it cites and no other ("Explain 7 CFR
    247.2" is not answered from another part's definitions because they read more like the question's words, nor
    "§ 406.21(c)" from the § 406.27 its text refers to). Otherwise the sections a specific subject names ahead of
    the rest (a sibling family found among the other hits must not push them down)."""
    cited = {_citation_ref(c) for c in retrieval.scope.citations if c.exists and c.section}
    cited_hits = [h for h in sections if h.cfr_ref in cited]
    if cited_hits:
        return cited_hits
    specific = {r for s in retrieval.scope.subjects if s.specific for r in s.cfr_refs}
    first = [h for h in sections if h.cfr_ref in specific]
    if not first:
        return sections
    refs = {h.cfr_ref for h in first}
    return first + [h for h in sections if h.cfr_ref not in refs]


def candidate_sections(question: str, retrieval: RetrieveResult, th: ScorerThresholds | None = None) -> list[Hit]:
    """The sections ``pre_gate`` hands to generation when it proceeds (whatever it decides): for calibration,
    which must generate answers for questions a stricter threshold would refuse."""
    th = th or ScorerThresholds()
    q = analyse_question(question)
    hits = [h for h in retrieval.hits if h.status == "active"]
    entitled = [h for h in hits if entitlement(h, question, th) is None]
    if not entitled:
        return []
    family = find_family(entitled[: th.pool_size], th)
    named = named_members(family, question, retrieval, q) if family is not None else []
    return _question_named_first(_sections_for(entitled, family, named), retrieval)


def _term_phrase(question: str, key: set[str]) -> str:
    """The question's own words for what it asks about, e.g. "minimum milkfat"."""
    words = tokens(question)
    out: list[str] = []
    for i, w in enumerate(words):
        if stem(w) in key and w not in STOPWORDS:
            if i > 0 and words[i - 1] in ("minimum", "maximum", "lowest", "highest") and words[i - 1] not in out:
                out.append(words[i - 1])
            out.append(w)
    return " ".join(out[:4])


# --------------------------------------------------------------------------------------------
# the post-generation gate
# --------------------------------------------------------------------------------------------
def _quote_norm(text: str) -> str:
    t = normalise_text(text).lower()
    t = re.sub(r"[\"']", "", t)
    return re.sub(r"\s+", " ", t).strip()


def _strip_quote_marks(text: str) -> str:
    t = normalise_text(text)
    t = t.strip().strip('"').strip("'").strip()
    return t.rstrip(".,;:").strip()


def verify_quote(quote: Quote, sections: dict[str, Hit]) -> tuple[bool, str]:
    """(verified, detail). Verbatim in the cited section's active text after normalisation; "..." elides."""
    hit = sections.get(quote.cfr_ref)
    if hit is None:
        return False, f"{quote.cfr_ref} is not among the sections given to generation"
    if hit.status != "active":
        return False, f"{quote.cfr_ref} is not active"
    body = _quote_norm(f"{hit.heading}\n{hit.text}")
    pieces = [_quote_norm(_strip_quote_marks(p)) for p in re.split(r"\.\.\.|\[\.\.\.\]|…", normalise_text(quote.text))]
    pieces = [p.strip(" .,;:") for p in pieces if p.strip(" .,;:")]
    if not pieces:
        return False, "empty quote"
    pos = 0
    for p in pieces:
        i = body.find(p, pos)
        if i < 0:
            return False, f"not found verbatim in {quote.cfr_ref}"
        pos = i + len(p)
    return True, f"verbatim in {quote.cfr_ref}"


def _remove_sentences(text: str, predicate) -> tuple[str, int]:
    """Remove the sentences of ``text`` for which ``predicate`` is true; paragraphs kept apart."""
    removed = 0
    out_lines = []
    for line in (text or "").split("\n"):
        sents = split_sentences(line)
        if not sents:
            out_lines.append(line)
            continue
        kept = []
        for s in sents:
            if predicate(s):
                removed += 1
            else:
                kept.append(s)
        if kept:
            out_lines.append(" ".join(kept))
    return "\n".join(out_lines).strip(), removed


def post_gate(req: PostGateRequest, th: ScorerThresholds | None = None,
              cache: EmbeddingCache | None = None, *, pre_not_found: bool = False,
              corpus_stats: CorpusStats | None = None) -> PostGateResult:
    th = th or ScorerThresholds()
    flags: list[str] = []
    sections = [s for s in req.sections if s.status == "active"]
    by_ref = {s.cfr_ref: s for s in sections}
    retrieved_only = {h.cfr_ref for h in req.retrieval.hits} | set(by_ref)
    # a reference the retrieved text itself makes ("as defined in § 133.138") is traceable to the evidence
    cross_refs = {r.cfr_ref for s in sections for r in find_cfr_refs(s.text, s.title)}
    retrieved = retrieved_only | cross_refs
    retrieved_parts = {(h.title, h.part) for h in list(req.retrieval.hits) + sections}
    default_title = sections[0].title if sections else (req.retrieval.hits[0].title if req.retrieval.hits else 21)
    similarities = [h.similarity for h in req.retrieval.hits]
    pre_signals = compute_signals(req.question, req.retrieval, th, corpus_stats)
    signals: dict[str, float] = {k: pre_signals[k] for k in ("relevance", "top1_similarity", "idf_coverage",
                                                              "fulltext_top", "specific_subject")}

    def result(passed: bool, plain: str, legal: str, quotes: list[Quote], citations: list[Citation],
               coverage: float, refusal: Refusal | None = None, sentences=None,
               not_found: bool = pre_not_found) -> PostGateResult:
        conf = compute_confidence(similarities, coverage, th, not_found=not_found, signals=signals)
        if refusal is not None:
            plain, legal, quotes, citations = "", "", [], []
        return PostGateResult(passed=passed, refusal=refusal, plain_english=plain, legal=legal, quotes=quotes,
                              citations=citations, confidence=conf, flags=flags, sentences=sentences or [])

    plain_text = req.plain.text or ""
    legal_text = req.legal.text or ""

    # 0. the model read the sections and found they do not answer the question ---------------------------
    declined = next((g for g in (req.plain, req.legal) if g.not_answered), None)
    if declined is not None:
        shown = sections[:3]
        return result(False, "", "", [], [], 0.0, Refusal(
            reason="not_found",
            message=f"The model ({declined.call.model}) read the {len(sections)} closest "
                    f"section{'s' if len(sections) != 1 else ''} ({_join([s.cfr_ref for s in shown])}"
                    f"{', …' if len(sections) > len(shown) else ''}) and found that they do not answer the question: "
                    f"{declined.not_answered.rstrip()}",
            evidence=[_evidence(s, detail="retrieved, but does not answer the question (the model's reading)")
                      for s in shown],
        ), not_found=True)

    # 0. the generator produced nothing (fallback "refuse") ----------------------------------------------
    if req.plain.refused or (not plain_text.strip() and not legal_text.strip()):
        return result(False, "", "", [], [], 0.0, Refusal(
            reason="provider_unavailable",
            message="The language model did not produce an answer and the fallback is set to refuse, so there is "
                    "nothing to check.",
            evidence=[Evidence(cfr_ref=s.cfr_ref, heading=s.heading, version_id=s.version_id,
                               source_date=s.source_date, status=s.status) for s in sections[:3]],
        ))

    # 1. citations written in the text: coverage, then strip the ones not retrieved ----------------------
    section_titles = list(dict.fromkeys(s.title for s in sections))

    def resolve(r) -> str:
        """A bare "§ 610.60" copied from a title-21 section means 21 CFR 610.60 even when the first section given
        is in title 42: a reference without its title resolves to any given section's title that holds it."""
        if r.cfr_ref in retrieved or re.search(r"C\.?\s?F\.?\s?R", r.raw, re.I):
            return r.cfr_ref
        for t in section_titles:
            alt = f"{t} CFR {r.section}" if r.section else f"{t} CFR part {r.part}"
            if alt in retrieved or _part_covered(alt, retrieved_parts):
                return alt
        return r.cfr_ref

    text_refs = [resolve(r) for r in find_cfr_refs(plain_text, default_title) + find_cfr_refs(legal_text, default_title)]
    quotes_in: list[Quote] = []
    seen = set()
    for qt in list(req.plain.quotes) + list(req.legal.quotes):
        k = (_quote_norm(qt.text), qt.cfr_ref)
        if k not in seen:
            seen.add(k)
            quotes_in.append(qt.model_copy())
    citations_in = list(req.plain.citations) + [c for c in req.legal.citations
                                                if c.cfr_ref not in {x.cfr_ref for x in req.plain.citations}]

    # 2. quotes -----------------------------------------------------------------------------------------
    verified_quotes: list[Quote] = []
    bad_quotes: list[tuple[Quote, str]] = []
    for qt in quotes_in:
        ok, detail = verify_quote(qt, by_ref)
        qt.verified = ok
        (verified_quotes.append(qt) if ok else bad_quotes.append((qt, detail)))
    signals["quotes_total"] = float(len(quotes_in))
    signals["quotes_verified"] = float(len(verified_quotes))

    structured = [c.cfr_ref for c in citations_in] + [qt.cfr_ref for qt in verified_quotes]
    coverage, basis = citation_coverage(text_refs, retrieved, structured_refs=structured, retrieved_parts=retrieved_parts)
    signals["coverage_from_text"] = float(basis == "text")
    signals["coverage_from_structured"] = float(basis == "structured")
    signals["text_citations"] = float(len(set(text_refs)))

    if bad_quotes:
        bad_norms = [_quote_norm(_strip_quote_marks(qt.text)) for qt, _ in bad_quotes]
        bad_norms = [b for b in bad_norms if len(b) >= 8]

        def has_bad_quote(sentence: str) -> bool:
            s = _quote_norm(sentence)
            return any(b in s or (len(s) > 20 and s.strip(' .') in b) for b in bad_norms)

        legal_text, n_legal = _remove_sentences(legal_text, has_bad_quote)
        plain_text, n_plain = _remove_sentences(plain_text, has_bad_quote)
        flags.append("stripped_quote")
        signals["quote_sentences_stripped"] = float(n_legal + n_plain)
        legal_relied = bool(req.legal.quotes) or bool(re.search(r"[\"“”]", req.legal.text or ""))
        if (not verified_quotes and legal_relied) or (req.legal.text.strip() and not legal_text.strip()):
            return result(False, plain_text, legal_text, verified_quotes, [], coverage, Refusal(
                reason="unverified_quote",
                message=(f"{'None of the quoted passages' if len(bad_quotes) > 1 else 'The quoted passage'} could be "
                         f"found word for word in "
                         f"{_join(sorted({qt.cfr_ref for qt, _ in bad_quotes}))}, so the legal answer cannot be shown."),
                evidence=[_quote_evidence(qt, detail, by_ref) for qt, detail in bad_quotes],
            ))

    # 3. citations to sections not retrieved: stripped and flagged ---------------------------------------
    unretrieved = sorted({r for r in text_refs if r not in retrieved and not _part_covered(r, retrieved_parts)})
    citations_out = [c for c in citations_in if c.cfr_ref in retrieved]
    if len(citations_out) < len(citations_in) or unretrieved:
        flags.append("stripped_citation")
        signals["citations_stripped"] = float(len(citations_in) - len(citations_out) + len(unretrieved))
        if unretrieved:
            def cites_unretrieved(sentence: str) -> bool:
                return any(resolve(r) in unretrieved for r in find_cfr_refs(sentence, default_title))

            plain_text, _ = _remove_sentences(plain_text, cites_unretrieved)
            legal_text, _ = _remove_sentences(legal_text, cites_unretrieved)
    if not plain_text.strip():
        return result(False, "", "", [], [], coverage, Refusal(
            reason="unsupported_claims",
            message=f"Everything the answer said rested on sections that were not retrieved "
                    f"({_join(unretrieved) or 'none named'}), so it is withheld.",
            evidence=[Evidence(cfr_ref=r, detail="cited by the answer but not retrieved") for r in unretrieved],
        ))

    # 4. figures ----------------------------------------------------------------------------------------
    cited = {r for r in text_refs if r in by_ref} | {c.cfr_ref for c in citations_out if c.cfr_ref in by_ref} | {
        qt.cfr_ref for qt in verified_quotes if qt.cfr_ref in by_ref}
    cited_sections = [by_ref[r] for r in sorted(cited)] or sections
    known_numbers = {h.section for h in list(req.retrieval.hits) + sections} | {
        r.section for r in find_cfr_refs(plain_text + "\n" + legal_text, default_title) if r.section}
    sec_figs = {s.cfr_ref: extract_figures(f"{s.heading}\n{s.text}\n{s.source_note or ''}") for s in sections}
    question_figs = extract_figures(req.question) if th.allow_question_figures else []
    unsupported: list[tuple[Figure, str, str]] = []  # figure, where, sentence
    uncited_source = False
    n_figs = 0
    section_norms = [_quote_norm(f"{s.heading}\n{s.text}") for s in sections]

    def copied(sentence: str) -> bool:
        body = _quote_norm(claim_body(sentence)).strip(" .;:")
        return len(body) >= 12 and any(body in n for n in section_norms)

    for where, text in (("plain answer", plain_text), ("legal answer", legal_text)):
        # a sentence copied word for word from a given section states that section's figures, whatever its
        # cut-off context makes of a number ("L. 89-642" without its "Pub.")
        for sentence in split_sentences(text):
            if copied(sentence):
                text = text.replace(sentence, " " * len(sentence))
        for f in extract_figures(text, extra_refs=known_numbers):
            n_figs += 1
            if any(f.matches(c) for s in cited_sections for c in sec_figs[s.cfr_ref]):
                continue
            if any(f.matches(c) for figs in sec_figs.values() for c in figs):
                uncited_source = True
                continue
            if any(f.matches(c) for c in question_figs):
                continue
            sentence = next((s for s in split_sentences(text) if f.raw in s), f.raw)
            unsupported.append((f, where, sentence))
    signals["figures_total"] = float(n_figs)
    signals["figures_unsupported"] = float(len(unsupported))
    if uncited_source:
        flags.append("figure_from_uncited_section")
    if unsupported:
        shown = sorted({f.key for f, _, _ in unsupported})
        refs = _join([s.cfr_ref for s in cited_sections[:4]]) or "the retrieved sections"
        verb = "states" if len(shown) == 1 else "states the figures"
        return result(False, plain_text, legal_text, verified_quotes, citations_out, coverage, Refusal(
            reason="unsupported_figure",
            message=f"The answer {verb} {_join(shown)}, which {'does' if len(shown) == 1 else 'do'} not appear in "
                    f"{refs}, so it cannot be traced to the regulation and is withheld.",
            evidence=[Evidence(cfr_ref=cited_sections[0].cfr_ref if cited_sections else "none",
                               heading=cited_sections[0].heading if cited_sections else None,
                               version_id=cited_sections[0].version_id if cited_sections else None,
                               source_date=cited_sections[0].source_date if cited_sections else None,
                               status=cited_sections[0].status if cited_sections else None,
                               figures=[f.key], detail=f"{where}: “{sentence}” — not in {refs}")
                      for f, where, sentence in unsupported],
        ))

    # 5. claim support ----------------------------------------------------------------------------------
    sentences = split_sentences(plain_text)
    answer_refs = sorted(cited)
    support = claim_support(sentences, sections, cache, th.support, answer_refs=answer_refs, default_title=default_title)
    claims = [s for s in support if s.is_claim]
    unsupported_claims = [s for s in claims if not s.supported]
    signals["claims_total"] = float(len(claims))
    signals["claims_supported"] = float(len(claims) - len(unsupported_claims))
    signals["claim_support_share"] = (len(claims) - len(unsupported_claims)) / len(claims) if claims else 1.0
    signals["claim_support_mean"] = sum(s.support for s in claims) / len(claims) if claims else 1.0
    sentence_out = [SentenceSupport(sentence=s.sentence, supported=s.supported, support=round(s.support, 4),
                                    cfr_ref=s.cfr_ref) for s in support]
    if unsupported_claims:
        flags.append("unsupported_sentence")
    if claims and len(unsupported_claims) / len(claims) > th.support.refuse_unsupported_share:
        refs = _join(answer_refs or [s.cfr_ref for s in sections[:3]])
        res = result(False, plain_text, legal_text, verified_quotes, citations_out, coverage, Refusal(
            reason="unsupported_claims",
            message=f"{len(unsupported_claims)} of the answer's {len(claims)} statements are not supported by "
                    f"{refs}, so the answer is withheld.",
            evidence=[Evidence(cfr_ref=s.cfr_ref or (answer_refs[0] if answer_refs else "none"),
                               detail=f"unsupported ({s.support:.2f}): “{s.sentence}”") for s in unsupported_claims],
        ))
        res.sentences = sentence_out
        return res

    return result(True, plain_text, legal_text, verified_quotes, citations_out, coverage, None, sentence_out)


def _part_covered(ref: str, parts: set[tuple[int, str]]) -> bool:
    if " CFR part " not in ref:
        return False
    title, part = ref.split(" CFR part ")
    return (int(title), part) in parts


def _quote_evidence(qt: Quote, detail: str, by_ref: dict[str, Hit]) -> Evidence:
    hit = by_ref.get(qt.cfr_ref)
    short = qt.text if len(qt.text) <= 160 else qt.text[:157] + "…"
    if hit is None:
        return Evidence(cfr_ref=qt.cfr_ref, detail=f"quote “{short}”: {detail}")
    return _evidence(hit, detail=f"quote “{short}”: {detail}")
