"""The metric audit: adversarial sanity checks of eval/metrics.py, written before any tuning.

Cases where the right score is obvious (or computable by hand) and the three known metric bugs:
sub-paragraph false negatives, text-mention false positives and duplicate-section NDCG inflation.
"""
from __future__ import annotations

import math

import pytest

from eval import metrics as m


def H(ref, rank, text="", **kw):
    """A search hit as the gateway returns it."""
    return {"cfr_ref": ref, "rank": rank, "text": text, "heading": "", "score": 1.0 / rank, **kw}


# ------------------------------------------------------------------ normalize_ref
@pytest.mark.parametrize(
    "raw, default, want",
    [
        ("21 C.F.R. § 101.9(c)(1)", None, "21 CFR 101.9"),
        ("21 CFR 101.9", None, "21 CFR 101.9"),
        ("21 cfr §101.9", None, "21 CFR 101.9"),
        ("§ 205.301(a)(1)", 7, "7 CFR 205.301"),
        ("§ 211.113", 21, "21 CFR 211.113"),
        ("section 110.80 of title 21", None, "21 CFR 110.80"),
        ("7 CFR 1b.4", None, "7 CFR 1b.4"),
        ("42 CFR § 406.13", None, "42 CFR 406.13"),
        ("21 CFR 610.11a", None, "21 CFR 610.11a"),
        ("101.9", None, "101.9"),
        ("21 CFR part 1301", None, ""),  # a part is not a section
        ("", None, ""),
        (None, 21, ""),
    ],
)
def test_normalize_ref(raw, default, want):
    assert m.normalize_ref(raw, default) == want


def test_hit_ref_uses_metadata_only():
    assert m.hit_ref({"cfr_ref": "21 CFR 133.150", "text": "see § 135.110"}) == "21 CFR 133.150"
    # no cfr_ref: title + section fields
    assert m.hit_ref({"title": 21, "section": "133.150", "text": "21 CFR 135.110"}) == "21 CFR 133.150"
    # nothing but text: not a reference at all
    assert m.hit_ref({"text": "21 CFR 135.110 applies"}) == ""


# ------------------------------------------------------------------ perfect ranking
def test_perfect_ranking_scores_one_everywhere():
    gold = ["21 CFR 101.9", "21 CFR 101.4", "21 CFR 101.22"]
    hits = [H("21 CFR 101.9", 1), H("21 CFR 101.4", 2), H("21 CFR 101.22", 3)]
    s = m.retrieval_scores(hits, gold, k=3)
    assert s == {"precision@3": 1.0, "recall@3": 1.0, "mrr@3": 1.0, "ndcg@3": 1.0, "hit@1": 1.0}


def test_perfect_ranking_with_larger_k():
    gold = ["21 CFR 133.142"]
    hits = [H("21 CFR 133.142", 1)] + [H(f"21 CFR 133.{100 + i}", i + 2) for i in range(9)]
    s = m.retrieval_scores(hits, gold, k=10)
    assert s["recall@10"] == 1.0 and s["mrr@10"] == 1.0 and s["ndcg@10"] == 1.0 and s["hit@1"] == 1.0
    # precision@k is bounded by |gold|/k: one gold section in ten slots
    assert s["precision@10"] == pytest.approx(0.1)


# ------------------------------------------------------------------ reversed ranking, computed by hand
def test_reversed_ranking_matches_the_formulas():
    gold = ["21 CFR 1.1", "21 CFR 1.2"]
    ranked = ["21 CFR 1.5", "21 CFR 1.4", "21 CFR 1.3", "21 CFR 1.2", "21 CFR 1.1"]  # gold at ranks 4 and 5
    k = 5
    assert m.precision_at_k(ranked, gold, k) == pytest.approx(2 / 5)
    assert m.recall_at_k(ranked, gold, k) == pytest.approx(1.0)
    assert m.mrr_at_k(ranked, gold, k) == pytest.approx(1 / 4)
    assert m.hit_at_1(ranked, gold) == 0.0
    dcg = 1 / math.log2(4 + 1) + 1 / math.log2(5 + 1)  # ranks 4 and 5
    idcg = 1 / math.log2(1 + 1) + 1 / math.log2(2 + 1)  # min(k, |gold|) = 2 ideal hits
    assert m.ndcg_at_k(ranked, gold, k) == pytest.approx(dcg / idcg)
    assert m.ndcg_at_k(ranked, gold, k) == pytest.approx(0.50127, abs=1e-4)
    # at k=3 nothing relevant is in the cut
    assert m.precision_at_k(ranked, gold, 3) == 0.0
    assert m.recall_at_k(ranked, gold, 3) == 0.0
    assert m.mrr_at_k(ranked, gold, 3) == 0.0
    assert m.ndcg_at_k(ranked, gold, 3) == 0.0


def test_ideal_dcg_uses_min_of_k_and_gold():
    gold = ["21 CFR 1.1", "21 CFR 1.2", "21 CFR 1.3"]
    ranked = ["21 CFR 1.1", "21 CFR 9.9"]
    # k=1: one slot, ideal DCG = 1, we got the gold section first
    assert m.ndcg_at_k(ranked, gold, 1) == pytest.approx(1.0)
    # k=2: ideal = 1 + 1/log2(3)
    assert m.ndcg_at_k(ranked, gold, 2) == pytest.approx(1 / (1 + 1 / math.log2(3)))


# ------------------------------------------------------------------ the three audit bugs
def test_subparagraph_gold_matches_base_section_hit():
    gold = ["§ 205.301(a)(1)"]
    hits = [H("7 CFR 205.301", 1)]
    s = m.retrieval_scores(hits, gold, k=10, default_title=7)
    assert s["hit@1"] == 1.0 and s["mrr@10"] == 1.0 and s["recall@10"] == 1.0


def test_text_mention_is_not_a_hit():
    gold = ["21 CFR 135.110"]
    hits = [
        H("21 CFR 135.115", 1, text="... as defined in § 135.110 ... see 21 CFR 135.110 for definitions"),
        H("21 CFR 135.140", 2, text="conforms to § 135.110(a)"),
    ]
    s = m.retrieval_scores(hits, gold, k=10)
    assert s == {"precision@10": 0.0, "recall@10": 0.0, "mrr@10": 0.0, "ndcg@10": 0.0, "hit@1": 0.0}


def test_duplicate_hits_of_one_section_cannot_push_ndcg_above_one():
    gold = ["21 CFR 133.150"]
    hits = [H("21 CFR 133.150", 1), H("21 CFR 133.150", 2), H("21 CFR 133.150(b)", 3), H("21 CFR 133.150", 4)]
    s = m.retrieval_scores(hits, gold, k=4)
    assert s["ndcg@4"] == pytest.approx(1.0)
    assert s["precision@4"] == pytest.approx(1 / 4)  # one distinct relevant section, not four
    assert s["recall@4"] == pytest.approx(1.0)
    # duplicates ahead of a second gold section do not displace it in rank either
    gold2 = ["21 CFR 133.150", "21 CFR 133.113"]
    hits2 = [H("21 CFR 133.150", 1), H("21 CFR 133.150", 2), H("21 CFR 133.113", 3)]
    assert m.ndcg_at_k(m.ranked_refs(hits2), gold2, 2) == pytest.approx(1.0)
    assert all(m.ndcg_at_k(m.ranked_refs(hits), gold, k) <= 1.0 + 1e-12 for k in range(1, 6))


def test_hits_are_ordered_by_rank_field():
    hits = [H("21 CFR 1.2", 2), H("21 CFR 1.1", 1)]
    assert m.ranked_refs(hits) == ["21 CFR 1.1", "21 CFR 1.2"]


# ------------------------------------------------------------------ empty / not_found
def test_empty_results_score_zero_not_error():
    s = m.retrieval_scores([], ["21 CFR 101.9"], k=10)
    assert s == {"precision@10": 0.0, "recall@10": 0.0, "mrr@10": 0.0, "ndcg@10": 0.0, "hit@1": 0.0}
    assert m.retrieval_scores(None, ["21 CFR 101.9"], k=10)["ndcg@10"] == 0.0
    assert m.fact_recall(["36 percent"], "") == 0.0
    assert m.citation_accuracy([], ["21 CFR 101.9"]) is None
    assert m.quote_verification_rate([]) is None
    agg = m.aggregate([])
    assert agg["n"] == 0 and agg["retrieval"] == {}


def test_not_found_questions_have_no_retrieval_score():
    assert m.retrieval_scores([H("21 CFR 101.9", 1)], [], k=10) is None


def _row(qid, kind, metrics, status, reason=None, correct=None, tier=None):
    return {"id": qid, "kind": kind, "title": 21, "metrics": metrics, "status": status,
            "refusal_reason": reason, "correct": correct, "tier": tier}


def test_not_found_excluded_from_retrieval_averages_and_counted_in_refusals():
    perfect = {"hit@1": 1.0, "ndcg@10": 1.0}
    rows = [
        _row("a", "fact", perfect, "answered", correct=True, tier="high"),
        _row("b", "fact", {"hit@1": 0.0, "ndcg@10": 0.0}, "refused", "below_authority", False, "low"),
        _row("c", "not_found", None, "refused", "not_found", True, "not_found"),
        _row("d", "not_found", None, "answered", None, False, "medium"),
    ]
    agg = m.aggregate(rows)
    assert agg["retrieval_n"] == 2
    assert agg["retrieval"]["hit@1"] == pytest.approx(0.5)  # not 0.25: not_found rows are not zeros
    ref = agg["refusals"]
    assert ref["not_found_n"] == 2 and ref["not_found_refusal_rate"] == pytest.approx(0.5)
    assert ref["answerable_n"] == 2 and ref["false_refusal_rate"] == pytest.approx(0.5)
    assert ref["reasons"] == {"below_authority": 1, "not_found": 1}
    cal = agg["calibration"]
    assert cal["high"] == {"n": 1, "correct_share": 1.0}
    assert cal["low"] == {"n": 1, "correct_share": 0.0}
    assert cal["not_found"] == {"n": 1, "correct_share": 1.0}


def test_refusal_for_wrong_reason_is_not_a_not_found_success():
    rows = [_row("c", "not_found", None, "refused", "provider_unavailable")]
    r = m.refusal_metrics(rows)
    assert r["not_found_refusal_rate"] == 0.0 and r["not_found_any_refusal_rate"] == 1.0


def test_transport_errors_leave_refusal_denominators():
    rows = [_row("a", "fact", None, None), _row("b", "fact", None, "answered")]
    rows[0]["query_error"] = "HTTP 500"
    r = m.refusal_metrics(rows)
    assert r["answerable_n"] == 1 and r["false_refusal_rate"] == 0.0 and r["errors"] == 1


# ------------------------------------------------------------------ answers
RESULT = {
    "status": "answered",
    "plain_english": "Heavy cream must have at least 36 percent milkfat; it can be sold in 2 sizes.",
    "legal": "Under 21 CFR 131.150(a), heavy cream “contains not less than 36 percent milkfat.”",
    "quotes": [
        {"text": "Heavy cream is cream which contains not less than 36 percent milkfat.", "cfr_ref": "21 CFR 131.150",
         "verified": True},
        {"text": "made up words", "cfr_ref": "21 CFR 131.155", "verified": False},
    ],
    "citations": [
        {"cfr_ref": "21 CFR 131.150", "title": 21, "part": "131", "section": "131.150", "paragraph": "(a)"},
        {"cfr_ref": "21 CFR 131.150", "title": 21, "part": "131", "section": "131.150", "paragraph": "(b)"},
        {"cfr_ref": "21 CFR 131.155", "title": 21, "part": "131", "section": "131.155"},
    ],
    "refusal": None,
    "model": {"requested": "x/y", "answered": "extractive/regs-extractive-1.0",
              "calls": [{"step": "plain", "tokens_in": 100, "tokens_out": 20},
                        {"step": "legal", "tokens_in": 150, "tokens_out": 30}]},
}


def test_fact_recall_normalises_whitespace_case_and_quotes():
    text = m.answer_text(RESULT)
    assert m.fact_recall(["not less than 36 percent milkfat"], text) == 1.0
    assert m.fact_recall(["NOT  less than\n36 percent MILKFAT", "18 percent"], text) == 0.5
    assert m.fact_recall([], text) is None


def test_quote_verification_and_citation_accuracy():
    assert m.quote_verification_rate(RESULT["quotes"]) == 0.5
    # two distinct sections cited (131.150 twice counts once), one of them gold
    assert m.citation_accuracy(RESULT["citations"], ["21 CFR 131.150"]) == 0.5
    assert m.citation_accuracy(RESULT["citations"], ["21 CFR 131.150(a)", "21 CFR 131.155"]) == 1.0


def test_unsupported_figures_ignore_citations_and_count_unquoted_numbers():
    assert m.figures("see 21 CFR 131.150(a) and § 133.5") == []
    # "36" is in a quote; "2" (sizes) is in no quote
    assert m.unsupported_figures(RESULT) == ["2"]
    assert m.unsupported_figures(RESULT, question="can I sell 2 sizes?") == []


def test_is_correct():
    facts, gold = ["not less than 36 percent milkfat"], ["21 CFR 131.150"]
    assert m.is_correct("sibling", RESULT, facts, gold) is True
    assert m.is_correct("sibling", RESULT, ["18 percent"], gold) is False  # fact recall < 0.5
    assert m.is_correct("sibling", RESULT, facts, ["21 CFR 131.160"]) is False  # no gold section cited
    refused = {"status": "refused", "refusal": {"reason": "not_found", "message": "."}}
    assert m.is_correct("not_found", refused, [], []) is True
    assert m.is_correct("not_found", RESULT, [], []) is False
    assert m.is_correct("fact", refused, facts, gold) is False
    assert m.is_correct("fact", None, facts, gold) is None


# ------------------------------------------------------------------ operations
def test_percentiles_and_latency_table():
    assert m.percentile([], 50) is None
    assert m.percentile([5], 95) == 5
    assert m.percentile([1, 2, 3, 4], 50) == pytest.approx(2.5)
    assert m.percentile(list(range(1, 101)), 95) == pytest.approx(95.05)
    table = m.latency_table([{"retrieve": 10, "total": 100}, {"retrieve": 30, "total": 300}, None])
    assert table["retrieve"] == {"n": 2, "p50": 20.0, "p95": pytest.approx(29.0)}
    assert table["total"]["n"] == 2


def test_tokens_and_model_distribution():
    assert m.token_usage(RESULT["model"]) == (250, 50)
    assert m.token_usage(None) == (0, 0)
    rows = [{"status": "answered", "answered_model": "a"}, {"status": "refused", "answered_model": None},
            {"status": "answered", "answered_model": "a"}, {"status": None, "answered_model": None}]
    assert m.model_distribution(rows) == {"None": 1, "a": 2}
