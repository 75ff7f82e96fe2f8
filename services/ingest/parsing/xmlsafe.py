"""Hardened, streaming XML input for the CFR parsers.

Two layers keep hostile input out:

1. Before a single byte reaches libxml2, the document prolog (everything before the root element) is scanned.
   A DOCTYPE that declares entities (``<!ENTITY``: "billion laughs" / quadratic blow-up) or names an external
   DTD or entity (``SYSTEM`` / ``PUBLIC``: XXE, SSRF) raises :class:`XMLSecurityError`. A bare ``<!DOCTYPE x>`` is
   harmless and allowed. Neither the GPO nor the eCFR files carry a DOCTYPE.
2. The parser itself runs with ``resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False``, and
   the parse loop re-checks the parsed DTD (``docinfo.internalDTD``) so nothing slips through if the prolog scan
   is ever fooled (e.g. a non-UTF-8 encoding).

Malformed or truncated XML becomes :class:`CFRParseError` naming the file and the line.
"""
from __future__ import annotations

import gzip
import re
import zlib
from pathlib import Path
from typing import IO, Iterable

from lxml import etree

__all__ = ["CFRParseError", "XMLSecurityError", "open_checked", "checked_bytes", "secure_iterparse", "display_name"]

# the prolog can hold an XML declaration, comments, PIs and a DOCTYPE; real ones are tiny
_PROLOG_LIMIT = 1 << 20
_CHUNK = 1 << 16
_ROOT_START = re.compile(rb"<[A-Za-z_:]")
_COMMENT = re.compile(rb"<!--.*?-->", re.S)
_DOCTYPE = re.compile(rb"<!DOCTYPE", re.I)
_ENTITY_DECL = re.compile(rb"<!ENTITY", re.I)
_EXTERNAL_ID = re.compile(rb"\b(SYSTEM|PUBLIC)\b")
_EXTERNAL_ENTITY = re.compile(rb"<!ENTITY[^>]*\b(SYSTEM|PUBLIC)\b", re.I)


class CFRParseError(ValueError):
    """The input is not a well-formed CFR XML document (malformed, truncated, empty, unknown format)."""

    def __init__(self, source: str, problem: str, line: int | None = None):
        self.source = source
        self.problem = problem
        self.line = line
        where = f"{source}, line {line}" if line else source
        super().__init__(f"{where}: {problem}")


class XMLSecurityError(CFRParseError):
    """The document tries something a CFR file never does: entity declarations (entity-expansion bomb) or
    external entities / DTDs (XXE). It is refused before anything is expanded or fetched."""


def display_name(path: str | Path) -> str:
    """The ``source`` recorded for a file: its name without directory and without a trailing ``.gz``."""
    name = Path(path).name
    return name[:-3] if name.endswith(".gz") else name


class _CheckedStream:
    """File-like wrapper: hands lxml the already-inspected prolog bytes first, then the rest of the stream."""

    def __init__(self, raw: IO[bytes], head: bytes, source: str):
        self._raw = raw
        self._head = head
        self._source = source

    def read(self, n: int = -1) -> bytes:
        if self._head:
            if n is None or n < 0:
                out, self._head = self._head, b""
                return out + self._read_raw(-1)
            out, self._head = self._head[:n], self._head[n:]
            return out  # a short read is fine: lxml simply asks again
        return self._read_raw(n)

    def _read_raw(self, n: int) -> bytes:
        try:
            return self._raw.read(n)
        except (OSError, EOFError, zlib.error) as exc:  # corrupt or truncated gzip
            raise CFRParseError(self._source, f"cannot read compressed data ({exc}); file truncated or corrupt") from exc

    def close(self) -> None:
        self._raw.close()


def _check_prolog(head: bytes, source: str, complete: bool) -> bool:
    """Inspect the bytes before the root element. Returns True once the root start tag has been seen."""
    text = head
    if text.startswith(b"\xef\xbb\xbf"):
        text = text[3:]
    elif text.startswith((b"\xff\xfe", b"\xfe\xff")):
        text = text.decode("utf-16", "replace").encode("utf-8", "replace")
    scan = _COMMENT.sub(b"", text)
    root = _ROOT_START.search(scan)
    prolog = scan if root is None else scan[: root.start()]
    doctype = _DOCTYPE.search(prolog)
    if doctype:
        decl = prolog[doctype.start():]
        if _EXTERNAL_ENTITY.search(decl):
            raise XMLSecurityError(
                source,
                "DOCTYPE declares an external entity (<!ENTITY ... SYSTEM/PUBLIC ...>); refused (XXE)",
                line=prolog[: doctype.start()].count(b"\n") + 1,
            )
        if _ENTITY_DECL.search(decl):
            raise XMLSecurityError(
                source,
                "DOCTYPE declares entities (<!ENTITY ...>); refused to avoid entity expansion (billion laughs)",
                line=prolog[: doctype.start()].count(b"\n") + 1,
            )
        if _EXTERNAL_ID.search(decl):
            raise XMLSecurityError(
                source,
                "DOCTYPE references an external DTD or entity (SYSTEM/PUBLIC); refused (XXE)",
                line=prolog[: doctype.start()].count(b"\n") + 1,
            )
    if root is None and not complete and len(head) >= _PROLOG_LIMIT:
        raise XMLSecurityError(source, f"no root element within the first {_PROLOG_LIMIT} bytes (oversized prolog/DTD)")
    return root is not None


def _checked(raw: IO[bytes], source: str) -> _CheckedStream:
    stream = _CheckedStream(raw, b"", source)
    head = b""
    while True:
        chunk = stream._read_raw(_CHUNK)
        head += chunk
        done = not chunk
        if _check_prolog(head, source, complete=done) or done:
            break
    if not head.strip():
        raise CFRParseError(source, "empty file (no XML content)")
    stream._head = head
    return stream


def open_checked(path: str | Path) -> _CheckedStream:
    """Open ``.xml`` or ``.xml.gz`` (detected by the gzip magic, not only the suffix) after the prolog check."""
    path = Path(path)
    source = display_name(path)
    raw: IO[bytes] = open(path, "rb")
    try:
        magic = raw.read(2)
        raw.seek(0)
        if magic == b"\x1f\x8b":
            raw = gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[assignment]
        return _checked(raw, source)
    except BaseException:
        raw.close()
        raise


def checked_bytes(data: bytes, source: str) -> _CheckedStream:
    import io

    raw: IO[bytes] = io.BytesIO(data)
    if data[:2] == b"\x1f\x8b":
        raw = gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[assignment]
    return _checked(raw, source)


def secure_iterparse(stream: _CheckedStream, tags: Iterable[str]):
    """lxml iterparse over ``end`` events of ``tags`` with every dangerous feature switched off."""
    return etree.iterparse(
        stream,
        events=("end",),
        tag=tuple(tags),
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        huge_tree=False,
        remove_comments=True,
        remove_pis=True,
        dtd_validation=False,
    )


def check_doctype(tree: etree._ElementTree, source: str) -> None:
    """Second line of defence: refuse a parsed document whose DTD declares entities or is external."""
    info = tree.docinfo
    if info.system_url or info.public_id:
        raise XMLSecurityError(source, "DOCTYPE references an external DTD (SYSTEM/PUBLIC); refused (XXE)")
    dtd = info.internalDTD
    if dtd is None:
        return
    entities = list(dtd.iterentities())
    if any(e.system_url for e in entities):
        raise XMLSecurityError(source, "DOCTYPE declares an external entity (SYSTEM); refused (XXE)")
    if entities:
        raise XMLSecurityError(source, "DOCTYPE declares entities; refused to avoid entity expansion")


def syntax_error(source: str, exc: etree.XMLSyntaxError) -> CFRParseError:
    msg = (getattr(exc, "msg", None) or str(exc)).strip()
    line = getattr(exc, "lineno", None) or (exc.position[0] if getattr(exc, "position", None) else None)
    lowered = msg.lower()
    if "document is empty" in lowered or "start tag expected" in lowered and line in (None, 0, 1):
        return CFRParseError(source, f"empty or not XML ({msg})", line)
    if "premature end" in lowered or "end of data" in lowered or "extra content" not in lowered and "eof" in lowered:
        return CFRParseError(source, f"truncated XML: the document ends before its elements are closed ({msg})", line)
    if "entity" in lowered and ("amplification" in lowered or "loop" in lowered or "huge" in lowered):
        return XMLSecurityError(source, f"entity expansion refused ({msg})", line)
    return CFRParseError(source, f"malformed XML: {msg}", line)
