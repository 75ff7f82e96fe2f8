"""What a parser produces: one record per CFR SECTION (or appendix), independent of the XML format."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Literal

UnitKind = Literal["section", "appendix"]


@dataclass(frozen=True)
class Paragraph:
    """One designated paragraph of a section's text.

    ``designation`` is the pinpoint path as the CFR writes it, e.g. "(a)(1)(i)" ("" for undesignated
    text); ``start``/``end`` are character offsets of the paragraph in ``ParsedSection.text``.
    """

    designation: str
    start: int
    end: int


@dataclass
class ParsedSection:
    title: int
    part: str
    section: str  # "101.9", "1b.4", or for appendices "Appendix A to Part 101"
    heading: str  # the section's subject, without the "§ 101.9" prefix
    text: str  # body text with paragraph designations and table rows kept, paragraphs separated by "\n"
    kind: UnitKind = "section"
    chapter: str | None = None  # "I", "II"
    subchapter: str | None = None  # "B—FOOD FOR HUMAN CONSUMPTION"
    subpart: str | None = None  # "B—Requirements for Specific Standardized Cheese and Related Products"
    subject_group: str | None = None
    agency: str | None = None  # from the chapter heading
    part_heading: str | None = None
    paragraphs: list[Paragraph] = field(default_factory=list)
    source_note: str | None = None  # the CITA text, e.g. "[48 FR 12536, Mar. 25, 1983, ...]"
    editorial_notes: list[str] = field(default_factory=list)  # NOTE / EDNOTE text, kept apart from the rule text
    reserved: bool = False  # "[Reserved]" sections
    removed: bool = False  # removed sections kept as markers
    source: str = ""  # file name or eCFR URL
    source_date: str | None = None  # "2024-04-01"

    @property
    def cfr_ref(self) -> str:
        return f"{self.title} CFR {self.section}"

    @property
    def content_hash(self) -> str:
        digest = hashlib.sha256()
        for piece in (self.heading, self.text, self.source_note or "", "|".join(self.editorial_notes)):
            digest.update(piece.encode())
            digest.update(b"\x00")
        return digest.hexdigest()

    def breadcrumb(self) -> str:
        """Hierarchy line used in embeddings and shown to users: 'Title 21 > Part 133 ... > Subpart B ...'."""
        pieces = [f"Title {self.title}"]
        if self.part_heading:
            pieces.append(self.part_heading)
        else:
            pieces.append(f"Part {self.part}")
        if self.subpart:
            pieces.append(f"Subpart {self.subpart}")
        if self.subject_group:
            pieces.append(self.subject_group)
        return " > ".join(pieces)
