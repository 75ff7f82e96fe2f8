"""CFR citation parsing: the one place that reads "21 CFR 101.9(c)(1)", "§§ 205.300–205.303",
"section 110.80 of title 21", "part 1301", "7 CFR 1b.4" and their variants.

Everything that needs a citation out of text (scoping, the scorer, the evaluation harness) calls
``find_citations`` or ``normalize_ref``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

SECTION_NO = r"\d+[a-z]?\.\d+[a-z]?"
PARAGRAPH = r"(?:\s?\((?:[a-z]{1,4}|\d{1,3}|[A-Z]{1,3})\))+"
CFR = r"C\.?\s?F\.?\s?R\.?"
DASH = r"\s?(?:-|–|—|through|to)\s?"

_TITLE_CFR = re.compile(
    rf"\b(?P<title>\d{{1,2}})\s*{CFR}\s*"
    rf"(?:(?P<sect_mark>§§?|sections?|secs?\.)\s*)?"
    rf"(?:(?P<part_word>parts?|pt\.)\s*(?P<part>\d+[a-z]?)\b(?!\.\d)"
    rf"|(?P<section>{SECTION_NO})(?P<paragraph>{PARAGRAPH})?(?:{DASH}(?:§\s?)?(?P<range_end>{SECTION_NO}))?"
    rf"|(?P<bare_part>\d+[a-z]?)\b(?!\.\d))",
    re.IGNORECASE,
)
_SECTION_OF_TITLE = re.compile(
    rf"\b(?:§§?|sections?|secs?\.)\s*(?P<section>{SECTION_NO})(?P<paragraph>{PARAGRAPH})?\s*,?\s*of\s+(?:the\s+)?"
    rf"(?:title\s+(?P<title>\d{{1,2}})|(?P<title2>\d{{1,2}})\s*{CFR})",
    re.IGNORECASE,
)
_TITLE_THEN_SECTION = re.compile(
    rf"\btitle\s+(?P<title>\d{{1,2}})\s*(?:of the CFR|of the Code of Federal Regulations)?\s*,?\s*"
    rf"(?:(?:§§?|sections?|secs?\.)\s*(?P<section>{SECTION_NO})(?P<paragraph>{PARAGRAPH})?"
    rf"|(?:parts?)\s+(?P<part>\d+[a-z]?)\b(?!\.\d))",
    re.IGNORECASE,
)
_PART_OF_TITLE = re.compile(
    r"\bparts?\s+(?P<part>\d+[a-z]?)\b(?!\.\d)\s*,?\s*of\s+(?:the\s+)?title\s+(?P<title>\d{1,2})", re.IGNORECASE
)
_SECTION_ALONE = re.compile(
    rf"(?:§§?\s*|\b(?:sections?|secs?\.)\s+)(?P<section>{SECTION_NO})(?P<paragraph>{PARAGRAPH})?"
    rf"(?:{DASH}(?:§\s?)?(?P<range_end>{SECTION_NO}))?",
    re.IGNORECASE,
)
_PART_ALONE = re.compile(r"\bparts?\s+(?P<part>\d{1,4}[a-z]?)\b(?!\.\d)", re.IGNORECASE)
_TITLE_ALONE = re.compile(r"\btitle\s+(?P<title>\d{1,2})\b(?!\.\d)", re.IGNORECASE)
# a section number with no "CFR" or "§" ("what does 1306.04 say"): read only where the caller can check it against
# the sections held, and never a figure ("10.5 mg", "$12.50", "98.6 degrees", "12.5%", "10.2-11.4")
_FIGURE_AFTER = (r"%|percent|per\b|°|x\b|mg\b|mcg\b|µg|g\b|kg\b|lbs?\b|pounds?|ounces?|oz\b|grams?|milligrams?|"
                 r"micrograms?|kilograms?|inch|in\.|feet|ft\b|cm\b|mm\b|meters?|degrees?|ml\b|milliliters?|liters?|"
                 r"litres?|gallons?|quarts?|pints?|hours?|hrs?\b|days?|weeks?|months?|years?|yrs?\b|minutes?|mins?\b|"
                 r"seconds?|times|cents?|dollars?|ppm|ppb|iu\b|kcal|calories|million|billion|thousand|acres?|miles?|"
                 r"units?|servings?|cups?|tablespoons?|teaspoons?|tbsp|tsp")
_NOT_A_SECTION_BEFORE = re.compile(
    r"\b(?:versions?|v|ver|release|rev|revision|firmware|ios|android|python|ph|gpa|score|scored|rated|rating|"
    r"temperature|temp|fever|a1c|bmi|level|levels|reading|weighs?|weighed|phone|tel|call|ip|no|number|#)"
    r"(?:\s+(?:is|was|of|at|about|around|reads?|came back|=|:)){0,2}\.?\s*$",
    re.IGNORECASE)
_BARE_SECTION = re.compile(
    rf"(?<![\w$€£.,/-])(?P<section>\d{{2,4}}[a-z]?\.\d{{1,4}}[a-z]?)(?P<paragraph>{PARAGRAPH})?"
    rf"(?![\w.,/-]?\d)(?!\s*-?\s*(?:{_FIGURE_AFTER}))",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Cite:
    raw: str
    title: int | None
    part: str | None
    section: str | None  # None: a whole part
    paragraph: str | None = None
    range_end: str | None = None  # "§§ 205.300–205.303": the last section of the range
    span: tuple[int, int] = (0, 0)
    bare: bool = False  # a section number alone ("1306.04"): a citation only if the corpus holds that section

    @property
    def cfr_ref(self) -> str | None:
        if self.section and self.title:
            return f"{self.title} CFR {self.section}"
        return None


def _part_of(section: str) -> str:
    return section.split(".", 1)[0]


def _paragraph(text: str | None) -> str | None:
    return re.sub(r"\s+", "", text) if text else None


def find_citations(text: str, *, bare: bool = False) -> list[Cite]:
    """Every CFR citation in ``text``, in order of appearance, without overlaps.

    ``bare``: also section numbers standing alone ("what does 1306.04 say"), marked ``bare``; only a caller that
    keeps those the corpus holds should ask (a number alone may be a figure the unit words did not rule out).
    """
    found: list[Cite] = []
    taken: list[tuple[int, int]] = []

    def free(span: tuple[int, int]) -> bool:
        return all(span[1] <= a or span[0] >= b for a, b in taken)

    def add(cite: Cite) -> None:
        if free(cite.span):
            taken.append(cite.span)
            found.append(cite)

    for match in _TITLE_CFR.finditer(text):
        title = int(match.group("title"))
        span = match.span()
        if match.group("section"):
            section = match.group("section").lower()
            add(Cite(match.group(0).strip(), title, _part_of(section), section, _paragraph(match.group("paragraph")),
                     (match.group("range_end") or "").lower() or None, span))
        else:
            part = (match.group("part") or match.group("bare_part")).lower()
            add(Cite(match.group(0).strip(), title, part, None, None, None, span))
    for pattern in (_SECTION_OF_TITLE, _TITLE_THEN_SECTION):
        for match in pattern.finditer(text):
            title = int(match.group("title") or match.groupdict().get("title2") or 0) or None
            section = (match.groupdict().get("section") or "").lower() or None
            part = (match.groupdict().get("part") or "").lower() or (section and _part_of(section)) or None
            add(Cite(match.group(0).strip(), title, part, section, _paragraph(match.groupdict().get("paragraph")),
                     None, match.span()))
    for match in _PART_OF_TITLE.finditer(text):
        add(Cite(match.group(0).strip(), int(match.group("title")), match.group("part").lower(), None, None, None,
                 match.span()))
    for match in _SECTION_ALONE.finditer(text):
        section = match.group("section").lower()
        add(Cite(match.group(0).strip(), None, _part_of(section), section, _paragraph(match.group("paragraph")),
                 (match.group("range_end") or "").lower() or None, match.span()))
    for match in _PART_ALONE.finditer(text):
        add(Cite(match.group(0).strip(), None, match.group("part").lower(), None, None, None, match.span()))
    if bare:
        for match in _BARE_SECTION.finditer(text):
            if _NOT_A_SECTION_BEFORE.search(text, 0, match.start()):
                continue
            section = match.group("section").lower()
            add(Cite(match.group(0).strip(), None, _part_of(section), section, _paragraph(match.group("paragraph")),
                     None, match.span(), bare=True))
    found.sort(key=lambda c: c.span)
    return found


def mentioned_titles(text: str) -> list[int]:
    """Titles named on their own ("title 40", "40 CFR") — including ones with no section."""
    titles = [int(m.group("title")) for m in _TITLE_ALONE.finditer(text)]
    titles += [c.title for c in find_citations(text) if c.title]
    return list(dict.fromkeys(titles))


def normalize_ref(ref: str, default_title: int | None = None) -> str | None:
    """"21 C.F.R. § 101.9(c)(1)" → "21 CFR 101.9"; "§ 205.301(a)(1)" with default_title=7 → "7 CFR 205.301"."""
    cites = [c for c in find_citations(ref) if c.section]
    if cites:
        cite = cites[0]
        title = cite.title or default_title
        return f"{title} CFR {cite.section}" if title else None
    match = re.fullmatch(rf"\s*(?P<section>{SECTION_NO})(?P<paragraph>{PARAGRAPH})?\s*", ref, re.IGNORECASE)
    if match and default_title:
        return f"{default_title} CFR {match.group('section').lower()}"
    return None


def section_sort_key(section: str) -> tuple:
    """Order sections numerically: 101.9 < 101.10 < 101.100."""
    part, _, rest = section.partition(".")
    def split(x: str) -> tuple:
        m = re.match(r"(\d+)([a-z]*)", x)
        return (int(m.group(1)), m.group(2)) if m else (0, x)
    return (*split(part), *split(rest))
