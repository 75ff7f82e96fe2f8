"""Evaluation harness: runs the dataset through the PUBLIC gateway over HTTP, the path users take.

    regs eval --config eval/configs/hybrid.yaml [--gateway URL] [--limit N] [--out DIR]
    regs eval diff eval/results/a.json eval/results/b.json

For each question it calls ``POST /v1/search`` (retrieval metrics; not_found questions are only recorded) and,
unless the config says ``answers: false``, ``POST /v1/query`` (answer, refusal and calibration metrics). It never
calls a stage directly. Each run writes ``<out>/<name>-<UTC timestamp>.json`` with the config, the git commit, the
gateway's versions, one row per question and the aggregates (overall, per kind, per title), and prints a table.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Sequence

import httpx
import yaml

from eval import metrics as M

REPO = Path(__file__).resolve().parents[1]
DEFAULT_GATEWAY = "http://127.0.0.1:8000"
KINDS = ("fact", "sibling", "multi", "citation", "not_found")
MODES = ("hybrid", "dense", "fulltext")
TITLES = (7, 21, 42)

DEFAULTS: dict[str, Any] = {
    "name": None,
    "mode": "hybrid",
    "top_k": 10,
    "scoping": True,
    "answers": True,
    "dataset": "eval/dataset.jsonl",
    "kinds": None,
    "concurrency": 4,
    "timeout": 180.0,
}


# --------------------------------------------------------------------------------------------
# config and dataset
# --------------------------------------------------------------------------------------------
def _resolve(path: str | Path) -> Path:
    p = Path(path)
    if p.exists() or p.is_absolute():
        return p
    alt = REPO / p
    return alt if alt.exists() else p


def load_config(path: str | Path) -> dict:
    p = _resolve(path)
    raw = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    if not isinstance(raw, dict):
        raise ValueError(f"{p}: a config is a mapping")
    unknown = set(raw) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"{p}: unknown config keys {sorted(unknown)}")
    cfg = {**DEFAULTS, **raw}
    cfg["name"] = str(cfg["name"] or p.stem)
    if cfg["mode"] not in MODES:
        raise ValueError(f"{p}: mode must be one of {MODES}")
    cfg["top_k"] = int(cfg["top_k"])
    if not 1 <= cfg["top_k"] <= 50:
        raise ValueError(f"{p}: top_k must be within 1..50")
    cfg["scoping"] = bool(cfg["scoping"])
    cfg["answers"] = bool(cfg["answers"])
    cfg["concurrency"] = max(1, int(cfg["concurrency"]))
    cfg["timeout"] = float(cfg["timeout"])
    if cfg["kinds"] is not None:
        kinds = [cfg["kinds"]] if isinstance(cfg["kinds"], str) else list(cfg["kinds"])
        bad = [k for k in kinds if k not in KINDS]
        if bad:
            raise ValueError(f"{p}: unknown kinds {bad}")
        cfg["kinds"] = kinds
    return cfg


def load_dataset(path: str | Path, kinds: Sequence[str] | None = None, limit: int | None = None) -> list[dict]:
    rows = []
    with _resolve(path).open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                rows.append(json.loads(line))
    if kinds:
        rows = [r for r in rows if r.get("kind") in kinds]
    if limit is not None:
        rows = rows[: max(0, int(limit))]
    return rows


# --------------------------------------------------------------------------------------------
# HTTP
# --------------------------------------------------------------------------------------------
def _post(client: httpx.Client, url: str, body: dict) -> tuple[dict | None, str | None, float]:
    t0 = time.perf_counter()
    try:
        resp = client.post(url, json=body)
        for _ in range(5):  # a polite client: honour the gateway's rate limit instead of scoring a 429
            if resp.status_code != 429:
                break
            time.sleep(min(float(resp.headers.get("Retry-After", "5") or 5), 60.0) + 0.5)
            t0 = time.perf_counter()
            resp = client.post(url, json=body)
        ms = (time.perf_counter() - t0) * 1000
        if resp.status_code >= 400:
            return None, f"HTTP {resp.status_code}: {resp.text[:300]}", ms
        try:
            data = resp.json()
        except ValueError:
            return None, f"invalid JSON: {resp.text[:200]}", ms
        if not isinstance(data, dict):
            return None, f"unexpected body: {str(data)[:200]}", ms
        return data, None, ms
    except httpx.HTTPError as exc:
        return None, f"{type(exc).__name__}: {exc}", (time.perf_counter() - t0) * 1000


def _get_versions(client: httpx.Client, gateway: str) -> dict:
    out: dict[str, Any] = {}
    for key, path in (("corpus", "/v1/corpus"), ("healthz", "/healthz")):
        try:
            resp = client.get(gateway + path)
            try:
                body: Any = resp.json()
            except ValueError:
                body = resp.text[:2000]
            out[key] = body if resp.status_code < 400 else {"error": f"HTTP {resp.status_code}", "body": body}
        except httpx.HTTPError as exc:
            out[key] = {"error": f"{type(exc).__name__}: {exc}"}
    return out


def git_commit() -> str | None:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


# --------------------------------------------------------------------------------------------
# one question
# --------------------------------------------------------------------------------------------
def evaluate_question(client: httpx.Client, gateway: str, item: dict, cfg: dict) -> dict:
    kind = item.get("kind")
    title = item.get("title")
    k = cfg["top_k"]
    gold = sorted(M.gold_set(item.get("gold") or [], title))
    row: dict[str, Any] = {
        "id": item.get("id"),
        "kind": kind,
        "title": title,
        "question": item.get("question"),
        "gold": gold,
        "retrieved": [],
        "ranks": {},
        "metrics": None,
        "scope_notes": [],
        "search_error": None,
        "status": None,
        "refusal_reason": None,
        "tier": None,
        "confidence": None,
        "answered_model": None,
        "fallback_reason": None,
        "cited": [],
        "fact_recall": None,
        "citation_accuracy": None,
        "quotes_verified": None,
        "quotes_total": None,
        "unsupported_figures": None,
        "unsupported_figure_values": [],
        "correct": None,
        "tokens_in": None,
        "tokens_out": None,
        "timings_ms": {},
        "client_ms": {},
        "query_error": None,
    }

    # ---- retrieval, through /v1/search
    body = {"question": item["question"], "top_k": k, "mode": cfg["mode"], "scoping": cfg["scoping"]}
    data, err, ms = _post(client, gateway + "/v1/search", body)
    row["client_ms"]["search"] = round(ms, 1)
    if err:
        row["search_error"] = err
    else:
        hits = data.get("results")
        if hits is None:
            hits = data.get("hits") or []
        ranked = M.ranked_refs(hits, title)
        row["retrieved"] = ranked
        scope = data.get("scope") or {}
        row["scope_notes"] = list(scope.get("notes") or []) if isinstance(scope, dict) else []
        if gold:  # not_found questions are only recorded
            row["ranks"] = M.gold_ranks(ranked, gold)
            row["metrics"] = M.retrieval_scores(hits, gold, k, title)

    # ---- answer, through /v1/query
    if cfg["answers"]:
        body = {"question": item["question"], "top_k": k, "mode": cfg["mode"]}
        res, err, ms = _post(client, gateway + "/v1/query", body)
        row["client_ms"]["query"] = round(ms, 1)
        if err:
            row["query_error"] = err
        else:
            _score_answer(row, item, res)
    return row


def _score_answer(row: dict, item: dict, res: dict) -> None:
    title = item.get("title")
    facts = item.get("facts") or []
    gold = item.get("gold") or []
    refusal = res.get("refusal") or {}
    confidence = res.get("confidence") or {}
    model = res.get("model") or {}
    row["status"] = res.get("status")
    row["refusal_reason"] = refusal.get("reason") if isinstance(refusal, dict) else None
    row["tier"] = confidence.get("tier") if isinstance(confidence, dict) else None
    row["confidence"] = confidence.get("score") if isinstance(confidence, dict) else None
    row["answered_model"] = model.get("answered") if isinstance(model, dict) else None
    row["fallback_reason"] = model.get("fallback_reason") if isinstance(model, dict) else None
    row["tokens_in"], row["tokens_out"] = M.token_usage(model if isinstance(model, dict) else None)
    row["timings_ms"] = {k: v for k, v in (res.get("timings_ms") or {}).items() if isinstance(v, (int, float))}
    row["cited"] = M.cited_refs(res.get("citations") or [], title)
    if row["status"] == "answered":
        row["fact_recall"] = M.fact_recall(facts, M.answer_text(res))
        row["citation_accuracy"] = M.citation_accuracy(res.get("citations") or [], gold, title) if gold else None
        row["quotes_verified"], row["quotes_total"] = M.quote_counts(res.get("quotes") or [])
        unsupported = M.unsupported_figures(res, item.get("question") or "")
        row["unsupported_figures"] = len(unsupported)
        row["unsupported_figure_values"] = unsupported
    row["correct"] = M.is_correct(row["kind"], res, facts, gold, title)


# --------------------------------------------------------------------------------------------
# a run
# --------------------------------------------------------------------------------------------
def aggregates(rows: list[dict]) -> dict:
    out = {"overall": M.aggregate(rows), "by_kind": {}, "by_title": {}}
    out["overall"]["latency_client_ms"] = M.latency_table([r.get("client_ms") for r in rows])
    for kind in KINDS:
        sub = [r for r in rows if r.get("kind") == kind]
        if sub:
            out["by_kind"][kind] = M.aggregate(sub)
    for title in (*TITLES, None):
        sub = [r for r in rows if r.get("title") == title]
        if sub:
            out["by_title"][str(title) if title is not None else "none"] = M.aggregate(sub)
    return out


def run(cfg: dict, gateway: str = DEFAULT_GATEWAY, limit: int | None = None, out_dir: str | Path = "eval/results",
        progress: bool = True) -> tuple[dict, Path]:
    gateway = gateway.rstrip("/")
    items = load_dataset(cfg["dataset"], cfg["kinds"], limit)
    started = dt.datetime.now(dt.timezone.utc)
    timeout = httpx.Timeout(cfg["timeout"], connect=10.0)
    limits = httpx.Limits(max_connections=cfg["concurrency"] + 2, max_keepalive_connections=cfg["concurrency"] + 2)
    with httpx.Client(timeout=timeout, limits=limits) as client:
        versions = _get_versions(client, gateway)
        done = 0

        def one(item: dict) -> dict:
            nonlocal done
            row = evaluate_question(client, gateway, item, cfg)
            done += 1
            if progress:
                flag = "ERR" if row["search_error"] or row["query_error"] else "ok "
                print(f"[{done:>3}/{len(items)}] {flag} {row['id']} {row['kind']}", file=sys.stderr, flush=True)
            return row

        with ThreadPoolExecutor(max_workers=cfg["concurrency"]) as pool:
            rows = list(pool.map(one, items))
    finished = dt.datetime.now(dt.timezone.utc)
    result = {
        "name": cfg["name"],
        "config": cfg,
        "gateway": gateway,
        "git_commit": git_commit(),
        "started": started.isoformat(),
        "finished": finished.isoformat(),
        "versions": versions,
        "aggregates": aggregates(rows),
        "rows": rows,
    }
    out = _resolve_out(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{cfg['name']}-{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    n = 1
    while path.exists():
        n += 1
        path = out / f"{cfg['name']}-{started.strftime('%Y%m%dT%H%M%SZ')}-{n}.json"
    path.write_text(json.dumps(result, indent=1, ensure_ascii=False, default=str), encoding="utf-8")
    return result, path


def _resolve_out(out_dir: str | Path) -> Path:
    p = Path(out_dir)
    return p if p.is_absolute() else (Path.cwd() / p)


# --------------------------------------------------------------------------------------------
# printing
# --------------------------------------------------------------------------------------------
def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}"
    return str(v)


def format_table(result: dict) -> str:
    k = result["config"]["top_k"]
    cols = [
        ("n", lambda a: a.get("n")),
        ("hit@1", lambda a: a["retrieval"].get("hit@1")),
        (f"mrr@{k}", lambda a: a["retrieval"].get(f"mrr@{k}")),
        (f"ndcg@{k}", lambda a: a["retrieval"].get(f"ndcg@{k}")),
        (f"rec@{k}", lambda a: a["retrieval"].get(f"recall@{k}")),
        (f"P@{k}", lambda a: a["retrieval"].get(f"precision@{k}")),
        ("facts", lambda a: (a.get("answers") or {}).get("fact_recall")),
        ("cite_acc", lambda a: (a.get("answers") or {}).get("citation_accuracy")),
        ("quotes_ok", lambda a: (a.get("answers") or {}).get("quote_verification_rate")),
        ("correct", lambda a: (a.get("answers") or {}).get("correct_rate")),
        ("false_ref", lambda a: (a.get("refusals") or {}).get("false_refusal_rate")),
        ("nf_refused", lambda a: (a.get("refusals") or {}).get("not_found_refusal_rate")),
    ]
    agg = result["aggregates"]
    lines_src = [("overall", agg["overall"])]
    lines_src += [(f"kind={k_}", a) for k_, a in agg["by_kind"].items()]
    lines_src += [(f"title={t}", a) for t, a in agg["by_title"].items()]
    header = ["group"] + [c for c, _ in cols]
    table = [header] + [[label] + [_fmt(f(a)) for _, f in cols] for label, a in lines_src]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    out = [f"run {result['name']}  mode={result['config']['mode']} top_k={k} scoping={result['config']['scoping']} "
           f"answers={result['config']['answers']}  commit={(result.get('git_commit') or '?')[:10]}"]
    for i, r in enumerate(table):
        out.append("  ".join(c.rjust(w) if j else c.ljust(w) for j, (c, w) in enumerate(zip(r, widths))))
        if i == 0:
            out.append("  ".join("-" * w for w in widths))
    overall = agg["overall"]
    errors = [r["id"] for r in result["rows"] if r.get("search_error") or r.get("query_error")]
    if errors:
        out.append(f"errors: {len(errors)} questions ({', '.join(errors[:10])}{' ...' if len(errors) > 10 else ''})")
    if overall.get("refusals"):
        out.append(f"refusal reasons: {overall['refusals']['reasons']}")
        by_model = overall["refusals"].get("not_found_by_model") or {}
        if any(by_model.values()):
            out.append(f"not_found decided by the generation model: {by_model.get('not_found', 0)} not_found and "
                       f"{by_model.get('answerable', 0)} answerable questions")
    if overall.get("calibration"):
        out.append("calibration: " + ", ".join(
            f"{t}: n={c['n']} correct={c['correct_share']:.2f}" for t, c in overall["calibration"].items()))
    if overall.get("models"):
        out.append(f"answering models: {overall['models']}")
    if overall.get("tokens"):
        t = overall["tokens"]
        out.append(f"tokens: in={t['in_total']} out={t['out_total']} (mean in={_fmt(t['in_mean'])} out={_fmt(t['out_mean'])})")
    if overall.get("answers"):
        a = overall["answers"]
        out.append(f"unsupported figures: {a['unsupported_figures']} "
                   f"(share of answers with any: {_fmt(a['answers_with_unsupported_figures'])})")
    for label, table_ in (("server", overall.get("latency_ms") or {}), ("client", overall.get("latency_client_ms") or {})):
        if table_:
            out.append(f"latency ms ({label}): " + ", ".join(
                f"{s} p50={_fmt(v['p50'])} p95={_fmt(v['p95'])}" for s, v in table_.items()))
    return "\n".join(out)


# --------------------------------------------------------------------------------------------
# diff
# --------------------------------------------------------------------------------------------
def _flatten(obj: Any, prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    if isinstance(obj, dict):
        for key, val in obj.items():
            out.update(_flatten(val, f"{prefix}.{key}" if prefix else str(key)))
    elif isinstance(obj, bool):
        pass
    elif isinstance(obj, (int, float)):
        out[prefix] = float(obj)
    return out


def _refused(row: dict) -> bool | None:
    return None if row.get("status") is None else row.get("status") == "refused"


def _hit1(row: dict) -> float | None:
    return (row.get("metrics") or {}).get("hit@1")


def diff(a: dict, b: dict) -> str:
    lines = [f"A: {a.get('name')} {a.get('started', '')} commit={str(a.get('git_commit'))[:10]}",
             f"B: {b.get('name')} {b.get('started', '')} commit={str(b.get('git_commit'))[:10]}", "", "metric changes:"]
    fa, fb = _flatten(a.get("aggregates") or {}), _flatten(b.get("aggregates") or {})
    for key in sorted(set(fa) | set(fb)):
        va, vb = fa.get(key), fb.get(key)
        if va == vb:
            continue
        delta = f" ({vb - va:+.3f})" if va is not None and vb is not None else ""
        lines.append(f"  {key}: {_fmt(va)} -> {_fmt(vb)}{delta}")
    rows_a = {r["id"]: r for r in a.get("rows") or []}
    rows_b = {r["id"]: r for r in b.get("rows") or []}
    common = [i for i in rows_a if i in rows_b]
    for label, fn in (("hit@1", _hit1), ("refused", _refused), ("correct", lambda r: r.get("correct"))):
        flips = []
        for qid in common:
            va, vb = fn(rows_a[qid]), fn(rows_b[qid])
            if va is not None and vb is not None and va != vb:
                flips.append((qid, rows_a[qid].get("kind"), va, vb, rows_b[qid]))
        lines.append("")
        lines.append(f"{label} flips: {len(flips)}")
        for qid, kind, va, vb, rb in flips:
            extra = f" reason={rb.get('refusal_reason')}" if label == "refused" and rb.get("refusal_reason") else ""
            lines.append(f"  {qid} [{kind}] {_fmt(va)} -> {_fmt(vb)}{extra}  {str(rb.get('question') or '')[:70]}")
    only = sorted(set(rows_a) ^ set(rows_b))
    if only:
        lines.append("")
        lines.append(f"questions in only one run: {len(only)}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "diff":
        p = argparse.ArgumentParser(prog="regs eval diff", description="Compare two evaluation result files.")
        p.add_argument("a")
        p.add_argument("b")
        args = p.parse_args(argv[1:])
        a = json.loads(Path(args.a).read_text(encoding="utf-8"))
        b = json.loads(Path(args.b).read_text(encoding="utf-8"))
        print(diff(a, b))
        return 0
    if argv and argv[0] == "run":
        argv = argv[1:]
    p = argparse.ArgumentParser(prog="regs eval", description="Run the evaluation dataset through the gateway.")
    p.add_argument("--config", required=True, help="eval/configs/<name>.yaml")
    p.add_argument("--gateway", default=DEFAULT_GATEWAY, help=f"gateway base URL (default {DEFAULT_GATEWAY})")
    p.add_argument("--limit", type=int, default=None, help="only the first N questions (after the kinds filter)")
    p.add_argument("--out", default="eval/results", help="directory for the result JSON (default eval/results)")
    p.add_argument("--quiet", action="store_true", help="no per-question progress on stderr")
    args = p.parse_args(argv)
    try:
        cfg = load_config(args.config)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        print(f"regs eval: bad config: {exc}", file=sys.stderr)
        return 2
    result, path = run(cfg, gateway=args.gateway, limit=args.limit, out_dir=args.out, progress=not args.quiet)
    print(format_table(result))
    print(f"\nwrote {path}")
    rows = result["rows"]
    if rows and all(r.get("search_error") for r in rows):
        print("regs eval: every search failed — is the gateway up?", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
