"""Parser benchmark: throughput over the shipped corpus and memory on a title-sized file.

    .venv/bin/python bench/bench_parse.py [--corpus data/corpus] [--synthetic-mb 100]

Prints one JSON object:
- ``sections_per_s``: units (sections + appendices) per second over all shipped files, median of 3 runs;
- ``largest_file``: peak RSS (ru_maxrss) of a fresh interpreter that parses the largest shipped file, and the
  growth over the same interpreter right before parsing;
- ``synthetic``: the same for a ~100 MB GPO title built in a temp dir by repeating the parts of the largest GPO
  volume inside one CHAPTER. Flat memory = its RSS growth stays close to the 4 MB file's, not 25x larger.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _maxrss_mb() -> float:
    # Linux reports kilobytes
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _current_rss_mb() -> float:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return _maxrss_mb()


def measure_one(path: str) -> dict:
    """Run in a child process: parse ``path`` once, report RSS and time."""
    from services.ingest.parsing import parse_file

    # warm up (imports, regex compilation, lxml init) on a tiny document so they do not count as parse memory
    list(parse_file(ROOT / "tests" / "data" / "xml" / "minimal_ecfr.xml"))
    before = _current_rss_mb()
    started = time.perf_counter()
    units = 0
    samples: list[float] = []
    for _ in parse_file(path):
        units += 1
        if units % 1000 == 0:
            samples.append(round(_current_rss_mb(), 1))  # current RSS along the way: flat = no growth with size
    elapsed = time.perf_counter() - started
    after = _maxrss_mb()
    return {
        "file": Path(path).name,
        "bytes": _size(Path(path)),
        "units": units,
        "seconds": round(elapsed, 3),
        "units_per_s": round(units / elapsed, 1),
        "rss_before_mb": round(before, 1),  # current RSS right before parsing
        "peak_rss_mb": round(after, 1),  # ru_maxrss of the whole child process
        "rss_growth_mb": round(after - before, 1),
        "rss_every_1000_units_mb": samples[:: max(1, len(samples) // 10)],
    }


def _size(path: Path) -> int:
    if path.name.endswith(".gz"):
        with gzip.open(path, "rb") as fh:
            return sum(len(chunk) for chunk in iter(lambda: fh.read(1 << 20), b""))
    return path.stat().st_size


def _child(path: Path) -> dict:
    out = subprocess.run([sys.executable, __file__, "--measure-one", str(path)], check=True, capture_output=True,
                         text=True, cwd=ROOT)
    return json.loads(out.stdout)


def throughput(files: list[Path], runs: int = 3) -> dict:
    from services.ingest.parsing import parse_file

    rates, counts = [], None
    for _ in range(runs):
        started = time.perf_counter()
        sections = appendices = 0
        for path in files:
            for unit in parse_file(path):
                if unit.kind == "section":
                    sections += 1
                else:
                    appendices += 1
        elapsed = time.perf_counter() - started
        rates.append((sections + appendices) / elapsed)
        counts = {"sections": sections, "appendices": appendices, "seconds": round(elapsed, 3)}
    return {"files": len(files), **(counts or {}), "sections_per_s_runs": [round(r, 1) for r in rates],
            "sections_per_s": round(statistics.median(rates), 1)}


def build_synthetic(source_gz: Path, target: Path, megabytes: int) -> int:
    """Repeat the PARTs of one GPO volume inside its CHAPTER until the file is ~``megabytes`` MB."""
    data = gzip.decompress(source_gz.read_bytes())
    start = data.index(b"<CHAPTER>") + len(b"<CHAPTER>")
    end = data.rindex(b"</CHAPTER>")
    body = data[start:end]
    copies = max(1, (megabytes << 20) // len(body))
    with open(target, "wb") as fh:
        fh.write(data[:start])
        for _ in range(copies):
            fh.write(body)
        fh.write(data[end:])
    return copies


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default=str(ROOT / "data" / "corpus"))
    ap.add_argument("--synthetic-mb", type=int, default=100)
    ap.add_argument("--measure-one")
    args = ap.parse_args()
    if args.measure_one:
        print(json.dumps(measure_one(args.measure_one)))
        return

    from services.ingest.parsing import shipped_corpus_files

    files = shipped_corpus_files(args.corpus)
    result: dict = {"throughput": throughput(files)}
    result["sections_per_s"] = result["throughput"]["sections_per_s"]
    largest = max(files, key=_size)
    result["largest_file"] = _child(largest)
    with tempfile.TemporaryDirectory(prefix="regs-bench-") as tmp:
        synthetic = Path(tmp) / "CFR-synthetic-title21.xml"
        copies = build_synthetic(largest, synthetic, args.synthetic_mb)
        result["synthetic"] = {"copies_of_largest_volume": copies, **_child(synthetic)}
    small, big = result["largest_file"], result["synthetic"]
    result["memory_flat"] = {
        "size_ratio": round(big["bytes"] / small["bytes"], 1),
        "rss_growth_ratio": round(big["rss_growth_mb"] / max(small["rss_growth_mb"], 0.1), 2),
    }
    result["python"] = sys.version.split()[0]
    result["cpu_count"] = os.cpu_count()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
