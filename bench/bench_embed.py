"""Local embedding benchmark: throughput, memory and quality of each backend against the torch fp32 reference.

    .venv/bin/python bench/bench_embed.py [--limit N] [--subset 600] [--repeats 3]
                                          [--backends torch,torch-bf16,onnx,onnx-int8] [--no-full]

Parses the shipped corpus (``--limit N``: its first N sections), builds the windows ingest embeds
(``section_windows`` with the default settings) and runs every backend in a fresh interpreter (own threads,
own peak RSS). Prints one JSON object:

- per backend ``speed``: windows/s and sections/s over a fixed subset (every k-th section, ``--subset``
  sections, all their windows), median of ``--repeats`` runs after a warm-up; ``load_s`` (first use: includes
  the ONNX export/quantisation into a fresh cache dir); ``peak_rss_mb`` of the worker;
- per backend ``quality`` against ``torch``: mean / min / p1 cosine of the subset's window vectors, and for
  ~100 plain-English questions the top-10 (and top-1) nearest-neighbour agreement over the section vectors
  (one vector per section: its first window, ~3,800 sections);
- ``full``: the chosen backend (the one ``auto`` resolves to) on every window of the corpus, fed in chunks of
  256 windows as the ingest pipeline does, end to end (windowing + tokenising + embedding), and also with the
  parse time of the XML included.
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

QUERIES = [
    # food labeling
    "What nutrients must be listed on the Nutrition Facts label?",
    "How must serving size be declared on a food label?",
    "When can a food be labeled low sodium?",
    "What does the term 'healthy' mean on food packaging?",
    "How should ingredients be listed on a food label, in what order?",
    "Which major food allergens must be declared on the label?",
    "What are the requirements for the principal display panel?",
    "Can a food label say 'fat free' if it has some fat?",
    "What is required for a health claim about calcium and osteoporosis?",
    "How must net quantity of contents be stated on a package?",
    "What labeling is required for foods sold in vending machines?",
    "When must added sugars be declared?",
    "What are the rules for 'gluten-free' labeling?",
    "How is the percent daily value calculated for vitamins?",
    "What does 'lite' or 'light' mean on a food label?",
    "Are restaurants required to post calorie information on menus?",
    "How must juice beverages declare the percentage of juice?",
    "What labeling is required for dietary supplements?",
    "When can a manufacturer use the word 'natural' or 'fresh'?",
    "What are the requirements for nutrient content claims like 'high fiber'?",
    # cheese and other standards of identity
    "What is the minimum milkfat content of gouda cheese?",
    "How long must cheddar cheese be aged?",
    "What is the standard of identity for cream cheese?",
    "How much moisture can mozzarella cheese contain?",
    "What ingredients are allowed in pasteurized process cheese?",
    "Can cheese be made from unpasteurized milk?",
    "What is the definition of cottage cheese?",
    "What is the standard for Swiss cheese with eyes?",
    "What is required for parmesan cheese?",
    "How is ice cream defined and how much milkfat must it have?",
    "What is the standard of identity for yogurt?",
    "What are the requirements for canned tuna?",
    "What is the definition of peanut butter?",
    "How is enriched bread defined?",
    "What is the standard of identity for mayonnaise?",
    "What are the requirements for fruit jelly and preserves?",
    "How is milk chocolate defined?",
    "What are the standards for canned peaches?",
    "What is the standard for frozen orange juice concentrate?",
    "What is macaroni and what ingredients may it contain?",
    # DEA / controlled substances
    "Is fentanyl a Schedule II controlled substance?",
    "Which drugs are listed in Schedule I?",
    "What substances are in Schedule IV?",
    "How does a pharmacy register with the DEA?",
    "What records must a registrant keep for controlled substances?",
    "Can a practitioner prescribe Schedule II drugs by telephone?",
    "How often must a DEA registration be renewed?",
    "What is required to import controlled substances?",
    "How should controlled substances be disposed of?",
    "What security controls are required for storing Schedule II drugs?",
    "What are the requirements for a DEA Form 222 order?",
    "How is a List I chemical regulated?",
    "Can a pharmacist refill a Schedule III prescription?",
    "What are the rules for electronic prescriptions for controlled substances?",
    "What quotas apply to manufacturing controlled substances?",
    "How do narcotic treatment programs dispense methadone?",
    "What must be reported when controlled substances are stolen or lost?",
    "Who is exempt from DEA registration?",
    "What are the rules for online pharmacies selling controlled substances?",
    "How is marijuana scheduled?",
    # Medicare / Medicaid
    "Who is entitled to Medicare Part A hospital insurance?",
    "When is the initial enrollment period for Medicare Part B?",
    "What is the general enrollment period for supplementary medical insurance?",
    "How is the Medicare Part B premium calculated?",
    "What is the late enrollment penalty for Part B?",
    "Can someone with end-stage renal disease get Medicare?",
    "What is a special enrollment period for people with group health coverage?",
    "How does a state buy-in agreement pay Medicare premiums?",
    "When does Medicare Part B coverage end?",
    "Are premiums deducted from Social Security benefits?",
    "How do Medicaid payments for outpatient drugs work?",
    "What are the limits on Medicaid cost sharing and copayments?",
    "How are disproportionate share hospital payments calculated?",
    "Who is eligible for Medicaid in Puerto Rico and Guam?",
    "How are payments for physician services under Medicaid set?",
    # SNAP and food assistance
    "How does a store become an authorized SNAP retailer?",
    "What stock requirements must a SNAP retailer meet?",
    "What happens if a retailer is caught trafficking SNAP benefits?",
    "How are SNAP benefits calculated for a household?",
    "What income limits apply for SNAP eligibility?",
    "What are the work requirements for able-bodied adults in SNAP?",
    "How does a household apply for SNAP benefits?",
    "What is expedited service for SNAP applicants?",
    "Can college students receive SNAP?",
    "How are EBT cards issued and replaced?",
    "What penalties apply to SNAP retailers for selling ineligible items?",
    "How long is a SNAP certification period?",
    "Who is eligible for the Commodity Supplemental Food Program?",
    "What foods are provided in the Commodity Supplemental Food Program?",
    "How are SNAP overpayment claims collected?",
    # drugs, devices, cosmetics, misc
    "What must be included in an investigational new drug application?",
    "What are the current good manufacturing practice requirements for drugs?",
    "How must over-the-counter drug labels show active ingredients?",
    "What are the requirements for informed consent in clinical trials?",
    "How are color additives approved for use in food?",
    "What warnings must appear on cosmetic labels?",
    "How are blood products licensed?",
    "What records must a food facility keep for traceability?",
    "What is required in a new drug application?",
    "How are drug establishments registered with FDA?",
]

WINDOW_KW = {}


def _maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def load_sections(limit: int | None):
    from services.ingest.parsing import parse_file, shipped_corpus_files
    from shared.config import Settings

    settings = Settings()
    started = time.perf_counter()
    sections = []
    for path in shipped_corpus_files(settings.corpus_dir):
        for s in parse_file(path):
            if s.reserved or s.removed:
                continue
            sections.append((s.cfr_ref, s.breadcrumb(), s.heading, s.text))
            if limit and len(sections) >= limit:
                break
        if limit and len(sections) >= limit:
            break
    return sections, time.perf_counter() - started


def windows_of(sections, settings) -> list[list[str]]:
    from shared.embeddings import section_windows

    return [section_windows(b, h, t, words=settings.embedding_window_words, stride=settings.embedding_window_stride,
                            max_windows=settings.embedding_max_windows) for _, b, h, t in sections]


def subset_of(sections, n: int):
    step = max(1, len(sections) // n)
    return sections[::step][:n]


# ---------------------------------------------------------------------------------------------- worker
def worker(args) -> None:
    """One backend in this interpreter: load, speed on the subset, vectors for quality, optional full run."""
    import numpy as np

    from shared.config import Settings
    from shared.embeddings import LocalEmbedder

    job = pickle.loads(Path(args.job).read_bytes())
    settings = Settings()
    started = time.perf_counter()
    embedder = LocalEmbedder(backend=args.worker, batch_size=settings.embedding_batch_size,
                             threads=settings.embedding_threads, batch_tokens=settings.embedding_batch_tokens,
                             cache_dir=Path(job["cache_dir"]))
    load_s = time.perf_counter() - started
    subset = job["subset"]
    sub_windows = [w for ws in windows_of(subset, settings) for w in ws]
    embedder.embed_documents(sub_windows[:64])  # warm-up (thread pools, oneDNN primitives)
    runs = []
    for _ in range(job["repeats"]):
        started = time.perf_counter()
        sub_vectors = embedder.embed_documents(sub_windows)
        runs.append(time.perf_counter() - started)
    seconds = statistics.median(runs)
    first_windows = [ws[0] for ws in windows_of(job["sections"], settings)]
    section_vectors = embedder.embed_documents(first_windows)
    query_vectors = embedder.embed_queries(QUERIES)
    out = {
        "backend": embedder.backend, "model_name": embedder.model_name, "threads": embedder.threads,
        "load_s": round(load_s, 2),
        "speed": {"sections": len(subset), "windows": len(sub_windows), "runs_s": [round(r, 2) for r in runs],
                  "windows_per_s": round(len(sub_windows) / seconds, 1),
                  "sections_per_s": round(len(subset) / seconds, 1)},
    }
    if job["full"]:
        sections = job["sections"]
        started = time.perf_counter()
        windows = [w for ws in windows_of(sections, settings) for w in ws]
        chunk = max(64, settings.embedding_batch_size * 4)  # what services/ingest/pipeline.py hands over
        for start in range(0, len(windows), chunk):
            embedder.embed_documents(windows[start : start + chunk])
        seconds = time.perf_counter() - started
        out["full"] = {"sections": len(sections), "windows": len(windows), "chunk": chunk, "seconds": round(seconds, 1),
                       "windows_per_s": round(len(windows) / seconds, 1),
                       "sections_per_s": round(len(sections) / seconds, 1),
                       "sections_per_s_incl_parse": round(len(sections) / (seconds + job["parse_s"]), 1)}
    out["peak_rss_mb"] = round(_maxrss_mb(), 1)
    np.savez(args.out, sub=sub_vectors, sections=section_vectors, queries=query_vectors)
    Path(args.out + ".json").write_text(json.dumps(out))


# ---------------------------------------------------------------------------------------------- parent
def quality(ref, got) -> dict:
    import numpy as np

    cos = (ref["sub"] * got["sub"]).sum(1)
    k = 10
    top_ref = np.argsort(-(ref["queries"] @ ref["sections"].T), axis=1)[:, :k]
    top_got = np.argsort(-(got["queries"] @ got["sections"].T), axis=1)[:, :k]
    overlap = [len(set(a) & set(b)) / k for a, b in zip(top_ref, top_got)]
    return {"windows": int(len(cos)), "cos_mean": round(float(cos.mean()), 5), "cos_min": round(float(cos.min()), 5),
            "cos_p1": round(float(np.percentile(cos, 1)), 5), "queries": len(QUERIES),
            "top10_overlap_mean": round(float(np.mean(overlap)), 3),
            "top10_overlap_min": round(float(np.min(overlap)), 2),
            "top1_agreement": round(float(np.mean(top_ref[:, 0] == top_got[:, 0])), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=int, default=None, help="use only the first N sections of the corpus")
    ap.add_argument("--subset", type=int, default=600, help="sections in the timed subset")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--backends", default="torch,torch-bf16,onnx,onnx-int8")
    ap.add_argument("--no-full", action="store_true", help="skip the full-corpus run of the chosen backend")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--job", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return

    import numpy as np

    from shared.config import Settings
    from shared.embeddings import available_cores, native_bf16, resolve_backend

    settings = Settings()
    chosen = resolve_backend(settings.embedding_backend)
    sections, parse_s = load_sections(args.limit)
    subset = subset_of(sections, args.subset)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if "torch" not in backends:
        backends.insert(0, "torch")
    result = {"corpus_sections": len(sections), "parse_s": round(parse_s, 2), "cores": available_cores(),
              "native_bf16": native_bf16(), "auto_backend": chosen,
              "load_avg_start": [round(x, 2) for x in os.getloadavg()], "backends": {}}
    with tempfile.TemporaryDirectory(prefix="bench-embed-") as tmp:
        job = Path(tmp) / "job.pkl"
        for backend in backends:
            job.write_bytes(pickle.dumps({"sections": sections, "subset": subset, "repeats": args.repeats,
                                          "full": backend == chosen and not args.no_full, "parse_s": parse_s,
                                          "cache_dir": str(Path(tmp) / "models")}))
            out = str(Path(tmp) / f"{backend}.npz")
            print(f"[bench_embed] {backend} ...", file=sys.stderr, flush=True)
            subprocess.run([sys.executable, __file__, "--worker", backend, "--job", str(job), "--out", out],
                           check=True, cwd=ROOT)
            result["backends"][backend] = json.loads(Path(out + ".json").read_text())
        ref = np.load(str(Path(tmp) / "torch.npz"))
        for backend in backends:
            got = np.load(str(Path(tmp) / f"{backend}.npz"))
            result["backends"][backend]["quality_vs_torch"] = quality(ref, got)
    base = result["backends"]["torch"]["speed"]["windows_per_s"]
    for r in result["backends"].values():
        r["speedup_vs_torch"] = round(r["speed"]["windows_per_s"] / base, 2)
    result["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
