"""The `regs` command: up, down, status, ingest, search, ask, eval, bench."""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import textwrap

import httpx

from shared.config import get_settings


def _gateway_url(settings) -> str:
    from shared.supervisor import read_state

    state = read_state(settings.resolved_data_dir())
    if state and state.get("gateway_url"):
        return state["gateway_url"]
    return f"http://{settings.gateway_host}:{settings.gateway_port}"


def _post(url: str, payload: dict, timeout: float = 120.0) -> dict:
    try:
        response = httpx.post(url, json=payload, timeout=timeout)
    except httpx.ConnectError:
        sys.exit(f"cannot reach the gateway at {url.rsplit('/v1', 1)[0]}: is `regs up` running?")
    if response.status_code >= 400:
        sys.exit(f"{response.status_code}: {response.json().get('detail', response.text)}")
    return response.json()


def cmd_up(args) -> int:
    from shared.supervisor import run_up

    return run_up(get_settings(), ingest_on_empty=not args.no_ingest)


def cmd_down(args) -> int:
    from shared.supervisor import run_down

    return run_down(get_settings())


def cmd_status(args) -> int:
    from shared.supervisor import run_status

    return run_status(get_settings())


def cmd_ingest(args) -> int:
    from shared import db
    from shared.messages import IngestRequest
    from shared.supervisor import ingest_with_progress, running_database_url

    settings = get_settings()
    dsn = running_database_url(settings)
    if not dsn:
        sys.exit("no database: set REGS_DATABASE_URL or start the embedded one with `regs up`")
    settings = settings.model_copy(update={"database_url": dsn})
    asyncio.run(db.migrate(settings.database_url))
    request = IngestRequest(title=args.title, source=args.source, parts=args.parts or None, force=args.force)
    record = asyncio.run(ingest_with_progress(settings, request))
    print(json.dumps({k: record.get(k) for k in ("run_id", "state", "message", "counts", "timings", "error")},
                     indent=2, default=str))
    return 0 if record["state"] == "succeeded" else 1


def cmd_search(args) -> int:
    settings = get_settings()
    payload = {"question": args.question, "top_k": args.top_k, "mode": args.mode}
    if args.no_scoping:
        payload["scoping"] = False
    result = _post(f"{_gateway_url(settings)}/v1/search", payload)
    for note in result["scope"].get("notes", []):
        print(f"scope: {note}")
    if not result["results"]:
        print(f"no results: {result.get('empty_reason')}")
    for hit in result["results"]:
        similarity = "" if hit["similarity"] is None else f"{hit['similarity']:.3f}"
        print(f"{hit['rank']:>2}. {hit['cfr_ref']:<18} {similarity:>6}  {hit['heading'][:80]}  "
              f"[{', '.join(hit.get('matched_by', []))}]")
    return 0


def cmd_ask(args) -> int:
    settings = get_settings()
    result = _post(f"{_gateway_url(settings)}/v1/query", {"question": args.question, "top_k": args.top_k})
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    confidence = result["confidence"]
    print(f"[{result['status']}] confidence {confidence['tier']} ({confidence['score']:.2f}); "
          f"answered by {result['model']['answered']} (requested {result['model']['requested']}"
          + (f"; fallback: {result['model']['fallback_reason']}" if result['model']['fallback_reason'] else "")
          + ")")
    if result["status"] == "refused":
        refusal = result["refusal"]
        print(f"\nREFUSED ({refusal['reason']}): {refusal['message']}")
        for evidence in refusal.get("evidence", []):
            print(f"  - {evidence['cfr_ref']} {evidence.get('heading') or ''} {', '.join(evidence.get('figures', []))}")
        return 0
    print("\nPlain English:\n" + textwrap.fill(result["plain_english"] or "", 100))
    print("\nLegal language:\n" + (result["legal"] or ""))
    print("\nCitations:")
    for citation in result["citations"]:
        print(f"  {citation['cfr_ref']}{citation.get('paragraph') or ''}  {citation.get('heading') or ''}")
    return 0


def cmd_eval(args) -> int:
    from eval import harness

    return harness.main(args.rest)


def cmd_bench(args) -> int:
    import runpy

    target = args.rest[0] if args.rest else "all"
    sys.argv = [f"bench/{target}.py", *args.rest[1:]]
    module = {"parse": "bench.bench_parse", "embed": "bench.bench_embed", "search": "bench.bench_search",
              "query": "bench.bench_search", "all": "bench.run_all"}.get(target)
    if module is None:
        sys.exit(f"unknown benchmark {target!r}: parse, embed, search, query or all")
    runpy.run_module(module, run_name="__main__")
    return 0


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    parser = argparse.ArgumentParser(prog="regs", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start everything (embedded servers unless REGS_*_URL are set)")
    up.add_argument("--no-ingest", action="store_true", help="do not ingest the shipped corpus into an empty store")
    up.set_defaults(func=cmd_up)
    sub.add_parser("down", help="stop everything `regs up` started").set_defaults(func=cmd_down)
    sub.add_parser("status", help="each process and dependency").set_defaults(func=cmd_status)
    ingest = sub.add_parser("ingest", help="ingest CFR XML into a new corpus version")
    ingest.add_argument("--source", default="shipped", help="'shipped', a file or folder, or ecfr:YYYY-MM-DD")
    ingest.add_argument("--title", type=int, default=None)
    ingest.add_argument("--parts", nargs="*", default=None)
    ingest.add_argument("--force", action="store_true", help="write a new version even if nothing changed")
    ingest.set_defaults(func=cmd_ingest)
    search = sub.add_parser("search", help="the ranked sections for a question")
    search.add_argument("question")
    search.add_argument("--top-k", type=int, default=10)
    search.add_argument("--mode", choices=["hybrid", "dense", "fulltext"], default=None)
    search.add_argument("--no-scoping", action="store_true")
    search.set_defaults(func=cmd_search)
    ask = sub.add_parser("ask", help="answer a question")
    ask.add_argument("question")
    ask.add_argument("--top-k", type=int, default=None)
    ask.add_argument("--json", action="store_true")
    ask.set_defaults(func=cmd_ask)
    evaluation = sub.add_parser("eval", help="run the evaluation harness (see eval/README.md)")
    evaluation.add_argument("rest", nargs=argparse.REMAINDER)
    evaluation.set_defaults(func=cmd_eval)
    bench = sub.add_parser("bench", help="benchmarks: parse, embed, search, query, all")
    bench.add_argument("rest", nargs=argparse.REMAINDER)
    bench.set_defaults(func=cmd_bench)
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("eval", "bench"):  # their own argument parsers take everything after the verb
        return (cmd_eval if argv[0] == "eval" else cmd_bench)(argparse.Namespace(rest=argv[1:])) or 0
    args = parser.parse_args(argv)
    return args.func(args) or 0


if __name__ == "__main__":
    raise SystemExit(main())
