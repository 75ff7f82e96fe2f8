"""Scoping: work out what a question is about before searching. ONE exported function,
``scope_question``, used by the retriever, the gateway's search endpoint and the evaluation harness
(through the gateway). Nothing else re-implements a piece of it.

It finds (1) CFR citations in any common form, resolved against the active corpus (sub-paragraphs
resolve to their section; citations that do not exist are reported, not dropped), (2) title hints
from agencies and programs, and (3) named subjects: words of the question that name a section by its
heading ("gouda" → 21 CFR 133.142 Gouda cheese), which is how near-identical siblings are told apart.
"""
from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass, field

import snowballstemmer

from shared.citations import find_citations, mentioned_titles, section_sort_key
from shared.messages import CitationRef, ProgramRef, Scope, SubjectMatch

AGENCY_HINTS: dict[int, tuple[str, ...]] = {
    21: ("fda", "food and drug", "dea", "drug enforcement", "controlled substance", "ondcp", "drug control policy",
         "otc", "over-the-counter", "cosmetic", "color additive", "biologic", "pharmac"),
    7: ("usda", "agriculture", "fns", "food and nutrition service", "snap", "food stamp", "wic", "csfp",
        "commodity supplemental", "nepa", "ebt"),
    42: ("cms", "medicare", "medicaid", "hhs centers", "part a", "part b", "premium", "hospital insurance",
         "supplementary medical insurance", "guam", "puerto rico", "virgin islands"),
}

# words too common in headings or questions to name a subject on their own
_STOP = set("""
a an and are as at be by can do does for from has have how i if in is it its me my of on or our shall should so
than that the their them there these they this to under was we were what when where which who why will with you
your any all must may also not no yes get need needs required require requirements requirement rule rules
regulation regulations cfr section sections part parts title subpart general provisions definitions definition
scope purpose applicability food foods product products use used make made sell selling label labeling
labels labeled much many long minimum maximum amount level levels allowed permitted per percent content
other than standard standards identity same about tell explain mean means program state states federal
""".split())


_STEMMER = snowballstemmer.stemmer("english")


def _stem(word: str) -> str:
    return _STEMMER.stemWord(word.lower())


_STOP |= {_stem(w) for w in _STOP}  # they are compared with stemmed tokens


# "Schedule I" names a section; its numeral alone is a pronoun or a letter
_SCHEDULE = re.compile(r"\bschedules?\s+(i{1,3}|iv|v)\b(?!['\u2019])")


def tokens(text: str) -> list[str]:
    text = _SCHEDULE.sub(lambda m: "schedule" + m.group(1), text.lower())
    return [_stem(t) for t in re.findall(r"[a-z0-9&]+(?:'[a-z]+)?", text)]


@dataclass(frozen=True)
class CatalogEntry:
    cfr_ref: str
    title: int
    part: str
    section: str
    heading: str
    kind: str = "section"
    reserved: bool = False


# Programs, agency rules and laws people name, with the CFR part(s) that govern them: the corpus holds some
# of them (SNAP's retailer rules, Medicare Part A/B enrollment) and not others (WIC, Part D, devices). A
# question about one the corpus does not hold is answered by naming where the rule lives, not by the nearest
# section that mentions it. Within a family the more specific entry comes first and wins ("SNAP income
# limit" is 7 CFR 273, not the SNAP parts held). (family, name, title, parts, pattern)
PROGRAM_HOMES: tuple[tuple[str, str, int, tuple[str, ...], str], ...] = (
    # --- title 7: food and nutrition programs, agriculture
    ("wic", "WIC (the Special Supplemental Nutrition Program for Women, Infants, and Children)", 7, ("246",),
     r"\bwic\b|women,? infants,? and children"),
    ("school-meals", "the National School Lunch Program", 7, ("210",), r"school lunch|\bnslp\b"),
    ("school-meals", "the School Breakfast Program", 7, ("220",), r"school breakfast"),
    ("cacfp", "the Child and Adult Care Food Program", 7, ("226",), r"child and adult care food|\bcacfp\b"),
    ("sfsp", "the Summer Food Service Program", 7, ("225",), r"summer food service"),
    ("snap", "SNAP household eligibility (income and resource limits, students, work rules)", 7, ("273",),
     r"\b(?:snap|food stamps?)\b.*\b(?:income limits?|gross (?:monthly )?income|resource limits?|assets?|college|"
     r"students?|able-bodied|abawds?|work requirements?)\b|\b(?:income limits?|resource limits?|assets?|college "
     r"students?|able-bodied|abawds?)\b.*\b(?:snap|food stamps?)\b"),
    ("snap", "SNAP", 7, ("271", "272", "274", "275", "276", "277", "278", "279", "280"),
     r"\bsnap\b|food stamps?|supplemental nutrition assistance"),
    ("csfp", "the Commodity Supplemental Food Program", 7, ("247",), r"\bcsfp\b|commodity supplemental food"),
    ("tefap", "The Emergency Food Assistance Program", 7, ("251",), r"\btefap\b|emergency food assistance program"),
    ("organic", "the National Organic Program", 7, ("205",),
     r"usda organic|national organic|made with organic|organic (?:seal|labels?|labeling|certif\w*|ingredients?|"
     r"products?|foods?|farm\w*)|(?:labeled|label it|sold as|certified) organic"),
    ("crop-insurance", "federal crop insurance", 7, ("400", "457"), r"crop insurance"),
    ("farm-loans", "Farm Service Agency farm loans", 7, ("761", "762", "764", "765"),
     r"farm service agency|\bfsa\b (?:farm )?loans?|farm (?:ownership|operating) loans?"),
    ("conservation", "USDA conservation programs (CRP, EQIP)", 7, ("1410", "1466"),
     r"conservation reserve program|\bcrp\b|\beqip\b|environmental quality incentives"),
    ("marketing-orders", "marketing orders and produce trade (PACA)", 7, ("46", "900"),
     r"marketing orders?|\bpaca\b|perishable agricultural commodities"),
    ("hemp", "domestic hemp production", 7, ("990",), r"\bhemp\b"),
    ("aphis", "APHIS animal welfare and plant health rules", 9, ("1", "2", "3"),
     r"\baphis\b|animal welfare act|plant quarantine"),
    # --- title 9
    ("fsis", "USDA FSIS meat, poultry and egg product inspection", 9, (),
     r"\bfsis\b|meat inspection|poultry inspection|slaughter (?:plant|establishment)"),
    # --- title 21 (FDA, DEA, ONDCP): parts held here and parts not
    ("food-additives", "food additive and GRAS rules", 21, ("170", "172", "173", "174", "175", "176", "177", "178",
                                                          "182", "184"),
     r"\bgras\b|generally recognized as safe|\bfood additives?\b|(?:in)?direct (?:food )?additives?|"
     r"food contact substance"),
    ("animal-drugs", "the veterinary feed directive", 21, ("558",), r"veterinary feed directive|\bvfd\b"),
    ("animal-drugs", "drug residue tolerances and withdrawal times in food animals", 21, ("556",),
     r"withdrawal (?:period|time)|drug residues? in (?:milk|meat)"),
    ("animal-drugs", "good manufacturing practice for medicated feeds", 21, ("225", "226"), r"medicated feeds?"),
    ("animal-drugs", "new animal drugs", 21, ("510", "514"), r"animal drugs?|veterinary drugs?"),
    ("devices", "medical device premarket, quality system and reporting rules", 21, ("803", "807", "814", "820"),
     r"510\s*\(k\)|premarket (?:notification|approval)|quality system (?:regulation|requirements)|medical device "
     r"report|device[- ]related death|class (?:i|ii|iii|1|2|3) (?:medical )?device"),
    ("mammography", "mammography facility standards (MQSA)", 21, ("900",), r"mammograph|\bmqsa\b"),
    ("tobacco", "tobacco products", 21, ("1100", "1140", "1141", "1143"),
     r"cigarette (?:packages?|packs?|warnings?|labels?|sales|advertising)|menthol|e-cigarettes?|"
     r"\bvap(?:e|es|ing)\b|tobacco"),
    ("dea", "DEA controlled substance rules", 21, ("1300", "1301", "1304", "1306", "1308"),
     r"\bdea\b|controlled substances?|schedule (?:i|ii|iii|iv|v)\b"),
    # --- title 42 (CMS): Medicare and Medicaid parts held here and parts not
    ("medicare", "Medicare Advantage", 42, ("422",), r"medicare advantage|\bpart c\b|star ratings?"),
    ("medicare", "Medicare Part D (prescription drug coverage)", 42, ("423",),
     r"\bpart d\b|prescription drug (?:plan|coverage)"),
    ("medicare", "Medicare coverage of equipment and services", 42, ("410", "414"),
     r"durable medical equipment|\bdme\b|wheelchair|telehealth|physician fee schedule"),
    ("medicare", "Medicare hospice and home health", 42, ("418", "484"), r"hospice|home health"),
    ("medicare", "Medicare Part A and Part B entitlement, enrollment and premiums", 42, ("406", "407", "408"),
     r"\bmedicare\b|\bpart [ab]\b"),
    ("providers", "long-term care facility requirements", 42, ("483",),
     r"nursing (?:home|facilit)|long-term care facilit|skilled nursing facilit"),
    ("providers", "EMTALA (emergency medical treatment and labor)", 42, ("489",),
     r"\bemtala\b|emergency medical treatment and (?:active )?labor"),
    ("providers", "hospital conditions of participation", 42, ("482",), r"conditions of participation"),
    ("clia", "CLIA laboratory requirements", 42, ("493",), r"\bclia\b|clinical laborator(?:y|ies) improvement"),
    ("fraud", "the Stark and anti-kickback rules", 42, ("411", "1001"), r"\bstark\b|anti-?kickback|self-referral"),
    ("medicaid", "Medicaid eligibility groups in the states", 42, ("435",),
     r"expansion (?:group|adults?)|adult group|medicaid expansion"),
    ("medicaid", "Medicaid managed care", 42, ("438",), r"managed care"),
    ("medicaid", "CHIP (the Children's Health Insurance Program)", 42, ("457",),
     r"(?-i:\bCHIP\b)|children's health insurance"),
    ("medicaid", "Medicaid", 42, ("436", "447"), r"\bmedicaid\b"),
    # --- other titles: agencies and laws people name
    ("osha", "OSHA workplace safety and health standards", 29, ("1910", "1926"),
     r"\bosha\b|occupational safety and health|lockout|tagout|forklift|noise exposure"),
    ("fmla", "the Family and Medical Leave Act", 29, ("825",), r"\bfmla\b|family and medical leave"),
    ("flsa", "the Fair Labor Standards Act", 29, ("541", "778"), r"\bflsa\b|fair labor standards|overtime"),
    ("irs", "federal tax rules (IRS)", 26, (), r"\birs\b|internal revenue|section 179|(?-i:\bIRA\b)|required minimum "
     r"distribution|business meals"),
    ("ssa", "Social Security benefits", 20, ("404", "416"),
     r"social security (?:disability|benefits|retirement)|\bssdi\b|\bssi\b|supplemental security income"),
    ("faa", "FAA aviation rules", 14, (), r"\bfaa\b|\bdrones?\b|remote pilot|airline pilots?|aircraft"),
    ("dot", "DOT motor carrier and hazardous materials rules", 49, ("171", "395"),
     r"hours of service|truck drivers?|commercial driver|hazardous materials? (?:shipping|transport)|\bhazmat\b"),
    ("epa", "EPA environmental rules", 40, (), r"\bepa\b|\bfifra\b|pesticide (?:tolerances?|residue tolerances?|"
     r"registration)|lead-safe|renovation, repair"),
    ("ftc", "FTC trade regulation rules", 16, (), r"\bftc\b|made in usa|federal trade commission"),
    ("ttb", "TTB alcohol beverage labeling", 27, (), r"\bttb\b|wine labels?|beer labels?|distilled spirits"),
    ("hipaa", "the HIPAA privacy and security rules", 45, ("160", "164"),
     r"\bhipaa\b|protected health information"),
    ("aca", "the ACA health insurance marketplace", 45, ("155", "156"),
     r"health insurance marketplace|affordable care act|obamacare|premium tax credit"),
    ("i-9", "employment eligibility verification (Form I-9)", 8, ("274a",), r"\bi-9\b"),
    ("ada", "the Americans with Disabilities Act", 28, ("35", "36"), r"(?-i:\bADA\b)|americans with disabilities"),
    ("education", "student privacy and education rules (FERPA, Title IX)", 34, ("99", "106"),
     r"\bferpa\b|title ix"),
    ("finance", "consumer credit and securities rules", 12, ("1026",),
     r"truth in lending|regulation z|\bsec\b filing|\bcfpb\b"),
)
_PROGRAM_PATTERNS = [(family, name, title, parts, re.compile(pattern, re.I | re.S))
                     for family, name, title, parts, pattern in PROGRAM_HOMES]


def _named_programs(question: str, catalog: "Catalog") -> list[ProgramRef]:
    found: list[ProgramRef] = []
    families: set[str] = set()
    for family, name, title, parts, pattern in _PROGRAM_PATTERNS:
        match = pattern.search(question)
        if match is None or family in families:
            continue
        families.add(family)
        held = title in catalog.titles and (not parts or any((title, p) in catalog.parts for p in parts))
        found.append(ProgramRef(name=name, title=title, parts=list(parts), said=match.group(0)[:80], held=held))
    return found


_ROMAN = re.compile(r"^(?:I{1,3}|IV|V|VI{1,3}|IX|X)$")
_CAPITALISED = r"(?:[A-Z][a-z]+|[A-Z]{2,}|\d+)"


def question_names(question: str) -> list[str]:
    """Proper names and acronyms the question uses: runs of two or more capitalised words not opening the
    sentence ("Medicare Savings Programs", "Rural Development"), and acronyms of three or more capitals
    ("QMB", "HCBS"). Whether the corpus mentions them is the retriever's to check."""
    names: list[str] = []
    for sentence in re.split(r"(?<=[.?!])\s+", question):
        words = sentence.split()
        rest = " ".join(words[1:])  # the sentence's first word is capitalised anyway
        for match in re.finditer(rf"\b{_CAPITALISED}(?:\s+(?:of|and|for|the)?\s*{_CAPITALISED})+\b", rest):
            phrase = match.group(0)
            if sum(1 for w in phrase.split() if w[:1].isupper()) >= 2 and not any(_ROMAN.match(w)
                                                                                   for w in phrase.split()):
                names.append(phrase)
        for match in re.finditer(r"\b[A-Z][A-Z&]{2,}\b", sentence):
            if not _ROMAN.match(match.group(0)) and not any(match.group(0) in n for n in names):
                names.append(match.group(0))
    return list(dict.fromkeys(names))


# function words: never part of what a heading names
_FUNCTION = set("""
a an and are as at be by can do does for from has have how i if in is it its me my of on or our shall should so
than that the their them there these they this to under was we were what when where which who why will with you
your any all must may also not no yes cfr section sections part parts title subpart
""".split())
_FUNCTION |= {_stem(w) for w in _FUNCTION}
# a heading word users leave out, implied by the word they do say: the OTC monographs' "active ingredients"
# are what a user calls the product's "ingredients"
_IMPLIED = {_stem("active"): _stem("ingredient")}
_CONJUNCTION = re.compile(r"\b(?:and|or)\b|[,;]")


@dataclass
class Catalog:
    """The active sections' citation metadata, what scoping resolves against."""

    entries: list[CatalogEntry]
    by_ref: dict[str, CatalogEntry] = field(default_factory=dict)
    by_section: dict[str, list[CatalogEntry]] = field(default_factory=lambda: defaultdict(list))
    parts: dict[tuple[int, str], list[CatalogEntry]] = field(default_factory=lambda: defaultdict(list))
    titles: set[int] = field(default_factory=set)
    # per section: its heading's words, as the alternatives the heading joins with and/or/commas
    # ("Swiss and emmentaler cheese" -> [{swiss}, {emmentaler, cheese}])
    heading_segments: dict[str, list[set[str]]] = field(default_factory=dict)
    heading_tokens: dict[str, set[str]] = field(default_factory=dict)
    token_index: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    bigram_index: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    part_token_df: dict[tuple[int, str], dict[str, int]] = field(default_factory=dict)
    part_size: dict[tuple[int, str], int] = field(default_factory=lambda: defaultdict(int))

    def __post_init__(self) -> None:
        for entry in self.entries:
            self.by_ref[entry.cfr_ref] = entry
            self.by_section[entry.section].append(entry)
            self.parts[(entry.title, entry.part)].append(entry)
            self.titles.add(entry.title)
            if entry.reserved or entry.kind != "section":
                continue
            segments = [{t for t in tokens(chunk) if t not in _FUNCTION and len(t) > 1 and not t.isdigit()}
                        for chunk in _CONJUNCTION.split(entry.heading)]
            segments = [seg for seg in segments if seg]
            words = set().union(*segments) if segments else set()
            self.heading_segments[entry.cfr_ref] = segments
            self.heading_tokens[entry.cfr_ref] = words
            key = (entry.title, entry.part)
            self.part_size[key] += 1
            df = self.part_token_df.setdefault(key, defaultdict(int))
            for word in words:
                df[word] += 1
                if word not in _STOP:
                    self.token_index[word].add(entry.cfr_ref)
            ordered = [t for t in tokens(entry.heading) if t not in _FUNCTION and len(t) > 1]
            for pair in _bigrams(ordered):
                self.bigram_index[pair].add(entry.cfr_ref)

    def phrase_index(self, probe: str) -> set[str]:
        return self.bigram_index.get(probe, set()) if " " in probe else self.token_index.get(probe, set())

    def family_weight(self, ref: str, word: str) -> float:
        """How much a heading word tells a section from its siblings in the part: ~0 for a word every heading of
        the part has ("cheese" in part 133), highest for a word only this heading has ("gruyere")."""
        entry = self.by_ref[ref]
        key = (entry.title, entry.part)
        return math.log((self.part_size[key] + 1) / self.part_token_df[key].get(word, 1))

    def heading_coverage(self, ref: str, present: set[str]) -> tuple[float, float]:
        """(share, weight) of the heading the question names: the best of the heading's alternatives, each
        weighted by family weight, so "swiss cheese" names "Swiss and emmentaler cheese" in full but "Swiss
        cheese for manufacturing" only in part. The weight (matched family weight) prefers the longer of two
        fully named headings ("Pasteurized process cheese food" over "Pasteurized process cheese")."""
        best = (0.0, 0.0)
        words = self.heading_tokens.get(ref, set())
        present = present | {implied for implied, by in _IMPLIED.items() if by in present}
        segments = self.heading_segments.get(ref, [])
        # a short alternative ("emmentaler" beside "swiss") may go unnamed; a longer part of the heading may not
        kept = set().union(*(seg for seg in segments if len(seg) > ALTERNATIVE_MAX_WORDS)) if segments else set()
        for segment in segments:
            named = segment | kept | (words & present)
            total = sum(self.family_weight(ref, t) for t in named)
            matched = sum(self.family_weight(ref, t) for t in named & present)
            share = matched / total if total > 0 else 0.0
            best = max(best, (round(share, 6), matched))
        return best


# a subject word must be rarer than this across headings to single a section out on its own
MAX_SUBJECT_DF = 6
MIN_HEADING_COVERAGE = 0.5
MAX_COMMON_SUBJECT_DF = 12
COMMON_MIN_COVERAGE = 0.99
MAX_SUBJECT_SECTIONS = 8
SPECIFIC_MAX_DF = 2  # "gruyere", "eggnog": a name, not a topic
SPECIFIC_MIN_COVERAGE = 0.7
ALTERNATIVE_MAX_WORDS = 2  # "Parmesan and reggiano cheese": a name beside another name


def _bigrams(words: list[str]) -> list[str]:
    return [f"{a} {b}" for a, b in zip(words, words[1:])]


def _match_subjects(question_tokens: list[str], catalog: Catalog) -> list[SubjectMatch]:
    """Sections whose heading the question names: a heading word or word pair that is rare across headings
    ("gouda", "eggnog", "cheese food") and the rest of one of the heading's alternatives named too, words every
    sibling heading shares counting for little. Every heading that qualifies is kept (up to a cap): telling
    "Earwax removal active ingredient" from "Labeling of earwax removal aids" is the search's job; telling
    eggnog from egg yolk is the subject's."""
    present = set(question_tokens)
    probes = [(w, {w}) for w in present if w not in _STOP and len(w) >= 3 and not w.isdigit()]
    probes += [(pair, set(pair.split()))
               for pair in _bigrams([t for t in question_tokens if t not in _FUNCTION and len(t) > 1])]
    candidates: dict[str, tuple[float, float]] = {}
    matched_words: dict[str, set[str]] = {}
    rarest: dict[str, int] = {}
    for probe, words in probes:
        refs = catalog.phrase_index(probe)
        if not 0 < len(refs) <= MAX_COMMON_SUBJECT_DF:
            continue
        # a commoner word names a section only when it is the whole heading: "Schedule I" names "Schedule I."
        needed = MIN_HEADING_COVERAGE if len(refs) <= MAX_SUBJECT_DF else COMMON_MIN_COVERAGE
        for ref in refs:
            coverage = catalog.heading_coverage(ref, present)
            if coverage[0] >= needed:
                candidates[ref] = max(coverage, candidates.get(ref, (0.0, 0.0)))
                matched_words.setdefault(ref, set()).update(catalog.heading_tokens[ref] & present)
                rarest[ref] = min(len(refs), rarest.get(ref, len(refs)))
    if not candidates:
        return []
    chosen = sorted(candidates, key=lambda r: (-candidates[r][0], -candidates[r][1],
                                               section_sort_key(catalog.by_ref[r].section)))
    chosen = chosen[:MAX_SUBJECT_SECTIONS]
    top_weight = max(candidates[r][1] for r in chosen) or 1.0
    grouped: dict[tuple[str, bool], list[str]] = defaultdict(list)
    for ref in chosen:
        specific = rarest[ref] <= SPECIFIC_MAX_DF and candidates[ref][0] >= SPECIFIC_MIN_COVERAGE
        grouped[(" ".join(sorted(matched_words[ref])), specific)].append(ref)
    # coverage as reported: the share of the heading named, a little less for a heading that names less of the
    # question than the best one does (the tie-break between two headings named in full)
    return [SubjectMatch(term=term, cfr_refs=refs, specific=specific,
                         coverage=[round(candidates[r][0] * (1 - 0.15 * (1 - candidates[r][1] / top_weight)), 3)
                                   for r in refs])
            for (term, specific), refs in grouped.items()]


def scope_question(question: str, catalog: Catalog) -> Scope:
    """What the question is about: citations (resolved), title hints, named subjects. See module doc."""
    scope = Scope()
    lowered = question.lower()
    for cite in find_citations(question):
        ref = CitationRef(raw=cite.raw, title=cite.title, part=cite.part, section=cite.section,
                          paragraph=cite.paragraph)
        if cite.section:
            candidates = [e for e in catalog.by_section.get(cite.section, [])
                          if cite.title is None or e.title == cite.title]
            if cite.range_end:
                end_key = section_sort_key(cite.range_end)
                start_key = section_sort_key(cite.section)
                candidates = [e for (t, p), entries in catalog.parts.items() if p == cite.part
                              and (cite.title is None or t == cite.title)
                              for e in entries if start_key <= section_sort_key(e.section) <= end_key]
            if candidates:
                for entry in sorted(candidates, key=lambda e: section_sort_key(e.section)):
                    scope.citations.append(ref.model_copy(update={"title": entry.title, "section": entry.section,
                                                                  "part": entry.part, "exists": True}))
            else:
                scope.missing_citations.append(ref)
        else:
            titles = [cite.title] if cite.title else sorted(t for (t, p) in catalog.parts if p == cite.part)
            if titles and any((t, cite.part) in catalog.parts for t in titles):
                for title in titles:
                    if (title, cite.part) in catalog.parts:
                        scope.citations.append(ref.model_copy(update={"title": title, "exists": True}))
                        scope.parts.append(cite.part)
            else:
                scope.missing_citations.append(ref)
    for title in mentioned_titles(question):
        if title in catalog.titles:
            scope.titles.append(title)
        elif title not in scope.unsupported_titles:
            scope.unsupported_titles.append(title)
    for title, needles in AGENCY_HINTS.items():
        if title in catalog.titles and title not in scope.titles and any(
            re.search(rf"\b{re.escape(n)}", lowered) for n in needles
        ):
            scope.titles.append(title)
    scope.programs = _named_programs(question, catalog)
    scope.names = question_names(question)
    cited_refs = {f"{c.title} CFR {c.section}" for c in scope.citations if c.section}
    question_tokens = tokens(re.sub(r"§+\s*[\d.a-z()]+", " ", question))
    for subject in _match_subjects(question_tokens, catalog):
        kept = [(r, c) for r, c in zip(subject.cfr_refs, subject.coverage) if r not in cited_refs]
        if kept:
            scope.subjects.append(SubjectMatch(term=subject.term, cfr_refs=[r for r, _ in kept],
                                               coverage=[c for _, c in kept], specific=subject.specific))
    if scope.citations:
        scope.notes.append("cited: " + ", ".join(
            f"{c.title} CFR {c.section or 'part ' + (c.part or '')}{c.paragraph or ''}" for c in scope.citations))
    if scope.missing_citations:
        scope.notes.append("not in this corpus: " + ", ".join(c.raw for c in scope.missing_citations))
    if scope.titles:
        scope.notes.append("title hints: " + ", ".join(str(t) for t in scope.titles))
    if scope.unsupported_titles:
        scope.notes.append("titles not held: " + ", ".join(str(t) for t in scope.unsupported_titles))
    for subject in scope.subjects:
        scope.notes.append(f"subject '{subject.term}': " + ", ".join(subject.cfr_refs))
    for program in scope.programs:
        home = f"{program.title} CFR" + (f" part {', '.join(program.parts)}" if program.parts else "")
        scope.notes.append(f"names {program.name} ({home}): " + ("held" if program.held else "not in this corpus"))
    return scope
