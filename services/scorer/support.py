"""Lexical tools (tokens, stems, content words, sentences) and claim support.

Claim support ("semantic citation coverage", no judge call): each sentence of an answer is compared
with the sentences of the sections it relies on, by cosine similarity of local embeddings (max over the
section's sentences) and by lexical overlap (share of the claim's stemmed content words found in the
section). A sentence copied verbatim from a section scores 1.0.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Sequence

import numpy as np

from shared.figures import find_cfr_refs, normalise_text

if TYPE_CHECKING:
    from shared.embeddings import EmbeddingCache

# --------------------------------------------------------------------------------------------
# words
# --------------------------------------------------------------------------------------------
STOPWORDS = frozenset(
    """a about above after again against all am an and any are aren't as at be because been before being below
    between both but by can cannot could did do does doing don't down during each few for from further had has
    have having he her here hers herself him himself his how i if in into is isn't it its itself let me more most
    my myself no nor not of off on once only or other ought our ours ourselves out over own same she should so
    some such than that that's the their theirs them themselves then there these they this those through to too
    under until up very was we were what when where which while who whom why will with would you your yours
    yourself yourselves also may must shall might per via upon within without whether etc e.g i.e us cfr
    section sections part parts title paragraph paragraphs chapter subpart tell explain say says said please
    need needs required require requires requirement requirements rule rules regulation regulations regulatory
    federal code according apply applies applicable much many mean means use used using what's i'm we're they're
    it's i've you're there's who's where's how's can't won't doesn't didn't""".split()
)
# words that frame a question but never pick out a subject (kept apart from STOPWORDS on purpose:
# they still count as words of a claim for lexical support)
QUESTION_FRAME = frozenset(
    """minimum maximum least most lowest highest level levels amount amounts content contents limit limits
    standard standards allowed allow allows permitted permit permits long often big large small high low
    lower upper kind kinds type types thing things exactly""".split()
)
UNIT_WORDS = frozenset(
    """percent percentage days day weeks week months month years year hours hour minutes minute seconds second
    degrees degree fahrenheit celsius grams gram milligrams milligram pounds pound ounces ounce dollars dollar
    gallons gallon liters liter ppm calories""".split()
)

_TOKEN_RE = re.compile(r"[a-z][a-z'\-]*[a-z]|[a-z]", re.I)


def stem(word: str) -> str:
    """A small suffix-stripping stemmer: enough to make 'cheeses'/'cheese', 'pasteurized'/'pasteurize' meet."""
    w = word.lower().strip("'-")
    if w.endswith("'s"):
        w = w[:-2]
    if len(w) <= 3:
        return w
    for suffix, repl in (
        ("ational", "ate"), ("ization", "ize"), ("fulness", "ful"), ("iveness", "ive"), ("ousness", "ous"),
        ("ements", ""), ("ement", ""), ("ments", ""), ("ment", ""), ("ations", "ate"), ("ation", "ate"),
        ("ities", "ity"), ("ingly", ""), ("edly", ""), ("ings", ""), ("ing", ""), ("ied", "y"), ("ies", "y"),
        ("sses", "ss"), ("ized", "ize"), ("ised", "ize"), ("izes", "ize"), ("ises", "ize"), ("ed", ""),
        ("es", "e"), ("ly", ""), ("s", ""),
    ):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3:
            if suffix == "s" and (w.endswith("ss") or w.endswith("us") or w.endswith("is")):
                continue
            w = w[: len(w) - len(suffix)] + repl
            break
    if w.endswith("ize") and len(w) > 5:
        w = w[:-3]
    elif w.endswith("e") and len(w) > 4:
        w = w[:-1]
    return w


def tokens(text: str) -> list[str]:
    return [t.lower() for t in _TOKEN_RE.findall(normalise_text(text))]


def content_words(text: str, *, drop: Iterable[str] = ()) -> list[str]:
    """Stemmed content words (stopwords removed), in order, with repeats."""
    dropped = set(drop)
    out = []
    for t in tokens(text):
        if t in STOPWORDS or t in dropped or len(t) < 2:
            continue
        s = stem(t)
        if s in dropped:
            continue
        out.append(s)
    return out


def stem_set(text: str) -> set[str]:
    return set(content_words(text))


def term_coverage(question: str, text: str) -> float:
    """Share of the question's distinct content words (stemmed) that occur in ``text``."""
    q = set(content_words(question, drop=QUESTION_FRAME))
    if not q:
        return 0.0
    return len(q & stem_set(text)) / len(q)


# --------------------------------------------------------------------------------------------
# sentences
# --------------------------------------------------------------------------------------------
_ABBREV = re.compile(
    r"\b(?:e\.g|i\.e|etc|vs|No|Nos|Inc|Co|Corp|Ltd|U\.S|U\.S\.C|C\.F\.R|Fed|Reg|Pub|L|Stat|Sec|Secs|Jan|Feb|Mar|Apr"
    r"|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec|Dr|Mr|Ms|Mrs|St|approx|ca|cf|ft|oz|lb|lbs|gal|qt|min|sec|hr|fl|pt|deg|Fig|"
    r"Figs|Ref|Vol|p|pp|al|viz|seq|[A-Z])\.$"
)


def split_sentences(text: str) -> list[str]:
    """Sentences of prose; a new line always ends a sentence; decimals, § numbers and abbreviations do not."""
    out: list[str] = []
    # a bracketed pinpoint ("... consumers. [21 CFR 201.320(a)(2)] This section ...") ends its sentence
    text = re.sub(r"(\[(?:\d+\s*C\.?F\.?R\.?|§)[^\]\n]{0,80}\])[ \t]+(?=[\"'\u201c(]*[A-Z0-9§(])", "\\1\n", text or "")
    for line in text.split("\n"):
        line = line.strip()
        if not line:
            continue
        start = 0
        for m in re.finditer(r"[.!?][\"'\u201d\u2019)]*(?=\s+[\"'\u201c\u2018(]*[A-Z0-9§(])", line):
            candidate = line[start:m.end()].strip()
            if _ABBREV.search(candidate) or re.search(r"\d\.$", candidate) and re.search(r"§\s*\d+\.$|CFR\s+\d+\.$", candidate):
                continue
            if candidate:
                out.append(candidate)
            start = m.end()
        tail = line[start:].strip()
        if tail:
            out.append(tail)
    # bullets / markdown list markers are not claims of their own
    cleaned = []
    for s in out:
        s2 = re.sub(r"^(?:[-*•]\s+|\d+\.\s+(?=[A-Z]))", "", s).strip()
        if s2:
            cleaned.append(s2)
    return cleaned


def section_sentences(text: str, heading: str = "") -> list[str]:
    """A section's sentences, with the designations kept (they are part of the verbatim text)."""
    sents = split_sentences(text)
    if heading:
        sents.insert(0, heading)
    return sents


# --------------------------------------------------------------------------------------------
# claim support
# --------------------------------------------------------------------------------------------
@dataclass
class SupportThresholds:
    supported_min: float = 0.55  # combined support at or above which a sentence counts as supported
    cosine_weight: float = 0.6  # combined = w*cos + (1-w)*lexical, floored by cos itself
    min_content_words: int = 3  # sentences with fewer content words are connective tissue, not claims
    refuse_unsupported_share: float = 0.5  # refuse when more than this share of claims is unsupported


@dataclass
class ClaimSupport:
    sentence: str
    supported: bool
    support: float
    cosine: float
    lexical: float
    verbatim: bool
    cfr_ref: str | None
    is_claim: bool


def _norm_for_verbatim(text: str) -> str:
    t = normalise_text(text).lower()
    t = re.sub(r"[\"']", "", t)
    return re.sub(r"\s+", " ", t).strip(" .;:")


_PINPOINT = re.compile(r"\s*\[(?:\d+\s*C\.?F\.?R\.?|§)[^\]]{0,80}\]")
_ATTRIBUTION = re.compile(
    r"^\s*(?:(?:according to|under|per|as stated in)\b[^:]{0,400}?|[^:\"]{0,80}?\b(?:further\s+)?(?:provides|states|reads|says))"
    r":\s*", re.I)


def claim_body(sentence: str) -> str:
    """What a sentence claims, without its attribution: bracketed pinpoints ("[21 CFR 133.142(a)]"), a leading
    "According to 21 CFR 133.142 (Gouda cheese):" frame and leading paragraph designations are not claims, and a
    sentence copied verbatim from a section must still read as verbatim once they are taken off."""
    body = _PINPOINT.sub("", sentence)
    if find_cfr_refs(body[:400]) or re.match(r"^\s*according to\b", body, re.I):
        body = _ATTRIBUTION.sub("", body, count=1)
    return re.sub(r"^\s*(?:\([a-zA-Z0-9]+\))+\s*", "", body).strip()


def claim_support(
    sentences: Sequence[str],
    sections: Sequence,  # Hit-like: cfr_ref, heading, text
    cache: EmbeddingCache | None,
    thresholds: SupportThresholds = SupportThresholds(),
    *,
    answer_refs: Sequence[str] = (),
    default_title: int = 21,
) -> list[ClaimSupport]:
    """Support of each sentence by the sections it relies on.

    A sentence relies on the sections it cites itself and on the sections the answer cites (``answer_refs``),
    or on every given section when the answer cites none of them; its support is the best over those.
    """
    by_ref = {s.cfr_ref: s for s in sections}
    if not sentences:
        return []
    relied: list[list[str]] = []
    fallback = [r for r in answer_refs if r in by_ref] or list(by_ref)
    for sent in sentences:
        own = [r.cfr_ref for r in find_cfr_refs(sent, default_title) if r.cfr_ref in by_ref]
        relied.append(list(dict.fromkeys(own + fallback)))

    needed = sorted({r for refs in relied for r in refs})
    sec_sents = {r: section_sentences(by_ref[r].text, by_ref[r].heading) for r in needed}
    sec_norm = {r: _norm_for_verbatim(by_ref[r].heading + " " + by_ref[r].text) for r in needed}
    sec_stems = {r: stem_set(by_ref[r].heading + " " + by_ref[r].text) for r in needed}

    cos_matrix: dict[str, np.ndarray] = {}
    if cache is not None and needed:
        claim_vecs = cache.embed(list(sentences))
        for r in needed:
            vecs = cache.embed(sec_sents[r]) if sec_sents[r] else None
            cos_matrix[r] = (claim_vecs @ vecs.T) if vecs is not None and len(vecs) else np.zeros((len(sentences), 1))

    out: list[ClaimSupport] = []
    for i, sent in enumerate(sentences):
        words = set(content_words(sent))
        is_claim = len(words) >= thresholds.min_content_words
        best = ClaimSupport(sent, False, 0.0, 0.0, 0.0, False, None, is_claim)
        norm = _norm_for_verbatim(claim_body(sent))
        for r in relied[i]:
            verbatim = len(norm) >= 12 and norm in sec_norm[r]
            lexical = len(words & sec_stems[r]) / len(words) if words else 0.0
            cosine = float(np.max(cos_matrix[r][i])) if r in cos_matrix else 0.0
            w = thresholds.cosine_weight
            combined = 1.0 if verbatim else max(cosine, w * cosine + (1 - w) * lexical)
            if combined > best.support:
                best = ClaimSupport(sent, False, combined, cosine, lexical, verbatim, r, is_claim)
        best.supported = (not is_claim) or best.support >= thresholds.supported_min
        out.append(best)
    return out


# --------------------------------------------------------------------------------------------
# corpus statistics: how specific a question's word is
# --------------------------------------------------------------------------------------------
@dataclass
class CorpusStats:
    """Document frequency of every content stem over the active sections (heading + text), and which sections
    are held (``refs``: a section's text that leaves a figure to another section is read against it)."""

    n: int
    df: dict[str, int]
    refs: frozenset[str] = frozenset()

    @classmethod
    def from_texts(cls, texts: Iterable[str], refs: Iterable[str] = ()) -> "CorpusStats":
        df: dict[str, int] = {}
        n = 0
        for text in texts:
            n += 1
            for w in stem_set(text):
                df[w] = df.get(w, 0) + 1
        return cls(n, df, frozenset(refs))

    def idf(self, stem_: str) -> float:
        """log((n+1)/(df+0.5)), scaled to 0..1 by its maximum (a stem the corpus never uses)."""
        top = np.log((self.n + 1) / 0.5)
        return float(np.log((self.n + 1) / (self.df.get(stem_, 0) + 0.5)) / top) if self.n else 1.0


def question_key_stems(question: str) -> set[str]:
    """The question's content stems that can pick out a subject (framing and unit words dropped)."""
    return set(content_words(question.replace("\u2019", "'"), drop=QUESTION_FRAME | UNIT_WORDS))


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'\u201c(])")
_FIRST_PERSON = re.compile(r"\b(?:i|i'm|i've|i'd|my|me|we|we're|our|us)\b", re.I)


def asked_part(question: str) -> str:
    """The question without the asker's own circumstances told before or after it ("I own a small-town pharmacy.
    For pseudoephedrine …, what's the most I can sell?"): what a section must cover is what is asked."""
    sentences = _SENTENCE_END.split(question.strip())
    if len(sentences) < 2 or not any(s.rstrip().endswith("?") for s in sentences):
        return question
    kept = [s for s in sentences if s.rstrip().endswith("?") or not _FIRST_PERSON.search(s)]
    return " ".join(kept)


def idf_coverage(phrasings: Iterable[str], text: str, stats: "CorpusStats | None") -> float:
    """IDF-weighted share of a question's key stems found in ``text`` (a rare word the text lacks weighs most;
    plain share without corpus statistics), the best over the question's ``phrasings`` (the text is stemmed
    once)."""
    have = stem_set(text)
    best = 0.0
    for phrasing in phrasings:
        weights = {w: (stats.idf(w) if stats is not None else 1.0) for w in question_key_stems(phrasing)}
        total = sum(weights.values())
        if total:
            best = max(best, sum(v for w, v in weights.items() if w in have) / total)
    return best
