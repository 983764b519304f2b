"""`hf:` generative vision-language models: checkpoints of transformers' image-text-to-text family
(`AutoModelForImageTextToText`: Qwen2-VL / Qwen2.5-VL, LLaVA, LLaVA-OneVision, Idefics3 / SmolVLM,
PaliGemma, Gemma 3, InternVL...) loaded with their processor and run by transformers in-process, on the
templated base (evaluator/models/templated.py), answering the two things a benchmark asks of them
(evaluator/models/ask.py):

- `generate`: decoding of the user turn (the processor's chat template, the images inside the message
  content), greedy unless `--gen-kwargs` says otherwise (evaluator/models/generation.py), batched with left
  padding; only the new tokens are decoded.
- `score`: the log-likelihood of each continuation (an answer, a response, a dialogue option) given
  the user turn: the sum of its tokens' log-probabilities (or their mean). A context with many
  continuations (VisDial's 100 options) is run once; its keys and values are reused for the
  continuations in batches (`score_cached`), instead of 100 full sequences (`score_full`).
"""

from __future__ import annotations

import copy

from core.errors import ModelError
from core.model_files import load_pretrained
from evaluator.models.backend import Turn
from evaluator.models.images import open_image
from evaluator.models.options import ModelOptions
from evaluator.models.templated import TemplatedVLM

DTYPES = ("auto", "float32", "bfloat16", "float16")
ATTENTION = ("eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")
DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")
PREFIX_CACHE_MIN_CONTINUATIONS = 8  # fewer continuations per context are batched as full sequences


class TransformersVLM(TemplatedVLM):
    """`hf:`: a loaded image-text-to-text checkpoint and its processor, run by transformers."""

    auto_model = "AutoModelForImageTextToText"  # the transformers class the weights load with

    def __init__(self, path: str, config, options: ModelOptions, chat_template: str | None = None):
        import torch
        import transformers

        from core.torch_runtime import torch_device
        from evaluator.models.distributed import local_device

        if options.dtype not in DTYPES:
            raise ModelError(f"--dtype {options.dtype}: expected one of {', '.join(DTYPES)}")
        for value, known, flag in ((options.attn_implementation, ATTENTION, "--attn-implementation"),
                                   (options.device_map, DEVICE_MAPS, "--device-map")):
            if value is not None and value not in known:
                raise ModelError(f"{flag} {value}: expected one of {', '.join(known)}")
        super().__init__(path, config, options, chat_template)
        self.device = torch_device(local_device(options.device))
        dtype = options.dtype if options.dtype != "auto" else "bfloat16" if self.device.type == "cuda" else "float32"
        self.dtype = dtype
        loading = {k: getattr(options, k) for k in ("revision", "attn_implementation", "device_map")
                   if getattr(options, k) is not None}
        if options.device_map is not None:
            _need_accelerate()
        self.model = load_pretrained(getattr(transformers, self.auto_model), path, self.spec,
                                     dtype=getattr(torch, dtype), **loading)
        if options.device_map is None:
            self.model.to(self.device)
        else:  # spread over the devices: inputs go where the model's embeddings are
            self.device = self.model.device
        self.model.eval()
        self.identity |= {"dtype": dtype, "device": self.device.type,
                          "attn_implementation": options.attn_implementation}

    def _encode(self, turns: list[Turn], padding_side: str) -> dict:
        images = [[open_image(source) for source in t.images] for t in turns]
        kwargs = {"images": images} if any(images) else {}
        texts = [self.prompt_text(t) for t in turns]
        enc = dict(self.processor(text=texts, return_tensors="pt", padding=True, padding_side=padding_side,
                                  **kwargs, **self.special_tokens(texts)))
        enc.pop("labels", None)  # PaliGemma's processor adds training labels: never a model input here
        return enc

    def to_device(self, enc: dict) -> dict:
        import torch

        return {k: (v.to(self.device, dtype=self.model.dtype) if torch.is_floating_point(v) else v.to(self.device))
                if hasattr(v, "to") else v for k, v in enc.items()}

    # -- generation -------------------------------------------------------------------------------
    def _generate(self, turns: list[Turn], todo: list[int], generation):
        """Batches of similar prompt length, left-padded; only the new tokens are decoded."""
        import torch

        kwargs = generation.generate_kwargs()
        if generation.stop:
            kwargs |= {"stop_strings": list(generation.stop), "tokenizer": self.tokenizer}
        if generation.sampling:
            torch.manual_seed(self.options.seed)
        order = sorted(todo, key=lambda i: (len(turns[i].images), len(turns[i].text)))
        batches = [order[b:b + self.batch_size] for b in range(0, len(order), self.batch_size)]
        with torch.inference_mode():
            for idx, enc in _prefetched(batches, lambda idx: self._encode([turns[i] for i in idx], "left"),
                                        self.device.type != "cpu"):
                self.check_length(enc["input_ids"].shape[1], generation.max_new_tokens)
                enc = self.to_device(enc)
                generated = self.model.generate(**enc, **kwargs, pad_token_id=self.tokenizer.pad_token_id)
                yield idx, self.decode(generated[:, enc["input_ids"].shape[1]:])

    # -- log-likelihoods --------------------------------------------------------------------------
    def _score(self, turns: list[Turn], distinct: list[list[str]], todo: list[int]):
        """Turns with many distinct continuations run their context once (score_cached); the others
        are batched as full sequences (score_full), one turn's continuations together and never with another
        turn's: padding and the batch's shape then depend on the turn alone, so its scores are the same bits
        whatever other rows are scored in the run (a shard of it, a subset, another order)."""
        few = [i for i in todo if len(distinct[i]) < PREFIX_CACHE_MIN_CONTINUATIONS]
        many = [i for i in todo if len(distinct[i]) >= PREFIX_CACHE_MIN_CONTINUATIONS]
        for i in few:
            yield [i], [self.score_full([turns[i]] * len(distinct[i]), distinct[i])]
        for i in many:
            yield [i], [self.score_cached(turns[i], distinct[i])]

    def score_full(self, turns: list[Turn], continuations: list[str]) -> list[float]:
        """log P(continuation | turn) for each (turn, continuation), each run as one full sequence;
        batches of similar length, right-padded so that every sequence keeps its positions."""
        import torch

        order = sorted(range(len(turns)), key=lambda i: (len(turns[i].images), len(turns[i].text)
                                                        + len(continuations[i])))
        out = [0.0] * len(turns)

        def prepare(idx: list[int]):
            conts = self.continuation_ids([self.prompt_text(turns[i]) for i in idx], [continuations[i] for i in idx])
            return append_continuations(self._encode([turns[i] for i in idx], "left"), conts,
                                        self.tokenizer.pad_token_id, self.answer_token_type)

        batches = [order[b:b + self.batch_size] for b in range(0, len(order), self.batch_size)]
        with torch.inference_mode():
            for idx, (enc, spans) in _prefetched(batches, prepare, self.device.type != "cpu"):
                self.check_length(enc["input_ids"].shape[1])
                logits = self.model(**self.to_device(enc)).logits.float()
                logprobs = torch.log_softmax(logits, dim=-1)
                for row, (i, (start, cont)) in enumerate(zip(idx, spans)):
                    positions = torch.arange(start - 1, start - 1 + len(cont), device=logprobs.device)
                    token_lp = logprobs[row, positions, torch.as_tensor(cont, device=logprobs.device)]
                    out[i] = self._reduce(token_lp, len(cont))
        return out

    def score_cached(self, turn: Turn, continuations: list[str]) -> list[float]:
        """log P(continuation | turn) for many continuations of one turn: the turn (image and text) runs
        once with its key/value cache; each batch of continuations extends a copy of that cache."""
        conts = self.continuation_ids([self.prompt_text(turn)] * len(continuations), continuations)
        enc = self._encode([turn], "left")
        self.check_length(enc["input_ids"].shape[1] + max(map(len, conts)))
        token_lps, _ = self.extend_prefix(self.to_device(enc), conts)
        return [self._reduce(lp, len(c)) for lp, c in zip(token_lps, conts)]

    @property
    def _cache_argument(self) -> str:
        """The forward argument that takes a key/value cache: `cache` in transformers >= 5.24
        (`past_key_values` is deprecated there), `past_key_values` before."""
        import inspect

        return "cache" if "cache" in inspect.signature(self.model.forward).parameters else "past_key_values"

    def extend_prefix(self, enc: dict, sequences: list[list[int]], gather: list[int] = ()):
        """One encoded prefix (a single unpadded turn, on the device) run once with its key/value cache;
        each batch of token sequences extends a copy of that cache. Returns per sequence the
        log-probability of each of its tokens (a float tensor), and the full-vocabulary log-probabilities
        at its end gathered at the token ids `gather` ((len(sequences), len(gather)); an empty sequence
        ends where the prefix does)."""
        import torch

        gather_ids = torch.as_tensor(list(gather), dtype=torch.long, device=self.device)
        with torch.inference_mode():
            prefix = self.model(**enc, use_cache=True, logits_to_keep=1)  # the vocabulary at the last position only
            first = torch.log_softmax(prefix.logits[0, -1].float(), dim=-1)
            cache, length = prefix.past_key_values, enc["input_ids"].shape[1]
            token_lps: list = [first[:0]] * len(sequences)
            ends = first[gather_ids].expand(len(sequences), len(gather_ids)).clone()
            todo = [k for k, c in enumerate(sequences) if c]
            for b in range(0, len(todo), self.batch_size):
                rows = todo[b:b + self.batch_size]
                width = max(len(sequences[k]) for k in rows)
                ids = torch.full((len(rows), width), self.tokenizer.pad_token_id, dtype=torch.long)
                for r, k in enumerate(rows):
                    ids[r, :len(sequences[k])] = torch.as_tensor(sequences[k])
                batch_cache = copy.deepcopy(cache)  # one copy of the prefix's row per sequence: every layer kind
                batch_cache.reorder_cache(torch.zeros(len(rows), dtype=torch.long, device=self.device))  # hybrid too
                # No attention mask: the prefix has no padding and the sequences are right-padded, so a
                # causal model's real tokens never see a pad; positions follow from the cache (M-RoPE
                # models add the offset their prefix pass stored).
                logits = self.model(input_ids=ids.to(self.device), **{self._cache_argument: batch_cache},
                                    use_cache=True,
                                    cache_position=torch.arange(length, length + width, device=self.device)).logits
                logprobs = torch.log_softmax(logits.float(), dim=-1)
                for r, k in enumerate(rows):
                    n = len(sequences[k])
                    tokens = torch.as_tensor(sequences[k], device=logprobs.device)
                    token_lps[k] = torch.cat([first[tokens[:1]], logprobs[r, torch.arange(n - 1), tokens[1:]]])
                    ends[k] = logprobs[r, n - 1, gather_ids]
            return token_lps, ends

    def describe(self) -> dict:
        """What the prediction's metadata file records about the model."""
        import torch
        import transformers

        return {**self.describe_prompts(), "class": type(self.model).__name__, "dtype": self.dtype,
                "device": str(self.device), "batch_size": self.batch_size,
                **{k: str(getattr(self.options, k)) for k in ("attn_implementation", "device_map")
                   if getattr(self.options, k) is not None},
                "versions": {"transformers": transformers.__version__, "torch": torch.__version__},
                **self.cache_stats()}


def _need_accelerate() -> None:
    try:
        import accelerate  # noqa: F401
    except ImportError:
        raise ModelError("--device-map needs accelerate: pip install accelerate") from None


def _prefetched(batches: list, prepare, overlap: bool = True):
    """(batch, prepare(batch)) in order. With `overlap`, the next batch is prepared in a thread while
    the caller runs the model on the current one (image decoding and the processor overlap the forward
    passes on an accelerator; both release the GIL for most of their work). On the CPU the forward
    passes use every core already, and a thread preparing the next batch competes with them (a tiny
    model's run was 5% slower with it on two cores, a larger one's no faster): batches are prepared in
    turn."""
    from concurrent.futures import ThreadPoolExecutor

    if not overlap:
        for batch in batches:
            yield batch, prepare(batch)
        return
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(prepare, batches[0]) if batches else None
        for k, batch in enumerate(batches):
            ready = pending.result()
            pending = pool.submit(prepare, batches[k + 1]) if k + 1 < len(batches) else None
            yield batch, ready


def append_continuations(enc: dict, continuations: list[list[int]], pad_id: int, token_type: int = 0,
                         ) -> tuple[dict, list]:
    """Left-padded prompts + their continuations -> each row `prompt + continuation` from position 0,
    right-padded. Per-token tensors (ids, mask, token types; a per-token mask over images, Llama 3.2 Vision's
    cross-attention mask) move with the tokens; the rest (pixels, image grids) stay. A continuation's tokens
    get `token_type` (PaliGemma's suffix: 1) in the token-type tensors, 0 in the other per-token ids, and in a
    per-token image mask the last prompt token's row (what transformers' generation does for each new token
    of Llama 3.2 Vision: an answer sees the images its prompt saw). Returns the encoding and per row
    (continuation start, continuation ids)."""
    import torch

    ids, mask = enc["input_ids"], enc["attention_mask"]
    per_token = [k for k, v in enc.items() if hasattr(v, "shape") and tuple(v.shape[:2]) == tuple(ids.shape)
                 and (v.dim() == 2 or k.endswith("attention_mask"))]
    lengths = mask.sum(dim=1).tolist()
    width = max(n + len(c) for n, c in zip(lengths, continuations))
    out = {k: torch.zeros((ids.shape[0], width, *enc[k].shape[2:]), dtype=enc[k].dtype) for k in per_token}
    out["input_ids"].fill_(pad_id)
    spans = []
    for r, (n, cont) in enumerate(zip(lengths, continuations)):
        for k in per_token:
            out[k][r, :n] = enc[k][r, ids.shape[1] - n:]
            if enc[k].dim() > 2:  # an image mask per token: the continuation sees what the prompt's last token saw
                out[k][r, n:n + len(cont)] = enc[k][r, -1]
        out["input_ids"][r, n:n + len(cont)] = torch.as_tensor(cont)
        out["attention_mask"][r, n:n + len(cont)] = 1
        if "token_type_ids" in out:
            out["token_type_ids"][r, n:n + len(cont)] = token_type
        spans.append((n, cont))
    return {**enc, **out}, spans
