"""Figures (amounts, percents, durations, temperatures, dates, limits) and CFR references in text.

Two jobs:

- ``extract_figures(text)``: every figure a reader would treat as a fact, normalised so that
  "50 percent" == "50%" == "fifty percent", "$1,000" == "1000 dollars", "thirty days" == "30 days",
  "March 18, 1983" == "1983-03-18". CFR citations ("21 CFR 133.150", "§ 133.5(a)", "part 133",
  "parts 101 and 130"), Federal Register / U.S.C. citations ("48 FR 2744", "21 U.S.C. 343") and
  paragraph designations ("(a)(1)", "paragraph (b)(2)") are not figures and are masked first.
- ``asks_for_figure(question)`` / ``asks_for_duration(question)``: whether a question asks for a quantity, or
  for a length of time ("how long", "how soon", "within how many days"): the scorer's figure gates and the
  extractive answerer's preference for sentences that state one.
- ``find_cfr_refs(text)``: the CFR references a text makes ("21 CFR 133.142", "§ 133.5", "§§ 101.9 and
  101.36", "21 CFR part 133"), for citation coverage and stripping.
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

# --------------------------------------------------------------------------------------------
# normalisation shared by quotes and figures
# --------------------------------------------------------------------------------------------
_QUOTE_MAP = {
    "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u2032": "'", "`": "'", "\u00b4": "'",
    "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u201f": '"', "\u2033": '"', "\u00ab": '"', "\u00bb": '"',
    "\u2010": "-", "\u2011": "-", "\u2012": "-", "\u2013": "-", "\u2014": "-", "\u2015": "-", "\u2212": "-",
    "\u00a0": " ", "\u2007": " ", "\u2009": " ", "\u202f": " ", "\u200b": "", "\ufeff": "", "\u2026": "...",
}
_QUOTE_TABLE = str.maketrans(_QUOTE_MAP)


def normalise_text(text: str) -> str:
    """Quote marks, dashes, odd spaces and runs of whitespace made canonical (case kept)."""
    text = unicodedata.normalize("NFKC", text or "").translate(_QUOTE_TABLE)
    text = re.sub(r"\s*-\s*(?=\d)", lambda m: "-" if m.group(0).strip() == "-" else m.group(0), text)
    return re.sub(r"\s+", " ", text).strip()


# --------------------------------------------------------------------------------------------
# units
# --------------------------------------------------------------------------------------------
# surface form (lower case, regex) -> canonical unit
_UNITS: list[tuple[str, str]] = [
    (r"%|percent|per\s*cent|percentum", "percent"),
    (r"°\s*f\b|degrees?\s+f(?:ahrenheit)?\b|deg\.?\s*f\b|f°", "°F"),
    (r"°\s*c\b|degrees?\s+c(?:elsius|entigrade)?\b|deg\.?\s*c\b|c°", "°C"),
    (r"°|degrees?", "degrees"),
    (r"calendar\s+days?|business\s+days?|working\s+days?|days?", "days"),
    (r"weeks?", "weeks"),
    (r"months?", "months"),
    (r"years?", "years"),
    (r"hours?|hrs?\.?", "hours"),
    (r"minutes?|mins?\.?", "minutes"),
    (r"seconds?|secs?\.?|s\.(?=\s|$)", "seconds"),
    (r"milligrams?|mg\b", "mg"),
    (r"micrograms?|mcg\b|µg\b|μg\b", "mcg"),
    (r"kilograms?|kg\b", "kg"),
    (r"grams?|g\b", "g"),
    (r"pounds?|lbs?\.?|lb\b", "pounds"),
    (r"ounces?|oz\.?", "ounces"),
    (r"fluid\s+ounces?|fl\.?\s*oz\.?", "fl oz"),
    (r"gallons?|gal\.?", "gallons"),
    (r"quarts?|qt\.?", "quarts"),
    (r"pints?", "pints"),
    (r"milliliters?|millilitres?|ml\b", "ml"),
    (r"liters?|litres?|l\b", "liters"),
    (r"parts\s+per\s+million|ppm\b", "ppm"),
    (r"parts\s+per\s+billion|ppb\b", "ppb"),
    (r"calories|kcal\b|cal\b", "calories"),
    (r"inch(?:es)?|in\.", "inches"),
    (r"feet|foot|ft\.?", "feet"),
    (r"millimeters?|mm\b", "mm"),
    (r"centimeters?|cm\b", "cm"),
    (r"meters?|m\b", "meters"),
    (r"dollars?|usd\b", "usd"),
    (r"cents?", "cents"),
    (r"units?|iu\b|international\s+units?", "units"),
    (r"times", "times"),
]
_UNIT_RE = re.compile(r"(?:\s*-\s*|\s*)(?:(?:of\s+)?a\s+)?(" + "|".join(f"(?:{p})" for p, _ in _UNITS) + r")", re.I)
_UNIT_LOOKUP = [(re.compile(rf"^(?:{p})$", re.I), u) for p, u in _UNITS]

# words used for numbers next to a unit ("thirty days", "one-half percent")
_SMALL = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
    "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19,
}
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90}
_SCALE = {"hundred": 100, "thousand": 1000, "million": 1_000_000, "billion": 1_000_000_000}
_FRACTION_WORDS = {"one-half": 0.5, "one half": 0.5, "one-third": 1 / 3, "one-quarter": 0.25, "one-fourth": 0.25,
                   "three-quarters": 0.75, "three-fourths": 0.75, "two-thirds": 2 / 3}
_MONTHS = {
    "jan": 1, "january": 1, "feb": 2, "february": 2, "mar": 3, "march": 3, "apr": 4, "april": 4, "may": 5,
    "jun": 6, "june": 6, "jul": 7, "july": 7, "aug": 8, "august": 8, "sep": 9, "sept": 9, "september": 9,
    "oct": 10, "october": 10, "nov": 11, "november": 11, "dec": 12, "december": 12,
}


def canonical_unit(surface: str) -> str:
    surface = re.sub(r"\s+", " ", surface.strip().lower())
    for pattern, unit in _UNIT_LOOKUP:
        if pattern.match(surface):
            return unit
    return surface


@dataclass(frozen=True)
class Figure:
    value: float
    unit: str  # canonical unit, "" when none, "date" for calendar dates (value = yyyymmdd), "year"
    raw: str  # the text as written
    start: int  # offsets in the text given to extract_figures
    end: int

    @property
    def key(self) -> str:
        return format_figure(self.value, self.unit)

    def matches(self, other: "Figure") -> bool:
        """Same value, and the same unit unless one side has none (a bare number in a table cell)."""
        if abs(self.value - other.value) > 1e-9 * max(1.0, abs(self.value)):
            if not (self.unit in ("date", "year") or other.unit in ("date", "year")):
                return False
            # a year matches a full date in that year
            a = self.value if self.unit != "date" else self.value // 10000
            b = other.value if other.unit != "date" else other.value // 10000
            if not ({self.unit, other.unit} & {"year"} and a == b):
                return False
            return True
        if self.unit == other.unit or not self.unit or not other.unit:
            return True
        return {self.unit, other.unit} <= {"year", ""}


def format_number(value: float) -> str:
    if abs(value - round(value)) < 1e-9:
        return f"{int(round(value)):,}".replace(",", ",") if abs(value) >= 10000 else str(int(round(value)))
    return f"{value:.6g}"


def format_figure(value: float, unit: str) -> str:
    if unit == "date":
        v = int(value)
        return f"{v // 10000:04d}-{(v // 100) % 100:02d}-{v % 100:02d}"
    if unit == "year":
        return str(int(value))
    number = format_number(value)
    if unit == "usd":
        return f"${number}"
    if unit in ("°F", "°C"):
        return f"{number} {unit}"
    return f"{number} {unit}".strip()


# --------------------------------------------------------------------------------------------
# masking what is not a figure
# --------------------------------------------------------------------------------------------
_DESIG = r"\((?:[a-z]{1,2}|\d{1,3}|[ivxlc]{1,6}|[A-Z]{1,2})\)"
_SECTION_NO = r"\d{1,4}[a-z]?\.\d{1,4}[a-z]?(?:-\d+)?"
_MASK_PATTERNS = [
    # 21 CFR 133.150(a)(1), 21 CFR part 133, 21 CFR parts 101 and 130, 21 C.F.R. § 101.9
    rf"\b\d{{1,2}}\s*C\.?\s?F\.?\s?R\.?\s*(?:§+\s*)?(?:(?:sub)?parts?\s+)?\d{{1,4}}[a-z]?(?:\.\d{{1,4}}[a-z]?(?:-\d+)?)?(?:\s*{_DESIG})*"
    rf"(?:\s*(?:,|and|or|through|to|-)\s*(?:\d{{1,4}}[a-z]?(?:\.\d{{1,4}}[a-z]?)?|{_DESIG})(?:\s*{_DESIG})*)*",
    # § 133.5(a), (b), and (d); §§ 101.9 and 101.36
    rf"§+\s*{_SECTION_NO}(?:\s*{_DESIG})*(?:\s*(?:,|and|or|through|to)\s*(?:(?:§+\s*)?{_SECTION_NO}|{_DESIG})(?:\s*{_DESIG})*)*",
    # part 133, parts 101 and 130 of this chapter, subpart B, section 502(f) (1) and (2), title 21
    rf"\b(?:(?:sub)?parts?(?!\s+per\b)|sections?|secs?\.|chapters?|titles?|subchapters?|appendix|appendices|paragraphs?|"
    rf"articles?|rules?|tables?|figures?|footnotes?|forms?|items?|lines?|columns?|steps?|schedules?|exhibits?|notes?)"
    rf"\s+(?:[A-Z]{{1,3}}\b|[ivxlc]+\b|\d{{1,4}}[a-z]?(?:\.\d{{1,4}}[a-z]?)?)?(?:\s*{_DESIG})*"
    rf"(?:\s*(?:,|and|or|through|to)\s*(?:\d{{1,4}}[a-z]?(?:\.\d{{1,4}}[a-z]?)?|{_DESIG})(?:\s*{_DESIG})*)*",
    # Federal Register, U.S. Code, public laws, statutes
    r"\b\d{1,3}\s+FR\s+\d{1,6}(?:\s*,\s*\d{1,6})?",
    r"\b\d{1,3}\s+U\.?\s?S\.?\s?C\.?\s+\d{1,5}[a-z]*(?:\s*" + _DESIG + r")*(?:\s*(?:note|et seq\.?))?",
    r"\bPub\.?\s*L\.?\s*(?:No\.?\s*)?\d{1,3}-\d{1,4}",
    r"\b\d{1,3}\s+Stat\.?\s+\d{1,5}",
    # paragraph designations on their own: (a), (1), (iv), (a)(1)(i)
    rf"(?<![\w$]){_DESIG}(?:{_DESIG})*",
    # footnote markers in table cells ("145 °F 1 |")
]
_MASK_RE = re.compile("|".join(f"(?:{p})" for p in _MASK_PATTERNS), re.I)
# "1. " / "2) " list markers at the start of a line, and a bare "21 CFR" / "Title 21 CFR"
_LIST_MARKER_RE = re.compile(r"^\s*\d{1,2}[.)](?=\s)|\b\d{1,2}\s*C\.?\s?F\.?\s?R\b\.?", re.M | re.I)


def mask_non_figures(text: str, extra_refs: set[str] | None = None) -> str:
    """Replace citations, designations and known section numbers with spaces (offsets kept)."""
    def blank(m: re.Match) -> str:
        return " " * (m.end() - m.start())

    masked = _MASK_RE.sub(blank, text)
    masked = _LIST_MARKER_RE.sub(blank, masked)
    for ref in extra_refs or ():
        masked = re.sub(rf"(?<![\d.]){re.escape(ref)}(?![\d])", lambda m: " " * len(m.group(0)), masked)
    return masked


# --------------------------------------------------------------------------------------------
# extraction
# --------------------------------------------------------------------------------------------
_NUMBER_WORDS = "|".join(sorted(list(_SMALL) + list(_TENS) + list(_SCALE), key=len, reverse=True))
_WORD_NUMBER = rf"(?:{_NUMBER_WORDS})(?:[\s-]+(?:and\s+)?(?:{_NUMBER_WORDS}))*"
_FRACTION_WORD = "|".join(sorted((re.escape(k) for k in _FRACTION_WORDS), key=len, reverse=True))
_MONTH_NAMES = "|".join(sorted(_MONTHS, key=len, reverse=True))
_DATE_RE = re.compile(
    rf"\b(?P<month>{_MONTH_NAMES})\.?\s+(?P<day>\d{{1,2}})(?:st|nd|rd|th)?,?\s+(?P<year>(?:1[89]|20)\d\d)\b"
    rf"|\b(?P<iy>(?:1[89]|20)\d\d)-(?P<im>\d\d)-(?P<id>\d\d)\b"
    rf"|\b(?P<um>\d{{1,2}})/(?P<ud>\d{{1,2}})/(?P<uy>(?:1[89]|20)\d\d)\b"
    rf"|\b(?P<mo>{_MONTH_NAMES})\.?\s+(?P<moy>(?:1[89]|20)\d\d)\b",
    re.I,
)
_NUM_RE = re.compile(
    r"(?P<dollar>\$\s?)?(?<![\w.])(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
    r"(?:\s*/\s*(?P<den>\d+)(?![\d/]))?"
    r"(?P<scale>\s+(?:million|billion|thousand))?",
)
_WORD_RE = re.compile(rf"\b(?P<frac>{_FRACTION_WORD})\b|\b(?P<word>{_WORD_NUMBER})\b", re.I)


def _words_to_number(words: str) -> float | None:
    total = 0
    current = 0
    seen = False
    for w in re.split(r"[\s-]+", words.lower()):
        if w == "and" or not w:
            continue
        if w in _SMALL:
            current += _SMALL[w]
        elif w in _TENS:
            current += _TENS[w]
        elif w == "hundred":
            current = max(current, 1) * 100
        elif w in _SCALE:
            total += max(current, 1) * _SCALE[w]
            current = 0
        else:
            return None
        seen = True
    return float(total + current) if seen else None


def _unit_after(text: str, pos: int) -> tuple[str, int]:
    m = _UNIT_RE.match(text, pos)
    if not m:
        return "", pos
    return canonical_unit(m.group(1)), m.end()


def extract_figures(text: str, *, extra_refs: set[str] | None = None, words_need_unit: bool = True) -> list[Figure]:
    """Every figure in ``text`` (see module doc). Offsets refer to ``text`` as given.

    ``extra_refs``: bare section numbers ("133.150") known to be citations in this context.
    Number words ("thirty") count only when a unit follows ("thirty days"), unless ``words_need_unit``
    is False, so that "one of the following" is not a figure.
    """
    if not text:
        return []
    masked = mask_non_figures(text, extra_refs)
    figures: list[Figure] = []
    taken = [False] * len(text)

    def take(start: int, end: int) -> bool:
        if any(taken[start:end]):
            return False
        for i in range(start, end):
            taken[i] = True
        return True

    for m in _DATE_RE.finditer(masked):
        if m.group("month"):
            y, mo, d = int(m.group("year")), _MONTHS[m.group("month").lower()], int(m.group("day"))
        elif m.group("iy"):
            y, mo, d = int(m.group("iy")), int(m.group("im")), int(m.group("id"))
        elif m.group("uy"):
            y, mo, d = int(m.group("uy")), int(m.group("um")), int(m.group("ud"))
        else:
            y, mo, d = int(m.group("moy")), _MONTHS[m.group("mo").lower()], 0
        if not (1 <= mo <= 12 and 0 <= d <= 31):
            continue
        if take(m.start(), m.end()):
            figures.append(Figure(float(y * 10000 + mo * 100 + d), "date", text[m.start():m.end()], m.start(), m.end()))

    for m in _NUM_RE.finditer(masked):
        start, end = m.start(), m.end()
        if any(taken[start:end]):
            continue
        raw_num = m.group("num").replace(",", "")
        try:
            value = float(raw_num)
        except ValueError:
            continue
        if m.group("den"):
            den = float(m.group("den"))
            if den == 0:
                continue
            value = value / den
        if m.group("scale"):
            value *= _SCALE[m.group("scale").strip().lower()]
        unit, uend = _unit_after(masked, end)
        if m.group("dollar"):
            unit = "usd"
        elif unit:
            end = uend
        elif m.group("num").isdigit() and len(m.group("num")) == 4 and 1800 <= value <= 2100:
            unit = "year"
        if take(start, end):
            figures.append(Figure(value, unit, text[start:end].strip(), start, end))

    for m in _WORD_RE.finditer(masked):
        if m.group("frac"):
            value = _FRACTION_WORDS[m.group("frac").lower().replace(" ", "-") if "-" not in m.group("frac") else m.group("frac").lower()]
        else:
            value = _words_to_number(m.group("word"))
            if value is None:
                continue
        unit, uend = _unit_after(masked, m.end())
        if not unit and words_need_unit:
            continue
        if unit in ("times", "degrees", "units", "meters", "liters") and words_need_unit:
            continue  # "one time", "two units of": too often not a figure
        end = uend if unit else m.end()
        if take(m.start(), end):
            figures.append(Figure(value, unit, text[m.start():end].strip(), m.start(), end))

    # a range or list shares its unit: "85 to 90 percent", "50, 46, and 40 percent"
    figures.sort(key=lambda f: f.start)
    for i in range(len(figures) - 2, -1, -1):
        f, g = figures[i], figures[i + 1]
        if f.unit == "" and g.unit not in ("", "date", "year"):
            between = masked[f.end:g.start]
            if re.fullmatch(r"\s*(?:-|to|and|or|through|,|,\s*and|,\s*or|°\s*to)\s*", between, re.I):
                figures[i] = Figure(f.value, g.unit, f.raw, f.start, f.end)
    return figures


def figure_keys(text: str, **kw) -> set[str]:
    return {f.key for f in extract_figures(text, **kw)}


def is_supported(figure: Figure, candidates: list[Figure]) -> bool:
    return any(figure.matches(c) for c in candidates)


# --------------------------------------------------------------------------------------------
# CFR references
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CfrRef:
    title: int
    part: str
    section: str | None  # None: a whole-part reference
    raw: str
    start: int
    end: int

    @property
    def cfr_ref(self) -> str:
        return f"{self.title} CFR {self.section}" if self.section else f"{self.title} CFR part {self.part}"


_REF_TITLE = re.compile(
    r"\b(?P<title>\d{1,2})\s*C\.?\s?F\.?\s?R\.?\s*(?:§+\s*)?"
    r"(?:(?P<partkw>(?:sub)?parts?)\s+(?P<part>\d{1,4}[a-z]?)(?![\.\d])|(?P<sec>\d{1,4}[a-z]?\.\d{1,4}[a-z]?(?:-\d+)?))",
    re.I,
)
_REF_SECTION_SIGN = re.compile(r"§+\s*(?P<sec>\d{1,4}[a-z]?\.\d{1,4}[a-z]?(?:-\d+)?)")
_REF_LIST_TAIL = re.compile(
    r"(?:\s*" + _DESIG + r")*\s*(?:,\s*(?:and|or)?|and|or)\s*(?:§+\s*)?(?P<sec>\d{1,4}[a-z]?\.\d{1,4}[a-z]?(?:-\d+)?)", re.I
)


def _list_tail(text: str, end: int, title: int, refs: list[CfrRef]) -> int:
    """Appends the sections a reference's list goes on to ("21 CFR 101.9 and 101.36"); returns where it ends."""
    while t := _REF_LIST_TAIL.match(text, end):
        sec = t.group("sec")
        refs.append(CfrRef(title, sec.split(".")[0], sec, t.group(0), t.start("sec"), t.end()))
        end = t.end()
    return end


def find_cfr_refs(text: str, default_title: int = 21) -> list[CfrRef]:
    """CFR references in ``text``, in order; a bare "§ 133.5" takes ``default_title``."""
    refs: list[CfrRef] = []
    spans: list[tuple[int, int]] = []
    for m in _REF_TITLE.finditer(text or ""):
        title = int(m.group("title"))
        if m.group("sec"):
            sec = m.group("sec")
            refs.append(CfrRef(title, sec.split(".")[0], sec, m.group(0), m.start(), m.end()))
            spans.append((m.start(), _list_tail(text, m.end(), title, refs)))
        else:
            refs.append(CfrRef(title, m.group("part"), None, m.group(0), m.start(), m.end()))
            spans.append((m.start(), m.end()))
    for m in _REF_SECTION_SIGN.finditer(text or ""):
        if any(a <= m.start() < b for a, b in spans):
            continue
        sec = m.group("sec")
        refs.append(CfrRef(default_title, sec.split(".")[0], sec, m.group(0), m.start(), m.end()))
        spans.append((m.start(), _list_tail(text, m.end(), default_title, refs)))
    refs.sort(key=lambda r: r.start)
    return refs


def parse_date(text: str) -> str | None:
    """The first calendar date (or year) in text as ISO "YYYY-MM-DD" (day/month 01 when absent)."""
    for f in extract_figures(text):
        if f.unit == "date":
            v = int(f.value)
            y, mo, d = v // 10000, (v // 100) % 100, v % 100
            return f"{y:04d}-{max(mo, 1):02d}-{max(d, 1):02d}"
    return None


def latest_date(text: str | None) -> str | None:
    """The latest calendar date in text (e.g. a CITA source note's last amendment), ISO."""
    best = None
    for f in extract_figures(text or ""):
        if f.unit == "date":
            v = int(f.value)
            iso = f"{v // 10000:04d}-{max((v // 100) % 100, 1):02d}-{max(v % 100, 1):02d}"
            best = iso if best is None or iso > best else best
    return best


# --------------------------------------------------------------------------------------------
# what a question asks for
# --------------------------------------------------------------------------------------------
_ASKS_FOR_FIGURE = re.compile(
    r"\b(?:how\s+(?:much|many|long|often|hot|cold|large|big|small|high|low|old|soon|far)|minimum|maximum|min|max|"
    r"at\s+least|at\s+most|no\s+more\s+than|not\s+(?:less|more)\s+than|limits?|thresholds?|percent(?:age)?s?|"
    r"temperatures?|degrees?|days?|hours?|minutes?|seconds?|weeks?|months?|years?|amounts?|levels?|contents?|"
    r"sizes?|weights?|volumes?|rates?|doses?|dosages?|concentrations?|ppm|mg|milligrams?|grams?|calories|"
    r"deadlines?|periods?|fees?|costs?|prices?|tolerances?|proportions?|ratios?|quantity|quantities|dollars?|"
    r"premiums?|allotments?|allowances?|deductibles?|poverty (?:guidelines?|levels?|lines?)|co-?pays?|co-?payments?|"
    r"coinsurance|"
    r"what\s+(?:percent|temperature|level|amount)|what\s+(?:does|do|will|would)\s+(?:\w+\s+){1,4}pay)\b|%|\$",
    re.I,
)
_ASKS_FOR_DURATION = re.compile(
    r"\bhow (?:long|soon|quickly|fast|often|many (?:days|weeks|months|years|hours|minutes))\b|\bdeadline\b|"
    r"\bwithin how\b|\bhow much time\b|\bwhat (?:is|'s) the (?:time limit|waiting period)\b",
    re.I,
)
DURATION_UNITS = frozenset({"days", "weeks", "months", "years", "hours", "minutes", "seconds"})


def asks_for_figure(question: str) -> bool:
    """Whether the question asks for a quantity (divergent/conflicting figures only matter then)."""
    return bool(_ASKS_FOR_FIGURE.search(question))


def asks_for_duration(question: str) -> bool:
    """Whether the question asks for a length of time: "how long", "how soon", "what's the deadline"."""
    return bool(_ASKS_FOR_DURATION.search(question))
