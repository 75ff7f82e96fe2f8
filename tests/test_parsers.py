"""CFR XML parsers: real sections of both shipped formats pinned with values read from the XML, the per-file
counts of SOURCES.md, and hostile or broken input."""
from __future__ import annotations

import gzip
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest

from services.ingest.parsing import (
    CFRParseError,
    XMLSecurityError,
    parse_bytes,
    parse_file,
    shipped_corpus_files,
)

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "data" / "corpus"
FIXTURES = ROOT / "tests" / "data" / "xml"

GPO = "Athish49_FDACompliance__CFR-2024-title21-{}.xml.gz"
AXIOM = "TheAxiomFoundation_axiom-corpus__{}.xml.gz"

# SOURCES.md "sections" column: the number of SECTION / DIV8 TYPE="SECTION" elements in each file.
SOURCES_COUNTS = {
    "Athish49_FDACompliance/CFR-2024-title21-vol1-chapI.xml": 1093,
    "Athish49_FDACompliance/CFR-2024-title21-vol2-chapI.xml": 767,
    "Athish49_FDACompliance/CFR-2024-title21-vol4-chapI.xml": 304,
    "Athish49_FDACompliance/CFR-2024-title21-vol5-chapI.xml": 431,
    "Athish49_FDACompliance/CFR-2024-title21-vol7-chapI.xml": 270,
    "Athish49_FDACompliance/CFR-2024-title21-vol9-chapII.xml": 463,
    "Athish49_FDACompliance/CFR-2024-title21-vol9-chapIII.xml": 31,
    "OCIO-CTO_policy_as_code_experimentation/title-7.xml": 12,
    "TheAxiomFoundation_axiom-corpus/ecfrtitle-7-part-247.xml": 37,
    "TheAxiomFoundation_axiom-corpus/title-42-part-406.xml": 25,
    "TheAxiomFoundation_axiom-corpus/title-42-part-407.xml": 28,
    "TheAxiomFoundation_axiom-corpus/title-42-part-408.xml": 50,
    "TheAxiomFoundation_axiom-corpus/title-42-part-436.xml": 78,
    "TheAxiomFoundation_axiom-corpus/title-42-part-447.xml": 72,
    "TheAxiomFoundation_axiom-corpus/title-7-part-271.xml": 9,
    "TheAxiomFoundation_axiom-corpus/title-7-part-272.xml": 18,
    "TheAxiomFoundation_axiom-corpus/title-7-part-274.xml": 8,
    "TheAxiomFoundation_axiom-corpus/title-7-part-275.xml": 24,
    "TheAxiomFoundation_axiom-corpus/title-7-part-276.xml": 7,
    "TheAxiomFoundation_axiom-corpus/title-7-part-277.xml": 18,
    "TheAxiomFoundation_axiom-corpus/title-7-part-278.xml": 10,
    "TheAxiomFoundation_axiom-corpus/title-7-part-279.xml": 8,
    "TheAxiomFoundation_axiom-corpus/title-7-part-280.xml": 1,
    "TheAxiomFoundation_axiom-corpus/title-7-part-281.xml": 10,
    "TheAxiomFoundation_axiom-corpus/title-7-part-282.xml": 2,
    "TheAxiomFoundation_axiom-corpus/title-7-part-283.xml": 32,
    "TheAxiomFoundation_axiom-corpus/title-7-part-284.xml": 2,
    "TheAxiomFoundation_axiom-corpus/title-7-part-285.xml": 5,
}
# Five of those SECTION elements are not sections of the edition: they are the future text of a section quoted
# inside its own effective-date note (SECTION > EFFDNOT > REVTXT > SECTION, same section number). They become
# part of the enclosing section's editorial_notes, not units of their own (a unit per copy would duplicate the
# cfr_ref, which the sections table forbids: UNIQUE (version_id, cfr_ref)).
QUOTED_IN_EFFECTIVE_DATE_NOTES = {
    "Athish49_FDACompliance/CFR-2024-title21-vol4-chapI.xml": ["202.1", "202.1"],
    "Athish49_FDACompliance/CFR-2024-title21-vol5-chapI.xml": ["352.10", "352.20"],
    "Athish49_FDACompliance/CFR-2024-title21-vol9-chapII.xml": ["1308.11"],
}
APPENDICES = {
    "Athish49_FDACompliance/CFR-2024-title21-vol1-chapI.xml": 8,
    "Athish49_FDACompliance/CFR-2024-title21-vol2-chapI.xml": 4,
    "Athish49_FDACompliance/CFR-2024-title21-vol4-chapI.xml": 1,
    "TheAxiomFoundation_axiom-corpus/title-7-part-277.xml": 1,
}


def _key(path: Path) -> str:
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    return name.replace("__", "/", 1)


@pytest.fixture(scope="module")
def corpus() -> dict[str, list]:
    return {_key(p): list(parse_file(p)) for p in shipped_corpus_files(CORPUS)}


@pytest.fixture(scope="module")
def by_ref(corpus) -> dict[str, object]:
    out = {}
    for units in corpus.values():
        for unit in units:
            assert unit.cfr_ref not in out, f"duplicate unit {unit.cfr_ref}"
            out[unit.cfr_ref] = unit
    return out


def _para(unit, designation: str):
    matches = [p for p in unit.paragraphs if p.designation == designation]
    assert matches, f"{unit.cfr_ref}: no paragraph {designation}; have {[p.designation for p in unit.paragraphs][:50]}"
    return matches[0]


# ------------------------------------------------------------------------------------------------- counts

def test_sources_md_table_matches_the_pinned_counts():
    table = {}
    for line in (CORPUS / "SOURCES.md").read_text().splitlines():
        m = re.match(r"\|\s*`([^`]+\.xml)`\s*\|[^|]*\|[^|]*\|\s*([\d,]+)\s*\|", line)
        if m:
            table[m.group(1)] = int(m.group(2).replace(",", ""))
    assert table == SOURCES_COUNTS
    assert sum(table.values()) == 3815
    assert "3,815 sections" in (CORPUS / "SOURCES.md").read_text()


def test_shipped_corpus_files_sorted_and_complete():
    files = shipped_corpus_files(CORPUS)
    assert len(files) == 28
    assert files == sorted(files)
    assert {_key(p) for p in files} == set(SOURCES_COUNTS)


def test_section_element_counts_equal_sources_md():
    """The raw element count of every file is exactly the SOURCES.md figure (3,815 in all)."""
    total = 0
    for path in shipped_corpus_files(CORPUS):
        data = gzip.decompress(path.read_bytes())
        n = data.count(b"<SECTION>") + data.count(b"<SECTION ") + len(re.findall(rb'<DIV8 [^>]*TYPE="SECTION"', data))
        assert n == SOURCES_COUNTS[_key(path)], path.name
        total += n
    assert total == 3815


def test_per_file_unit_counts(corpus):
    for key, expected in SOURCES_COUNTS.items():
        kinds = Counter(u.kind for u in corpus[key])
        quoted = len(QUOTED_IN_EFFECTIVE_DATE_NOTES.get(key, []))
        assert kinds["section"] == expected - quoted, key
        assert kinds["appendix"] == APPENDICES.get(key, 0), key


def test_total_sections_is_3815_elements_minus_the_5_quoted_copies(corpus):
    sections = [u for units in corpus.values() for u in units if u.kind == "section"]
    quoted = sum(len(v) for v in QUOTED_IN_EFFECTIVE_DATE_NOTES.values())
    assert quoted == 5
    assert len(sections) + quoted == 3815
    assert len(sections) == 3810
    assert sum(u.kind == "appendix" for units in corpus.values() for u in units) == 14
    assert sum(u.reserved for u in sections) == 24  # RESERVED element or "[Reserved]" heading, counted in the XML


def test_cfr_refs_are_unique(by_ref, corpus):
    assert len(by_ref) == sum(len(units) for units in corpus.values())


def test_effective_date_note_text_goes_to_editorial_notes(by_ref):
    unit = by_ref["21 CFR 202.1"]
    notes = " ".join(unit.editorial_notes)
    assert notes.startswith("Effective Date Notes: 1. At 44 FR 37467, June 26, 1979, § 202.1(e)(6) (ii) and (vii) were revised.")
    assert "§ 202.1" in notes and "Prescription-drug advertisements." in notes  # the quoted revised section
    assert "Effective Date Notes" not in unit.text
    schedule_1 = by_ref["21 CFR 1308.11"]
    assert schedule_1.heading == "Schedule I"
    assert any(n.startswith("Effective Date Notes: 1.At 83 FR 5191, Feb. 6, 2018, § 1308.11 was amended by adding "
                            "paragraph (h)(30)") for n in schedule_1.editorial_notes)


# ------------------------------------------------------------------------------------------------- GPO

def test_gpo_hard_cheeses_133_150(by_ref):
    u = by_ref["21 CFR 133.150"]
    assert (u.title, u.part, u.section, u.kind) == (21, "133", "133.150", "section")
    assert u.heading == "Hard cheeses"
    assert u.chapter == "I"
    assert u.agency == "Food and Drug Administration"
    assert u.subchapter == "B—FOOD FOR HUMAN CONSUMPTION"
    assert u.subpart == "B—Requirements for Specific Standardized Cheese and Related Products"
    assert u.part_heading == "PART 133—CHEESES AND RELATED CHEESE PRODUCTS"
    assert u.source_note == ("[42 FR 14366, Mar. 15, 1977, as amended at 48 FR 49013, Oct. 24, 1983; 49 FR 10094, "
                             "Mar. 19, 1984; 58 FR 2893, Jan. 6, 1993]")
    assert "42 FR 14366" not in u.text  # CITA is not body text
    assert u.text.startswith("(a) The cheeses for which definitions and standards of identity are prescribed by this "
                             "section are hard cheeses")
    assert [p.designation for p in u.paragraphs] == [
        "(a)", "(b)", "(c)", "(c)(1)", "(c)(2)", "(d)", "(e)", "(e)(1)", "(e)(2)", "(e)(3)", "(f)", "(f)(1)", "(f)(2)"]
    assert u.source == "Athish49_FDACompliance__CFR-2024-title21-vol2-chapI.xml"
    assert u.source_date == "2024-04-01"
    assert u.cfr_ref == "21 CFR 133.150"
    assert by_ref["21 CFR 133.149"].heading == "Gruyere cheese"


def test_gpo_101_9_designations_and_offsets(by_ref):
    u = by_ref["21 CFR 101.9"]
    assert u.heading == "Nutrition labeling of food"
    assert u.subpart == "A—General Provisions"
    for designation, starts in [
        ("(a)", "(a) Nutrition information relating to food shall be provided"),
        ("(b)(2)(i)(A)", "(A) If a unit weighs 50 percent or less"),
        ("(c)(1)(i)", "(i) Caloric content may be calculated"),
        ("(c)(1)(i)(A)", "(A) Using specific Atwater factors"),
        ("(c)(6)(iii)", "(iii) “Added Sugars”"),
        ("(c)(8)(iv)", "(iv) The following RDIs,"),
        ("(d)(1)", "(d)(1) Nutrient information"),
    ]:
        p = _para(u, designation)
        assert u.text[p.start:p.end].startswith(starts), designation
    # offsets cover whole lines of text
    for p in u.paragraphs:
        assert p.start == 0 or u.text[p.start - 1] == "\n"
        assert p.end == len(u.text) or u.text[p.end] == "\n"
    # the RDI table: header row first, then one " | " line per row, quotable verbatim
    assert "\nNutrient | Unit of measure | Adults and children ≥ 4 years | Infants 1 through 12 months" in u.text
    assert "\nVitamin D | Micrograms (mcg) 2 | 20 | 10 | 15 | 15\n" in u.text  # "2": footnote ref kept as text
    assert "\nCalcium | Milligrams (mg) | 1,300 | 260 | 700 | 1,300\n" in u.text


def test_gpo_inline_paragraph_heading_designation(by_ref):
    u = by_ref["21 CFR 100.1"]
    assert u.text.startswith("(a) Scope and purpose. (1) This subpart applies")
    assert [p.designation for p in u.paragraphs[:3]] == ["(a)(1)", "(a)(2)", "(b)(1)"]
    assert _para(u, "(c)(4)(ii)")


def test_gpo_schedule_ii_table_rows_are_designated(by_ref):
    u = by_ref["21 CFR 1308.12"]
    assert u.heading == "Schedule II"
    assert u.chapter == "II"
    assert u.agency == "Drug Enforcement Administration"
    assert u.subject_group == "Schedules"
    assert u.part_heading == "PART 1308—SCHEDULES OF CONTROLLED SUBSTANCES"
    p = _para(u, "(b)(1)(i)")
    assert u.text[p.start:p.end] == "(i) Codeine | 9050"
    p = _para(u, "(c)(9)")
    assert u.text[p.start:p.end] == "(9) Fentanyl | 9801"
    assert u.source_note == "[39 FR 22142, June 20, 1974]"


def test_gpo_letter_i_after_h(by_ref):
    u = by_ref["21 CFR 1301.13"]
    assert [p.designation for p in u.paragraphs if p.designation and len(p.designation) == 3][-3:] == ["(h)", "(i)", "(j)"]
    assert u.text[_para(u, "(e)(1)(iii)").start:].startswith("(iii) Reverse distributing | Schedules I-V |")


def test_gpo_chapter_iii_agency(by_ref):
    u = by_ref["21 CFR 1401.1"]
    assert (u.chapter, u.agency, u.heading) == ("III", "Office of National Drug Control Policy", "Purpose")
    assert u.part_heading == "PART 1401—PUBLIC AVAILABILITY OF INFORMATION"
    assert u.text == ("The purpose of this part is to prescribe rules, guidelines and procedures to implement the "
                      "Freedom of Information Act (FOIA), as amended, 5 U.S.C. 552.")
    assert u.paragraphs[0].designation == ""


def test_gpo_reserved_section_range(by_ref):
    u = by_ref["21 CFR 250.103-250.104"]
    assert u.reserved and not u.removed
    assert u.heading == "[Reserved]"
    assert u.text == ""
    assert u.subpart == "B—New Drug or Prescription Status of Specific Drugs"


def test_gpo_table_of_contents_is_not_sections(corpus):
    part_100 = [u.section for u in corpus["Athish49_FDACompliance/CFR-2024-title21-vol2-chapI.xml"] if u.part == "100"]
    # the CONTENTS of part 100 lists exactly these; each appears once, with its body
    assert part_100 == ["100.1", "100.2", "100.100", "100.155"]
    for units in corpus.values():
        for u in units:
            assert u.text or u.reserved, u.cfr_ref


def test_gpo_appendix(by_ref):
    u = by_ref["21 CFR Appendix A to Subpart A of Part 26"]
    assert u.kind == "appendix"
    assert u.part == "26"
    assert u.heading == "List of Applicable Laws, Regulations, and Administrative Provisions"
    assert u.text.startswith("1. For the European Community (EC):\n")
    assert "Pt. 26, Subpt. A, App. A" not in u.text


def test_gpo_appendix_named_from_ear_and_table_of_contents(by_ref):
    # <APPENDIX><EAR>Pt. 101, App. C</EAR><HD SOURCE="HED"> </HD><GPH>...: title only in the part's CONTENTS
    u = by_ref["21 CFR Appendix C to Part 101"]
    assert u.heading == "Nutrition Facts for Raw Fruits and Vegetables"
    assert u.text == "[Graphic: ER17AU06.007]\n[Graphic: ER17AU06.008]"
    reserved = by_ref["21 CFR Appendix A to Part 101"]
    assert reserved.reserved and reserved.heading == "[Reserved]" and reserved.kind == "appendix"


def test_gpo_page_markers_dropped(by_ref):
    # PRTPAGE sits inside the FP "F. Accountability of the regulatory authority." of appendix D
    u = by_ref["21 CFR Appendix D to Subpart A of Part 26"]
    assert "\nF. Accountability of the regulatory authority.\n" in u.text
    assert "388" not in u.text


# ------------------------------------------------------------------------------------------------- eCFR

def test_ecfr_7_1b_4(by_ref):
    u = by_ref["7 CFR 1b.4"]
    assert (u.title, u.part, u.section) == (7, "1b", "1b.4")
    assert u.heading == "Categorical exclusion of USDA subcomponents and actions"
    assert u.part_heading == "PART 1b—NATIONAL ENVIRONMENT POLICY ACT"
    assert u.agency == "Office of the Secretary of Agriculture"
    assert u.chapter is None  # 7 CFR Subtitle A has no chapter
    assert u.source_date is None
    assert u.source == "OCIO-CTO_policy_as_code_experimentation__title-7.xml"
    assert u.source_note == "[90 FR 29646, July 3, 2025, as amended at 90 FR, July 18, 2025]"
    assert u.text[_para(u, "(a)(4)").start:].startswith("(4) Food and Nutrition Se")
    assert _para(u, "(b)(1)")


def test_ecfr_42_406_13(by_ref):
    u = by_ref["42 CFR 406.13"]
    assert u.heading == "Individual who has end-stage renal disease"
    assert u.chapter == "IV"
    assert u.agency == "Centers for Medicare & Medicaid Services"
    assert u.subpart == "B—Hospital Insurance Without Monthly Premiums"
    assert u.part_heading == "PART 406—HOSPITAL INSURANCE ELIGIBILITY AND ENTITLEMENT"
    assert u.text.startswith("(a) Statutory basis and applicability. This section explains the conditions")
    assert u.source_note == "[48 FR 12536, Mar. 25, 1983, as amended at 60 FR 22535, May 8, 1995; 87 FR 66503, Nov. 3, 2022]"
    assert "[48 FR 12536" not in u.text


def test_ecfr_html_table_rows(by_ref):
    u = by_ref["42 CFR 407.25"]
    assert u.heading == "Beginning of entitlement: Individual enrollment"
    assert "\nTable 1 to Paragraph (a)(1)(v)\nEnrolls in initial enrollment period | Entitlement begins on—\n" in u.text
    assert "\nJanuary | April 1 (month eligibility requirements first met).\n" in u.text
    assert "\nMay | July 1 (second month after month of enrollment).\n" in u.text


def test_ecfr_7_247(by_ref):
    u = by_ref["7 CFR 247.9"]
    assert u.heading == "Eligibility requirements"
    assert u.chapter == "II"
    assert u.agency == "Food and Nutrition Service"
    assert u.part_heading == "PART 247—COMMODITY SUPPLEMENTAL FOOD PROGRAM"
    assert u.editorial_notes == [
        "Editorial Note: At 89 FR 104393, Dec. 23, 2024, § 247.9 was amended by correcting paragraph (d)(3)(xxiv); "
        "however, the amendment could not be incorporated due to inaccurate amendatory instruction."]
    assert "Editorial Note" not in u.text
    assert u.text.startswith("(a) Who is eligible for CSFP? To be eligible for CSFP, individuals must be at least 60")
    assert by_ref["7 CFR 247.1"].heading == "Definitions"


def test_ecfr_table_in_7_275(by_ref):
    u = by_ref["7 CFR 275.11"]
    assert "\nAverage monthly reviewable caseload (N) | Minimum annual sample size (n)\n60,000 and over | n = 2400\n" in u.text


def test_ecfr_appendix(by_ref):
    u = by_ref["7 CFR Appendix A to Part 277"]
    assert u.kind == "appendix"
    assert u.part == "277"
    assert u.heading == "Principles for Determining Costs Applicable to Administration of SNAP by State Agencies"
    assert u.agency == "Food and Nutrition Service"
    assert u.text.startswith("This appendix sets forth the procedures implementing uniform requirements")


def test_ecfr_reserved(by_ref):
    u = by_ref["42 CFR 408.47"]
    assert u.reserved and u.heading == "[Reserved]" and u.text == ""
    r = by_ref["42 CFR 436.604-436.608"]
    assert r.reserved and r.heading == "[Reserved]"
    assert not by_ref["42 CFR 406.13"].reserved  # has "(e) [Reserved]" paragraphs but is not reserved


def test_ecfr_subject_group(by_ref):
    groups = {u.subject_group for u in by_ref.values() if u.title == 42 and u.part == "436"}
    assert None not in groups or len(groups) > 1


def test_gz_and_plain_xml_give_the_same_result(tmp_path):
    for name in (GPO.format("vol9-chapIII"), AXIOM.format("title-42-part-407")):
        plain = tmp_path / name[:-3]
        plain.write_bytes(gzip.decompress((CORPUS / name).read_bytes()))
        assert list(parse_file(plain)) == list(parse_file(CORPUS / name))


def test_parse_bytes_matches_parse_file():
    name = AXIOM.format("title-7-part-282")
    data = gzip.decompress((CORPUS / name).read_bytes())
    from_bytes = list(parse_bytes(data, "title-7-part-282.xml", source_date="2026-01-01"))
    from_file = list(parse_file(CORPUS / name))
    assert [u.section for u in from_bytes] == [u.section for u in from_file] == ["282.1", "282.2"]
    assert from_bytes[0].text == from_file[0].text
    assert from_bytes[0].source_date == "2026-01-01"  # the caller's date when the document has none
    assert from_file[0].source_date is None


# ------------------------------------------------------------------------------------------------- designations

def test_designation_nesting_fixture():
    [u] = list(parse_file(FIXTURES / "minimal_ecfr.xml"))
    assert (u.title, u.part, u.section, u.heading) == (7, "999", "999.1", "Designations")
    assert u.source_date == "2025-01-15"  # from hierarchy_metadata path /on/2025-01-15/
    assert u.chapter is None and u.agency is None  # part 999 is in no known chapter
    got = [(p.designation, u.text[p.start:p.end]) for p in u.paragraphs]
    assert got == [
        ("", "Introductory text."),
        ("(a)(1)", "(a) First. (1) Opens with an inline heading."),
        ("(a)(2)", "(2) Second of (a)."),
        ("(a)(2)(i)", "(i) Roman under (a)(2)."),
        ("(a)(2)(ii)", "(ii) Next roman."),
        ("(a)(2)(ii)(A)", "(A) Capital under (ii)."),
        ("(a)(2)(ii)(A)(1)", "(1) Italic digit under (A)."),
        ("(a)(2)(ii)(A)(2)", "(2) Second italic digit."),
        ("(a)(2)(ii)(B)", "(B) Back to capitals."),
        ("(a)(3)", "(3) Back to digits."),
        ("(b)", "(b) Second letter."),
        ("(c)", "(c) through (g) [Reserved]"),
        ("(h)", "(h) Eighth letter."),
        ("(i)", "(i) Ninth letter, not roman."),
        ("(j)(1)", "(j)(1) Two tokens at once."),
        ("(j)(1)(i)", "(i) Roman under (j)(1)."),
        ("", "(a) A quoted paragraph that is not a designation of this section."),
        ("(j)(2)", "(2) Back in (j)."),
    ]
    assert u.source_note == "[90 FR 1, Jan. 2, 2025]"
    assert "90 FR 1" not in u.text


# ------------------------------------------------------------------------------------------------- bad input

def test_malformed_xml_names_file_and_line():
    with pytest.raises(CFRParseError) as err:
        list(parse_file(FIXTURES / "malformed.xml"))
    assert not isinstance(err.value, XMLSecurityError)
    assert err.value.line == 10
    assert "malformed.xml, line 10: malformed XML" in str(err.value)


def test_truncated_xml_yields_complete_sections_then_fails():
    units = []
    with pytest.raises(CFRParseError) as err:
        for unit in parse_file(FIXTURES / "truncated.xml"):
            units.append(unit)
    assert [u.section for u in units] == ["999.1"]
    assert "truncated.xml" in str(err.value) and "truncated" in err.value.problem
    assert err.value.line == 11


def test_truncated_gzip_is_a_parse_error(tmp_path):
    data = (CORPUS / GPO.format("vol9-chapIII")).read_bytes()
    cut = tmp_path / "cut.xml.gz"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(CFRParseError, match="cut.xml"):
        list(parse_file(cut))


def test_empty_file():
    with pytest.raises(CFRParseError, match="empty"):
        list(parse_file(FIXTURES / "empty.xml"))
    with pytest.raises(CFRParseError, match="empty"):
        list(parse_bytes(b"  \n", "api-response"))


def test_unknown_root():
    with pytest.raises(CFRParseError, match=r"unknown format: root element <html>"):
        list(parse_file(FIXTURES / "unknown_root.xml"))


def test_entity_bomb_refused_without_expansion():
    with pytest.raises(XMLSecurityError, match="entit") as err:
        list(parse_file(FIXTURES / "entity_bomb.xml"))
    assert "entity_bomb.xml" in str(err.value)
    assert isinstance(err.value, ValueError)


def test_xxe_refused():
    with pytest.raises(XMLSecurityError, match="XXE") as err:
        list(parse_file(FIXTURES / "xxe.xml"))
    assert "root:" not in str(err.value)
    with pytest.raises(XMLSecurityError, match="external"):
        list(parse_file(FIXTURES / "xxe_external_dtd.xml"))
    with pytest.raises(XMLSecurityError):
        list(parse_bytes((FIXTURES / "xxe.xml").read_bytes(), "api-response"))


def test_parser_layer_refuses_entities_even_without_the_prolog_check():
    """Defence in depth: feed the hostile documents straight to the lxml loop."""
    import io

    from services.ingest import parsing
    from services.ingest.parsing import xmlsafe

    for name in ("entity_bomb.xml", "xxe.xml"):
        stream = xmlsafe._CheckedStream(io.BytesIO((FIXTURES / name).read_bytes()), b"", name)
        with pytest.raises(XMLSecurityError):
            list(parsing._parse(stream, name))


def test_gzip_detected_by_magic_not_suffix(tmp_path):
    odd = tmp_path / "title-7-part-280.bin.xml"
    shutil.copy(CORPUS / AXIOM.format("title-7-part-280"), odd)
    [u] = list(parse_file(odd))
    assert u.cfr_ref == "7 CFR 280.1"


def test_ecfr_whole_title_structure_fixture():
    """A whole-title response: chapter and agency come from DIV3, title from DIV1."""
    units = list(parse_file(FIXTURES / "ecfr_title_structure.xml"))
    assert [(u.section, u.kind) for u in units] == [
        ("999.1", "section"), ("999.2", "section"), ("Appendix A to Part 999", "appendix")]
    first, removed, appendix = units
    assert (first.title, first.chapter, first.agency) == (42, "IV", "Centers for Medicare & Medicaid Services")
    assert first.subchapter == "B—MEDICARE PROGRAM"
    assert first.subpart == "A—General"
    assert first.subject_group == "Definitions and Scope"
    assert first.part_heading == "PART 999—STRUCTURE TEST"
    assert first.source_date == "2024-05-01"
    assert first.text == "This part is a test.\nItem | Amount\nPremium | $174.70"
    assert first.editorial_notes == ["Note 1 to § 999.1: A note is kept apart."]
    assert removed.removed and not removed.reserved and removed.heading == "[Removed]"
    assert appendix.heading == "Worked Examples" and appendix.text == "Example text."
    assert appendix.cfr_ref == "42 CFR Appendix A to Part 999"
