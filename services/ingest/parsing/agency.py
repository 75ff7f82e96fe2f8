"""Issuing agency and chapter of a CFR unit.

The agency is read from the chapter heading when the file has one ("CHAPTER I—FOOD AND DRUG ADMINISTRATION,
DEPARTMENT OF HEALTH AND HUMAN SERVICES" -> "Food and Drug Administration"). eCFR part-level responses
(``?part=N``) carry no chapter element, so :data:`KNOWN_CHAPTERS` maps (title, part range) to the chapter and
agency for the titles this product ships or fetches. Extend it when a new title is added.
"""
from __future__ import annotations

import re

# (title, first part, last part, chapter, agency). Parts are compared numerically on their leading digits, so
# "1b" is part 1. Sources: the chapter tables of the CFR titles (eCFR "Browse" pages).
KNOWN_CHAPTERS: list[tuple[int, int, int, str | None, str]] = [
    (7, 0, 26, None, "Office of the Secretary of Agriculture"),  # 7 CFR Subtitle A (parts 0-26, incl. 1b)
    (7, 210, 299, "II", "Food and Nutrition Service"),
    (21, 1, 1299, "I", "Food and Drug Administration"),
    (21, 1300, 1399, "II", "Drug Enforcement Administration"),
    (21, 1400, 1499, "III", "Office of National Drug Control Policy"),
    (42, 1, 199, "I", "Public Health Service"),
    (42, 400, 699, "IV", "Centers for Medicare & Medicaid Services"),
    (42, 1000, 1099, "V", "Office of Inspector General-Health Care"),
]

_SMALL = {"of", "and", "the", "for", "on", "in", "to", "a", "an", "by", "at", "or"}
_DEPARTMENT = re.compile(r",\s*(DEPARTMENT OF|U\.S\. DEPARTMENT|EXECUTIVE OFFICE)\b.*$", re.I)


def _title_case(text: str) -> str:
    words = text.lower().split()
    out = []
    for i, word in enumerate(words):
        if i and word in _SMALL:
            out.append(word)
        else:
            out.append("-".join(p[:1].upper() + p[1:] for p in word.split("-")))
    return " ".join(out)


def agency_from_heading(heading: str) -> str | None:
    """'CHAPTER II—DRUG ENFORCEMENT ADMINISTRATION, DEPARTMENT OF JUSTICE' -> 'Drug Enforcement Administration'.

    Also accepts the bare FDSYS ``TITLE`` ("FOOD AND DRUG ADMINISTRATION, ... (CONTINUED)")."""
    if not heading:
        return None
    text = heading.split("—", 1)[1] if "—" in heading else heading
    text = re.sub(r"\(CONTINUED\)", "", text, flags=re.I).strip()
    text = re.sub(r"^CHAPTER\s+[IVXLC]+\s*", "", text).strip()
    text = _DEPARTMENT.sub("", text).strip(" ,.")
    if not text:
        return None
    return _title_case(text) if text.isupper() else text


def _part_number(part: str) -> int | None:
    m = re.match(r"\d+", part or "")
    return int(m.group()) if m else None


def known_chapter(title: int | None, part: str) -> tuple[str | None, str | None]:
    """(chapter, agency) from :data:`KNOWN_CHAPTERS`, or (None, None)."""
    n = _part_number(part)
    if title is None or n is None:
        return None, None
    for t, first, last, chapter, agency in KNOWN_CHAPTERS:
        if t == title and first <= n <= last:
            return chapter, agency
    return None, None
