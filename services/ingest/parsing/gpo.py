"""GPO annual-edition CFR XML (govinfo bulk data ``CFR-YYYY-titleN-volV-chapC.xml``).

``CFRGRANULE`` > ``FDSYS`` (CFRTITLE, DATE, GRANULENUM, TITLE) > ``CHAPTER`` > ``SUBCHAP`` > ``PART`` > ``SUBPART`` >
``SUBJGRP`` > ``SECTION`` / ``APPENDIX``.

- Each PART opens with ``CONTENTS`` (SUBPART/SUBJGRP/SECTNO/SUBJECT lines without bodies). It holds no ``SECTION``
  elements, and the parse loop only reacts to ``SECTION``/``APPENDIX`` ends, so a table of contents never becomes a
  unit; it is dropped with the rest of the processed tree.
- ``EFFDNOT`` (effective-date notes) may quote the future text of a section as ``REVTXT`` > ``SECTION``. Those are
  not sections of the edition (they repeat the number of the section holding the note): their text goes to that
  section's ``editorial_notes``.
- ``APPENDIX`` (``EAR`` + ``HD SOURCE="HED"`` "Appendix A to Subpart A of Part 26—List of ...") becomes a unit of
  kind "appendix" whose ``section`` is the part before the dash.
"""
from __future__ import annotations

import re

from lxml import etree

from shared.corpus import ParsedSection

from .agency import agency_from_heading
from .text import Body, cached_heading, clean_heading, inline, is_removed, is_reserved, norm, prepare, render

UNIT_TAGS = ("SECTION", "APPENDIX")
AUX_TAGS = ("FDSYS", "CONTENTS")
_PART_NO = re.compile(r"^PART\s+([0-9A-Za-z]+(?:[.-][0-9A-Za-z]+)*)", re.I)
_SECTNO = re.compile(r"^§+\s*")


def read_fdsys(el: etree._Element) -> dict:
    title = norm(el.findtext("CFRTITLE"))
    chapter_title = norm(el.findtext("TITLE"))
    return {
        "title": int(title) if title.isdigit() else None,
        "source_date": norm(el.findtext("DATE")) or norm(el.findtext("ORIGINALDATE")) or None,
        "chapter": norm(el.findtext("GRANULENUM")) or None,
        "agency": agency_from_heading(chapter_title) if chapter_title else None,
    }


def context(ancestors: list[etree._Element]) -> dict:
    ctx: dict = {"subject_group": None, "subpart": None, "part_heading": None, "part": None, "subchapter": None}
    for anc in ancestors:
        tag = anc.tag
        if tag == "SUBJGRP" and ctx["subject_group"] is None:
            ctx["subject_group"] = cached_heading(anc, "HD") or None
        elif tag == "SUBPART" and ctx["subpart"] is None:
            hd = cached_heading(anc, "HD")
            ctx["subpart"] = re.sub(r"^Subpart\s+", "", hd, flags=re.I) or None
        elif tag == "PART":
            hd = cached_heading(anc, "HD")
            ctx["part_heading"] = hd or None
            m = _PART_NO.match(hd)
            ctx["part"] = m.group(1) if m else None
        elif tag == "SUBCHAP":
            hd = cached_heading(anc, "HD")
            ctx["subchapter"] = re.sub(r"^SUBCHAPTER\s+", "", hd, flags=re.I) or None
    return ctx


_EAR = re.compile(r"Pt\.\s*([0-9A-Za-z.-]+?),\s*(?:Subpt\.\s*([0-9A-Za-z-]+?),\s*)?App\.\s*([0-9A-Za-z-]+)")


def read_contents(el: etree._Element, doc: dict) -> None:
    """Remember the appendix titles a part's table of contents lists ("Appendix C to Part 101—Nutrition Facts for
    Raw Fruits and Vegetables"): some APPENDIX elements carry only an EAR and an empty HD."""
    toc = doc.setdefault("toc_appendices", {})
    for app in el.iter("APP"):
        label, _, title = inline(app).partition("—")
        if title:
            toc[norm(label)] = clean_heading(title)


def _appendix_name(el: etree._Element, doc: dict) -> tuple[str, str]:
    hd = el.find("HD")
    full = inline(hd) if hd is not None else ""
    if hd is not None and full:
        el.remove(hd)
        label, _, title = full.partition("—")
        return norm(label), clean_heading(title)
    if hd is not None:
        el.remove(hd)
    reserved = el.find("RESERVED")
    if reserved is not None and inline(reserved).lower().startswith("appendix"):
        return norm(inline(reserved).replace("[Reserved]", "")), "[Reserved]"
    m = _EAR.search(norm(el.findtext("EAR")))
    if not m:
        return "", ""
    part, subpart, letter = m.groups()
    label = f"Appendix {letter} to Subpart {subpart} of Part {part}" if subpart else f"Appendix {letter} to Part {part}"
    return label, doc.get("toc_appendices", {}).get(label, "")


def build(el: etree._Element, ancestors: list[etree._Element], doc: dict, source: str) -> ParsedSection:
    prepare(el)
    ctx = context(ancestors)
    body = Body()
    if el.tag == "SECTION":
        kind = "section"
        section = _SECTNO.sub("", norm(el.findtext("SECTNO")))
        heading = clean_heading(" ".join(inline(s) for s in el.findall("SUBJECT")))
    else:
        kind = "appendix"
        section, heading = _appendix_name(el, doc)
    render(el, body)
    text, paragraphs = body.finish()
    reserved = body.reserved_marker or is_reserved(heading, heading=True) or (not text and not heading) or is_reserved(text)
    removed = is_removed(heading, heading=True) or is_removed(text)
    if not heading and reserved:
        heading = "[Reserved]"
    part = ctx["part"] or (section.split(".", 1)[0] if kind == "section" else "")
    return ParsedSection(
        title=doc["title"],
        part=part,
        section=section,
        heading=heading,
        text=text,
        kind=kind,
        chapter=doc.get("chapter"),
        subchapter=ctx["subchapter"],
        subpart=ctx["subpart"],
        subject_group=ctx["subject_group"],
        agency=doc.get("agency"),
        part_heading=ctx["part_heading"],
        paragraphs=paragraphs,
        source_note=" ".join(body.cita) or None,
        editorial_notes=body.notes,
        reserved=reserved,
        removed=removed,
        source=source,
        source_date=doc.get("source_date"),
    )
