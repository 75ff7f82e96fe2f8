"""Retrieval metrics in-process: the retriever's own `Searcher` on a database, no services, no queue.

    .venv/bin/python -m eval.inprocess [--database-url URL] [--mode hybrid] [--top-k 10] [--kinds sibling,fact]
                                       [--misses] [--json out.json]

For fast iteration on retrieval settings (any `REGS_*` variable applies, e.g. fusion weights or the window
settings of a database ingested with them). The numbers equal the gateway harness's retrieval metrics for
the same settings and database, because both run `Searcher.search`; the harness stays the reference.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import defaultdict

from eval.harness import load_dataset
from eval.metrics import gold_ranks, mean, ranked_refs, retrieval_scores
from services.retriever.search import FusionWeights, Searcher
from shared.config import Settings
from shared.db import create_pool
from shared.messages import RetrieveRequest
from shared.supervisor import running_database_url

METRICS = ("mrr@10", "recall@10", "hit@1")


async def run(args: argparse.Namespace) -> dict:
    settings = Settings()
    dsn = args.database_url or running_database_url(settings)
    if not dsn:
        sys.exit("no database: pass --database-url, set REGS_DATABASE_URL or start the embedded one with `regs up`")
    settings = settings.model_copy(update={"database_url": dsn})
    pool = await create_pool(dsn, min_size=1, max_size=4)
    try:
        weights = FusionWeights(**{k: type(getattr(FusionWeights, k))(v) for k, v in
                                   (kv.split("=") for kv in args.weights.split(",") if kv)}) if args.weights else None
        searcher = Searcher(pool, settings, weights=weights)
        items = load_dataset(args.dataset, kinds=args.kinds.split(",") if args.kinds else None)
        by_kind: dict[str, list[dict]] = defaultdict(list)
        misses = []
        for item in items:
            result = await searcher.search(RetrieveRequest(question=item["question"], mode=args.mode, top_k=args.top_k))
            scores = retrieval_scores(result.hits, item["gold"], 10, item.get("title"))
            if scores is None:
                continue
            by_kind[item["kind"]].append(scores)
            by_kind["all"].append(scores)
            if scores["hit@1"] < 1:
                misses.append({"id": item["id"], "kind": item["kind"], "question": item["question"],
                               "gold": gold_ranks(ranked_refs(result.hits, item.get("title")), item["gold"]),
                               "top3": ranked_refs(result.hits, item.get("title"))[:3]})
        table = {kind: {"n": len(rows), **{m: round(mean(r[m] for r in rows), 3) for m in METRICS}}
                 for kind, rows in sorted(by_kind.items())}
        return {"table": table, "misses": misses}
    finally:
        await pool.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url")
    parser.add_argument("--dataset", default="eval/dataset.jsonl")
    parser.add_argument("--mode", default=None)
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--kinds")
    parser.add_argument("--weights", help="FusionWeights overrides, e.g. subject=0.06,fulltext=0.4")
    parser.add_argument("--misses", action="store_true", help="print the questions whose gold is not ranked first")
    parser.add_argument("--json", help="write the table and misses here")
    args = parser.parse_args(argv)
    out = asyncio.run(run(args))
    for kind, row in out["table"].items():
        print(f"{kind:10s} n={row['n']:3d}  " + "  ".join(f"{m} {row[m]:.3f}" for m in METRICS))
    if args.misses:
        for miss in out["misses"]:
            print(f"{miss['id']} [{miss['kind']}] {miss['question']}\n    gold ranks {miss['gold']}  top3 {miss['top3']}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
