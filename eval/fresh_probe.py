"""A small probe of the pre-generation gate on questions written *after* the scorer's rules were fitted.

    .venv/bin/python -m eval.fresh_probe [--database-url URL]

15 not_found and 10 answerable questions that were not in view when `shared.scoping.PROGRAM_HOMES` and the
not_found thresholds were chosen: the evaluation set's not_found numbers are in-sample for those rules, this is
the nearest thing to a held-out check (2026-11-30: 10/15 not_found refused, 0/10 answerable refused). It runs the
retriever's `Searcher` and the scorer's `pre_gate` in process against a database, like `eval.calibrate`.
"""
from __future__ import annotations

import argparse
import asyncio
import sys

NF = [
 "How does Medicare pay for hospice care for a terminally ill patient?",
 "What are the income limits for the Medicare Savings Programs like QMB?",
 "Do beef labels need country of origin labeling under USDA rules?",
 "What do I need to get a federal firearms license to sell guns?",
 "What are the FCC rules on robocalls and the do-not-call list?",
 "When must an employer provide respirators to workers?",
 "What are the FDA rules for laser products like laser pointers?",
 "How much lead is allowed in children's toys?",
 "What are the requirements for a USDA Rural Development housing loan?",
 "What are the HUD rules for Section 8 housing vouchers?",
 "How long can a truck driver drive before taking a break?",
 "What are the FDA requirements for hearing aids sold over the counter?",
 "What does the FDA require for menthol cigarettes?",
 "What are the Medicaid rules for home and community-based services waivers?",
 "What are the rules for bringing fruit into the US from Mexico?",
]
ANS = [
 "What nutrients must infant formula contain?",
 "What are FDA's quality standards for bottled water?",
 "How long do I have to sign up for Medicare Part B after my employer coverage ends?",
 "Can a SNAP retailer be fined instead of disqualified?",
 "What is the maximum cost sharing Medicaid can charge for a preferred drug?",
 "What labeling is required for OTC antacid products?",
 "What is the minimum milkfat in cheddar cheese?",
 "How must a pharmacy record a partial fill of a Schedule II prescription?",
 "What is the acidity requirement for acidified foods?",
 "Which color additives can be used in contact lenses?",
]


def dataset_questions(path) -> tuple[list[str], list[str]]:
    """The not_found and the answerable questions of a dataset file (eval/dataset.jsonl's format)."""
    from eval.harness import load_dataset

    rows = load_dataset(path)
    return ([r["question"] for r in rows if r["kind"] == "not_found"],
            [r["question"] for r in rows if r["kind"] != "not_found"])


async def run(dsn: str, sets: tuple[list[str], list[str]] = (NF, ANS), verbose: bool = True) -> int:
    from services.retriever.search import Searcher
    from services.scorer.confidence import ScorerThresholds
    from services.scorer.gates import pre_gate
    from services.scorer.service import load_corpus_stats
    from shared import db
    from shared.config import Settings
    from shared.messages import RetrieveRequest

    pool = await db.create_pool(dsn, max_size=4)
    try:
        searcher = Searcher(pool, Settings().model_copy(update={"database_url": dsn}))
        stats = await load_corpus_stats(pool)
        titles = await db.active_titles(pool)
        for label, questions in zip(("not_found", "answerable"), sets):
            refused = 0
            for question in questions:
                retrieval = await searcher.search(RetrieveRequest(question=question, include_superseded=True))
                pre = pre_gate(question, retrieval, ScorerThresholds(), corpus_titles=titles, corpus_stats=stats)
                is_not_found = not pre.proceed and pre.refusal.reason == "not_found"
                refused += is_not_found
                if verbose or (is_not_found != (label == "not_found")):
                    reason = pre.refusal.reason if not pre.proceed else "proceeds"
                    print(f"{label:10s} {'REFUSED' if is_not_found else 'proceeds':8s} {reason:15s} {question[:90]}")
            print(f"{label}: {refused}/{len(questions)} refused as not_found\n")
    finally:
        await pool.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    from shared.config import Settings
    from shared.supervisor import running_database_url

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url")
    parser.add_argument("--dataset", help="a dataset file (e.g. eval/heldout.jsonl) instead of the probe's questions;"
                        " prints only the questions the gate gets wrong")
    args = parser.parse_args(argv)
    settings = Settings()
    dsn = args.database_url or running_database_url(settings)
    if not dsn:
        sys.exit("no database: pass --database-url, set REGS_DATABASE_URL or start the embedded one with `regs up`")
    if args.dataset:
        return asyncio.run(run(dsn, dataset_questions(args.dataset), verbose=False))
    return asyncio.run(run(dsn))


if __name__ == "__main__":
    sys.exit(main())
