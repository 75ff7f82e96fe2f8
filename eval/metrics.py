"""Evaluation metrics as pure functions (no I/O, no network).

Retrieval is scored at the SECTION level with binary relevance. Relevance is decided only from a hit's citation
metadata (``cfr_ref``, or ``title`` + ``section``) — never from its text — because regulatory text is full of
cross-references ("see § 135.110") that would otherwise credit every section that merely mentions the gold one.

Three metric bugs this module guards against (see tests/test_eval_metrics.py, the audit):
1. sub-paragraph false negatives: gold "§ 205.301(a)(1)" must match a hit for section 205.301 (``normalize_ref``);
2. text false positives: a hit whose text mentions the gold section is not a hit (``hit_ref`` ignores text);
3. duplicate-section inflation: hits are deduplicated by section before scoring, so NDCG can never exceed 1.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any, Iterable, Mapping, Sequence

# --------------------------------------------------------------------------------------------
# references
# --------------------------------------------------------------------------------------------
_SECTION = r"(?P<sec>\d+[a-z]?\.\d+[a-z]?(?:-\d+[a-z]?(?:\.\d+[a-z]?)?)?)"
_CFR = r"C\.?\s*F\.?\s*R\.?"
_PATTERNS = [
    # "21 CFR 101.9", "21 C.F.R. § 101.9(c)(1)", "21 CFR section 101.9", "21 CFR Sec. 101.9"
    re.compile(rf"(?P<title>\d+)\s*{_CFR}\s*(?:§+|sec(?:tion)?s?\.?|part)?\s*{_SECTION}", re.I),
    # "section 110.80 of title 21", "§ 110.80 of title 21"
    re.compile(rf"(?:§+|sec(?:tion)?s?\.?)\s*{_SECTION}(?:\([^)]*\))*\s+of\s+title\s+(?P<title>\d+)", re.I),
    # "title 21, section 110.80"
    re.compile(rf"title\s+(?P<title>\d+)\s*,?\s*(?:§+|sec(?:tion)?s?\.?)?\s*{_SECTION}", re.I),
    # "§ 205.301(a)(1)", "section 110.80", or a bare "101.9"
    re.compile(rf"(?:(?:§+|sec(?:tion)?s?\.?)\s*)?{_SECTION}", re.I),
]


def normalize_ref(s: str | None, default_title: int | None = None) -> str:
    """Canonical section reference "TITLE CFR PART.SECTION"; paragraph designations are dropped.

    "21 C.F.R. § 101.9(c)(1)" -> "21 CFR 101.9"; "§ 205.301(a)(1)" with default_title=7 -> "7 CFR 205.301".
    Without any title (none written, no default) the result is just the section, e.g. "101.9".
    Returns "" when the string names no section.
    """
    if not s:
        return ""
    text = str(s).replace("\u00a0", " ").strip()
    for pattern in _PATTERNS:
        m = pattern.search(text)
        if not m:
            continue
        section = m.group("sec").lower()
        title = m.groupdict().get("title") or (str(default_title) if default_title is not None else None)
        return f"{int(title)} CFR {section}" if title else section
    return ""


def _get(obj: Any, name: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def hit_ref(hit: Any, default_title: int | None = None) -> str:
    """The section a hit (or citation) stands for, from its citation metadata ONLY (never its text)."""
    if isinstance(hit, str):
        return normalize_ref(hit, default_title)
    ref = _get(hit, "cfr_ref")
    title = _get(hit, "title")
    section = _get(hit, "section")
    if ref:
        out = normalize_ref(str(ref), title if isinstance(title, int) else default_title)
        if out:
            return out
    if section:
        t = title if title not in (None, "") else default_title
        return normalize_ref(f"{t} CFR {section}" if t is not None else str(section), default_title)
    return ""


def dedupe(refs: Iterable[str]) -> list[str]:
    """Keep the first occurrence of each section, in rank order; drop empty refs."""
    seen: set[str] = set()
    out: list[str] = []
    for r in refs:
        if r and r not in seen:
            seen.add(r)
            out.append(r)
    return out


def gold_set(gold: Iterable[str], default_title: int | None = None) -> set[str]:
    return {g for g in (normalize_ref(x, default_title) for x in gold) if g}


def ranked_refs(hits: Sequence[Any], default_title: int | None = None) -> list[str]:
    """Hits -> deduplicated section refs in rank order (sorted by ``rank`` when every hit has one)."""
    items = list(hits or [])
    if items and all(not isinstance(h, str) and isinstance(_get(h, "rank"), (int, float)) for h in items):
        items = sorted(items, key=lambda h: _get(h, "rank"))  # stable: ties keep server order
    return dedupe(hit_ref(h, default_title) for h in items)


# --------------------------------------------------------------------------------------------
# retrieval metrics (inputs: deduplicated ranked refs and a gold set)
# --------------------------------------------------------------------------------------------
def _prep(ranked: Sequence[str], gold: Iterable[str], k: int) -> tuple[list[str], set[str]]:
    if k <= 0:
        raise ValueError("k must be positive")
    return dedupe(ranked)[:k], set(gold)


def precision_at_k(ranked: Sequence[str], gold: Iterable[str], k: int) -> float:
    top, g = _prep(ranked, gold, k)
    if not g:
        return 0.0
    return sum(1 for r in top if r in g) / k


def recall_at_k(ranked: Sequence[str], gold: Iterable[str], k: int) -> float:
    top, g = _prep(ranked, gold, k)
    if not g:
        return 0.0
    return sum(1 for r in top if r in g) / len(g)


def mrr_at_k(ranked: Sequence[str], gold: Iterable[str], k: int) -> float:
    top, g = _prep(ranked, gold, k)
    for i, r in enumerate(top, 1):
        if r in g:
            return 1.0 / i
    return 0.0


def dcg(gains: Sequence[float]) -> float:
    return sum(gain / math.log2(i + 1) for i, gain in enumerate(gains, 1))


def ndcg_at_k(ranked: Sequence[str], gold: Iterable[str], k: int) -> float:
    top, g = _prep(ranked, gold, k)
    if not g:
        return 0.0
    actual = dcg([1.0 if r in g else 0.0 for r in top])
    ideal = dcg([1.0] * min(k, len(g)))
    return actual / ideal if ideal else 0.0


def hit_at_1(ranked: Sequence[str], gold: Iterable[str]) -> float:
    top, g = _prep(ranked, gold, 1)
    return 1.0 if top and top[0] in g else 0.0


def gold_ranks(ranked: Sequence[str], gold: Iterable[str]) -> dict[str, int | None]:
    """1-based rank of each gold section in the deduplicated ranking (None when absent)."""
    order = {r: i for i, r in enumerate(dedupe(ranked), 1)}
    return {g: order.get(g) for g in sorted(set(gold))}


def retrieval_scores(hits: Sequence[Any], gold: Iterable[str], k: int, default_title: int | None = None) -> dict | None:
    """All retrieval metrics of one question, or None for a question without gold (not_found)."""
    g = gold_set(gold, default_title)
    if not g:
        return None
    ranked = ranked_refs(hits, default_title)
    return {
        f"precision@{k}": precision_at_k(ranked, g, k),
        f"recall@{k}": recall_at_k(ranked, g, k),
        f"mrr@{k}": mrr_at_k(ranked, g, k),
        f"ndcg@{k}": ndcg_at_k(ranked, g, k),
        "hit@1": hit_at_1(ranked, g),
    }


# --------------------------------------------------------------------------------------------
# answers
# --------------------------------------------------------------------------------------------
_TRANS = str.maketrans(
    {
        "\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2032": "'", "\u2033": '"',
        "\u2013": "-", "\u2014": "-", "\u2012": "-", "\u2212": "-", "\u00a0": " ", "\u2009": " ", "\u202f": " ",
    }
)


def normalize_text(s: str | None) -> str:
    """Lower case, straight quotes and hyphens, single spaces."""
    if not s:
        return ""
    return re.sub(r"\s+", " ", str(s).translate(_TRANS)).strip().lower()


def answer_text(result: Mapping[str, Any]) -> str:
    """plain_english + legal + quote texts of a QueryResult, the text a fact must appear in."""
    pieces = [result.get("plain_english") or "", result.get("legal") or ""]
    pieces += [(_get(q, "text") or "") for q in (result.get("quotes") or [])]
    return "\n".join(pieces)


def fact_recall(facts: Sequence[str], text: str) -> float | None:
    """Share of gold facts present (after normalisation) in the answer text; None without facts."""
    if not facts:
        return None
    hay = normalize_text(text)
    return sum(1 for f in facts if normalize_text(f) and normalize_text(f) in hay) / len(facts)


def quote_counts(quotes: Sequence[Any]) -> tuple[int, int]:
    """(verified, total) over the answer's quotes."""
    quotes = list(quotes or [])
    return sum(1 for q in quotes if _get(q, "verified") is True), len(quotes)


def quote_verification_rate(quotes: Sequence[Any]) -> float | None:
    verified, total = quote_counts(quotes)
    return verified / total if total else None


def cited_refs(citations: Sequence[Any], default_title: int | None = None) -> list[str]:
    return dedupe(hit_ref(c, default_title) for c in (citations or []))


def citation_accuracy(citations: Sequence[Any], gold: Iterable[str], default_title: int | None = None) -> float | None:
    """Share of the distinct sections the answer cites that are gold; None when nothing is cited."""
    cited = cited_refs(citations, default_title)
    if not cited:
        return None
    g = gold_set(gold, default_title)
    return sum(1 for c in cited if c in g) / len(cited)


_FIGURE = re.compile(r"(?<![\w.])\$?\d[\d,]*(?:\.\d+)?(?:\s?(?:%|percent))?(?![\w])")
_CITE_SPAN = re.compile(
    rf"(?:\d+\s*{_CFR}\s*(?:§+|parts?|sec(?:tion)?s?\.?)?\s*[\d.a-z-]+(?:\([^)]*\))*)"
    r"|(?:(?:§+|sections?|parts?)\s*\d+[a-z]?(?:\.\d+[a-z]?)?(?:-\d+[a-z]?)?(?:\([^)]*\))*)",
    re.I,
)


def figures(text: str | None) -> list[str]:
    """Numeric figures in a text, ignoring the numbers inside CFR citations and paragraph designations."""
    if not text:
        return []
    stripped = _CITE_SPAN.sub(" ", normalize_text(text))
    out = []
    for m in _FIGURE.finditer(stripped):
        fig = m.group(0).replace("$", "").replace(",", "").replace("percent", "").replace("%", "").strip()
        if fig:
            out.append(fig.rstrip("."))
    return out


def unsupported_figures(result: Mapping[str, Any], question: str = "") -> list[str]:
    """Figures stated in plain_english/legal that appear in none of the answer's quotes, the headings of the
    sections it cites, nor the question.

    The quotes are the verbatim source text the answer rests on and a cited section's heading is its own text
    ("Individuals who enrolled ... before April 1, 1981"); a figure in neither is not shown to be supported by
    the regulation.
    """
    stated = figures((result.get("plain_english") or "") + "\n" + (result.get("legal") or ""))
    support = set(figures(" ".join((_get(q, "text") or "") for q in (result.get("quotes") or []))))
    support |= set(figures(" ".join((_get(c, "heading") or "") for c in (result.get("citations") or []))))
    support |= set(figures(question))
    return sorted({f for f in stated if f not in support})


def is_correct(kind: str, result: Mapping[str, Any] | None, facts: Sequence[str], gold: Iterable[str],
               default_title: int | None = None) -> bool | None:
    """The calibration notion of correct.

    not_found question: refused with reason not_found. Answerable question: answered, fact recall >= 0.5 and at
    least one gold section cited. None when there is no result (transport error).
    """
    if result is None:
        return None
    status = result.get("status")
    refusal = result.get("refusal") or {}
    if kind == "not_found":
        return status == "refused" and _get(refusal, "reason") == "not_found"
    if status != "answered":
        return False
    fr = fact_recall(facts, answer_text(result))
    if fr is not None and fr < 0.5:
        return False
    g = gold_set(gold, default_title)
    return any(c in g for c in cited_refs(result.get("citations") or [], default_title))


# --------------------------------------------------------------------------------------------
# refusals
# --------------------------------------------------------------------------------------------
def refusal_metrics(rows: Sequence[Mapping[str, Any]]) -> dict:
    """Rows carry kind, status ("answered"/"refused"/None on error) and refusal_reason.

    not_found_refusal_rate: share of not_found questions refused with reason not_found.
    false_refusal_rate: share of answerable questions refused (any reason).
    Rows without a status (transport errors) are left out of both denominators and counted as errors.
    """
    nf = [r for r in rows if r.get("kind") == "not_found" and r.get("status")]
    ans = [r for r in rows if r.get("kind") != "not_found" and r.get("status")]
    refused = [r for r in rows if r.get("status") == "refused"]
    # not_found refusals a generation model decided (plain.v2's not_answered: a model answered the call, the
    # pre-gate had let the question through), apart from the pre-gate's, for a provider run
    declined = [r for r in refused if r.get("refusal_reason") == "not_found" and r.get("answered_model")]
    return {
        "not_found_n": len(nf),
        "not_found_refusal_rate": (
            sum(1 for r in nf if r["status"] == "refused" and r.get("refusal_reason") == "not_found") / len(nf)
            if nf else None
        ),
        "not_found_any_refusal_rate": (sum(1 for r in nf if r["status"] == "refused") / len(nf) if nf else None),
        "answerable_n": len(ans),
        "false_refusal_rate": (sum(1 for r in ans if r["status"] == "refused") / len(ans) if ans else None),
        "reasons": dict(sorted(Counter(r.get("refusal_reason") or "unknown" for r in refused).items())),
        "reasons_answerable": dict(
            sorted(Counter(r.get("refusal_reason") or "unknown" for r in refused if r.get("kind") != "not_found").items())
        ),
        "errors": sum(1 for r in rows if r.get("status") is None and r.get("query_error")),
        "not_found_by_model": {"not_found": sum(1 for r in declined if r.get("kind") == "not_found"),
                               "answerable": sum(1 for r in declined if r.get("kind") != "not_found")},
    }


def calibration_table(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict]:
    """tier -> {n, correct_share}; rows carry tier and correct (True/False/None)."""
    groups: dict[str, list[bool]] = {}
    for r in rows:
        if r.get("correct") is None:
            continue
        groups.setdefault(r.get("tier") or "none", []).append(bool(r["correct"]))
    order = {"high": 0, "medium": 1, "low": 2, "not_found": 3}
    return {
        tier: {"n": len(v), "correct_share": sum(v) / len(v)}
        for tier, v in sorted(groups.items(), key=lambda kv: (order.get(kv[0], 9), kv[0]))
    }


# --------------------------------------------------------------------------------------------
# operations
# --------------------------------------------------------------------------------------------
def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolation percentile (q in [0, 100]); None for no values."""
    vals = sorted(float(v) for v in values if v is not None)
    if not vals:
        return None
    if len(vals) == 1:
        return vals[0]
    pos = (len(vals) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return vals[lo] + (vals[hi] - vals[lo]) * (pos - lo)


def latency_table(timings: Sequence[Mapping[str, float] | None]) -> dict[str, dict]:
    """stage -> {n, p50, p95} over per-question ``timings_ms`` dicts."""
    stages: dict[str, list[float]] = {}
    for t in timings:
        for stage, ms in (t or {}).items():
            if isinstance(ms, (int, float)):
                stages.setdefault(stage, []).append(float(ms))
    return {s: {"n": len(v), "p50": percentile(v, 50), "p95": percentile(v, 95)} for s, v in sorted(stages.items())}


def token_usage(model: Mapping[str, Any] | None) -> tuple[int, int]:
    """(tokens_in, tokens_out) summed over model.calls of a QueryResult."""
    calls = (model or {}).get("calls") or []
    tin = sum(int(_get(c, "tokens_in") or 0) for c in calls)
    tout = sum(int(_get(c, "tokens_out") or 0) for c in calls)
    return tin, tout


def model_distribution(rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """answered model -> number of questions (None when no model produced text, e.g. refused)."""
    return dict(sorted(Counter(str(r.get("answered_model")) for r in rows if r.get("status")).items()))


# --------------------------------------------------------------------------------------------
# aggregation
# --------------------------------------------------------------------------------------------
def mean(values: Iterable[float | None]) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def aggregate(rows: Sequence[Mapping[str, Any]]) -> dict:
    """Aggregates over per-question rows produced by the harness.

    Retrieval metrics average only rows with retrieval metrics (answerable questions whose search succeeded);
    not_found questions are excluded there and counted in the refusal metrics instead.
    """
    out: dict[str, Any] = {"n": len(rows)}
    with_ret = [r for r in rows if r.get("metrics")]
    keys: list[str] = []
    for r in with_ret:
        for key in r["metrics"]:
            if key not in keys:
                keys.append(key)
    out["retrieval_n"] = len(with_ret)
    out["retrieval"] = {key: mean(r["metrics"].get(key) for r in with_ret) for key in keys}
    out["search_errors"] = sum(1 for r in rows if r.get("search_error"))

    queried = [r for r in rows if r.get("status")]
    if queried or any(r.get("query_error") for r in rows):
        answered = [r for r in queried if r["status"] == "answered" and r.get("kind") != "not_found"]
        verified = sum(r.get("quotes_verified") or 0 for r in answered)
        total_quotes = sum(r.get("quotes_total") or 0 for r in answered)
        out["answers"] = {
            "answered_n": len(answered),
            "fact_recall": mean(r.get("fact_recall") for r in answered),
            "quote_verification_rate": verified / total_quotes if total_quotes else None,
            "citation_accuracy": mean(r.get("citation_accuracy") for r in answered),
            "unsupported_figures": sum(r.get("unsupported_figures") or 0 for r in answered),
            "answers_with_unsupported_figures": (
                sum(1 for r in answered if r.get("unsupported_figures")) / len(answered) if answered else None
            ),
            "correct_rate": mean(
                (1.0 if r["correct"] else 0.0) for r in queried if r.get("correct") is not None
            ),
        }
        out["refusals"] = refusal_metrics(rows)
        out["calibration"] = calibration_table(rows)
        out["models"] = model_distribution(rows)
        tin = [r.get("tokens_in") or 0 for r in queried]
        tout = [r.get("tokens_out") or 0 for r in queried]
        out["tokens"] = {
            "in_total": sum(tin), "out_total": sum(tout),
            "in_mean": mean(tin), "out_mean": mean(tout),
        }
    out["latency_ms"] = latency_table([r.get("timings_ms") for r in rows])
    return out
