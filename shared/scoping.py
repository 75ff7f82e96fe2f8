"""Scoping: work out what a question is about before searching. ONE exported function,
``scope_question``, used by the retriever, the gateway's search endpoint and the evaluation harness
(through the gateway). Nothing else re-implements a piece of it.

It finds (1) CFR citations in any common form, resolved against the active corpus (sub-paragraphs
resolve to their section; citations that do not exist are reported, not dropped), (2) title hints
from agencies and programs, and (3) named subjects: words of the question that name a section by its
heading ("gouda" → 21 CFR 133.142 Gouda cheese), which is how near-identical siblings are told apart.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections import defaultdict
from dataclasses import dataclass, field

import snowballstemmer

from shared.citations import find_citations, mentioned_titles, section_sort_key
from shared.messages import CitationRef, ProgramRef, Scope, SubjectMatch
from shared.programs import named_homes

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


@functools.lru_cache(maxsize=200_000)
def _stem(word: str) -> str:
    # the snowball stemmer is pure Python (~20 µs a word): the catalog stems ~1.2 M heading words at 85k
    # sections, from a vocabulary of a few tens of thousands
    return _STEMMER.stemWord(word.lower())


_STOP |= {_stem(w) for w in _STOP}  # they are compared with stemmed tokens


# "Schedule I" names a section; its numeral alone is a pronoun or a letter
_SCHEDULE = re.compile(r"\bschedules?\s+(i{1,3}|iv|v)\b(?!['\u2019])")


# the CFR's own spellings of words people spell today's way ("Maple sirup", 21 CFR 168.140)
_CFR_SPELLING = {"syrup": "sirup", "syrups": "sirups"}


def tokens(text: str) -> list[str]:
    text = _SCHEDULE.sub(lambda m: "schedule" + m.group(1), text.lower())
    return [_stem(_CFR_SPELLING.get(t, t)) for t in re.findall(r"[a-z0-9&]+(?:'[a-z]+)?", text)]


# a hyphened word describing what a thing does or lacks ("a skin-lightening cream", "a sugar-free syrup"), not the
# name of a variety ("cold-pack cheese")
_DESCRIBING_COMPOUND = re.compile(r"-(?:[a-z]+ing|[a-z]+ed|free|based|like|style|type|friendly|proof|resistant)$|"
                                  r"^(?:low|high|reduced|non|no|extra)-", re.I)


@dataclass(frozen=True)
class CatalogEntry:
    cfr_ref: str
    title: int
    part: str
    section: str
    heading: str
    kind: str = "section"
    reserved: bool = False


def _named_programs(question: str, catalog: "Catalog") -> list[ProgramRef]:
    """The programs, agencies and laws the question names (``shared.programs``), each marked held or not."""
    return [ProgramRef(name=home.name, title=home.title, parts=list(home.parts), said=said, home=home.home,
                       family=home.family, held=home.title in catalog.titles and (not home.parts
                                                              or any((home.title, p) in catalog.parts for p in home.parts)))
            for home, said in named_homes(question)]


_ROMAN = re.compile(r"^(?:I{1,3}|IV|V|VI{1,3}|IX|X)$")
_CAPITALISED = r"(?:[A-Z][a-z]+|[A-Z]{2,}|\d+)"


def question_names(question: str) -> list[str]:
    """Proper names and acronyms the question uses: runs of two or more capitalised words not opening the
    sentence ("Medicare Savings Programs", "Rural Development"), and acronyms of three or more capitals
    ("QMB", "HCBS"), and one-word brand names with an inner capital ("WanaBana"). Whether the corpus mentions them
    is the retriever's to check."""
    names: list[str] = []
    for sentence in re.split(r"(?<=[.?!])\s+", question):
        words = sentence.split()
        rest = " ".join(words[1:])  # the sentence's first word is capitalised anyway
        for match in re.finditer(rf"\b{_CAPITALISED}(?:\s+(?:of|and|for|the)?\s*{_CAPITALISED})+\b", rest):
            # an agency's acronym before a name is not part of it: "the FDA Salmonella Enteritidis rule" names
            # Salmonella Enteritidis (the acronym is taken on its own below); after one it is ("Tylenol PM"), and
            # so it is before a single word ("FDA Commissioner")
            phrase = match.group(0)
            bare = re.sub(r"^(?:[A-Z][A-Z&]+\s+)+", "", phrase)
            if sum(1 for w in bare.split() if w[:1].isupper()) >= 2:
                phrase = bare
            if sum(1 for w in phrase.split() if w[:1].isupper()) >= 2 and not any(_ROMAN.match(w)
                                                                                   for w in phrase.split()):
                names.append(phrase)
        for match in re.finditer(r"\b[A-Z][a-z]+[A-Z][A-Za-z]*\b", sentence):  # a brand's one word: "WanaBana"
            if not any(match.group(0) in n for n in names):
                names.append(match.group(0))
        for match in re.finditer(r"\b[A-Z][A-Z&]{2,}\b", sentence):
            if not _ROMAN.match(match.group(0)) and not any(match.group(0) in n for n in names):
                names.append(match.group(0))
    return list(dict.fromkeys(names))


# the food or term a question asks the standard or definition of: "a standard of identity for feta", "is there a
# federal standard for Greek yogurt", "what makes a yogurt legally “Greek”", "call a loaf “multigrain”"
_NAMED_THING = r"[\"“‘']?(?P<x>[A-Za-z][\w'-]*(?:\s+[A-Za-z][\w'-]*){0,3}?)[\"”’']?"
_NAMED_END = (r"(?=\s*(?:[,.?;:!—–(-]|\s(?:like|such|for|that|which|or|and|to|in|on|at|under|as|is|are|has|have|"
              r"must|so|from|with|anymore|any|still|again|instead|now|too|either|if|when|because|but|without|even|"
              r"yet)\b|$))")
_ARTICLE = r"(?:(?:a|an|the|our|my|this|that|its|their)\s+)?"
_DEFINED_NAME = [re.compile(p, re.I) for p in (
    r"\bstandards?\s+of\s+identity\s+(?:for|of|on)\s+" + _ARTICLE + _NAMED_THING + _NAMED_END,
    r"\b(?:federal|fda|usda|legal|official|government)\s+(?:standard|definition)s?\s+(?:for|of|on)\s+"
    r"(?:the\s+(?:term|word|name)\s+)?(?!identity\b)" + _ARTICLE + _NAMED_THING + _NAMED_END,
    r"\b(?:is|are)\s+there\s+(?:an?\s+|any\s+)?(?:federal\s+|fda\s+|usda\s+|legal\s+|official\s+)?"
    r"(?:standard|definition)s?\s+(?:for|of|on)\s+(?:the\s+(?:term|word|name)\s+)?(?!identity\b)" + _ARTICLE
    + _NAMED_THING + _NAMED_END,
    r"\bwhat\s+makes\s+" + _ARTICLE + _NAMED_THING + r"\s+legally\b",
    r"\blegally\s+(?:called|labeled|labelled|named|sold\s+as)\s+" + _ARTICLE + _NAMED_THING + _NAMED_END,
    r"\blegally\s+[\"“‘'](?P<x>[^\"”’']{2,40})[\"”’']",
    r"\b(?:call|label|name)\s+(?:it|them|(?:a|an|the|our|my)\s+product)\s+(?:as\s+)?(?![\"“‘'])" + _NAMED_THING
    + _NAMED_END,
    r"\b(?:call|calls|called|label|labels|labeled|name|market|sell|print)\s+(?:it|them|this|that|"
    r"(?:a|an|our|the|my)\s+\w+)?\s*(?:as\s+)?[\"“‘'](?P<x>[^\"”’']{2,40})[\"”’']",
)]
_NOT_A_NAME = {"it", "them", "this", "that", "food", "foods", "product", "products", "identity"}
_NOT_A_FIRST_WORD = {"on", "in", "at", "for", "to", "if", "when", "by", "with", "from", "about", "anything",
                     "something", "anymore"}


def defined_names(question: str) -> list[str]:
    """The foods or terms the question asks the standard or definition of. Whether the corpus mentions them is the
    retriever's to check: a standard no section mentions ("Greek yogurt", "multigrain") is not held."""
    out: list[str] = []
    for pattern in _DEFINED_NAME:
        for match in pattern.finditer(question):
            name = match.group("x").strip(" '\"“”‘’.,;:!?")
            name = re.sub(r"^(?:(?:how|what|which|why|when|whether|a|an|the)\s+)+", "", name, flags=re.I)
            first = name.split()[0].lower() if name else ""
            if name and name.lower() not in _NOT_A_NAME and first not in _NOT_A_FIRST_WORD:
                out.append(name)
    return list(dict.fromkeys(out))


# the endings of drug and chemical names (generic drug stems, alkaloids, amides, salts): a word like this that no
# section mentions is a substance the corpus does not list ("xylazine")
_SUBSTANCE = re.compile(
    r"[a-z]{3,}(?:azine|azepam|azolam|barbital|caine|fentanil|fentanyl|mycin|cillin|olol|pril|sartan|statin|oxone|"
    r"odone|orphan|orphine|amine|idine|etine|amide|azole|ximab|umab|tinib|profen|oxacin|cycline|dronate|gliptin|"
    r"flozin|glutide|tidine|prazole|zodone|pramine|triptyline|phetamine|cathinone|tryptamine|olone)"
)


def substance_words(question: str) -> list[str]:
    """Words of the question shaped like a drug's or a chemical's name ("xylazine", "semaglutide")."""
    return list(dict.fromkeys(w.lower() for w in re.findall(r"[A-Za-z]+", question) if _SUBSTANCE.fullmatch(w.lower())))


# everyday words and the CFR's words for the same thing: the full-text search and the second stage read both
# (the embedding reads the question as asked). General vocabulary of the rules this corpus holds, not phrasings of
# particular questions; brand names map to the generic names the rules use.
_CFR_WORDING: tuple[tuple[re.Pattern, str], ...] = tuple((re.compile(p, re.I), words) for p, words in (
    (r"\bsign(?:ing|ed)? up\b", "enroll enrollment"),
    (r"\b(?:sign[- ]?up|enrollment|enroll) (?:window|deadline)s?\b|\bwindow to (?:sign up|enroll)\b",
     "enrollment period"),
    (r"\bfirst (?:sign[- ]?up |enrollment )?(?:window|chance)\b", "initial enrollment period"),
    (r"\bmedicare part a\b|\bpart a (?:premium|coverage|benefits|entitlement)", "hospital insurance"),
    (r"\bmedicare part b\b|\bpart b (?:premium|coverage|benefits|enrollment|penalty)",
     "supplementary medical insurance"),
    (r"\b(?:co-?pays?|co-?payments?|out[- ]of[- ]pocket)\b", "cost sharing"),
    (r"\b(?:er|emergency room)\b", "emergency department"),
    (r"\bkids?\b", "child children"),
    (r"\bdoctors?\b", "physician practitioner"),
    (r"\bfined?\b|\bfines\b", "civil money penalty"),
    (r"\bfood stamps?\b", "supplemental nutrition assistance program"),
    (r"\b(?:senior|elderly) food box(?:es)?\b|\bfood box(?:es)? for (?:seniors|the elderly)\b",
     "commodity supplemental food program"),
    (r"\b(?:drug |medicine )?take[- ]?back days?\b", "take-back events"),
    (r"\bebt\b", "electronic benefit transfer"),
    (r"\b(?:kicked out|banned)\b", "disqualification disqualified"),
    (r"\bnursing homes?\b", "nursing facility"),
    (r"\bkidney failure\b|\bdialysis\b", "end-stage renal disease"),
    (r"\b(?:pills?|meds|medicines?|medications?)\b", "drug"),
    (r"\birb\b", "institutional review board"),
    (r"\bgas relief\b|\bgassiness\b|\bbloating\b", "antiflatulent"),
    (r"\bpinworms?\b", "anthelmintic"),
    (r"\bheartburn\b|\bacid indigestion\b|\bsour stomach\b", "antacid"),
    (r"\bsudafed\b", "pseudoephedrine"),
    (r"\btylenol\b", "acetaminophen"),
    (r"\b(?:advil|motrin)\b", "ibuprofen"),
    (r"\baleve\b", "naproxen"),
    (r"\bxanax\b", "alprazolam"),
    (r"\badderall\b", "amphetamine"),
    (r"\bambien\b", "zolpidem"),
    (r"\bvalium\b", "diazepam"),
    (r"\b(?:oxycontin|percocet)\b", "oxycodone"),
    (r"\bvicodin\b", "hydrocodone"),
    (r"\bnarcan\b", "naloxone"),
    (r"\bbenadryl\b", "diphenhydramine"),
    (r"\bimodium\b", "loperamide"),
    (r"\bgas-x\b", "simethicone"),
    (r"\bpepto(?:-bismol)?\b", "bismuth subsalicylate"),
    (r"\blyrica\b", "pregabalin"),
    (r"\britalin\b|\bconcerta\b", "methylphenidate"),
    (r"\bvyvanse\b", "lisdexamfetamine"),
    (r"\bultram\b", "tramadol"),
    (r"\bklonopin\b", "clonazepam"),
    (r"\bativan\b", "lorazepam"),
    (r"\b(?:suboxone|subutex)\b", "buprenorphine"),
    (r"\bsoma\b(?= (?:pills?|tablets?|prescriptions?|muscle))", "carisoprodol"),
    (r"\bprovigil\b", "modafinil"),
    (r"\bmarinol\b", "dronabinol"),
    (r"\bbelsomra\b", "suvorexant"),
    (r"\bsonata\b(?= (?:pills?|sleep))", "zaleplon"),
    (r"\b(?:adipex|lomaira)\b", "phentermine"),
    (r"\bnucynta\b", "tapentadol"),
    (r"\b(?:dilaudid)\b", "hydromorphone"),
    (r"\bdemerol\b", "meperidine"),
    (r"\bdebrox\b", "carbamide peroxide"),
    (r"\bmucinex\b", "guaifenesin"),
    (r"\brobitussin\b", "dextromethorphan guaifenesin"),
    (r"\b(?:lotrimin)\b", "clotrimazole"),
    (r"\bmonistat\b", "miconazole"),
    (r"\bcortaid\b", "hydrocortisone"),
    (r"\bnodoz\b|\bvivarin\b", "caffeine"),
))


def cfr_wording(question: str) -> list[str]:
    """The CFR's words for the everyday words of the question ("copay" -> "cost sharing")."""
    return [words for pattern, words in _CFR_WORDING if pattern.search(question)]


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
# heading words that end many headings without naming a kind of thing ("General requirements", "Scope")
_ADMINISTRATIVE = {_stem(w) for w in """
scope purpose requirements requirement records processing products orders ingredients manufacturing labeling quota
definitions applicability exemptions procedures general reports registration provisions authority information
limitations conditions standards responsibilities payments services eligibility penalties applications enrollment
premiums notice determinations policy review hearings content contents methods terms forms use uses sale fees
""".split()}
_VARIETY_MIN = 5
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
    # words that end many short headings of one part, each heading naming a variety of it ("Gouda cheese",
    # "Grape juice", "Half-and-half" ... "cream"): the question's word before one of them names a variety
    variety_heads: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        ends: dict[tuple[int, str, str], int] = defaultdict(int)
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
            heading_tokens = tokens(entry.heading)
            ordered = [t for t in heading_tokens if t not in _FUNCTION and len(t) > 1]
            for pair in _bigrams(ordered):
                self.bigram_index[pair].add(entry.cfr_ref)
            if 2 <= len(ordered) <= 4 and ordered[-1].isalpha() and len(ordered) == len(heading_tokens):
                ends[(entry.title, entry.part, ordered[-1])] += 1
        # counted over bare noun phrases ("Gouda cheese", "Light cream"), not headings with function words
        # ("Issuance of import permit"), where a merely frequent word ends them too
        self.variety_heads = {word for (_, _, word), n in ends.items()
                              if n >= _VARIETY_MIN and word not in _ADMINISTRATIVE}

    def variety_words(self, question: str) -> list[str]:
        """Words of the question that name a variety of something the corpus has varieties of: the word before a
        variety head ("feta" in "feta cheese"). Whether the corpus mentions the variety is the retriever's to check."""
        words = re.findall(r"[A-Za-z][A-Za-z-]*", question)
        out = []
        for word, head in zip(words, words[1:]):
            stem = _stem(word)
            if (_stem(head) in self.variety_heads and len(word) > 2 and stem not in _STOP and stem not in _FUNCTION
                    and stem not in _ADMINISTRATIVE and stem not in self.variety_heads
                    and not _DESCRIBING_COMPOUND.search(word)):
                out.append(word)
        return out

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


_MEASURED = re.compile(
    r"\b(?:how much|how many|what (?:percent(?:age)?|share|amount|level|proportion) of|minimum|maximum|max|min)\s+"
    r"(?P<x>[a-z][a-z' -]{0,40}?)\s+(?:does|do|did|must|can|may|should|is|are|has|have|will|in|for)\b", re.I)


def _measured_words(question: str) -> set[str]:
    """Stems in the measured slot of "how much X does Y ...": what is measured, not what it is measured in."""
    return {t for m in _MEASURED.finditer(question) for t in tokens(m.group("x"))}


def scope_question(question: str, catalog: Catalog) -> Scope:
    """What the question is about: citations (resolved), title hints, named subjects. See module doc."""
    scope = Scope()
    lowered = question.lower()
    scope.programs = _named_programs(question, catalog)
    # a citation without a title belongs to the title of the agency or program the question names: "the FAA's
    # Part 107" is 14 CFR part 107, not the infant formula part 21 CFR 107 that the corpus happens to hold
    named_titles = {p.title for p in scope.programs if p.title}
    for cite in find_citations(question, bare=True):
        if cite.title is None and named_titles and not any((t, cite.part) in catalog.parts for t in named_titles):
            cite = dataclasses.replace(cite, title=min(named_titles))
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
            elif not cite.bare:  # a number alone that is no section held here was a figure, not a citation
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
    # a brand whose generic name the CFR uses ("Xanax" is alprazolam) is not a name the corpus lacks
    scope.names = [n for n in question_names(question)
                   if not all(cfr_wording(w) for w in re.findall(r"[A-Z][\w-]+", n) if w.lower() not in _FUNCTION)]
    scope.names += [w for w in catalog.variety_words(question) + substance_words(question) + defined_names(question)
                    if not any(w.lower() in n.lower() for n in scope.names)]
    cited_refs = {f"{c.title} CFR {c.section}" for c in scope.citations if c.section}
    question_tokens = tokens(re.sub(r"§+\s*[\d.a-z()]+", " ", question))
    subjects = _match_subjects(question_tokens, catalog)
    measured = _measured_words(question)
    if len(subjects) > 1 and measured:
        # "how much chocolate liquor does milk chocolate have to contain": the heading named in the measured
        # slot is an ingredient or attribute of the subject, not the subject
        attributes = [s for s in subjects if set(s.term.split()) <= measured]
        if attributes and len(attributes) < len(subjects):
            subjects = [s.model_copy(update={"specific": False, "coverage": [round(c * 0.5, 3) for c in s.coverage]})
                        if s in attributes else s for s in subjects]
    for subject in subjects:
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
        scope.notes.append(f"names {program.name} ({program.home}): "
                           + ("held" if program.held else "not in this corpus"))
    return scope
