"""Text helpers of the generator: sentence units, paragraph lookup, JSON replies, quotes and citations.

Everything here is deterministic and pure (no I/O), so the providers and the service share one
definition of "a sentence of a section", "the paragraph containing an offset" and "a citation".
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Iterable

from shared.messages import Citation, Hit, Quote

# --------------------------------------------------------------------------------------------
# designations and paragraphs
# --------------------------------------------------------------------------------------------
# one or more leading designations, each optionally followed by an italic heading ("(a) Description. (1) ...")
_DESIGNATION = re.compile(r"\((?:[0-9]{1,3}|[a-z]{1,5}|[A-Z])\)")
_LEADING = re.compile(
    r"^(?:\s*\((?:[0-9]{1,3}|[a-z]{1,5}|[A-Z])\)\s*(?:[A-Z][A-Za-z ,/'’-]{0,60}\.\s+(?=\())?)+"
)
_LEADING_HEADING = re.compile(r"^[A-Z][A-Za-z ,/'’-]{0,60}\.\s+")


def _paragraph_containing(hit: Hit, offset: int):
    """The most specific paragraph span of ``hit`` containing ``offset`` (None if none)."""
    best = None
    best_key: tuple[int, int, str] | None = None
    for span in hit.paragraphs:
        if span.start <= offset < max(span.end, span.start + 1):
            key = (len(_DESIGNATION.findall(span.designation)), -(span.end - span.start), span.designation)
            if best_key is None or key > best_key:
                best, best_key = span, key
    return best


def paragraph_at(hit: Hit, offset: int) -> str | None:
    """Designation path of the most specific paragraph of ``hit`` containing ``offset`` (None if none)."""
    span = _paragraph_containing(hit, offset)
    return span.designation if span else None


def known_designation(hit: Hit, designation: str | None) -> str | None:
    """``designation`` if the section has it (or a paragraph below it), else None; sections without
    paragraph spans accept nothing (a pinpoint we cannot check is not kept)."""
    if not designation:
        return None
    designation = designation.strip()
    for span in hit.paragraphs:
        if span.designation == designation or span.designation.startswith(designation):
            return designation
    return None


# --------------------------------------------------------------------------------------------
# sentence units
# --------------------------------------------------------------------------------------------
_ABBREVIATIONS = {
    "u.s", "e.g", "i.e", "etc", "no", "nos", "inc", "co", "corp", "ltd", "st", "mr", "mrs", "dr", "vs", "fed",
    "reg", "sec", "secs", "pt", "pts", "approx", "ch", "subch", "app", "fig", "vol", "jan", "feb", "mar", "apr",
    "jun", "jul", "aug", "sept", "sep", "oct", "nov", "dec", "ft", "oz", "lb", "lbs", "gal", "min", "max",
    "u.s.c", "c.f.r", "cfr", "par", "para", "art", "ibid", "al", "viz", "cf",
}
# a sentence ends at ". " / "; " / ": " (the latter two only when a designation or capital follows)
_BOUNDARY = re.compile(r"(?<=[.?!])\s+(?=[(“\"A-Z0-9§])|(?<=[;:])\s+(?=\((?:[0-9]{1,3}|[a-z]{1,5}|[A-Z])\)\s)")


@dataclass(frozen=True)
class Unit:
    """A sentence (or table row) of one section: ``hit.text[start:end] == text``."""

    hit_index: int
    start: int
    end: int
    text: str
    position: int  # index of the unit inside its section
    is_table_row: bool = False


def _ends_with_abbreviation(chunk: str) -> bool:
    m = re.search(r"([A-Za-z][A-Za-z.]*)\.$", chunk)
    if not m:
        return bool(re.search(r"§\s*$", chunk))
    word = m.group(1).lower()
    if word in _ABBREVIATIONS or len(word) == 1:
        return True
    return False


def split_units(hit: Hit, hit_index: int = 0) -> list[Unit]:
    """Split a section's text into sentence units with exact offsets; table rows (" | ") stay whole."""
    units: list[Unit] = []
    text = hit.text
    pos = 0
    for line in text.split("\n"):
        line_start = pos
        pos += len(line) + 1
        if not line.strip():
            continue
        if " | " in line:
            units.append(Unit(hit_index, line_start, line_start + len(line), line, len(units), True))
            continue
        cuts = [0]
        for m in _BOUNDARY.finditer(line):
            if _ends_with_abbreviation(line[cuts[-1] : m.start()].rstrip()):
                continue
            cuts.append(m.end())
        cuts.append(len(line))
        for a, b in zip(cuts, cuts[1:]):
            piece = line[a:b]
            stripped = piece.rstrip()
            lead = len(piece) - len(piece.lstrip())
            if not stripped.strip():
                continue
            units.append(
                Unit(hit_index, line_start + a + lead, line_start + a + len(stripped), stripped.strip(), len(units))
            )
    return units


def strip_designation(sentence: str) -> str:
    """The sentence without its leading designations and italic paragraph heading, for plain prose."""
    out = _LEADING.sub("", sentence)
    if out != sentence:
        # "(b) Optional ingredients. The following ..." -> drop the heading too
        out2 = _LEADING_HEADING.sub("", out)
        if len(out2.split()) >= 4:
            out = out2
    return out.strip()


def is_heading_only(sentence: str) -> bool:
    """A unit that states nothing: a designation or a few words, a short lead-in, or a paragraph heading put as a
    question ("(b) How many persons may be served in CSFP?"), which reads like the user's question and answers
    nothing."""
    body = strip_designation(sentence).rstrip()
    return len(body.split()) < 4 or (body.endswith(":") and len(body.split()) < 8) or body.endswith("?")


_STATES_SOMETHING = re.compile(
    r"\b(?:is|are|was|were|be|been|being|must|shall|may|will|can|could|should|would|means?|has|have|had|does|do|"
    r"did|includes?|contains?|applies|apply|consists?|needs?|requires?|provides?|sets?|lists?)\b",
    re.I,
)


def is_paragraph_heading(hit: Hit, unit: Unit, body: str) -> bool:
    """A paragraph's own heading ("(4) Effect on previously accrued late enrollment penalties. Individuals who
    …"): a few words with no verb, and the paragraph goes on after them. A list item of the same shape ("(ii)
    Benzoyl peroxide, 2.5 to 10 percent.") is its whole paragraph and stays an answer, and so does a heading that
    names a number ("(1) Cover sheet (Form FDA-1571).")."""
    if (len(body.split()) > 10 or not body.rstrip().endswith(".") or _STATES_SOMETHING.search(body)
            or any(ch.isdigit() for ch in body)):
        return False
    span = _paragraph_containing(hit, unit.start)
    return span is not None and bool(hit.text[unit.end:span.end].strip())


# --------------------------------------------------------------------------------------------
# lexical features
# --------------------------------------------------------------------------------------------
STOPWORDS = frozenset(
    """a about above after again against all also am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have having he
    her here hers him his how i if in into is it its itself just may me might more most must my no nor not now of
    off on once only or other our out over own per same shall she should so some such than that the their them
    then there these they this those through to too under until up upon very was we were what when where which
    while who whom why will with within would you your cfr section sections part regulation regulations rule rules
    require required requires requirement requirements say says tell explain""".split()
)
_WORD = re.compile(r"[A-Za-z]+(?:['’][a-z]+)?|\d+(?:[.,]\d+)*")


def stem(word: str) -> str:
    w = word.lower().replace("’", "'")
    if w.endswith("'s"):
        w = w[:-2]
    for suffix, repl in (
        ("ational", "ate"), ("ization", "ize"), ("iveness", "ive"), ("fulness", "ful"), ("ousness", "ous"),
        ("ements", ""), ("ement", ""), ("ments", ""), ("ment", ""), ("ities", "ity"), ("ings", ""), ("ing", ""),
        ("ies", "y"), ("ied", "y"), ("sses", "ss"), ("edly", ""), ("ed", ""), ("es", ""), ("s", ""), ("ly", ""),
    ):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3:
            w = w[: len(w) - len(suffix)] + repl
            break
    return w


def terms(text: str) -> list[str]:
    """Stemmed content terms; numbers kept as written (without thousands separators)."""
    out = []
    for tok in _WORD.findall(text):
        if tok[0].isdigit():
            out.append(tok.replace(",", ""))
        elif tok.lower() not in STOPWORDS and len(tok) > 1:
            out.append(stem(tok))
    return out


def is_number(term: str) -> bool:
    return term[:1].isdigit()


def word_count(*texts: str | None) -> int:
    return sum(len(t.split()) for t in texts if t)


# --------------------------------------------------------------------------------------------
# model replies
# --------------------------------------------------------------------------------------------
class MalformedReply(ValueError):
    """The reply cannot be read as the requested JSON object."""


_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.S)


def parse_json_reply(raw: str, required: str = "answer") -> dict[str, Any]:
    """The first JSON object in ``raw`` that has the key ``required`` (code fences and prose tolerated)."""
    if not raw or not raw.strip():
        raise MalformedReply("empty reply")
    candidates = [m.group(1) for m in _FENCE.finditer(raw)] + [raw]
    decoder = json.JSONDecoder()
    for cand in candidates:
        for m in re.finditer(r"\{", cand):
            try:
                obj, _ = decoder.raw_decode(cand, m.start())
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict) and required in obj:
                return obj
    raise MalformedReply(f"no JSON object with {required!r} in reply: {raw.strip()[:80]!r}")


# --------------------------------------------------------------------------------------------
# citations
# --------------------------------------------------------------------------------------------
# "21 CFR 133.150(a)(1)", "21 C.F.R. § 133.150(a)", "21 CFR part 133" is a part, not a section (ignored)
_CFR_REF = re.compile(
    r"\b(\d{1,2})\s*C\.?\s*F\.?\s*R\.?\s*(?:§{1,2}\s*|[Ss]ec(?:tion)?\.?\s*)?(\d+[A-Za-z]?\.\d+[A-Za-z0-9-]*)"
    r"((?:\s?\((?:[0-9]{1,3}|[a-z]{1,5}|[A-Z])\))*)"
)


def normalise_ref(ref: str) -> tuple[str, str | None] | None:
    """("21 CFR 133.150", "(a)(1)") from any written form, or None."""
    m = _CFR_REF.search(ref or "")
    if not m:
        return None
    section = m.group(2).rstrip(".-")
    paragraph = re.sub(r"\s", "", m.group(3)) or None
    return f"{int(m.group(1))} CFR {section}", paragraph


def refs_in_text(text: str) -> list[tuple[str, str | None]]:
    out = []
    for m in _CFR_REF.finditer(text or ""):
        section = m.group(2).rstrip(".-")
        out.append((f"{int(m.group(1))} CFR {section}", re.sub(r"\s", "", m.group(3)) or None))
    return out


def build_citations(sections: list[Hit], refs: Iterable[tuple[str, str | None]]) -> list[Citation]:
    """Citations for ``refs`` restricted to the request's sections, deduplicated, first-seen order.

    A pinpoint the section does not have is kept at section level; a section cited both with and without
    a pinpoint keeps only its pinpoints.
    """
    by_ref = {h.cfr_ref: h for h in sections}
    seen: dict[tuple[str, str | None], Citation] = {}
    for cfr_ref, paragraph in refs:
        hit = by_ref.get(cfr_ref)
        if hit is None:
            continue
        paragraph = known_designation(hit, paragraph)
        key = (cfr_ref, paragraph)
        if key not in seen:
            seen[key] = Citation(
                cfr_ref=hit.cfr_ref, title=hit.title, part=hit.part, section=hit.section, paragraph=paragraph,
                heading=hit.heading,
            )
    pinpointed = {ref for ref, par in seen if par}
    return [c for (ref, par), c in seen.items() if par or ref not in pinpointed]


def locate_quote(sections: list[Hit], text: str, cfr_ref: str | None) -> tuple[Hit, int] | None:
    """The section (preferring ``cfr_ref``) and offset where ``text`` occurs verbatim, if it does."""
    if not text:
        return None
    ordered = sorted(sections, key=lambda h: h.cfr_ref != cfr_ref)
    for hit in ordered:
        at = hit.text.find(text)
        if at >= 0:
            return hit, at
    return None


def quote_from_model(sections: list[Hit], item: Any) -> Quote:
    """A Quote from a model's {"text", "cfr_ref", "paragraph"} item; raises MalformedReply on a bad item.

    The text is kept as the model wrote it (the scorer verifies it); a missing cfr_ref or paragraph is
    filled in only when the text is found verbatim in a section.
    """
    if isinstance(item, str):
        item = {"text": item}
    if not isinstance(item, dict) or not isinstance(item.get("text"), str) or not item["text"].strip():
        raise MalformedReply(f"quote item is not an object with text: {str(item)[:60]!r}")
    text = item["text"].strip().strip("\"“”")
    raw_ref = item.get("cfr_ref") if isinstance(item.get("cfr_ref"), str) else None
    norm = normalise_ref(raw_ref) if raw_ref else None
    cfr_ref = norm[0] if norm else None
    paragraph = item.get("paragraph") if isinstance(item.get("paragraph"), str) else None
    if norm and norm[1] and not paragraph:
        paragraph = norm[1]
    found = locate_quote(sections, text, cfr_ref)
    if found and (cfr_ref is None or found[0].cfr_ref == cfr_ref):
        hit, at = found
        cfr_ref = hit.cfr_ref
        if not paragraph:
            paragraph = paragraph_at(hit, at)
    paragraph = re.sub(r"\s", "", paragraph) if paragraph else None
    return Quote(text=text, cfr_ref=cfr_ref or (raw_ref or ""), paragraph=paragraph or None)


def pinpoint(cfr_ref: str, paragraph: str | None) -> str:
    return f"{cfr_ref}{paragraph or ''}"
