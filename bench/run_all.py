"""Every benchmark, quick settings for the ones that are not search/query, into one JSON and one PNG.

    regs bench all [--skip parse,embed,ingest] [--full] [--timeout 1800] [bench_search options ...]

Runs, each in its own interpreter where it is its own script (their output is the JSON they print):
- ``parse``  bench/bench_parse.py --synthetic-mb 20 (``--full``: its defaults);
- ``embed``  bench/bench_embed.py --limit 600 --subset 150 --repeats 1 --no-full --backends <auto's backend>
  (``--full``: its defaults);
- ``ingest`` bench/bench_ingest.py --limit-sections 300 --repeats 1 --refresh-sections 20 (scratch databases on the
  same server, dropped; ``--full``: the whole shipped corpus, 3 repeats);
- ``search`` and ``query``: bench/bench_search.py --what search,query with every option not listed above (e.g.
  ``--sizes small`` for a quick run, ``--keep --reuse`` to keep the 85k database between runs).

Writes bench/results/all.json (``--out``) and bench/results/all.png (``--plot``: p50/p95 against concurrency of
each search path and corpus, and of /v1/query). A step that fails or times out is recorded with its error; the
others still run. A benchmark file that is absent is skipped.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

RESULTS = ROOT / "bench" / "results"


def _script_step(name: str, argv: list[str], timeout: float) -> dict:
    script = ROOT / "bench" / f"bench_{name}.py"
    if not script.exists():
        return {"skipped": f"{script.relative_to(ROOT)} is absent"}
    started = time.perf_counter()
    print(f"[run_all] {name}: {' '.join(argv) or '(defaults)'}", flush=True)
    try:
        done = subprocess.run([sys.executable, str(script), *argv], cwd=ROOT, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s", "args": argv}
    elapsed = round(time.perf_counter() - started, 1)
    if done.returncode != 0:
        return {"error": f"exit {done.returncode}", "stderr": done.stderr[-3000:], "args": argv, "elapsed_s": elapsed}
    try:
        start = done.stdout.index("{")
        result = json.loads(done.stdout[start:])
    except ValueError:
        return {"error": "no JSON on stdout", "stdout": done.stdout[-2000:], "args": argv, "elapsed_s": elapsed}
    return {"args": argv, "elapsed_s": elapsed, "result": result}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skip", default="", help="comma-separated steps to skip: parse, embed, ingest, search")
    parser.add_argument("--full", action="store_true", help="the parse/embed/ingest benchmarks' own defaults")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per parse/embed/ingest step")
    parser.add_argument("--out", type=Path, default=RESULTS / "all.json")
    parser.add_argument("--plot", type=Path, default=RESULTS / "all.png")
    args, rest = parser.parse_known_args(argv)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}

    from bench import bench_search

    search_args = bench_search.parse_args(["--what", "search,query", *rest, "--out",
                                           str(args.out.with_suffix(".search.tmp")), "--plot", str(args.plot)])
    report: dict = {"started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpus": os.cpu_count(),
                    "load_average_start": bench_search.load_average(), "steps": {}}
    steps = report["steps"]
    if "parse" not in skip:
        steps["parse"] = _script_step("parse", [] if args.full else ["--synthetic-mb", "20"], args.timeout)
    if "embed" not in skip:
        from shared.config import Settings
        from shared.embeddings import resolve_backend

        backend = resolve_backend(Settings().embedding_backend)
        steps["embed"] = _script_step("embed", [] if args.full else [
            "--limit", "600", "--subset", "150", "--repeats", "1", "--no-full", "--backends", backend], args.timeout)
    if "ingest" not in skip:
        steps["ingest"] = _script_step("ingest", ["--database-url", search_args.source_url] + ([] if args.full else [
            "--limit-sections", "300", "--repeats", "1", "--refresh-sections", "20"]), args.timeout)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    if "search" not in skip:
        import asyncio

        started = time.perf_counter()
        try:
            result = asyncio.run(bench_search.run(search_args))
            steps["search"] = {"args": rest, "elapsed_s": round(time.perf_counter() - started, 1), "result": result}
            if bench_search.plot(result["corpora"], args.plot):
                report["plot"] = str(args.plot.relative_to(ROOT) if args.plot.is_relative_to(ROOT) else args.plot)
        except Exception as exc:  # noqa: BLE001 - recorded; the other steps' results are still written
            steps["search"] = {"error": f"{type(exc).__name__}: {exc}", "args": rest}
        finally:
            search_args.out.unlink(missing_ok=True)
    report["load_average_end"] = bench_search.load_average()
    args.out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(f"wrote {args.out}" + (f" and {args.plot}" if report.get("plot") else ""))
    for name, step in steps.items():
        print(f"  {name}: {'error: ' + step['error'] if 'error' in step else step.get('skipped') or 'ok'}")
    return report


if __name__ == "__main__":
    main()
