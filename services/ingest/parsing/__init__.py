"""Streaming, hardened parsers for CFR XML: one :class:`shared.corpus.ParsedSection` per SECTION or appendix.

Public API::

    parse_file(path)            # .xml or .xml.gz, GPO annual edition or eCFR versioner, detected from the root
    parse_bytes(data, source)   # an eCFR API response body (or any CFR XML held in memory)
    shipped_corpus_files(dir)   # the shipped *.xml / *.xml.gz, sorted
    XMLSecurityError, CFRParseError (both ValueError)

Memory stays flat on title-sized files: lxml ``iterparse`` only reports the end of unit elements (``SECTION``,
``APPENDIX``, ``DIV8``, ``DIV9``, ``FDSYS``); each unit is rendered, then cleared, and the already processed
preceding siblings of the unit and of each of its ancestors (tables of contents, earlier parts and subparts) are
deleted. Headings of the open ancestors are cached on them as an attribute before their children go.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

from lxml import etree

from shared.corpus import ParsedSection

from . import ecfr, gpo
from .xmlsafe import (
    CFRParseError,
    XMLSecurityError,
    check_doctype,
    checked_bytes,
    display_name,
    open_checked,
    secure_iterparse,
    syntax_error,
)

__all__ = ["parse_file", "parse_bytes", "shipped_corpus_files", "CFRParseError", "XMLSecurityError", "detect_format"]

_UNIT_TAGS = frozenset(gpo.UNIT_TAGS + ecfr.UNIT_TAGS)
_EVENT_TAGS = (*gpo.UNIT_TAGS, *ecfr.UNIT_TAGS, *gpo.AUX_TAGS)
_NESTED_STOP = frozenset({"SECTION", "APPENDIX", "DIV8", "DIV9", "EFFDNOT", "REVTXT", "EXTRACT", "NOTE", "EDNOTE"})
_ECFR_ROOTS = frozenset({"DIV1", "DIV2", "DIV3", "DIV4", "DIV5", "DIV6", "DIV7", "DIV8", "DIV9", "ECFR"})


def detect_format(root_tag: str) -> str | None:
    if root_tag == "CFRGRANULE":
        return "gpo"
    if root_tag in _ECFR_ROOTS:
        return "ecfr"
    return None


def _drop_processed(el: etree._Element, ancestors: list[etree._Element]) -> None:
    el.clear(keep_tail=False)
    for node in (el, *ancestors):
        parent = node.getparent()
        if parent is None:
            break
        while node.getprevious() is not None:
            del parent[0]


def _parse(stream, source: str, source_date: str | None = None) -> Iterator[ParsedSection]:
    doc: dict = {"title": None, "source_date": source_date, "chapter": None, "agency": None}
    fmt: str | None = None
    it = secure_iterparse(stream, _EVENT_TAGS)
    try:
        while True:
            try:
                _, el = next(it)
            except StopIteration:
                break
            except etree.XMLSyntaxError as exc:
                raise syntax_error(source, exc) from None
            if fmt is None:
                tree = el.getroottree()
                check_doctype(tree, source)
                fmt = detect_format(tree.getroot().tag)
                if fmt is None:
                    raise CFRParseError(
                        source, f"unknown format: root element <{tree.getroot().tag}> is neither CFRGRANULE (GPO) "
                        "nor DIV1..DIV9 (eCFR)")
            tag = el.tag
            if tag == "FDSYS":
                info = gpo.read_fdsys(el)
                doc.update({k: v for k, v in info.items() if v is not None})  # the file's DATE beats the fallback
                continue
            if tag == "CONTENTS":
                if fmt == "gpo":
                    gpo.read_contents(el, doc)
                    el.clear(keep_tail=False)  # a table of contents is never a unit
                continue
            if tag not in _UNIT_TAGS:
                continue
            if fmt == "gpo" and tag.startswith("DIV") or fmt == "ecfr" and tag in ("SECTION", "APPENDIX"):
                continue  # e.g. an HTML-ish DIV8 inside a GPO file: not a unit of that format
            if tag == "DIV8" and el.get("TYPE", "SECTION") != "SECTION":
                continue
            if tag == "DIV9" and el.get("TYPE", "APPENDIX") != "APPENDIX":
                continue
            ancestors = list(el.iterancestors())
            if any(a.tag in _NESTED_STOP for a in ancestors):
                continue  # quoted text (e.g. REVTXT of an effective-date note): part of the enclosing unit
            builder = gpo.build if fmt == "gpo" else ecfr.build
            unit = builder(el, ancestors, doc, source)
            _drop_processed(el, ancestors)
            yield unit
        if fmt is None:
            root = getattr(it, "root", None)
            if root is None:
                raise CFRParseError(source, "empty document: no root element")
            check_doctype(root.getroottree(), source)
            if detect_format(root.tag) is None:
                raise CFRParseError(
                    source, f"unknown format: root element <{root.tag}> is neither CFRGRANULE (GPO) nor DIV1..DIV9 (eCFR)")
    finally:
        stream.close()


def parse_file(path: str | Path) -> Iterator[ParsedSection]:
    """Stream the units of a CFR XML file (``.xml`` or ``.xml.gz``); ``source`` is the file name without ``.gz``."""
    path = Path(path)
    stream = open_checked(path)
    yield from _parse(stream, display_name(path))


def parse_bytes(data: bytes, source: str, source_date: str | None = None) -> Iterator[ParsedSection]:
    """Parse CFR XML held in memory (an eCFR API response). ``source_date`` (e.g. the requested date) is used
    when the document carries none."""
    stream = checked_bytes(data, source)
    yield from _parse(stream, source, source_date)


def shipped_corpus_files(corpus_dir: str | Path) -> list[Path]:
    """The shipped CFR XML files under ``corpus_dir`` (``*.xml`` and ``*.xml.gz``, recursively), sorted."""
    root = Path(corpus_dir)
    files = [p for p in root.rglob("*") if p.is_file() and (p.name.endswith(".xml") or p.name.endswith(".xml.gz"))]
    return sorted(files)
