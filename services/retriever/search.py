"""Scope, then hybrid retrieval over the active corpus: dense (pgvector HNSW over section windows) and
PostgreSQL full-text, fused by reciprocal rank with scoping signals, one hit per section."""
from __future__ import annotations

import asyncio
import logging
import math
import re
import time
from dataclasses import dataclass

import asyncpg
import numpy as np

from shared import db
from shared.config import Settings
from shared.embeddings import Embedder, get_embedder
from shared.messages import Hit, ParagraphSpan, RetrieveRequest, RetrieveResult, Scope, SubjectMatch
from shared.scoping import Catalog, CatalogEntry, cfr_wording, scope_question

log = logging.getLogger(__name__)

MAX_QUESTION_CHARS = 2000


class SearchError(ValueError):
    """A request the retriever cannot serve as asked (e.g. an index built with another embedding model)."""


@dataclass(frozen=True)
class FusionWeights:
    fusion: str = "weighted"  # "rrf" (reciprocal rank) or "weighted" (min-max normalised scores)
    rrf_k: float = 10.0
    dense: float = 1.0
    dense_section: float = 1.0  # the whole-section (mean of windows) embedding as a second dense list
    fulltext: float = 0.5
    cited: float = 1.0  # a cited section that exists comes first
    subject: float = 0.04  # a section the question names by its heading
    subject_specific: float = 0.15  # ... and far more when a rare name singles it out ("gruyere")
    subject_sharpness: float = 2.0
    subject_min_similarity: float = 0.30  # ... provided its meaning is near the question too
    subject_max_gap: float = 0.20  # (within this much of the best dense similarity)
    # a rare name of several words ("asiago old") is not matched by accident, and the embedding model may not know
    # it (MiniLM rates "asiago old"'s own section 0.21 against a question on its curing): a lower floor. One word
    # that names a heading alone is often an everyday word ("hours", "Congress", "cook") and keeps the first floor
    subject_specific_min_similarity: float = 0.15
    cited_part: float = 0.004  # a section of a cited part
    title_hint: float = 0.002  # a section of a hinted title
    candidates: int = 60  # sections taken from each list before fusion
    # windows read from the HNSW index: at most hnsw.ef_search (200), what one pass of the index returns; more
    # starts an iterative scan (85k sections: 2 ms for 200 windows, 7 ms for 240), for no gain on the eval set
    dense_windows: int = 200
    max_lexeme_share: float = 0.25  # a lexeme in more than this share of sections does not select candidates
    idf_power: float = 2.0  # full-text lexeme weight = IDF ** idf_power: a rare word outweighs a common one more
    # hybrid mode's second stage over the best `rerank_depth` fused sections: score / best score + these weights × the
    # IDF-weighted share of the question's words the section holds, in its heading and text and in its hierarchy
    # (part, subpart, subject group headings), + `rerank_subject` for a section the question names by heading.
    # Fitted (pairwise logistic regression) on the labelled question sets: eval/RESULTS.md, "Second stage".
    text_coverage: float = 0.5
    hierarchy_coverage: float = 0.6
    rerank_subject: float = 0.1
    rerank_depth: int = 20


class Searcher:
    def __init__(self, pool: asyncpg.Pool, settings: Settings, embedder: Embedder | None = None,
                 weights: FusionWeights | None = None):
        self.pool = pool
        self.settings = settings
        self._embedder = embedder
        self.weights = weights or FusionWeights()
        self._catalog: Catalog | None = None
        self._signature: tuple = ()
        self._checked_at = 0.0
        self._lock = asyncio.Lock()
        self._title_part: dict[int, tuple[int, str]] = {}
        self._doc_count = 0
        self._lexeme_df: dict[str, int] = {}
        self._reloading: asyncio.Task | None = None
        self._load_error: SearchError | None = None

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = get_embedder(self.settings)
        return self._embedder

    async def catalog(self) -> Catalog:
        """The active sections' metadata. Loaded once before the first search; when the active corpus versions
        change (an ingest swapped one in) a new one is built in the background while the current one keeps
        serving — at 85,000 sections a build takes ~5 s, which used to stall the requests that noticed it."""
        if self._catalog is None:
            async with self._lock:
                if self._catalog is None:
                    await self._load(await db.active_signature(self.pool))
            self._checked_at = time.monotonic()
        if self._load_error is not None:
            raise self._load_error
        now = time.monotonic()
        if now - self._checked_at >= 2.0:
            self._checked_at = now
            signature = await db.active_signature(self.pool)
            if signature != self._signature and (self._reloading is None or self._reloading.done()):
                self._reloading = asyncio.create_task(self._reload(signature), name="catalog-reload")
        return self._catalog

    async def _reload(self, signature: tuple) -> None:
        try:
            async with self._lock:
                await self._load(signature)
            self._load_error = None
        except SearchError as exc:
            self._load_error = exc  # every search says so until the store and the embedder agree again
        except Exception:  # noqa: BLE001 - the current catalog keeps serving; the next check retries
            log.exception("catalog reload failed; serving the previous one")
            self._signature = ()

    async def _load(self, signature: tuple) -> None:
        rows = await db.catalog_rows(self.pool)
        doc_count, lexeme_df = await db.lexeme_document_frequencies(self.pool)
        models = await db.active_embedding_models(self.pool)
        if models and self.embedder.model_name not in models:
            raise SearchError(f"the index was embedded with {', '.join(models)}, but this retriever embeds "
                              f"queries with {self.embedder.model_name}: set REGS_EMBEDDING_PROVIDER/MODEL "
                              f"to match or re-ingest")
        # building the catalog is CPU work (seconds at 85k): off the event loop
        catalog = await asyncio.to_thread(Catalog, [CatalogEntry(r["cfr_ref"], r["title"], r["part"], r["section"],
                                                                 r["heading"], r["kind"], r["reserved"]) for r in rows])
        self._title_part = {r["id"]: (r["title"], r["part"]) for r in rows}
        self._doc_count, self._lexeme_df = doc_count, lexeme_df
        self._catalog, self._signature = catalog, signature

    async def scope(self, question: str) -> Scope:
        return scope_question(question, await self.catalog())

    async def search(self, request: RetrieveRequest) -> RetrieveResult:
        mode = request.mode or self.settings.retrieval_mode
        top_k = max(1, min(request.top_k or self.settings.top_k, 50))
        use_scoping = self.settings.scoping if request.scoping is None else request.scoping
        question = (request.question or "").strip()[:MAX_QUESTION_CHARS]
        catalog = await self.catalog()
        model = self.embedder.model_name
        result = RetrieveResult(scope=Scope(), hits=[], mode=mode, top_k=top_k, embedding_model=model)
        if not re.search(r"\w", question):
            result.empty_reason = "the question has no searchable words"
            return result
        if not catalog.entries:
            result.empty_reason = "the corpus is empty: nothing has been ingested yet"
            return result
        scope = scope_question(question, catalog) if use_scoping else Scope()
        result.scope = scope
        # the words searched for: the question's own, and the CFR's words for its everyday ones
        wording = cfr_wording(question) if use_scoping else []
        lexical_text = " ".join([question, *wording])
        if wording:
            scope.notes.append("also searched for: " + "; ".join(wording))
        w = self.weights
        # the query embedding (both cores, outside the event loop), the full-text query and the two dense
        # queries run concurrently, each dense/full-text query on its own connection (its own server process)
        embedding = asyncio.ensure_future(asyncio.to_thread(self.embedder.embed_queries, [question]))

        question_lexemes: list[str] = []

        async def fulltext_rows() -> list:
            if mode not in ("hybrid", "fulltext"):
                return []
            async with self.pool.acquire() as c:
                question_lexemes.extend(await db.question_lexemes(c, lexical_text))
                lexemes, idfs = self._weighted_lexemes(question_lexemes)
                return await db.fulltext_search(c, lexemes, idfs, w.candidates) if lexemes else []

        async def dense(search, limit: int) -> list:
            vector = (await embedding)[0].astype(np.float32)
            async with self.pool.acquire() as c:
                return await search(c, vector, model, len(vector), limit, self.settings.hnsw_ef_search)

        async def absent_names() -> list:
            # which of the question's names no section mentions (a phrase search: up to ~15 ms at 85k sections
            # for a long name of common words, so it runs beside the searches, not after them)
            if not scope.names:
                return []
            async with self.pool.acquire() as c:
                return await db.absent_phrases(c, scope.names)

        use_dense = mode in ("hybrid", "dense")
        try:
            window_rows, section_rows, text_rows, scope.absent_names = await asyncio.gather(
                dense(db.dense_window_search, w.dense_windows) if use_dense else _nothing(),
                dense(db.dense_section_search, w.candidates) if use_dense and w.dense_section else _nothing(),
                fulltext_rows(),
                absent_names(),
            )
        finally:
            vector = (await embedding)[0].astype(np.float32)
        dim = len(vector)
        scores: dict[int, float] = {}
        dense_rank: dict[int, int] = {}
        fulltext_rank: dict[int, int] = {}
        similarity: dict[int, float] = {}
        matched: dict[int, list[str]] = {}

        def add(section_id: int, amount: float, how: str) -> None:
            scores[section_id] = scores.get(section_id, 0.0) + amount
            matched.setdefault(section_id, [])
            if how not in matched[section_id]:
                matched[section_id].append(how)

        rows = window_rows[: w.candidates]
        for rank, row in enumerate(rows, start=1):
            dense_rank[row["section_id"]] = rank
            similarity[row["section_id"]] = float(row["similarity"])
            add(row["section_id"], w.dense * self._fused(rank, row["similarity"], rows, "similarity"), "dense")
        for rank, row in enumerate(section_rows, start=1):
            add(row["section_id"], w.dense_section * self._fused(rank, row["similarity"], section_rows, "similarity"),
                "dense")
        for rank, row in enumerate(text_rows, start=1):
            fulltext_rank[row["section_id"]] = rank
            add(row["section_id"], w.fulltext * self._fused(rank, row["rank"], text_rows, "rank"), "fulltext")

        async with self.pool.acquire() as conn:
            if use_scoping:
                if scope.absent_names:
                    scope.notes.append("not mentioned anywhere in this corpus: " + ", ".join(scope.absent_names))
                cited_refs = [f"{c.title} CFR {c.section}" for c in scope.citations if c.section]
                subject_refs = [r for s in scope.subjects for r in s.cfr_refs]
                ids = await db.active_ids_for_refs(conn, cited_refs + subject_refs)
                for position, ref in enumerate(cited_refs):
                    if ref in ids:
                        add(ids[ref], w.cited * (1 - position * 0.01), "citation")
                subject_sims = await db.section_similarities(
                    conn, [ids[r] for r in subject_refs if r in ids], vector, model, dim)
                similarity.update(subject_sims)
                best = max(similarity.values(), default=0.0)
                floor = max(w.subject_min_similarity, best - w.subject_max_gap)
                specific_floor = max(w.subject_specific_min_similarity, best - w.subject_max_gap)
                kept_subjects = []
                best_coverage = max((c for s in scope.subjects for c in s.coverage), default=1.0) or 1.0
                for subject in scope.subjects:
                    subject_floor = specific_floor if named_in_full(subject) else floor
                    plausible = [(r, c) for r, c in zip(subject.cfr_refs, subject.coverage)
                                 if r in ids and subject_sims.get(ids[r], 0.0) >= subject_floor]
                    if plausible:
                        kept_subjects.append(subject.model_copy(update={"cfr_refs": [r for r, _ in plausible],
                                                                        "coverage": [c for _, c in plausible]}))
                        for ref, coverage in plausible:
                            # the heading named most completely gets the most ("Mozzarella cheese" over
                            # "Low-moisture mozzarella" for a question about mozzarella's moisture)
                            weight = w.subject_specific if subject.specific else w.subject
                            add(ids[ref], weight * (coverage / best_coverage) ** w.subject_sharpness, "subject")
                    else:
                        # a heading word that matched by accident ("aged" in "Age requirements for the aged")
                        scope.notes.append(f"subject '{subject.term}' set aside: its section is unrelated in meaning")
                scope.subjects = kept_subjects
                cited_parts = {(c.title, c.part) for c in scope.citations if not c.section}
                hinted = set(scope.titles)
                if cited_parts or hinted:
                    for section_id in list(scores):
                        entry_title, entry_part = self._title_part.get(section_id, (0, ""))
                        if (entry_title, entry_part) in cited_parts:
                            add(section_id, w.cited_part, "cited_part")
                        if entry_title in hinted:
                            scores[section_id] += w.title_hint
                    if cited_parts and not any("cited_part" in m for m in matched.values()):
                        # a cited part whose sections the question's words did not reach: its first sections
                        for title, part in cited_parts:
                            refs = [e.cfr_ref for e in catalog.parts.get((title, part), [])][:top_k]
                            for ref, section_id in (await db.active_ids_for_refs(conn, refs)).items():
                                add(section_id, w.cited_part, "cited_part")
            ranked = sorted(scores, key=lambda sid: -scores[sid])
            if ranked and mode == "hybrid" and (w.text_coverage or w.hierarchy_coverage or w.rerank_subject):
                head = ranked[: max(w.rerank_depth, top_k)]
                coverage = await self.coverage(conn, head, question_lexemes)
                best = scores[head[0]] or 1.0
                for sid in head:
                    text_share, hierarchy_share, _ = coverage.get(sid, (0.0, 0.0, 0.0))
                    scores[sid] = (scores[sid] / best + w.text_coverage * text_share
                                   + w.hierarchy_coverage * hierarchy_share
                                   + w.rerank_subject * ("subject" in matched.get(sid, [])))
                ranked = sorted(head, key=lambda sid: -scores[sid])
            ranked = ranked[:top_k]
            missing = [sid for sid in ranked if sid not in similarity]
            similarity.update(await db.section_similarities(conn, missing, vector, model, dim))
            rows = await db.active_sections_by_id(conn, ranked, with_text=request.include_text)
            superseded = await db.latest_superseded(conn, [rows[sid]["cfr_ref"] for sid in ranked[:3] if sid in rows]
                                                    + [f"{c.title} CFR {c.section}" for c in scope.citations
                                                       if c.section], vector, model, dim) \
                if request.include_superseded else []
        for position, sid in enumerate(ranked, start=1):
            row = rows.get(sid)
            if row is None:
                continue  # swapped out between the searches and the fetch
            result.hits.append(_hit(row, scores[sid], similarity.get(sid), position, dense_rank.get(sid),
                                    fulltext_rank.get(sid), matched.get(sid, [])))
        result.superseded = [_hit(r, 0.0, float(r["similarity"]), 0, None, None, ["superseded"]) for r in superseded]
        if not result.hits:
            result.empty_reason = "no section matched the question's words or meaning"
        return result

    async def coverage(self, conn: asyncpg.Connection, section_ids: list[int],
                       lexemes: list[str]) -> dict[int, tuple[float, float, float]]:
        """Per section: the IDF-weighted share of the question's lexemes it holds in its heading or text, in its
        hierarchy headings, and in its own heading. Lexemes the corpus lacks are left out (they tell no section
        from another)."""
        n = max(self._doc_count, 1)
        idf = {}
        for lexeme in dict.fromkeys(lexemes):
            df = self._lexeme_df.get(lexeme, 0)
            if df:
                idf[lexeme] = math.log((n - df + 0.5) / (df + 0.5) + 1.0)
        total = sum(idf.values())
        if not total:
            return {}
        presence = await db.lexeme_presence(conn, section_ids, list(idf))
        out = {}
        for sid in section_ids:
            held = presence.get(sid, {})
            out[sid] = (sum(idf[x] for x, where in held.items() if where & {"A", "D"}) / total,
                        sum(idf[x] for x, where in held.items() if "B" in where) / total,
                        sum(idf[x] for x, where in held.items() if "A" in where) / total)
        return out

    def _fused(self, rank: int, value: float, rows: list, key: str) -> float:
        """One list's contribution: reciprocal rank, or the min-max normalised score on the same scale."""
        w = self.weights
        if w.fusion == "rrf":
            return 1.0 / (w.rrf_k + rank)
        top, bottom = float(rows[0][key]), float(rows[-1][key])
        return (float(value) - bottom) / ((top - bottom) or 1.0) / (w.rrf_k + 1)

    def _weighted_lexemes(self, lexemes: list[str]) -> tuple[list[str], list[float]]:
        """The question's lexemes that occur in the corpus, each with its IDF; very common ones are dropped when
        rarer ones exist (they would pull in half the corpus and add nothing to the ranking)."""
        n = max(self._doc_count, 1)
        scored = []
        for lexeme in dict.fromkeys(lexemes):
            df = self._lexeme_df.get(lexeme, 0)
            if df == 0:
                continue
            scored.append((lexeme, math.log((n - df + 0.5) / (df + 0.5) + 1.0) ** self.weights.idf_power, df / n))
        informative = [x for x in scored if x[2] <= self.weights.max_lexeme_share]
        chosen = informative or scored
        return [x[0] for x in chosen], [x[1] for x in chosen]


async def _nothing() -> list:
    return []


def named_in_full(subject: SubjectMatch) -> bool:
    """A rare name of several words the question names a heading by ("asiago old"), not one word of it."""
    return subject.specific and len(subject.term.split()) > 1


def _hit(row, score: float, similarity: float | None, rank: int, dense_rank: int | None, fulltext_rank: int | None,
         matched: list[str]) -> Hit:
    return Hit(
        cfr_ref=row["cfr_ref"], title=row["title"], part=row["part"], section=row["section"], heading=row["heading"],
        score=round(float(score), 6), similarity=None if similarity is None else round(float(similarity), 4),
        rank=rank, dense_rank=dense_rank, fulltext_rank=fulltext_rank, matched_by=matched, kind=row["kind"],
        reserved=row["reserved"], removed=row["removed"], status=row["status"], version_id=row["version_id"],
        source_date=row["source_date"], agency=row["agency"], subpart=row["subpart"], text=row["text"],
        paragraphs=[ParagraphSpan(**p) for p in (row["paragraphs"] or [])], source_note=row["source_note"],
        editorial_notes=list(row["editorial_notes"] or []),
    )
