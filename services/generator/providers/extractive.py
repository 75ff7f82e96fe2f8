"""The built-in extractive answerer: offline, deterministic, and unable to invent a word.

Plain answer: the 2-4 sentences of the retrieved sections that best answer the question, copied (leading
paragraph designations aside) and ordered by section then position, each followed by its pinpoint
citation, behind a fixed frame that names the section(s) and is not a claim.

Legal answer: the same passages as verbatim quotations with pinpoint citations; every quote is an exact
substring of ``Hit.text`` and its paragraph is the designation path of the span containing it.

Sentence score = 0.50 * cosine(question, heading + sentence) with the local MiniLM embedder
               + 0.35 * weighted lexical overlap with the question's stemmed content terms
                 (idf-weighted over the candidates, numbers count double, heading matches count half)
               + 0.15 * section prior (retrieval rank, and how much of the question the heading names)
                 plus a small earlier-in-section prior
               + 0.15 inside the paragraph the question cites ("§ 1306.22(b)"),
               + 0.06 when the question asks for a quantity and the sentence states a figure, and 0.06 more
                 when it asks how long and the figure is a length of time (a figure question is answered by the
                 sentence with the figure, not by the one that repeats its words; measured on the 17 question
                 sets: answers judged correct 59.4 % -> 62.4 % in an emulation of the pick, eval/README.md).
Picked: the best sentence, then up to 3 more scoring >= 86 % of it (another section only >= 92 %, at most one),
not redundant with those already picked (near-identical in meaning or words, and stating no figure the other
does not); a second one (same section first, then a section the first one
refers to) when it is close enough (75 %, 60 % for the referenced section): a weak filler is worse than none;
a list item brings its lead-in ("... except that:") and a lead-in its two best items. A paragraph's own heading
("(4) Effect on previously accrued late enrollment penalties. Individuals …") and a heading put as a question are
never candidates. Sections in order of
their best sentence.
Without an embedder (load failure) the cosine term is dropped and the rest still decides.
"""
from __future__ import annotations

import asyncio
import logging
import math
import re
import threading
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from shared.citations import find_citations
from shared.config import Settings
from shared.embeddings import EmbeddingCache
from shared.figures import DURATION_UNITS, asks_for_duration, asks_for_figure, extract_figures
from shared.messages import GenerateRequest, Hit, Quote

from ..text import (
    Unit,
    is_heading_only,
    is_paragraph_heading,
    is_number,
    paragraph_at,
    pinpoint,
    split_units,
    strip_designation,
    terms,
    word_count,
)
from .base import ProviderFailure, ProviderOutput

log = logging.getLogger(__name__)

_SECTION_REF = re.compile(r"§\s*(\d+[A-Za-z]?\.\d+[A-Za-z0-9-]*)")

NAME = "regs-extractive"
VERSION = "1.0"
MODEL = f"{NAME}-{VERSION}"

MAX_SECTIONS = 5  # sections whose sentences are candidates
MAX_UNITS_PER_SECTION = 40  # candidates embedded per section (latency cap)
MIN_SENTENCES, MAX_SENTENCES = 2, 4
W_COSINE, W_LEXICAL, W_PRIOR = 0.50, 0.35, 0.15
FIGURE_BONUS = 0.06  # a sentence stating a figure, for a question that asks for one
DURATION_BONUS = 0.06  # ... and a length of time, for a question that asks how long
PINPOINT_BONUS = 0.15  # a sentence inside the paragraph the question cites ("what does § 1306.22(b) say")
KEEP_RATIO = 0.86  # a further sentence must score at least this share of the best one
OTHER_SECTION_RATIO = 0.92  # ... and this share when it comes from another section than the best one
FILL_RATIO = 0.75  # the second sentence (minimum of two) needs at least this share
CROSS_REF_RATIO = 0.60  # ... or this share in a section the first one refers to ("by § 133.138")
REDUNDANT_COSINE, REDUNDANT_JACCARD = 0.92, 0.70
CACHE_SIZE = 20000


@dataclass
class Scored:
    unit: Unit
    hit: Hit
    body: str  # the sentence without leading designations/heading: a suffix of unit.text
    body_start: int  # offset of body in hit.text
    score: float
    cosine: float
    lexical: float
    terms: frozenset[str]
    vector: np.ndarray | None

    @cached_property
    def figures(self) -> frozenset[str]:
        """The figures it states ("20 days"), normalised."""
        return frozenset(f.key for f in extract_figures(self.body))


class ExtractiveProvider:
    name = "extractive"
    model = MODEL

    def __init__(self, settings: Settings, embedder: Any = None):
        self.settings = settings
        self._embedder = embedder
        self._embedder_failed = False
        self._vectors: EmbeddingCache | None = None
        self._lock = threading.Lock()

    # ---------------------------------------------------------------------------- embedder
    def embedder(self) -> Any:
        if self._embedder is None and not self._embedder_failed:
            try:
                from shared.embeddings import get_embedder

                # always the local MiniLM: the fallback must work offline whatever embeds the corpus
                local = self.settings.model_copy(
                    update={"embedding_provider": "local", "embedding_model": "all-MiniLM-L6-v2"}
                )
                self._embedder = get_embedder(local)
            except Exception as exc:  # noqa: BLE001 - lexical scoring still answers
                log.warning("extractive: local embedder unavailable (%s); scoring lexically", exc)
                self._embedder_failed = True
        return self._embedder

    def warm(self) -> None:
        self.embedder()

    def _embed(self, texts: list[str]) -> np.ndarray | None:
        embedder = self.embedder()
        if embedder is None or not texts:
            return None
        with self._lock:
            if self._vectors is None:
                self._vectors = EmbeddingCache(embedder, CACHE_SIZE)
        return self._vectors.embed(texts)

    # ---------------------------------------------------------------------------- API
    async def generate(self, request: GenerateRequest) -> ProviderOutput:
        return await asyncio.to_thread(self.generate_sync, request)

    def generate_sync(self, request: GenerateRequest) -> ProviderOutput:
        sections = request.sections[:MAX_SECTIONS]
        chosen = self.select(request.question, sections)
        if not chosen:
            raise ProviderFailure("no_extractable_text", "the sections hold no sentence to extract")
        if request.step == "plain":
            text, quotes = self._plain(chosen), []
        else:
            text, quotes = self._legal(chosen)
        cited = [(s.hit.cfr_ref, paragraph_at(s.hit, s.body_start)) for s in chosen]
        # tokens are WORD counts (whitespace tokens), not model tokens: question + considered sections in,
        # the answer out
        tokens_in = word_count(request.question, request.plain_answer, *(h.text for h in sections))
        return ProviderOutput(
            text=text, model=MODEL, quotes=quotes, cited=cited, tokens_in=tokens_in, tokens_out=word_count(text)
        )

    # ---------------------------------------------------------------------------- scoring
    def candidates(self, sections: list[Hit]) -> list[tuple[Unit, Hit, str, int]]:
        out = []
        for index, hit in enumerate(sections):
            units = [u for u in split_units(hit, index) if not is_heading_only(u.text)]
            for u in units:
                body = strip_designation(u.text) if not u.is_table_row else u.text
                offset = u.text.rfind(body) if body else -1
                if not body or offset < 0:
                    body, offset = u.text, 0
                if not u.is_table_row and is_paragraph_heading(hit, u, body):
                    continue
                out.append((u, hit, body, u.start + offset))
        return out

    def select(self, question: str, sections: list[Hit]) -> list[Scored]:
        cands = self.candidates(sections)
        if not cands:
            return []
        q_terms = terms(question)
        if not q_terms:
            q_terms = [t.lower() for t in question.split()]
        unit_terms = [frozenset(terms(body)) for _, _, body, _ in cands]
        heading_terms = {id(h): frozenset(terms(h.heading)) for h in sections}
        n = len(cands)
        weights: dict[str, float] = {}
        for t in dict.fromkeys(q_terms):
            df = sum(1 for ts in unit_terms if t in ts)
            idf = 1.0 + math.log((n + 1) / (df + 1))
            weights[t] = idf * (2.0 if is_number(t) else 1.0)
        total = sum(weights.values()) or 1.0
        heading_match = {
            id(h): sum(w for t, w in weights.items() if t in heading_terms[id(h)]) / total for h in sections
        }

        def lexical(i: int) -> float:
            ts, hs = unit_terms[i], heading_terms[id(cands[i][1])]
            got = sum(w * (1.0 if t in ts else 0.5 if t in hs else 0.0) for t, w in weights.items())
            return got / total

        lex = [lexical(i) for i in range(n)]
        # latency cap: at most MAX_UNITS_PER_SECTION candidates per section go to the embedder (lexical first)
        keep: list[int] = []
        by_section: dict[int, list[int]] = {}
        for i, (u, _, _, _) in enumerate(cands):
            by_section.setdefault(u.hit_index, []).append(i)
        for idxs in by_section.values():
            if len(idxs) > MAX_UNITS_PER_SECTION:
                idxs = sorted(idxs, key=lambda i: (-round(lex[i], 6), cands[i][0].position))[:MAX_UNITS_PER_SECTION]
                idxs.sort()
            keep.extend(idxs)
        embed_texts = [f"{cands[i][1].heading}: {cands[i][2]}" for i in keep]
        vectors = self._embed([question.strip()] + embed_texts)
        figure_question = asks_for_figure(question)
        duration_question = asks_for_duration(question)
        # numbers alone count too ("what does 1306.22(b) say"): only a section handed on here can match them
        pinpoints = {(c.section, c.paragraph) for c in find_citations(question, bare=True) if c.section and c.paragraph}
        scored: list[Scored] = []
        for k, i in enumerate(keep):
            unit, hit, body, body_start = cands[i]
            cos = float(vectors[0] @ vectors[k + 1]) if vectors is not None else 0.0
            section_prior = 1.0 / (1.0 + 0.5 * unit.hit_index)
            units_in_section = len(by_section[unit.hit_index])
            position_prior = 1.0 - unit.position / max(1, units_in_section)
            prior = 0.5 * section_prior + 0.4 * heading_match[id(hit)] + 0.1 * position_prior
            if vectors is not None:
                score = W_COSINE * cos + W_LEXICAL * lex[i] + W_PRIOR * prior
            else:
                score = (W_LEXICAL * lex[i] + W_PRIOR * prior) / (W_LEXICAL + W_PRIOR)
            if pinpoints:
                paragraph = paragraph_at(hit, body_start) or ""
                if any(hit.section == section and paragraph.startswith(cited) for section, cited in pinpoints):
                    score += PINPOINT_BONUS
            if figure_question or duration_question:
                figures = extract_figures(body)
                if figure_question and figures:
                    score += FIGURE_BONUS
                if duration_question and any(f.unit in DURATION_UNITS for f in figures):
                    score += DURATION_BONUS
            scored.append(
                Scored(unit, hit, body, body_start, round(score, 5), cos, lex[i], unit_terms[i],
                       vectors[k + 1] if vectors is not None else None)
            )
        ranked = sorted(scored, key=lambda s: (-s.score, s.unit.hit_index, s.unit.position))
        return self._pick(ranked)

    @staticmethod
    def _redundant(a: Scored, b: Scored) -> bool:
        # sentences on one subject embed alike (cosine ~0.94 for "may not exceed 20 calendar days" and "the
        # entire detention period may not exceed 30 calendar days"): one that states figures the other does not
        # says something else
        if a.figures - b.figures:
            return False
        if a.vector is not None and b.vector is not None and float(a.vector @ b.vector) > REDUNDANT_COSINE:
            return True
        if a.terms and b.terms:
            jaccard = len(a.terms & b.terms) / len(a.terms | b.terms)
            if jaccard > REDUNDANT_JACCARD:
                return True
        return False

    def _pick(self, ranked: list[Scored]) -> list[Scored]:
        top = ranked[0]
        chosen = [top]
        best_section = top.unit.hit_index
        others = 0
        for s in ranked[1:]:
            if len(chosen) >= MAX_SENTENCES:
                break
            other = s.unit.hit_index != best_section
            ratio = OTHER_SECTION_RATIO if other else KEEP_RATIO
            if s.score < ratio * top.score or (other and others >= 1):
                continue
            if any(self._redundant(s, c) for c in chosen):
                continue
            chosen.append(s)
            others += other
        if len(chosen) < MIN_SENTENCES:
            # a section the chosen sentence refers to ("... prescribed for edam cheese by § 133.138") comes next
            referenced = {m for c in chosen for m in _SECTION_REF.findall(c.body)}
            fill = [s for s in ranked[1:] if s.score >= FILL_RATIO * top.score and s not in chosen]
            same = [s for s in fill if s.unit.hit_index == best_section]
            cross = [
                s for s in ranked[1:]
                if s.hit.section in referenced and s.hit.section != top.hit.section
                and s.score >= CROSS_REF_RATIO * top.score
            ]
            for s in same or cross:
                if not any(self._redundant(s, c) for c in chosen):
                    chosen.append(s)
                    break
        # a list item needs its lead-in ("... shall be declared ..., except that:") to be read correctly
        for s in list(chosen):
            lead = self._lead_in(s, ranked)
            if lead is not None and lead not in chosen and len(chosen) <= MAX_SENTENCES:
                chosen.append(lead)
        # ... and a lead-in picked on its own brings its best items ("The following ... may be used:")
        for s in list(chosen):
            for child in self._items(s, ranked, chosen):
                if len(chosen) <= MAX_SENTENCES:
                    chosen.append(child)
        section_best: dict[int, float] = {}
        for s in chosen:
            section_best[s.unit.hit_index] = max(section_best.get(s.unit.hit_index, 0.0), s.score)
        return sorted(chosen, key=lambda s: (-section_best[s.unit.hit_index], s.unit.hit_index, s.unit.position))

    def _items(self, lead: Scored, ranked: list[Scored], chosen: list[Scored]) -> list[Scored]:
        if not lead.unit.text.rstrip().endswith(":"):
            return []
        mine = paragraph_at(lead.hit, lead.body_start)
        if not mine:
            return []

        def is_item(other: Scored) -> bool:
            theirs = paragraph_at(other.hit, other.body_start)
            return (
                other.hit is lead.hit and other.unit.position > lead.unit.position and theirs is not None
                and theirs.startswith(mine) and theirs != mine
            )

        if any(is_item(c) for c in chosen):
            return []
        items: list[Scored] = []
        for other in ranked:  # best first
            if len(items) == 2:
                break
            if is_item(other) and not any(self._redundant(other, c) for c in chosen + items):
                items.append(other)
        return items

    @staticmethod
    def _lead_in(s: Scored, ranked: list[Scored]) -> Scored | None:
        mine = paragraph_at(s.hit, s.body_start)
        if not mine:
            return None
        best: Scored | None = None
        for other in ranked:
            if other.hit is not s.hit or other.unit.position >= s.unit.position:
                continue
            if not other.unit.text.rstrip().endswith(":"):
                continue
            theirs = paragraph_at(other.hit, other.body_start)
            if theirs and mine.startswith(theirs) and mine != theirs:
                if best is None or other.unit.position > best.unit.position:
                    best = other
        return best

    # ---------------------------------------------------------------------------- writing
    @staticmethod
    def _frame(chosen: list[Scored]) -> str:
        hits = list(dict.fromkeys(s.hit.cfr_ref for s in chosen))
        by_ref = {s.hit.cfr_ref: s.hit for s in chosen}
        names = [f"{ref} ({by_ref[ref].heading})" if by_ref[ref].heading else ref for ref in hits]
        return "According to " + (" and ".join(names) if len(names) <= 2 else ", ".join(names[:-1]) + ", and " + names[-1]) + ":"

    def _plain(self, chosen: list[Scored]) -> str:
        parts = [self._frame(chosen)]
        for s in chosen:
            parts.append(f"{s.body} [{pinpoint(s.hit.cfr_ref, paragraph_at(s.hit, s.body_start))}]")
        return " ".join(parts)

    def _legal(self, chosen: list[Scored]) -> tuple[str, list[Quote]]:
        # contiguous chosen sentences of one paragraph become one quotation
        groups: list[list[Scored]] = []
        for s in chosen:
            prev = groups[-1][-1] if groups else None
            if (
                prev is not None
                and prev.hit is s.hit
                and s.unit.position == prev.unit.position + 1
                and paragraph_at(s.hit, s.body_start) == paragraph_at(prev.hit, prev.body_start)
                and "\n" not in s.hit.text[prev.unit.end : s.unit.start]
            ):
                groups[-1].append(s)
            else:
                groups.append([s])
        lines: list[str] = []
        quotes: list[Quote] = []
        seen_sections: set[str] = set()
        for g in groups:
            hit = g[0].hit
            start, end = g[0].body_start, g[-1].unit.end
            text = hit.text[start:end]
            paragraph = paragraph_at(hit, start)
            verb = "further provides" if hit.cfr_ref in seen_sections else "provides"
            seen_sections.add(hit.cfr_ref)
            lines.append(f'{pinpoint(hit.cfr_ref, paragraph)} {verb}: "{text}"')
            quotes.append(Quote(text=text, cfr_ref=hit.cfr_ref, paragraph=paragraph))
        return "\n\n".join(lines), quotes
