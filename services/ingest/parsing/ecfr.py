"""eCFR versioner XML (``/api/versioner/v1/full/{date}/title-{n}.xml[?part=N]``).

``DIV1 TITLE`` > ``DIV2 SUBTITLE`` > ``DIV3 CHAPTER`` > ``DIV4 SUBCHAP`` > ``DIV5 PART`` > ``DIV6 SUBPART`` >
``DIV7 SUBJGRP`` > ``DIV8 SECTION``; appendices are ``DIV9 TYPE="APPENDIX"`` (``N="Appendix A to Part 277"``).
A part-level response has ``DIV5`` as its root and no chapter: :func:`agency.known_chapter` fills chapter/agency.
Every DIV carries ``hierarchy_metadata`` (JSON, on DIV1-DIV7 HTML-escaped twice) with a ``citation`` such as
"42 CFR 406.1" and a ``path`` "/on/{date}/title-42/section-406.1" whose date is a placeholder in stored copies.
"""
from __future__ import annotations

import html
import json
import re

from lxml import etree

from shared.corpus import ParsedSection

from .agency import agency_from_heading, known_chapter
from .text import Body, cached_heading, clean_heading, inline, is_removed, is_reserved, prepare, render

UNIT_TAGS = ("DIV8", "DIV9")
_SECTION_PREFIX = re.compile(r"^§+\s*\S+\s*")
_DATE = re.compile(r"/on/(\d{4}-\d{2}-\d{2})/")
_TITLE = re.compile(r"^(\d+)\s+CFR\b|Title\s+(\d+)\b")


def metadata(el: etree._Element) -> dict:
    raw = el.get("hierarchy_metadata")
    if not raw:
        return {}
    for candidate in (raw, html.unescape(raw)):
        try:
            value = json.loads(candidate)
            return value if isinstance(value, dict) else {}
        except ValueError:
            continue
    return {}


def context(ancestors: list[etree._Element]) -> dict:
    ctx: dict = {"subject_group": None, "subpart": None, "part_heading": None, "part": None, "subchapter": None,
                 "chapter": None, "chapter_heading": None, "title": None, "meta": None}
    for anc in ancestors:
        kind = anc.get("TYPE")
        if kind == "SUBJGRP" and ctx["subject_group"] is None:
            ctx["subject_group"] = cached_heading(anc, "HEAD") or None
        elif kind == "SUBPART" and ctx["subpart"] is None:
            ctx["subpart"] = re.sub(r"^Subpart\s+", "", cached_heading(anc, "HEAD"), flags=re.I) or None
        elif kind == "PART":
            ctx["part_heading"] = cached_heading(anc, "HEAD") or None
            ctx["part"] = anc.get("N")
            ctx["meta"] = metadata(anc)
        elif kind == "SUBCHAP":
            ctx["subchapter"] = re.sub(r"^SUBCHAPTER\s+", "", cached_heading(anc, "HEAD"), flags=re.I) or None
        elif kind == "CHAPTER":
            ctx["chapter"] = anc.get("N")
            ctx["chapter_heading"] = cached_heading(anc, "HEAD")
        elif kind == "TITLE":
            n = anc.get("N") or ""
            ctx["title"] = int(n) if n.isdigit() else None
    return ctx


def _title_from(meta: dict | None, source: str) -> int | None:
    for value in ((meta or {}).get("citation") or "", (meta or {}).get("path") or ""):
        m = _TITLE.search(value) or re.search(r"/title-(\d+)", value)
        if m:
            return int(next(g for g in m.groups() if g))
    m = re.search(r"title-?(\d+)", source)
    return int(m.group(1)) if m else None


def build(el: etree._Element, ancestors: list[etree._Element], doc: dict, source: str) -> ParsedSection:
    prepare(el)
    ctx = context(ancestors)
    meta = metadata(el)
    title = ctx["title"] or doc.get("title") or _title_from(meta, source) or _title_from(ctx["meta"], source)
    head = cached_heading(el, "HEAD")
    if el.tag == "DIV8":
        kind = "section"
        section = el.get("N") or ""
        heading = clean_heading(_SECTION_PREFIX.sub("", head) if head.startswith("§") else head)
        if not section:
            m = re.match(r"^§+\s*(\S+)", head)
            section = m.group(1) if m else ""
    else:
        kind = "appendix"
        label, _, rest = head.partition("—")
        section = el.get("N") or label.strip()
        heading = clean_heading(rest if rest else head)
    body = Body()
    render(el, body)
    text, paragraphs = body.finish()
    reserved = body.reserved_marker or is_reserved(heading, heading=True) or is_reserved(text)
    removed = is_removed(heading, heading=True) or is_removed(text)
    if is_reserved(heading, heading=True) and heading != "[Reserved]":
        heading = heading.replace("[Reserved]", "").strip() or "[Reserved]"
    part = ctx["part"] or (section.split(".", 1)[0] if kind == "section" else "")
    chapter, agency = ctx["chapter"], agency_from_heading(ctx["chapter_heading"] or "")
    if chapter is None or agency is None:
        known_ch, known_agency = known_chapter(title, part)
        chapter = chapter or known_ch
        agency = agency or known_agency
    m = _DATE.search(meta.get("path", "") or "")
    date = m.group(1) if m else doc.get("source_date")  # the document's own date, else what the caller passed
    return ParsedSection(
        title=title or 0,
        part=part,
        section=section,
        heading=heading,
        text=text,
        kind=kind,
        chapter=chapter,
        subchapter=ctx["subchapter"],
        subpart=ctx["subpart"],
        subject_group=ctx["subject_group"],
        agency=agency,
        part_heading=ctx["part_heading"],
        paragraphs=paragraphs,
        source_note=" ".join(body.cita) or None,
        editorial_notes=body.notes,
        reserved=reserved,
        removed=removed,
        source=source,
        source_date=date,
    )
