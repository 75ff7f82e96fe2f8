"""Checks of the evaluation dataset against the shipped CFR XML.

The corpus is read here with lxml directly (not through the product's parser) so that a parser bug cannot
make a wrong dataset pass: every gold reference must name a section that exists in the shipped XML, and every
fact must occur verbatim (after whitespace normalisation, case-insensitively) in a gold section's text.
"""
from __future__ import annotations

import collections
import gzip
import json
import re
from functools import lru_cache
from pathlib import Path

import pytest
from lxml import etree

ROOT = Path(__file__).resolve().parents[1]
DATASET = ROOT / "eval" / "dataset.jsonl"
CORPUS = ROOT / "data" / "corpus"
KINDS = {"fact", "sibling", "multi", "citation", "not_found"}
REF_RE = re.compile(r"^(7|21|42) CFR [0-9]+[a-z]?\.[0-9A-Za-z-]+$")

# inline elements whose text belongs to the surrounding word stream (no separator around them)
INLINE = {"E", "I", "B", "SU", "FR", "AC", "sup", "sub", "em", "strong", "a", "span", "PRTPAGE", "FTREF", "i", "b"}


def _text(el: etree._Element) -> str:
    parts: list[str] = []

    def walk(e: etree._Element) -> None:
        tag = e.tag if isinstance(e.tag, str) else ""
        block = tag not in INLINE
        if block:
            parts.append(" ")
        if e.text and isinstance(e.tag, str):
            parts.append(e.text)
        for child in e:
            walk(child)
            if child.tail:
                parts.append(child.tail)
        if block:
            parts.append(" ")

    walk(el)
    return "".join(parts)


def norm(s: str) -> str:
    return re.sub(r"\s+", " ", s).strip().lower()


@lru_cache(maxsize=1)
def corpus_index() -> dict[str, str]:
    """cfr_ref -> normalised text of every section (several versions of one section are concatenated)."""
    index: dict[str, str] = collections.defaultdict(str)
    parser = etree.XMLParser(recover=True, huge_tree=True)
    files = sorted(CORPUS.glob("*.xml.gz"))
    assert files, f"no shipped corpus in {CORPUS}"
    for path in files:
        with gzip.open(path) as fh:
            root = etree.parse(fh, parser).getroot()
        if "title-" in path.name and "CFR-" not in path.name:  # eCFR versioner XML
            m = re.search(r"title-(\d+)", path.name)
            title = int(m.group(1)) if m else 7
            for sec in root.iter("DIV8"):
                if sec.get("TYPE") != "SECTION" or not sec.get("N"):
                    continue
                index[f"{title} CFR {sec.get('N').strip()}"] += " " + norm(_text(sec))
        else:  # GPO annual edition
            m = re.search(r"title(\d+)", path.name)
            title = int(m.group(1)) if m else 21
            for sec in root.iter("SECTION"):
                sectno = sec.find("SECTNO")
                if sectno is None:
                    continue
                num = norm(_text(sectno)).replace("§", "").strip()
                if num:
                    index[f"{title} CFR {num}"] += " " + norm(_text(sec))
    return dict(index)


@lru_cache(maxsize=1)
def rows() -> list[dict]:
    out = []
    with DATASET.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if line.strip():
                out.append(json.loads(line))
    return out


def test_size_and_shape():
    data = rows()
    assert len(data) >= 200
    for r in data:
        assert set(r) >= {"id", "question", "gold", "facts", "answer", "kind", "title"}, r
        assert isinstance(r["question"], str) and len(r["question"]) > 10
        assert isinstance(r["answer"], str) and r["answer"].strip()
        assert r["kind"] in KINDS, r["id"]
        assert r["title"] in (7, 21, 42, None), r["id"]


def test_ids_unique_and_questions_unique():
    data = rows()
    ids = [r["id"] for r in data]
    assert len(ids) == len(set(ids))
    qs = [norm(r["question"]) for r in data]
    assert len(qs) == len(set(qs))


def test_kinds_and_titles_covered():
    data = rows()
    kinds = collections.Counter(r["kind"] for r in data)
    assert set(kinds) == KINDS
    assert kinds["not_found"] >= 30
    titles = {r["title"] for r in data if r["kind"] != "not_found"}
    assert {7, 21, 42} <= titles


def test_not_found_rows_have_no_gold():
    for r in rows():
        if r["kind"] == "not_found":
            assert r["gold"] == [] and r["facts"] == [], r["id"]
        else:
            assert r["gold"], r["id"]
            assert 1 <= len(r["facts"]) <= 3, r["id"]


def test_multi_rows_have_several_gold_sections():
    for r in rows():
        if r["kind"] == "multi":
            assert 2 <= len(r["gold"]) <= 4, r["id"]


def test_gold_refs_well_formed_and_title_consistent():
    for r in rows():
        for g in r["gold"]:
            assert REF_RE.match(g), (r["id"], g)
            assert int(g.split()[0]) == r["title"], (r["id"], g)


def test_gold_refs_exist_in_shipped_corpus():
    index = corpus_index()
    missing = [(r["id"], g) for r in rows() for g in r["gold"] if g not in index]
    assert not missing, missing


def test_facts_occur_verbatim_in_a_gold_section():
    index = corpus_index()
    bad = []
    for r in rows():
        texts = [index.get(g, "") for g in r["gold"]]
        for fact in r["facts"]:
            assert len(fact.strip()) >= 3, (r["id"], fact)
            if not any(norm(fact) in t for t in texts):
                bad.append((r["id"], fact))
    assert not bad, bad


def test_citation_questions_name_their_section():
    """A citation question writes the section number (in some style) that its gold resolves to."""
    for r in rows():
        if r["kind"] != "citation":
            continue
        sections = [g.split(" CFR ")[1] for g in r["gold"]]
        assert any(s in r["question"] for s in sections), r["id"]


@pytest.mark.parametrize("title", [7, 21, 42])
def test_each_title_has_answerable_questions(title):
    assert sum(1 for r in rows() if r["title"] == title and r["kind"] != "not_found") >= 15


@pytest.mark.parametrize("name", [f"heldout{n}.jsonl" for n in ("", *range(2, 43))])
def test_held_out_sets_are_well_formed_and_their_gold_and_facts_are_real(name):
    """The held-out sets (written blind by helpers) hold to the same rules as the dataset."""
    data = [json.loads(line) for line in (ROOT / "eval" / name).read_text(encoding="utf-8").splitlines() if line.strip()]
    kinds = collections.Counter(r["kind"] for r in data)
    assert set(kinds) == KINDS and kinds["not_found"] == 40 and len(data) >= 80
    assert len({r["id"] for r in data}) == len(data) and not {r["id"] for r in data} & {r["id"] for r in rows()}
    index = corpus_index()
    for r in data:
        if r["kind"] == "not_found":
            assert r["gold"] == [] and r["facts"] == [], r["id"]
            continue
        assert r["gold"] and all(REF_RE.match(g) and g in index for g in r["gold"]), r["id"]
        for fact in r["facts"]:
            assert any(norm(fact) in index[g] for g in r["gold"]), (r["id"], fact)


@pytest.mark.parametrize("name,rows", [("contrast.jsonl", 1700), ("contrast_validation.jsonl", 120)])
def test_the_reader_contrast_pairs_are_real_and_paired(name, rows):
    """eval/contrast.jsonl (the answer reader's training pairs) and eval/contrast_validation.jsonl (pairs on other
    sections, held out of training): each answerable question sits next to a not_found one on the same section;
    gold and facts hold as in every set."""
    data = [json.loads(line) for line in (ROOT / "eval" / name).read_text(encoding="utf-8").splitlines()
            if line.strip()]
    assert len(data) == rows and len({r["id"] for r in data}) == rows
    index = corpus_index()
    for answerable, unanswerable in zip(data[::2], data[1::2]):
        assert answerable["kind"] == "fact" and unanswerable["kind"] == "not_found", answerable["id"]
        assert unanswerable["gold"] == [] and unanswerable["facts"] == []
        assert all(REF_RE.match(g) and g in index for g in answerable["gold"]), answerable["id"]
        assert all(any(norm(f) in index[g] for g in answerable["gold"]) for f in answerable["facts"]), answerable["id"]
