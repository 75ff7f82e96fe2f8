"""The answer reader's cost per question (services/scorer/reader.py), as the pre-gate pays it.

    .venv/bin/python -m eval.train_reader collect          # once: retrieval + pre-gate for every eval question
    .venv/bin/python bench/bench_reader.py [--cache /tmp/regs_reader] [--limit 200] [--per-section 4,1000] [--weights A,B]

For each question the rule-based pre-gate lets through, it times ``AnswerReader.read`` over the first three handed
sections (what ``pre_gate`` reads), for each ``--per-section`` value (1000: every passage), after one warm-up
question. Reports median / p90 / max milliseconds and the passages read per question, as JSON on stdout.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", type=Path, default=Path("/tmp/regs_reader"))
    ap.add_argument("--limit", type=int, default=200, help="questions timed (every k-th of those that proceed)")
    ap.add_argument("--per-section", default="4,1000")
    ap.add_argument("--weights", default=None,
                    help="comma-separated weights files, without the strict reader (default: the shipped readers, "
                         "read together, and the strict reader)")
    args = ap.parse_args()

    from eval.train_reader import load_cache
    from services.scorer.reader import AnswerReader, closest_passages

    rows = [r for r in load_cache(args.cache) if r["outcome"] == "proceed" and r["sections"] and not r["cited"]]
    step = max(1, len(rows) // args.limit)
    rows = rows[::step][: args.limit]
    reader = (AnswerReader(tuple(Path(f) for f in args.weights.split(",")), strict=None) if args.weights
              else AnswerReader())
    reader.read(rows[0]["question"], rows[0]["sections"][:3])  # warm-up
    report = {"questions": len(rows), "threads": reader.threads, "readers": len(reader.models), "runs": []}
    for per_section in (int(x) for x in args.per_section.split(",")):
        times, strict_times, counts = [], [], []
        for r in rows:
            sections = r["sections"][:3]
            counts.append(sum(len(closest_passages(r["question"], h, per_section)) for h in sections))
            started = time.perf_counter()
            reader.read(r["question"], sections, per_section)
            times.append((time.perf_counter() - started) * 1000)
            if reader.strict_model is not None:
                started = time.perf_counter()
                reader.read_strict(r["question"], sections, per_section)
                strict_times.append((time.perf_counter() - started) * 1000)
        run = {"per_section": per_section, **_summary(times),
               "passages_median": statistics.median(counts), "passages_max": max(counts)}
        if strict_times:
            # the strict reader reads every question handed on: after the two readers below the relevance bound,
            # alone above it
            run["strict"] = _summary(strict_times)
            run["both_and_strict"] = _summary([a + b for a, b in zip(times, strict_times)])
        report["runs"].append(run)
    print(json.dumps(report, indent=1))


def _summary(times: list[float]) -> dict:
    times = sorted(times)
    return {"median_ms": round(statistics.median(times), 1), "p90_ms": round(times[int(0.9 * (len(times) - 1))], 1),
            "max_ms": round(times[-1], 1)}


if __name__ == "__main__":
    main()
