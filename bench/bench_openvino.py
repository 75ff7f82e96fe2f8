"""A one-off comparison for the ingest issue's embedding target: is OpenVINO (bf16, or int8 by NNCF static
quantisation on AMX) faster than the shipped torch-bf16 backend for all-MiniLM-L6-v2 on this CPU?

    .venv/bin/pip install openvino nncf        # not dependencies of regs
    .venv/bin/python bench/bench_openvino.py [--database-url URL] [--sections 600]

Reads ``--sections`` active sections from the database, cuts them into the ingest's windows, and embeds the same
length-bucketed batches with torch-bf16 (``LocalEmbedder``), OpenVINO bf16 and OpenVINO int8 (the ONNX export the
``onnx`` backend caches under ``.regs/models``). Prints windows/s, tokens/s and the cosine of each to torch-bf16.
2026-11-30 (2 cores, AMX): torch-bf16 159 windows/s (31.9k tokens/s); OpenVINO bf16 159–161 (32.2k); OpenVINO
int8 (bf16 elsewhere) 144, int8 (f32 elsewhere) 130, cosine to torch-bf16 ≥ 0.991 (mean 0.997). No faster path.
"""
from __future__ import annotations

import argparse
import asyncio
import glob
import os
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--database-url", default=os.environ.get("REGS_DATABASE_URL",
                                                             "postgresql://postgres@127.0.0.1:54329/regs"))
    ap.add_argument("--sections", type=int, default=600)
    args = ap.parse_args()

    import asyncpg
    import nncf
    import openvino as ov

    from shared.embeddings import PAD_TO, LocalEmbedder, _Tokens, model_dir, section_windows

    async def load():
        conn = await asyncpg.connect(args.database_url)
        try:
            return await conn.fetch("SELECT part_heading, heading, text FROM sections WHERE status = 'active' "
                                    "ORDER BY id LIMIT $1 OFFSET 1000", args.sections)
        finally:
            await conn.close()

    texts = [w for r in asyncio.run(load())
             for w in section_windows(r["part_heading"] or "", r["heading"], r["text"], words=150, stride=120,
                                      max_windows=24)]
    batches = [(rows, ids.astype(np.int64), mask.astype(np.int64))
               for rows, ids, mask in _Tokens(model_dir()).batches(texts, 64, 8192, PAD_TO)]
    tokens = sum(int(m.sum()) for _, _, m in batches)

    embedder = LocalEmbedder(backend="torch-bf16")
    embedder.embed_documents(texts[:64])
    started = time.perf_counter()
    reference = embedder.embed_documents(texts)
    seconds = time.perf_counter() - started
    print(f"torch-bf16: {len(texts) / seconds:.1f} windows/s, {tokens / seconds:.0f} tokens/s ({len(texts)} windows)")

    onnx = sorted(glob.glob(".regs/models/*-onnx-*/model.onnx"))
    if not onnx:
        LocalEmbedder(backend="onnx")  # exports and caches the ONNX graph
        onnx = sorted(glob.glob(".regs/models/*-onnx-*/model.onnx"))
    core = ov.Core()
    model = core.read_model(onnx[-1])
    calibration = [{"input_ids": ids, "attention_mask": mask} for _, ids, mask in batches[::4][:30]]
    quantised = nncf.quantize(model, nncf.Dataset(calibration), model_type=nncf.ModelType.TRANSFORMER,
                              subset_size=len(calibration))
    for label, graph, hint in (("openvino bf16", model, "bf16"), ("openvino int8, bf16 elsewhere", quantised, "bf16"),
                               ("openvino int8, f32 elsewhere", quantised, "f32")):
        compiled = core.compile_model(graph, "CPU", {"INFERENCE_PRECISION_HINT": hint, "PERFORMANCE_HINT": "LATENCY",
                                                     "INFERENCE_NUM_THREADS": str(os.cpu_count() or 1)})
        request = compiled.create_infer_request()
        out = np.empty((len(texts), 384), np.float32)
        for _, ids, mask in batches[:3]:
            request.infer({"input_ids": ids, "attention_mask": mask})
        started = time.perf_counter()
        for rows, ids, mask in batches:
            out[rows] = list(request.infer({"input_ids": ids, "attention_mask": mask}).values())[0]
        seconds = time.perf_counter() - started
        out /= np.linalg.norm(out, axis=1, keepdims=True)
        cosine = (out * reference).sum(1)
        print(f"{label}: {len(texts) / seconds:.1f} windows/s, {tokens / seconds:.0f} tokens/s; cosine to "
              f"torch-bf16 min {cosine.min():.4f} mean {cosine.mean():.5f}")


if __name__ == "__main__":
    main()
