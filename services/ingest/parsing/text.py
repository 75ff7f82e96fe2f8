"""Format-independent text rendering of a CFR section body.

Both formats share most block elements (P, FP, HD, EXTRACT, NOTE, EDNOTE, CITA ...); the differences (GPO
``GPOTABLE`` vs eCFR HTML ``TABLE``, ``HD`` vs ``HD1..3``/``HED``) are handled here too, so the two parsers only
differ in how they find the section number, heading and hierarchy.

Rules:
- one paragraph per line, whitespace normalised, inline markup (E, I, B, SU, FR, FTREF ...) flattened to text,
  page markers (PRTPAGE) dropped;
- table rows rendered as one line of cells joined by " | " (header row first);
- CITA goes to ``source_note``, NOTE/EDNOTE/EFFDNOT/APPRO/SECAUTH/CROSSREF go to ``editorial_notes``;
- graphics (GPH, img) become a "[Graphic: ER21DE18.017]" placeholder line, so a figure-only appendix is not empty;
- paragraph designations are tracked into a full path ("(c)(1)(i)") for every P/FP line of the section body
  (not inside EXTRACTs, footnotes, examples, tables or notes, whose "(a)" are quotations or labels).
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

from lxml import etree

from shared.corpus import Paragraph

_WS = re.compile(r"\s+")


def norm(text: str | None) -> str:
    return " ".join(text.split()) if text else ""


def prepare(el: etree._Element) -> None:
    """Drop page markers and graphics, make line-break-ish inline elements separate words."""
    etree.strip_elements(el, "PRTPAGE", "STARS", with_tail=False)
    for sep in el.iter("br", "LI"):
        sep.tail = " " + (sep.tail or "")
        if sep.tag == "LI":
            sep.text = " " + (sep.text or "")


def inline(el: etree._Element) -> str:
    return norm("".join(el.itertext()))


# ---------------------------------------------------------------------------------------------- designations


def cached_heading(el: etree._Element, tag: str) -> str:
    """The inline text of an element's first ``tag`` child, cached on the element: the heading of an open
    ancestor must survive the clearing of its already-processed children."""
    cached = el.get("_h")
    if cached is not None:
        return cached
    head = el.find(tag)
    text = inline(head) if head is not None else ""
    el.set("_h", text)
    return text

def _roman(n: int) -> str:
    out = ""
    for value, digits in ((50, "l"), (40, "xl"), (10, "x"), (9, "ix"), (5, "v"), (4, "iv"), (1, "i")):
        while n >= value:
            out += digits
            n -= value
    return out


_ROMAN = {_roman(i): i for i in range(1, 90)}
_LEVELS = {"lower": (1,), "digit": (2, 5), "roman": (3, 6), "upper": (4,)}
_TOKEN = re.compile(r"\(([0-9]{1,3}|[a-z]{1,6}|[A-Z]{1,3})\)")


def _letter_ord(tok: str) -> int:
    return (len(tok) - 1) * 26 + ord(tok[0].lower()) - 96


@functools.lru_cache(maxsize=4096)
def _candidates(tok: str) -> list[tuple[str, int]]:
    if tok.isdigit():
        return [("digit", int(tok))]
    out: list[tuple[str, int]] = []
    if tok.islower():
        if len(set(tok)) == 1 and len(tok) <= 3:
            out.append(("lower", _letter_ord(tok)))
        if tok in _ROMAN:
            out.append(("roman", _ROMAN[tok]))
    elif tok.isupper() and len(set(tok)) == 1:
        out.append(("upper", _letter_ord(tok)))
    return out


def leading_tokens(line: str) -> list[str]:
    """The designation tokens at the very start of a paragraph: "(j)(1) No advertisement" -> ["j", "1"]."""
    toks: list[str] = []
    pos = 0
    while True:
        m = _TOKEN.match(line, pos)
        if not m or not _candidates(m.group(1)):
            return toks
        toks.append(m.group(1))
        pos = m.end()


@dataclass
class _Level:
    kind: str
    ordinal: int
    level: int
    token: str


class DesignationTracker:
    """Turns the designation at the start of each paragraph into its full path.

    The CFR nests (a) > (1) > (i) > (A) > (1) > (i). A token that continues a sequence already open on the stack
    ("(b)" after "(a)...", "(2)" after "(1)...") closes everything deeper; a first-of-its-kind token ("(1)", "(i)",
    "(A)") opens a deeper level. "(i)", "(v)", "(x)", "(ii)"... are both letters and roman numerals: "(i)" right
    after "(h)" is the letter; otherwise the next paragraph decides ("(ii)" follows a roman "(i)").
    """

    def __init__(self) -> None:
        self.stack: list[_Level] = []

    def path(self) -> str:
        return "".join(f"({lv.token})" for lv in self.stack)

    def feed(self, tokens: list[str], next_tokens: list[str]) -> str:
        for i, tok in enumerate(tokens):
            nxt = tokens[i + 1] if i + 1 < len(tokens) else (next_tokens[0] if next_tokens else None)
            self._step(tok, nxt)
        return self.path()

    def _has(self, kind: str, ordinal: int) -> int:
        for i in range(len(self.stack) - 1, -1, -1):
            lv = self.stack[i]
            if lv.kind == kind and lv.ordinal == ordinal:
                return i
        return -1

    def _choose(self, cands: list[tuple[str, int]], tok: str, nxt: str | None) -> tuple[str, int]:
        if len(cands) == 1:
            return cands[0]
        letter, roman = cands  # ("lower", n), ("roman", m)
        letter_sib = self._has("lower", letter[1] - 1)
        roman_sib = self._has("roman", roman[1] - 1) if roman[1] > 1 else -2  # -2: a first roman is always possible
        deepest = self.stack[-1].level if self.stack else 0
        if letter_sib < 0 and roman_sib == -1:
            return roman if deepest in (2, 5) else letter
        if letter_sib >= 0 and roman_sib == -1:
            return letter
        if letter_sib < 0:
            return roman
        # both readings are possible
        if roman[1] == 1:  # "(i)"
            if letter_sib == len(self.stack) - 1:
                return letter  # right after "(h)" itself
            return roman if nxt == _roman(2) else letter
        if nxt is not None:
            if nxt == _roman(roman[1] + 1):
                return roman
            if nxt == "1" or (nxt.islower() and _candidates(nxt)[:1] == [("lower", letter[1] + 1)]):
                return letter
        return roman if roman_sib > letter_sib else letter

    def _open(self, kind: str, ordinal: int, tok: str) -> None:
        deepest = self.stack[-1].level if self.stack else 0
        levels = _LEVELS[kind]
        level = next((lv for lv in levels if lv > deepest), levels[0])
        self.stack = [lv for lv in self.stack if lv.level < level]
        self.stack.append(_Level(kind, ordinal, level, tok))

    def _step(self, tok: str, nxt: str | None) -> None:
        kind, ordinal = self._choose(_candidates(tok), tok, nxt)
        sib = self._has(kind, ordinal - 1)
        if sib >= 0:
            level = self.stack[sib].level
            del self.stack[sib:]
            self.stack.append(_Level(kind, ordinal, level, tok))
            return
        if ordinal == 1:
            self._open(kind, ordinal, tok)
            return
        for i in range(len(self.stack) - 1, -1, -1):  # a gap in the sequence: same kind, nearest level
            if self.stack[i].kind == kind:
                level = self.stack[i].level
                del self.stack[i:]
                self.stack.append(_Level(kind, ordinal, level, tok))
                return
        self._open(kind, ordinal, tok)


# ---------------------------------------------------------------------------------------------- body rendering

_SKIP = frozenset(
    {"SECTNO", "SUBJECT", "HEAD", "EAR", "PRTPAGE", "GID", "STARS", "SECHD", "LRH", "RRH", "RESERVED",
     "PTHD", "PGHD"}
)
_NOTES = frozenset({"NOTE", "EDNOTE", "EFFDNOT", "EFFDNOTP", "APPRO", "SECAUTH", "CROSSREF", "AUTH", "SOURCE"})
_TRACKED = frozenset({"P", "FP", "FP-1", "FP-2", "FP1-2", "FP-DASH", "PSPACE"})
_BLOCK = frozenset(
    {"P", "FP", "FP-1", "FP-2", "FP1-2", "FP-DASH", "HD", "HD1", "HD2", "HD3", "HED", "PSPACE", "EXTRACT", "NOTE",
     "EDNOTE", "EFFDNOT", "GPOTABLE", "TABLE", "DIV", "FTNT", "EXAMPLE", "SECTION", "SECTNO", "SUBJECT", "REVTXT",
     "BOXTXT", "SCOL2", "APPRO", "CITA", "TTITLE", "TNOTE", "TDESC", "ROW", "TR", "CAPTION", "AC", "THEAD", "TBODY"}
)


@dataclass
class Body:
    lines: list[str] = field(default_factory=list)
    tracked: list[bool] = field(default_factory=list)
    inner: dict[int, list[str]] = field(default_factory=dict)  # line -> tokens after an italic paragraph heading
    cita: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    reserved_marker: bool = False

    def add(self, text: str, tracked: bool = False, inner: list[str] | None = None) -> None:
        if text:
            if inner:
                self.inner[len(self.lines)] = inner
            self.lines.append(text)
            self.tracked.append(tracked)

    def finish(self) -> tuple[str, list[Paragraph]]:
        """Join the lines and compute designation paths and offsets."""
        tracker = DesignationTracker()
        toks = [leading_tokens(line) if tr and line.startswith("(") else [] for line, tr in zip(self.lines, self.tracked)]
        for i, extra in self.inner.items():
            if toks[i]:
                toks[i] = toks[i] + extra  # "(a) Scope and purpose. (1) This subpart ..." is (a)(1)
        paragraphs: list[Paragraph] = []
        pos = 0
        following: list[list[str]] = [[]] * len(toks)  # tokens of the next designated paragraph (look-ahead)
        upcoming: list[str] = []
        for i in range(len(toks) - 1, -1, -1):
            following[i] = upcoming
            if toks[i]:
                upcoming = toks[i]
        for i, line in enumerate(self.lines):
            designation = ""
            if toks[i]:
                designation = tracker.feed(toks[i], following[i])
            paragraphs.append(Paragraph(designation, pos, pos + len(line)))
            pos += len(line) + 1
        return "\n".join(self.lines), paragraphs


def _is_container(el: etree._Element) -> bool:
    for child in el:
        if child.tag in _BLOCK:
            return True
    return False


def _gpo_table(el: etree._Element, body: Body, tracked: bool) -> None:
    for child in el:
        tag = child.tag
        if tag == "BOXHD":
            heads = [(int(c.get("H") or 1), inline(c)) for c in child if c.tag == "CHED"]
            leaves = [text for i, (h, text) in enumerate(heads) if i + 1 == len(heads) or heads[i + 1][0] <= h]
            if any(leaves):
                body.add(" | ".join(leaves))
        elif tag == "ROW":
            cells = [inline(c) for c in child if c.tag == "ENT"]
            if any(cells):
                body.add(" | ".join(cells), tracked)  # "(i) Codeine | 9050" is paragraph (b)(1)(i) of 1308.12
        elif tag in ("TTITLE", "TNOTE", "TDESC", "TCAP", "BCAP", "TRPRTPAGE"):
            body.add(inline(child))


def _html_table(el: etree._Element, body: Body, tracked: bool) -> None:
    for child in el.iter("CAPTION", "TR"):
        if child.tag == "CAPTION":
            body.add(inline(child))
        else:
            cells = [inline(c) for c in child if c.tag in ("TH", "TD")]
            if any(cells):
                body.add(" | ".join(cells), tracked and not any(c.tag == "TH" for c in child))


def _inner_tokens(el: etree._Element) -> list[str] | None:
    """Tokens that open the text after an italic paragraph heading: ``(a) <E>Scope.</E> (1) This ...``."""
    lead = (el.text or "").strip()
    if not lead.startswith("(") or not len(el):
        return None
    first = el[0]
    if first.tag not in ("E", "I", "B") or not first.tail:
        return None
    if not lead.startswith("(") or "".join(f"({t})" for t in leading_tokens(lead)) != lead.replace(" ", ""):
        return None
    return leading_tokens(first.tail.lstrip()) or None


def note_text(el: etree._Element) -> str:
    sub = Body()
    render(el, sub, tracked=False)
    own = norm(el.text)
    lines = ([own] if own else []) + sub.lines + sub.notes
    return " ".join(lines) if lines else inline(el)


def render(parent: etree._Element, body: Body, tracked: bool = True) -> None:
    """Render the block children of ``parent`` (a SECTION / DIV8 / APPENDIX / DIV9 or a container) into ``body``."""
    for el in parent:
        tag = el.tag
        if not isinstance(tag, str):
            continue
        if tag in _SKIP:
            if not tracked and tag in ("SECTNO", "SUBJECT", "HEAD", "RESERVED"):
                body.add(inline(el))  # e.g. the revised section quoted in an effective-date note
            elif tag == "RESERVED":
                body.reserved_marker = True
            continue
        if tag in _TRACKED:
            if _is_container(el):
                render(el, body, tracked)
            else:
                body.add(inline(el), tracked, _inner_tokens(el) if tracked else None)
        elif tag in ("GPH", "img"):
            ref = norm(el.findtext("GID")) or norm(el.get("src") or "").rsplit("/", 1)[-1]
            body.add(f"[Graphic: {ref}]" if ref else "[Graphic]")  # images are not reproduced in text
        elif tag == "CITA":
            body.cita.append(inline(el))
        elif tag in _NOTES:
            text = note_text(el)
            if text:
                body.notes.append(text)
        elif tag == "GPOTABLE":
            _gpo_table(el, body, tracked)
        elif tag == "TABLE":
            _html_table(el, body, tracked)
        elif tag in ("EXTRACT", "FTNT", "EXAMPLE", "BOXTXT", "SCOL2", "REVTXT"):
            own = norm(el.text)
            if own:
                body.add(own)
            render(el, body, tracked=False)
        elif _is_container(el):
            own = norm(el.text)
            if own:
                body.add(own)
            render(el, body, tracked)
        else:
            body.add(inline(el))


_KEEP_FINAL_DOT = re.compile(r"(?:\b[A-Z]\.){2,}$|\betc\.$|\bet seq\.$|\bInc\.$|\bCo\.$")


def clean_heading(text: str) -> str:
    """'Nutrition labeling of food.' -> 'Nutrition labeling of food'; 'Schedule I.' -> 'Schedule I';
    keeps the dot of 'U.S.', 'etc.', 'et seq.'."""
    text = norm(text)
    if _KEEP_FINAL_DOT.search(text):
        return text
    return text.rstrip(" .;,")


_RESERVED = re.compile(r"^\[?\s*reserved\s*\]?\.?$", re.I)
_REMOVED = re.compile(r"^\[?\s*removed(?: and reserved)?\s*\]?\.?$", re.I)


def is_reserved(text: str, heading: bool = False) -> bool:
    """A whole text "[Reserved]"; for a heading also "§§ 436.604-436.608 [Reserved]"-style endings."""
    if not text:
        return False
    return _RESERVED.match(text.strip()) is not None or (heading and text.rstrip().endswith("[Reserved]"))


def is_removed(text: str, heading: bool = False) -> bool:
    if not text:
        return False
    return _REMOVED.match(text.strip()) is not None or (heading and text.rstrip().endswith("[Removed]"))
