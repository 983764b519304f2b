"""Token id tensors built with numpy from a tokenizer's layout, read off a probe once: what
`tok(a, b, truncation=True, padding=True)` (or `tok(texts, ...)`) gives, for many texts or text pairs at
once and each text tokenized once. The pairing recipe's NLI filter (builders/nlp.py) and the shortcut
labels' text-only models (evaluator/shortcuts/labels.py) build their batches with it."""

from __future__ import annotations

import numpy as np


def pair_layout(tok, max_length: int | None = None) -> dict:
    """Where a tokenizer puts its special tokens around a (first, second) text pair, read off a probe
    pair once: BERT gives [CLS] a [SEP] b [SEP], RoBERTa <s> a </s></s> b </s>. `max_length` bounds a
    pair (default: the model's, at most 512)."""
    a, b = (tok(t, add_special_tokens=False)["input_ids"] for t in ("premise", "hypothesis"))
    full = tok("premise", "hypothesis")
    ids = full["input_ids"]
    start_a = next(k for k in range(len(ids)) if ids[k:k + len(a)] == a)
    start_b = next(k for k in range(start_a + len(a), len(ids)) if ids[k:k + len(b)] == b)
    types = full.get("token_type_ids")
    return {"prefix": ids[:start_a], "middle": ids[start_a + len(a):start_b], "suffix": ids[start_b + len(b):],
            "type_b": (types[start_b] if types else None), "pad": tok.pad_token_id or 0,
            "max_len": max_length or min(int(tok.model_max_length), 512)}


def encode_texts(tok, texts: list[str]) -> list[list[int]]:
    """Token ids of each text without special tokens: a fast tokenizer's Rust batch encoder (the one
    its __call__ uses, without building a BatchEncoding), else the tokenizer itself."""
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is not None:
        return [e.ids for e in backend.encode_batch(texts, add_special_tokens=False)]
    return tok(texts, add_special_tokens=False)["input_ids"]


def pad_rows(n: int, rows, encoded: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """An n-row id matrix with encoded[k] in row rows[k], zero-padded, and each row's length (0 for a
    row not given)."""
    lengths = np.zeros(n, dtype=np.int64)
    lengths[list(rows)] = [len(e) for e in encoded]
    matrix = np.zeros((n, max(1, int(lengths.max(initial=0)))), dtype=np.int64)
    for row, ids in zip(rows, encoded):
        matrix[row, :len(ids)] = ids
    return matrix, lengths


def token_matrix(tok, texts: list[str], used: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Token ids (no special tokens) of the used texts, each tokenized once, padded into a matrix,
    and their lengths."""
    rows = used.tolist()
    return pad_rows(len(texts), rows, encode_texts(tok, [texts[k] for k in rows]))


def truncate_pairs(layout: dict, la: np.ndarray, lb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Longest-first truncation as the fast tokenizers compute it: the shorter side stays whole
    when the longer can take the rest of the room (and no less than the shorter); otherwise the
    shorter gets room // 2 and the longer the remainder (on a tie the second text is the longer)."""
    room = layout["max_len"] - len(layout["prefix"]) - len(layout["middle"]) - len(layout["suffix"])
    short, long = np.minimum(la, lb), np.maximum(la, lb)
    long_t = np.maximum(short, room - short)
    split = short + long_t > room
    short_t = np.where(split, room // 2, short)
    long_t = np.minimum(np.where(split, room // 2 + room % 2, long_t), long)
    fits = la + lb <= room
    a_is_long = la > lb
    new_a = np.where(fits, la, np.where(a_is_long, long_t, short_t))
    new_b = np.where(fits, lb, np.where(a_is_long, short_t, long_t))
    return new_a, new_b


def pair_tensors(layout: dict, matrix: np.ndarray, ua: np.ndarray, ub: np.ndarray, la: np.ndarray,
                 lb: np.ndarray) -> dict:
    """prefix + a + middle + b + suffix for every pair of a batch, padded, built with numpy: what the
    tokenizer gives for the pair (texts[ua_k], texts[ub_k]) truncated to (la_k, lb_k) tokens."""
    import torch

    prefix, middle, suffix = (np.asarray(layout[k], dtype=np.int64) for k in ("prefix", "middle", "suffix"))
    s2 = len(prefix) + la[:, None]
    s3 = s2 + len(middle)
    s4 = s3 + lb[:, None]
    s5 = s4 + len(suffix)
    j = np.arange(int(s5.max()))[None, :]
    width = matrix.shape[1]
    out = np.full((len(ua), j.shape[1]), layout["pad"], dtype=np.int64)
    segments = [(0, len(prefix), lambda k: prefix[np.clip(k, 0, max(0, len(prefix) - 1))] if len(prefix) else k),
                (len(prefix), s2, lambda k: np.take_along_axis(matrix[ua], np.clip(k, 0, width - 1), 1)),
                (s2, s3, lambda k: middle[np.clip(k, 0, max(0, len(middle) - 1))] if len(middle) else k),
                (s3, s4, lambda k: np.take_along_axis(matrix[ub], np.clip(k, 0, width - 1), 1)),
                (s4, s5, lambda k: suffix[np.clip(k, 0, max(0, len(suffix) - 1))] if len(suffix) else k)]
    for start, end, values in segments:
        inside = (j >= start) & (j < end)
        out = np.where(inside, np.broadcast_to(values(j - start), out.shape), out)
    tensors = {"input_ids": torch.from_numpy(out), "attention_mask": torch.from_numpy((j < s5).astype(np.int64))}
    if layout["type_b"] is not None:
        types = np.where((j >= s3) & (j < s5), layout["type_b"], 0).astype(np.int64)
        tensors["token_type_ids"] = torch.from_numpy(types)
    return tensors


def single_layout(tok, max_length: int | None = None) -> dict:
    """Where a tokenizer puts its special tokens around one text, read off a probe text once (BERT:
    [CLS] a [SEP]), and how it pads and truncates. `max_length` bounds a sequence (default: the
    tokenizer's model_max_length)."""
    a = tok("premise", add_special_tokens=False)["input_ids"]
    ids = tok("premise")["input_ids"]
    start = next(k for k in range(len(ids)) if ids[k:k + len(a)] == a)
    return {"prefix": ids[:start], "suffix": ids[start + len(a):], "pad": tok.pad_token_id or 0,
            "max_len": int(max_length or tok.model_max_length), "types": "token_type_ids" in tok.model_input_names,
            "pad_left": tok.padding_side == "left", "cut_left": tok.truncation_side == "left"}


def single_tensors(layout: dict, encoded: list[list[int]]) -> dict:
    """prefix + text + suffix for each text of a batch, truncated and padded as the tokenizer's
    __call__(texts, padding=True, truncation=True) does, built with numpy."""
    import torch

    room = max(0, layout["max_len"] - len(layout["prefix"]) - len(layout["suffix"]))
    rows = [layout["prefix"] + ((ids[len(ids) - room:] if layout["cut_left"] else ids[:room]) if len(ids) > room
                                else ids) + layout["suffix"] for ids in encoded]
    width = max(len(r) for r in rows)
    matrix = np.full((len(rows), width), layout["pad"], dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for k, row in enumerate(rows):
        span = slice(width - len(row), width) if layout["pad_left"] else slice(0, len(row))
        matrix[k, span], mask[k, span] = row, 1
    tensors = {"input_ids": torch.from_numpy(matrix), "attention_mask": torch.from_numpy(mask)}
    if layout["types"]:
        tensors["token_type_ids"] = torch.zeros_like(tensors["input_ids"])
    return tensors
