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


def test_not_found_decided_by_the_model_is_counted_apart():
    rows = [
        {"kind": "not_found", "status": "refused", "refusal_reason": "not_found", "answered_model": None},
        {"kind": "not_found", "status": "refused", "refusal_reason": "not_found",
         "answered_model": "anthropic/claude-haiku-4-5-20251001"},
        {"kind": "fact", "status": "refused", "refusal_reason": "not_found",
         "answered_model": "anthropic/claude-haiku-4-5-20251001"},
        {"kind": "fact", "status": "refused", "refusal_reason": "unsupported_figure",
         "answered_model": "anthropic/claude-haiku-4-5-20251001"},
        {"kind": "fact", "status": "answered", "refusal_reason": None, "answered_model": "extractive/x"},
    ]
    out = m.refusal_metrics(rows)
    assert out["not_found_by_model"] == {"not_found": 1, "answerable": 1}
    assert out["not_found_refusal_rate"] == 1.0 and out["false_refusal_rate"] == 2 / 3


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


# ==================================================================================================
# the harness, against a tiny fake gateway (a real HTTP server on 127.0.0.1 serving canned JSON)
# ==================================================================================================
import json  # noqa: E402
import socket  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

from eval import harness  # noqa: E402

Q_FACT = "How much milkfat does heavy cream need?"
Q_MULTI = "Heavy cream versus light cream?"
Q_NF = "What is the OSHA noise limit?"
Q_CITE = "What does 21 CFR 131.155(a) say?"

DATASET_ROWS = [
    {"id": "t1", "question": Q_FACT, "gold": ["21 CFR 131.150"], "facts": ["not less than 36 percent milkfat"],
     "answer": "36%", "kind": "fact", "title": 21},
    {"id": "t2", "question": Q_MULTI, "gold": ["21 CFR 131.150", "21 CFR 131.155"],
     "facts": ["not less than 36 percent milkfat"], "answer": "...", "kind": "multi", "title": 21},
    {"id": "t3", "question": Q_NF, "gold": [], "facts": [], "answer": "not in corpus", "kind": "not_found",
     "title": None},
    {"id": "t4", "question": Q_CITE, "gold": ["21 CFR 131.155"], "facts": ["less than 30 percent"],
     "answer": "...", "kind": "citation", "title": 21},
]


def _hit(ref, rank, text=""):
    title, _, section = ref.split(" ", 2)
    section = section.replace("CFR ", "")
    return {"cfr_ref": ref, "title": int(title), "part": section.split(".")[0], "section": section, "heading": "h",
            "score": 1.0 / rank, "similarity": 0.5, "rank": rank, "text": text}


def _answer(status="answered", reason=None, tier="high", cites=("21 CFR 131.150",), text="", model="fake/m1"):
    return {
        "id": "x", "status": status, "question": "q",
        "plain_english": text if status == "answered" else None,
        "legal": "See 21 CFR 131.150." if status == "answered" else None,
        "quotes": ([{"text": "Heavy cream is cream which contains not less than 36 percent milkfat.",
                     "cfr_ref": "21 CFR 131.150", "paragraph": "(a)", "verified": True}] if status == "answered" else []),
        "citations": [{"cfr_ref": c, "title": 21, "part": "131", "section": c.split()[-1]} for c in cites],
        "confidence": {"score": 0.8, "tier": tier, "retrieval_score": 0.7, "citation_coverage": 1.0},
        "refusal": ({"reason": reason, "message": "No.", "evidence": []} if status == "refused" else None),
        "model": {"requested": "fake/m1", "answered": model if status == "answered" else None, "fallback_reason": None,
                  "calls": [{"step": "plain", "provider": "fake", "model": "m1", "tokens_in": 100, "tokens_out": 10,
                             "ms": 5.0}]},
        "retrieved": [], "timings_ms": {"retrieve": 12.0, "generate": 40.0, "total": 60.0},
    }


def make_app(variant: str, calls: dict):
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    app = FastAPI()

    @app.get("/healthz")
    def healthz():
        return {"status": "ok", "variant": variant}

    @app.get("/v1/corpus")
    def corpus():
        return {"titles": [7, 21, 42], "sections": 3815, "embedding_model": "fake"}

    @app.post("/v1/search")
    def search(body: dict):
        calls.setdefault("search", []).append(body)
        q = body["question"]
        if q == Q_MULTI:
            return JSONResponse({"detail": "boom"}, status_code=500)
        if q == Q_FACT:
            if variant == "a":
                # rank 1 merely MENTIONS the gold section in its text; the gold section is at rank 2
                hits = [_hit("21 CFR 131.155", 1, text="see § 131.150 and 21 CFR 131.150"), _hit("21 CFR 131.150", 2)]
            else:
                hits = [_hit("21 CFR 131.150", 1), _hit("21 CFR 131.150", 2), _hit("21 CFR 131.155", 3)]
        elif q == Q_CITE:
            hits = [_hit("21 CFR 131.155", 1)]
        else:
            hits = [_hit("21 CFR 1.1", 1)]
        return {"scope": {"notes": [f"variant {variant}"]}, "results": hits}

    @app.post("/v1/query")
    def query(body: dict):
        calls.setdefault("query", []).append(body)
        q = body["question"]
        if q == Q_FACT:
            return _answer(text="Heavy cream needs not less than 36 percent milkfat and comes in 3 sizes.")
        if q == Q_NF:
            return _answer(status="refused", reason="not_found", tier="not_found", cites=())
        if q == Q_CITE:
            if variant == "a":
                return _answer(status="refused", reason="below_authority", tier="low", cites=())
            return _answer(text="Light cream has not less than 18 percent but less than 30 percent milkfat.",
                           cites=("21 CFR 131.155",), tier="medium")
        return _answer(text="...")

    return app


class FakeGateway:
    def __init__(self, variant: str):
        import uvicorn

        self.calls: dict = {}
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        sock.close()
        self.server = uvicorn.Server(
            uvicorn.Config(make_app(variant, self.calls), host="127.0.0.1", port=self.port, log_level="warning")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self):
        self.thread.start()
        deadline = time.time() + 20
        while not self.server.started:
            assert time.time() < deadline, "fake gateway did not start"
            time.sleep(0.05)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture
def tiny_setup(tmp_path):
    ds = tmp_path / "ds.jsonl"
    ds.write_text("\n".join(json.dumps(r) for r in DATASET_ROWS) + "\n")

    def cfg(name="tiny", answers=True, **kw):
        p = tmp_path / f"{name}.yaml"
        body = {"name": name, "mode": "hybrid", "top_k": 5, "scoping": True, "answers": answers,
                "dataset": str(ds), "concurrency": 2, **kw}
        p.write_text(json.dumps(body))  # JSON is YAML
        return p

    return tmp_path, cfg


def _only_result(out_dir):
    files = sorted(out_dir.glob("*.json"))
    assert len(files) == 1, files
    return files[0], json.loads(files[0].read_text())


def test_harness_computes_metrics_from_the_gateway_and_writes_the_result(tiny_setup, capsys):
    tmp, cfg = tiny_setup
    out = tmp / "results"
    with FakeGateway("a") as gw:
        rc = harness.main(["--config", str(cfg()), "--gateway", gw.url, "--out", str(out), "--quiet"])
        calls = gw.calls
    assert rc == 0
    path, res = _only_result(out)
    assert path.name.startswith("tiny-") and path.name.endswith("Z.json")
    assert res["config"]["top_k"] == 5 and res["config"]["mode"] == "hybrid"
    assert "git_commit" in res
    assert res["versions"]["healthz"]["variant"] == "a"
    assert res["versions"]["corpus"]["sections"] == 3815
    # the gateway saw exactly what the config asked for
    assert {tuple(sorted(b)) for b in calls["search"]} == {("mode", "question", "scoping", "top_k")}
    assert all(b["top_k"] == 5 and b["mode"] == "hybrid" and b["scoping"] is True for b in calls["search"])
    assert all(set(b) == {"question", "top_k", "mode"} for b in calls["query"])
    assert len(calls["search"]) == 4 and len(calls["query"]) == 4

    rows = {r["id"]: r for r in res["rows"]}
    fact = rows["t1"]
    # the text-mention decoy at rank 1 is not a hit: gold is at rank 2
    assert fact["retrieved"] == ["21 CFR 131.155", "21 CFR 131.150"]
    assert fact["ranks"] == {"21 CFR 131.150": 2}
    assert fact["metrics"]["hit@1"] == 0.0 and fact["metrics"]["mrr@5"] == pytest.approx(0.5)
    assert fact["metrics"]["ndcg@5"] == pytest.approx(1 / math.log2(3))
    assert fact["status"] == "answered" and fact["fact_recall"] == 1.0 and fact["citation_accuracy"] == 1.0
    assert fact["quotes_verified"] == 1 and fact["quotes_total"] == 1
    assert fact["unsupported_figure_values"] == ["3"]
    assert fact["correct"] is True and fact["tier"] == "high" and fact["answered_model"] == "fake/m1"
    assert fact["tokens_in"] == 100 and fact["timings_ms"]["total"] == 60.0
    # HTTP 500 on search is recorded per question and the run continues
    assert rows["t2"]["search_error"].startswith("HTTP 500") and rows["t2"]["metrics"] is None
    assert rows["t2"]["status"] == "answered"
    # not_found: searched and recorded, but no retrieval metrics
    assert rows["t3"]["retrieved"] == ["21 CFR 1.1"] and rows["t3"]["metrics"] is None
    assert rows["t3"]["refusal_reason"] == "not_found" and rows["t3"]["correct"] is True
    assert rows["t4"]["status"] == "refused" and rows["t4"]["correct"] is False

    agg = res["aggregates"]
    overall = agg["overall"]
    assert overall["retrieval_n"] == 2  # t1 and t4: t2 errored, t3 is not_found
    assert overall["retrieval"]["hit@1"] == pytest.approx(0.5)
    assert overall["retrieval"]["mrr@5"] == pytest.approx(0.75)
    assert overall["search_errors"] == 1
    assert overall["refusals"]["not_found_refusal_rate"] == 1.0
    assert overall["refusals"]["false_refusal_rate"] == pytest.approx(1 / 3)
    assert overall["refusals"]["reasons"] == {"below_authority": 1, "not_found": 1}
    assert overall["calibration"]["not_found"] == {"n": 1, "correct_share": 1.0}
    assert overall["models"] == {"None": 2, "fake/m1": 2}
    assert overall["latency_ms"]["total"]["p50"] == 60.0
    assert set(overall["latency_client_ms"]) == {"search", "query"}
    assert set(agg["by_kind"]) == {"fact", "multi", "not_found", "citation"}
    assert agg["by_kind"]["fact"]["retrieval"]["mrr@5"] == pytest.approx(0.5)
    assert agg["by_kind"]["citation"]["retrieval"]["hit@1"] == 1.0
    assert set(agg["by_title"]) == {"21", "none"}
    printed = capsys.readouterr().out
    assert "overall" in printed and "kind=fact" in printed and "title=21" in printed and "wrote" in printed


def test_harness_answers_false_skips_query_and_limit_applies(tiny_setup):
    tmp, cfg = tiny_setup
    out = tmp / "r2"
    with FakeGateway("a") as gw:
        rc = harness.main(["--config", str(cfg("ret", answers=False)), "--gateway", gw.url, "--limit", "2",
                           "--out", str(out), "--quiet"])
        calls = gw.calls
    assert rc == 0
    assert "query" not in calls and len(calls["search"]) == 2
    _, res = _only_result(out)
    assert [r["id"] for r in res["rows"]] == ["t1", "t2"]
    assert all(r["status"] is None for r in res["rows"])
    assert "answers" not in res["aggregates"]["overall"]


def test_harness_kinds_filter_and_unreachable_gateway(tiny_setup):
    tmp, cfg = tiny_setup
    out = tmp / "r3"
    rc = harness.main(["--config", str(cfg("down", kinds=["citation"])), "--gateway", "http://127.0.0.1:9",
                       "--out", str(out), "--quiet"])
    assert rc == 1  # every search failed
    _, res = _only_result(out)
    assert [r["id"] for r in res["rows"]] == ["t4"]
    assert res["rows"][0]["search_error"] and res["rows"][0]["query_error"]
    assert "error" in res["versions"]["healthz"]


def test_bad_config_is_rejected(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("mode: vector\n")
    assert harness.main(["--config", str(p)]) == 2
    p.write_text("nme: typo\n")
    assert harness.main(["--config", str(p)]) == 2


def test_shipped_configs_load():
    root = harness.REPO / "eval" / "configs"
    names = {p.stem: harness.load_config(p) for p in root.glob("*.yaml")}
    assert {"hybrid", "dense", "fulltext", "hybrid-noscope", "hybrid-k6", "hybrid-k20"} <= set(names)
    assert names["hybrid"]["answers"] is True and names["hybrid"]["top_k"] == 10 and names["hybrid"]["scoping"]
    assert names["dense"]["mode"] == "dense" and names["fulltext"]["mode"] == "fulltext"
    assert names["hybrid-noscope"]["scoping"] is False
    assert names["hybrid-k6"]["top_k"] == 6 and names["hybrid-k20"]["top_k"] == 20
    assert all(c["name"] == n for n, c in names.items())


def test_diff_reports_metric_changes_and_flips(tiny_setup, capsys):
    tmp, cfg = tiny_setup
    out_a, out_b = tmp / "a", tmp / "b"
    with FakeGateway("a") as gw:
        assert harness.main(["--config", str(cfg("runa")), "--gateway", gw.url, "--out", str(out_a), "--quiet"]) == 0
    with FakeGateway("b") as gw:
        assert harness.main(["--config", str(cfg("runb")), "--gateway", gw.url, "--out", str(out_b), "--quiet"]) == 0
    pa, _ = _only_result(out_a)
    pb, _ = _only_result(out_b)
    capsys.readouterr()
    assert harness.main(["diff", str(pa), str(pb)]) == 0
    text = capsys.readouterr().out
    assert "overall.retrieval.hit@1: 0.500 -> 1.000 (+0.500)" in text
    assert "hit@1 flips: 1" in text and "t1 [fact] 0.000 -> 1.000" in text
    assert "refused flips: 1" in text and "t4 [citation] True -> False" in text
    assert "correct flips: 1" in text and "t4 [citation] False -> True" in text


def test_a_figure_from_a_cited_sections_heading_is_supported_but_not_one_from_elsewhere():
    result = {"plain_english": "Under 42 CFR 408.24 (enrolled before April 1, 1981) the penalty is 10 percent.",
              "legal": "", "quotes": [{"text": "increased by 10 percent"}],
              "citations": [{"cfr_ref": "42 CFR 408.24", "heading": "Individuals who enrolled before April 1, 1981"}]}
    assert m.unsupported_figures(result) == []
    result["plain_english"] += " The window is 7 months."
    assert m.unsupported_figures(result) == ["7"]
