"""Calibrate the scorer's gates and confidence on the evaluation set, offline and cross-validated.

Three steps, each cached under ``--cache`` (default ``/tmp/regs_calibrate``):

``collect``   every dataset question through the production retriever code, in process
              (``services.retriever.search.Searcher`` against the running PostgreSQL, the request the gateway's
              fan-out sends: default top_k and mode, ``include_superseded=True``) -> ``retrievals.json``.
``generate``  the extractive generator's two calls (``services.generator.service.Generator`` with the default
              settings: no API key, so the extractive fallback answers) for the sections the pre-gate would hand
              to generation -> ``generations.json`` (keyed by question + section refs, so a threshold change
              that changes the sections only generates what is new).
``evaluate``  the gates in process over every question (``pre_gate`` / ``post_gate`` with a
              ``ScorerThresholds``, and the answer reader as production asks it, each reading done once however
              many thresholds are swept; ``--no-reader`` for the rules alone), scored with ``eval.metrics``: not_found refusals, answerable refusals and their
              reasons, the calibration table, claim-support agreement, and a k-fold cross-validation of the
              not_found threshold (chosen on k-1 folds from a grid of round values, scored on the held-out fold).

    .venv/bin/python -m eval.calibrate collect
    .venv/bin/python -m eval.calibrate generate
    .venv/bin/python -m eval.calibrate evaluate [--folds 5] [--json out.json]

No step writes to the database or the bus. The numbers that count are those of ``regs eval`` through the
running system; this script is for sweeping thresholds in seconds without overfitting them.
"""
from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import random
import sys
import time
from collections import Counter, defaultdict
from dataclasses import replace
from pathlib import Path

from eval import metrics as M

DATASET = Path(__file__).resolve().parent / "dataset.jsonl"
DEFAULT_CACHE = Path("/tmp/regs_calibrate")


def load_dataset(path: Path = DATASET) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# --------------------------------------------------------------------------------------------
# collect: retrievals exactly as production computes them
# --------------------------------------------------------------------------------------------
async def _collect(rows: list[dict], out: Path) -> None:
    from services.retriever.search import Searcher
    from shared import db
    from shared.config import Settings
    from shared.embeddings import get_embedder
    from shared.messages import RetrieveRequest

    settings = Settings()
    if not settings.database_url:
        raise SystemExit("REGS_DATABASE_URL is not set (the running system's PostgreSQL)")
    pool = await db.create_pool(settings.database_url, max_size=2)
    try:
        searcher = Searcher(pool, settings, await asyncio.to_thread(get_embedder, settings))
        titles = await db.active_titles(pool)
        data = {"corpus_titles": titles, "retrievals": {}}
        t0 = time.perf_counter()
        for i, row in enumerate(rows, 1):
            # the fan-out's request: top_k/mode unset (settings decide), superseded matches included
            res = await searcher.search(RetrieveRequest(question=row["question"], include_superseded=True))
            data["retrievals"][row["id"]] = res.model_dump(mode="json")
            if i % 25 == 0:
                print(f"  {i}/{len(rows)} retrieved ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
        out.write_text(json.dumps(data))
    finally:
        await pool.close()


# --------------------------------------------------------------------------------------------
# generate: the extractive generator's outputs for the sections the pre-gate passes on
# --------------------------------------------------------------------------------------------
def gen_key(question: str, refs: list[str]) -> str:
    return hashlib.sha1(json.dumps([question, refs]).encode()).hexdigest()[:16]


def load_json(path: Path, default):
    return json.loads(path.read_text()) if path.exists() else default


async def _generate(rows: list[dict], cache: Path, th) -> int:
    from services.generator.service import Generator
    from services.scorer.gates import candidate_sections
    from shared.config import Settings
    from shared.messages import GenerateRequest, RetrieveResult

    retrievals = load_json(cache / "retrievals.json", None)
    if retrievals is None:
        raise SystemExit("run `collect` first")
    gen_path = cache / "generations.json"
    gens = load_json(gen_path, {})
    settings = Settings(anthropic_api_key=None, openai_api_key=None)
    generator = Generator(settings)
    new = 0
    for row in rows:
        retrieval = RetrieveResult.model_validate(retrievals["retrievals"][row["id"]])
        sections = candidate_sections(row["question"], retrieval, th)
        if not sections:
            continue
        key = gen_key(row["question"], [s.cfr_ref for s in sections])
        if key in gens:
            continue
        plain = await generator.generate(GenerateRequest(step="plain", question=row["question"], sections=sections))
        legal = await generator.generate(GenerateRequest(step="legal", question=row["question"], sections=sections,
                                                         plain_answer=plain.text))
        gens[key] = {"plain": plain.model_dump(mode="json"), "legal": legal.model_dump(mode="json")}
        new += 1
        if new % 20 == 0:
            gen_path.write_text(json.dumps(gens))
            print(f"  {new} generated", file=sys.stderr)
    gen_path.write_text(json.dumps(gens))
    return new


async def _corpus_stats(cache: Path):
    """The scorer's corpus statistics, built exactly as the worker builds them, cached."""
    from services.scorer.service import load_corpus_stats
    from services.scorer.support import CorpusStats
    from shared import db
    from shared.config import Settings

    path = cache / "corpus_stats.json"
    if path.exists():
        d = json.loads(path.read_text())
        if "refs" in d:  # a cache from before the held sections were kept is rebuilt
            return CorpusStats(d["n"], d["df"], frozenset(d["refs"]))
    pool = await db.create_pool(Settings().database_url, max_size=1)
    try:
        stats = await load_corpus_stats(pool)
    finally:
        await pool.close()
    path.write_text(json.dumps({"n": stats.n, "df": stats.df, "refs": sorted(stats.refs)}))
    return stats


# --------------------------------------------------------------------------------------------
# evaluate: the gates in process
# --------------------------------------------------------------------------------------------
class _MemoReader:
    """The production answer reader, each (question, sections) read once however many thresholds are swept."""

    def __init__(self):
        from services.scorer.reader import shared_reader

        self._reader = shared_reader()
        self._memo: dict = {}

    def read(self, question, sections, per_section):
        key = (question, tuple(h.cfr_ref for h in sections), per_section)
        if key not in self._memo:
            self._memo[key] = self._reader.read(question, sections, per_section)
        return self._memo[key]


class Bench:
    """Everything cached, and the gates run over it for any ScorerThresholds."""

    def __init__(self, rows: list[dict], cache: Path, use_reader: bool = True):
        from services.scorer.support import SentenceEmbeddingCache
        from shared.config import Settings
        from shared.embeddings import get_embedder
        from shared.messages import RetrieveResult

        self.rows = rows
        data = load_json(cache / "retrievals.json", None)
        if data is None:
            raise SystemExit("run `collect` first")
        self.corpus_titles = data["corpus_titles"]
        self.retrievals = {r["id"]: RetrieveResult.model_validate(data["retrievals"][r["id"]]) for r in rows}
        self.gens = load_json(cache / "generations.json", {})
        self.stats = asyncio.run(_corpus_stats(cache))
        self.support_cache = SentenceEmbeddingCache(get_embedder(Settings()), max_items=10**7)
        self._vec_path = cache / "sentence_vectors.pkl"
        if self._vec_path.exists():  # the claim-support embeddings: the slow part, kept across runs
            import pickle

            self.support_cache._cache.update(pickle.loads(self._vec_path.read_bytes()))
        self._post_memo: dict = {}
        self.reader = _MemoReader() if use_reader else None

    def save_vectors(self) -> None:
        import pickle

        self._vec_path.write_bytes(pickle.dumps(dict(self.support_cache._cache)))

    def pre(self, row: dict, th):
        from services.scorer.gates import pre_gate

        return pre_gate(row["question"], self.retrievals[row["id"]], th, corpus_titles=self.corpus_titles,
                        corpus_stats=self.stats, reader=self.reader)

    def post(self, row: dict, pre, th):
        from services.scorer.gates import post_gate
        from shared.messages import GenerateResult, PostGateRequest

        key = gen_key(row["question"], [s.cfr_ref for s in pre.sections])
        g = self.gens.get(key)
        if g is None:
            return None
        memo_key = (key, repr(th))
        if memo_key not in self._post_memo:
            req = PostGateRequest(question=row["question"], retrieval=self.retrievals[row["id"]], sections=pre.sections,
                                  plain=GenerateResult.model_validate(g["plain"]),
                                  legal=GenerateResult.model_validate(g["legal"]))
            self._post_memo[memo_key] = post_gate(req, th, self.support_cache, corpus_stats=self.stats)
        return self._post_memo[memo_key]

    def run(self, th, rows: list[dict] | None = None) -> list[dict]:
        """One row per question, shaped like the harness's rows (status, refusal_reason, tier, correct, …)."""
        from services.scorer.confidence import compute_confidence

        out = []
        missing = 0
        for row in rows or self.rows:
            pre = self.pre(row, th)
            rec = {"id": row["id"], "kind": row["kind"], "title": row.get("title"), "signals": pre.signals}
            if not pre.proceed:
                not_found = pre.refusal.reason == "not_found"
                conf = compute_confidence([h.similarity for h in self.retrievals[row["id"]].hits], 0.0, th,
                                          not_found=not_found, signals=pre.signals)
                result = {"status": "refused", "refusal": pre.refusal.model_dump(), "confidence": conf.model_dump()}
            else:
                post = self.post(row, pre, th)
                if post is None:
                    missing += 1
                    continue
                result = {
                    "status": "answered" if post.passed else "refused",
                    "refusal": post.refusal.model_dump() if post.refusal else None,
                    "plain_english": post.plain_english if post.passed else None,
                    "legal": post.legal if post.passed else None,
                    "quotes": [q.model_dump() for q in post.quotes] if post.passed else [],
                    "citations": [c.model_dump() for c in post.citations] if post.passed else [],
                    "confidence": post.confidence.model_dump(),
                }
                rec["sentences"] = [s.model_dump() for s in post.sentences]
                rec["post_signals"] = post.confidence.signals
            rec["status"] = result["status"]
            rec["refusal_reason"] = (result.get("refusal") or {}).get("reason")
            rec["tier"] = result["confidence"]["tier"]
            rec["confidence"] = result["confidence"]["score"]
            rec["correct"] = M.is_correct(row["kind"], result, row.get("facts") or [], row.get("gold") or [],
                                          row.get("title"))
            if result["status"] == "answered":
                rec["fact_recall"] = M.fact_recall(row.get("facts") or [], M.answer_text(result))
                rec["quotes_verified"], rec["quotes_total"] = M.quote_counts(result["quotes"])
                rec["unsupported_figures"] = len(M.unsupported_figures(result, row["question"]))
            out.append(rec)
        if missing:
            print(f"  ({missing} questions have no cached generation for their sections: run `generate`)",
                  file=sys.stderr)
        return out


def summarise(recs: list[dict]) -> dict:
    ref = M.refusal_metrics(recs)
    answered = [r for r in recs if r["status"] == "answered"]
    qv = sum(r.get("quotes_verified") or 0 for r in answered)
    qt = sum(r.get("quotes_total") or 0 for r in answered)
    return {
        "n": len(recs),
        "not_found_refused": ref["not_found_refusal_rate"],
        "answerable_refused": ref["false_refusal_rate"],
        "reasons": ref["reasons"],
        "reasons_answerable": ref["reasons_answerable"],
        "calibration": M.calibration_table(recs),
        "correct_rate": sum(1 for r in recs if r["correct"]) / len(recs) if recs else None,
        "quote_verification": qv / qt if qt else None,
        "unsupported_figures": sum(r.get("unsupported_figures") or 0 for r in answered),
    }


# --------------------------------------------------------------------------------------------
# fitting the not_found relevance, cross-validated
# --------------------------------------------------------------------------------------------
NF_FEATURES = ("top1_similarity", "idf_coverage", "fulltext_top")


def _rule_decided(sig: dict) -> bool:
    """Questions the relevance threshold never decides: a cited section exists (never not_found), a citation or
    title the corpus lacks (not_found by rule), or a subject named by a rare heading word (backed)."""
    return bool(sig.get("cited_exists") or sig.get("cited_missing") or sig.get("unsupported_titles")
                or sig.get("specific_subject"))


def fit_relevance(X, y, C: float = 1.0) -> dict:
    """Logistic regression of not_found on the features, as relevance weights relative to top-1 cosine."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    mu, sd = X.mean(0), X.std(0) + 1e-9
    m = LogisticRegression(C=C, max_iter=2000, class_weight="balanced").fit((X - mu) / sd, y)
    coef = -m.coef_[0] / sd  # towards "relevant"
    w = coef / coef[0]
    return {"coverage_weight": float(w[1]), "agreement_bonus": float(w[2])}


def relevance_of(sig: dict, th) -> float:
    return sig["relevance"] if th is None else (
        sig["top1_similarity"] + th.coverage_weight * (sig["idf_coverage"] - th.coverage_center)
        + th.agreement_bonus * sig["fulltext_top"])


def choose_threshold(sigs: list[dict], labels: list[int], th, max_false: float, grid) -> float:
    """The highest-recall threshold whose share of answerable questions refused as not_found stays within
    ``max_false`` (refusals by rule count too)."""
    n_ans = sum(1 for l in labels if not l) or 1
    best = grid[0]
    best_key = None
    for t in grid:
        fp = tp = 0
        for s, l in zip(sigs, labels):
            nf = bool(s.get("cited_missing") or s.get("unsupported_titles")) and not s.get("cited_exists")
            if not nf and not _rule_decided(s):
                nf = s["top1_similarity"] < 0.15 or relevance_of(s, th) < t
            fp += nf and not l
            tp += nf and l
        if fp / n_ans <= max_false + 1e-9:
            key = (tp, -t)
            if best_key is None or key > best_key:
                best, best_key = t, key
    return best


def cross_validate(bench: Bench, th, folds: int, seed: int, max_false: float) -> dict:
    """k-fold: on k-1 folds fit the relevance weights (logistic, rounded to 0.05) and pick the threshold (grid of
    0.01); refuse/answer the held-out fold with them. Returns the out-of-fold numbers and each fold's choice."""
    import numpy as np

    rows = bench.rows
    sigs = {r["id"]: bench.pre(r, th).signals for r in rows}
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    # stratified by kind: deal each kind's questions round-robin into the folds
    fold_of = {}
    by_kind = defaultdict(list)
    for i in order:
        by_kind[rows[i]["kind"]].append(rows[i]["id"])
    for kind, ids in by_kind.items():
        for j, qid in enumerate(ids):
            fold_of[qid] = j % folds
    grid = [round(0.30 + 0.01 * i, 2) for i in range(41)]
    chosen = []
    oof = {}
    for k in range(folds):
        train = [r for r in rows if fold_of[r["id"]] != k]
        test = [r for r in rows if fold_of[r["id"]] == k]
        fit_rows = [r for r in train if not _rule_decided(sigs[r["id"]])]
        X = np.array([[sigs[r["id"]][f] for f in NF_FEATURES] for r in fit_rows], float)
        y = np.array([r["kind"] == "not_found" for r in fit_rows], int)
        w = fit_relevance(X, y)
        th_k = th.replace(coverage_weight=round(w["coverage_weight"] * 20) / 20,
                          agreement_bonus=round(w["agreement_bonus"] * 20) / 20)
        t = choose_threshold([sigs[r["id"]] for r in train], [int(r["kind"] == "not_found") for r in train],
                             th_k, max_false, grid)
        th_k = th_k.replace(not_found_min_similarity=t)
        chosen.append({"fold": k, "coverage_weight": th_k.coverage_weight, "agreement_bonus": th_k.agreement_bonus,
                       "not_found_min_similarity": t})
        for rec in bench.run(th_k, test):
            oof[rec["id"]] = rec
    recs = [oof[r["id"]] for r in rows if r["id"] in oof]
    return {"folds": chosen, "summary": summarise(recs)}


def _tier(score: float, high: float, medium: float) -> str:
    return "high" if score >= high - 1e-12 else "medium" if score >= medium - 1e-12 else "low"


def choose_tiers(recs: list[dict], grid=None, min_share: float = 0.1) -> tuple[float, float]:
    """Tier cut-offs (multiples of 0.05) that order the answered questions by how often they are right: high >
    medium > low, maximising the smaller of the two gaps, each tier holding at least ``min_share`` of them."""
    grid = grid or [round(0.05 * i, 2) for i in range(4, 20)]
    answered = [r for r in recs if r["status"] == "answered"]
    best, best_gap = (grid[-1], grid[0]), -1.0
    for high in grid:
        for medium in [g for g in grid if g < high]:
            groups = defaultdict(list)
            for r in answered:
                groups[_tier(r["confidence"], high, medium)].append(bool(r["correct"]))
            if any(len(groups[t]) < min_share * len(answered) for t in ("high", "medium", "low")):
                continue
            acc = {t: sum(v) / len(v) for t, v in groups.items()}
            gap = min(acc["high"] - acc["medium"], acc["medium"] - acc["low"])
            if gap > best_gap:
                best, best_gap = (high, medium), gap
    return best


def cross_validate_tiers(recs: list[dict], rows: list[dict], folds: int, seed: int) -> dict:
    """k-fold: tier cut-offs chosen on k-1 folds, applied to the held-out fold's confidence scores."""
    order = [r["id"] for r in rows]
    random.Random(seed + 1).shuffle(order)
    fold_of = {qid: i % folds for i, qid in enumerate(order)}
    out, chosen = [], []
    for k in range(folds):
        high, medium = choose_tiers([r for r in recs if fold_of[r["id"]] != k])
        chosen.append({"fold": k, "tier_high": high, "tier_medium": medium})
        for r in recs:
            if fold_of[r["id"]] == k:
                out.append({**r, "tier": r["tier"] if r["tier"] == "not_found" else _tier(r["confidence"], high, medium)})
    return {"folds": chosen, "calibration": M.calibration_table(out)}


def support_agreement(recs: list[dict]) -> dict:
    """How the per-sentence "unsupported" flag lines up with the evaluation's verdict on answered questions."""
    table = {"flagged": {"correct": 0, "incorrect": 0}, "not_flagged": {"correct": 0, "incorrect": 0}}
    sentences = {"correct": [0, 0], "incorrect": [0, 0]}  # [unsupported, all]
    for r in recs:
        if r["status"] != "answered" or r["kind"] == "not_found":
            continue
        verdict = "correct" if r["correct"] else "incorrect"
        flagged = any(not s["supported"] for s in r.get("sentences", []))
        table["flagged" if flagged else "not_flagged"][verdict] += 1
        sentences[verdict][0] += sum(1 for s in r.get("sentences", []) if not s["supported"])
        sentences[verdict][1] += len(r.get("sentences", []))
    return {"answers": table, "sentences_unsupported_of_all": sentences}


def _print_summary(title: str, s: dict) -> None:
    print(f"\n== {title}")
    print(f"not_found refused as not_found: {s['not_found_refused']:.1%}   answerable refused: "
          f"{s['answerable_refused']:.1%}   correct: {s['correct_rate']:.1%}")
    print(f"reasons (answerable): {s['reasons_answerable']}   all: {s['reasons']}")
    print("calibration: " + ", ".join(f"{t} n={v['n']} correct={v['correct_share']:.2f}"
                                      for t, v in sorted(s["calibration"].items())))
    print(f"quotes verified: {s['quote_verification']}   unsupported figures: {s['unsupported_figures']}")


def evaluate(rows: list[dict], cache: Path, *, folds: int = 5, seed: int = 7, max_false: float = 0.03,
             use_reader: bool = True) -> dict:
    from services.scorer.confidence import ScorerThresholds

    bench = Bench(rows, cache, use_reader)
    th = ScorerThresholds()
    t0 = time.perf_counter()
    recs = bench.run(th)
    bench.save_vectors()
    in_sample = summarise(recs)
    _print_summary(f"in-sample, shipped defaults ({time.perf_counter() - t0:.0f} s)", in_sample)
    cv = cross_validate(bench, th, folds, seed, max_false)
    _print_summary(f"{folds}-fold cross-validated not_found relevance (weights+threshold refit per fold)",
                   cv["summary"])
    print("per-fold choices:", cv["folds"])
    tiers = cross_validate_tiers(recs, rows, folds, seed)
    print("tiers chosen per fold:", tiers["folds"])
    print("cross-validated calibration: " + ", ".join(f"{t} n={v['n']} correct={v['correct_share']:.2f}"
                                                      for t, v in sorted(tiers["calibration"].items())))
    agreement = support_agreement(recs)
    print("claim support vs evaluation:", agreement)
    return {"defaults": th.as_dict(), "in_sample": in_sample, "cross_validated": cv, "tiers_cv": tiers,
            "support_agreement": agreement,
            "rows": [{k: v for k, v in r.items() if k not in ("sentences",)} for r in recs]}


# --------------------------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eval.calibrate", description=__doc__.split("\n\n")[0])
    ap.add_argument("step", choices=["collect", "generate", "evaluate", "all"])
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--dataset", type=Path, default=DATASET)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", type=Path, default=None, help="write the evaluation report here")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--no-reader", dest="reader", action="store_false",
                    help="evaluate the rule-based gates alone (production also asks the answer reader)")
    args = ap.parse_args(argv)
    rows = load_dataset(args.dataset)[: args.limit]
    args.cache.mkdir(parents=True, exist_ok=True)
    if args.step in ("collect", "all"):
        asyncio.run(_collect(rows, args.cache / "retrievals.json"))
    if args.step in ("generate", "all"):
        from services.scorer.confidence import ScorerThresholds

        print(f"generated {asyncio.run(_generate(rows, args.cache, ScorerThresholds()))} new answers", file=sys.stderr)
    if args.step in ("evaluate", "all"):
        report = evaluate(rows, args.cache, folds=args.folds, seed=args.seed, use_reader=args.reader)
        if args.json:
            args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
