"""The templated base of the backends that run a checkpoint's processor and chat template here (`hf:`,
transformers in-process, evaluator/models/transformers_vlm.py; `vllm:`, evaluator/models/vllm_engine.py):
the prompts, the answer lead, the continuations' tokens and the response-cache keys are built once, the
same way, for both; `generate` and `score` answer from the response cache what it holds and ask the
subclass (`_generate`, `_score`) for the rest."""

from __future__ import annotations

import dataclasses
import json
from abc import abstractmethod

from core.errors import ModelError
from evaluator.models.backend import Turn, VLMBackend
from evaluator.models.families import prefix_format
from evaluator.models.options import ModelOptions
from evaluator.models.reasoning import ANSWER_WRAPPERS, DEFAULT_TAGS, Reasoning, answer_budget, thinking_switched_on
from evaluator.models.response_cache import ResponseCache, folder_identity, image_digest, request_key, vlbench_version
from evaluator.models.template_kwargs import check_template_reads
from evaluator.models.vlm_checkpoint import load_processor, size_dict, snapshot_revision, template_text

IMAGE_MARKERS = ("image_token", "boi_token", "start_image_token")  # processor attributes naming image markers
SEAM_CHARACTERS = 64  # how much of a prompt is tokenised with a continuation to find the seam between them


class TemplatedVLM(VLMBackend):
    """A checkpoint whose processor and chat template run here (`hf:` and `vllm:`): the prompts, the
    continuations' tokens and the response-cache keys are built once, the same way, for both; a
    subclass runs the model (`_generate`, `_score`, `describe`)."""

    prefix = "hf"  # the spec's kind

    def __init__(self, path: str, config, options: ModelOptions, chat_template: str | None = None):
        from evaluator.models.generation import Generation

        if options.loglik not in ("sum", "mean"):
            raise ModelError(f"--loglik {options.loglik}: expected sum or mean")
        self.path, self.options, self.spec = path, options, f"{self.prefix}:{path}"
        self.processor, self.note = self._load_processor(path, config, options)
        self._bound_pixels(options)
        self.tokenizer = self._tokenizer_of(self.processor)
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if chat_template is not None:
            self.processor.chat_template = chat_template
        self.prefix_format = prefix_format(config, chat_template)
        self.template_kwargs = dict(options.chat_template_kwargs)
        if self.prefix_format is not None:  # prompted by its documented prefix (evaluator/models/families.py)
            given = "--system-prompt" if options.system_prompt else "--chat-template-kwarg" if self.template_kwargs \
                else None
            if given:
                raise ModelError(f"{given}: {self.spec} is prompted by its {config.model_type} prefix format, which "
                                 "has no system turn and no chat template")
        elif getattr(self.processor, "chat_template", None) is None:
            raise ModelError(f"{self.spec}: the processor has no chat template and a {config.model_type} model has no "
                             "documented prompt format here (not an instruction-tuned VLM?); --chat-template FILE "
                             "gives one")
        else:
            check_template_reads(self.template_kwargs, template_text(self.processor.chat_template), self.spec)
        self.reasoning = Reasoning(options.reasoning_tags or DEFAULT_TAGS)
        self.thinking_opened = self.reasoning.opened_by(self.prompt_text(Turn("?")))
        self.thinking = self.thinking_opened is not None or thinking_switched_on(self.template_kwargs)
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        self.context_length: int | None = getattr(text, "max_position_embeddings", None)
        self.generation = Generation(answer_budget(options, self.thinking, self.context_length),
                                     tuple(options.gen_kwargs), tuple(options.stop))
        self._kept_special = self._marker_special_ids()
        self.revision = options.revision or snapshot_revision(path, config)
        self.batch_size = options.batch_size
        if self.context_length is not None and self.generation.max_new_tokens >= self.context_length:
            raise ModelError(f"--max-new-tokens {self.generation.max_new_tokens}: {self.spec}'s context holds "
                             f"{self.context_length:,} tokens, prompt included")
        # `predict --resume`: answers and scores kept in the response cache as they are computed
        self.cache = None if options.response_cache is None else ResponseCache(options.response_cache)
        self.identity = {"model": self.spec, "revision": self.revision, "files": folder_identity(path),
                         "vlbench": vlbench_version(), "chat_template_kwargs": self.template_kwargs,
                         **{k: getattr(options, k) for k in ("min_pixels", "max_pixels")}}
        self._lead: str | None = None

    def _load_processor(self, path: str, config, options: ModelOptions) -> tuple[object, str | None]:
        """(processor, note): the checkpoint's processor (evaluator/models/vlm_checkpoint.py)."""
        return load_processor(path, config, options.revision, self.spec)

    def _tokenizer_of(self, processor):
        return processor.tokenizer

    def content(self, text: str, images: int = 0):
        """A message's content as the chat template reads it: an image part per picture, then the text."""
        return [{"type": "image"} for _ in range(images)] + [{"type": "text", "text": text}]

    def _bound_pixels(self, options: ModelOptions) -> None:
        bounds = {k: v for k, v in (("min_pixels", options.min_pixels), ("max_pixels", options.max_pixels))
                  if v is not None}
        if not bounds:
            return
        image_processor = self.processor.image_processor
        known = getattr(getattr(image_processor, "valid_kwargs", None), "__annotations__", {})
        if not all(k in known for k in bounds):
            raise ModelError(f"--{next(iter(bounds)).replace('_', '-')}: the {type(image_processor).__name__} of "
                             f"{self.spec} has no pixel bounds")
        # Qwen2-VL's processors keep the pixel bounds as size = {shortest_edge: min, longest_edge: max}.
        size = size_dict(image_processor.size)
        size = {"shortest_edge": bounds.get("min_pixels", size.get("shortest_edge")),
                "longest_edge": bounds.get("max_pixels", size.get("longest_edge"))}
        if None not in size.values() and size["shortest_edge"] > size["longest_edge"]:
            raise ModelError(f"--min-pixels {size['shortest_edge']} is larger than --max-pixels {size['longest_edge']}")
        image_processor.size = {k: v for k, v in size.items() if v is not None}

    # -- inputs -----------------------------------------------------------------------------------
    def _messages(self, turn: Turn) -> list[dict]:
        system = self.options.system_prompt
        return ([{"role": "system", "content": self.content(system)}] if system else []) + [
            {"role": "user", "content": self.content(turn.text, len(turn.images))}]

    def prompt_text(self, turn: Turn) -> str:
        """The chat-template text of one user turn with its images inside the message, ready for the
        assistant's answer (a prefix-format family: the turn's text, which its processor frames itself)."""
        if self.prefix_format is not None:
            return turn.text
        try:
            text = self.processor.apply_chat_template(self._messages(turn), add_generation_prompt=True,
                                                      tokenize=False, **self.template_kwargs)
        except Exception as exc:  # noqa: BLE001 -- a user's template fails in Jinja or in its own raise_exception
            raise ModelError(f"{self.spec}: the chat template fails on a turn ({type(exc).__name__}: "
                             f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
        # Where the template writes an image: the processor's image token, or the marker it expands into one
        # (Gemma 3's start-of-image, InternVL's <img>); a template that writes none of them dropped the image.
        markers = {m for m in (getattr(self.processor, a, None) for a in IMAGE_MARKERS) if isinstance(m, str) and m}
        if turn.images and markers and not any(m in text for m in markers):
            raise ModelError(f"{self.spec}: the chat template writes no image placeholder "
                             f"({', '.join(sorted(markers))}) for a turn that shows {len(turn.images)} image(s); a "
                             "template must write each image of the message where the model sees it")
        return text

    @property
    def answer_lead(self) -> str:
        """What the chat template puts between its generation prompt and an assistant answer (LLaVA-1.5's
        "ASSISTANT:" is followed by a space; ChatML's "assistant\\n" by nothing): the beginning of every
        answer as the template writes one, so a scored continuation is the text a server sees in an
        assistant message (whitespace only; a template's own text, a thinking block, is not an answer's)."""
        if self._lead is None and self.prefix_format is not None:
            self._lead = ""
        if self._lead is None:
            user = [{"role": "user", "content": self.content("?")}]
            marker = "\u2063"  # an invisible separator no template writes itself
            try:
                ask = self.processor.apply_chat_template(user, add_generation_prompt=True, tokenize=False,
                                                         **self.template_kwargs)
                full = self.processor.apply_chat_template(
                    user + [{"role": "assistant", "content": self.content(marker)}], tokenize=False,
                    **self.template_kwargs)
            except Exception:  # noqa: BLE001 -- a template that cannot render an answer: the text follows directly
                ask, full = "", ""
            lead = full[len(ask):full.index(marker, len(ask))] if full.startswith(ask) and marker in full[
                len(ask):] else ""
            self._lead = lead if not lead.strip() else ""
        return self._lead

    @property
    def answer_token_type(self) -> int:
        """The token type of an answer's tokens (PaliGemma's suffix: 1; 0 for every other family)."""
        return self.prefix_format.suffix_token_type if self.prefix_format is not None else 0

    def special_tokens(self, prompts: list[str]) -> dict:
        """The processor's tokenizer keyword for templated prompts: a template that writes the BOS token itself
        (Gemma 3, Idefics3, Llama 3.2 Vision, Aya Vision) must not get a second one from the tokenizer, as
        transformers' own `apply_chat_template(tokenize=True)` decides (its first prompt starts with BOS)."""
        bos = self.tokenizer.bos_token
        return {"add_special_tokens": False} if bos and prompts and prompts[0].startswith(bos) else {}

    def _marker_special_ids(self) -> frozenset[int]:
        """The ids of special tokens that are thinking or answer markers (a tokenizer may make `<think>` a
        special token): decoding keeps them, since an answer is told from its thinking by them."""
        tokenizer = self.tokenizer
        special = {i for i, t in getattr(tokenizer, "added_tokens_decoder", {}).items() if getattr(t, "special", False)}
        markers = {m for pair in (*self.reasoning.tags, *ANSWER_WRAPPERS) for m in pair}
        ids = {tokenizer.convert_tokens_to_ids(m) for m in markers if m in tokenizer.get_vocab()}
        return frozenset(special & ids)

    def decode(self, sequences) -> list[str]:
        """Generated token ids as text, special tokens skipped, except those that mark thinking or an answer."""
        if not self._kept_special:
            return self.tokenizer.batch_decode(sequences, skip_special_tokens=True)
        dropped = set(self.tokenizer.all_special_ids) | {
            i for i, t in self.tokenizer.added_tokens_decoder.items() if t.special}
        dropped -= self._kept_special
        return self.tokenizer.batch_decode([[int(t) for t in seq if int(t) not in dropped] for seq in sequences],
                                           skip_special_tokens=False)

    def _ids(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def continuation_ids(self, prompts: list[str], texts: list[str]) -> list[list[int]]:
        """The tokens of each continuation written as an answer after its prompt: the template's lead and
        the text, tokenised together with the end of the prompt and taken after the prompt's own tokens
        (as a server tokenises the whole prompt it renders; lm-evaluation-harness splits context and
        continuation the same way). The prompt's last SEAM_CHARACTERS characters stand for it (merges
        never reach further back than a word; tokenising a long dialogue 100 times was a third of
        VisDial's scoring time); where the two tokenisations disagree at the seam, the lead and text
        alone. The tokenizer is called on the whole lists at once (a fast tokenizer encodes in parallel)."""
        lead = self.answer_lead
        after = self.prefix_format.after_prompt if self.prefix_format is not None else ""  # the processor's own
        tails = [(p + after)[-SEAM_CHARACTERS:] for p in prompts]
        distinct = list(dict.fromkeys(tails))
        contexts = dict(zip(distinct, self._batch_ids(distinct)))
        out = []
        for tail, text, whole in zip(tails, texts, self._batch_ids([p + lead + t for p, t in zip(tails, texts)])):
            context = contexts[tail]
            ids = whole[len(context):] if whole[:len(context)] == context else self._ids(lead + text)
            if not ids or not text:
                raise ModelError(f"{self.spec}: the continuation {text!r} has no tokens")
            out.append(ids)
        return out

    def _batch_ids(self, texts: list[str]) -> list[list[int]]:
        return self.tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []

    def check_length(self, tokens: int, new_tokens: int = 0) -> None:
        """A sequence that would not fit the model's context is one error line, before a forward pass (an
        unbounded prompt or answer length would otherwise run out of memory, or for ever)."""
        if self.context_length is not None and tokens + new_tokens > self.context_length:
            raise ModelError(f"{self.spec}: a prompt of {tokens:,} tokens" + (
                f" and --max-new-tokens {new_tokens:,}" if new_tokens else "") +
                f" exceed the model's context of {self.context_length:,} tokens")

    def _reduce(self, logprobs, n: int) -> float:
        total = float(logprobs.sum()) if hasattr(logprobs, "sum") else float(sum(logprobs))
        return total / n if self.options.loglik == "mean" else total

    def describe_prompts(self) -> dict:
        """The record's entries on how prompts were built (the same for every backend that runs here)."""
        size = size_dict(getattr(getattr(self.processor, "image_processor", None), "size", None))
        return {"model": self.spec, "revision": self.revision, "processor": type(self.processor).__name__,
                "processor_note": self.note, "image_size": json.loads(json.dumps(size, default=str)),
                "answer_lead": self.answer_lead, "reasoning": self.describe_reasoning(),
                **{k: str(getattr(self.options, k)) for k in ("system_prompt", "chat_template")
                   if getattr(self.options, k) is not None}}

    # -- the response cache (predict --resume) ------------------------------------------------------
    def _key(self, turn: Turn, what: dict) -> str:
        """A turn's cache key: the model (checkpoint revision, or a local folder's files), how it runs,
        the templated prompt, the images' SHA-256 and what is asked (`what`)."""
        return request_key({**self.identity, "prompt": self.prompt_text(turn),
                            "images": [image_digest(s) for s in turn.images], **what})

    # -- the two questions: generate, score ---------------------------------------------------------
    def generate(self, turns: list[Turn], max_new_tokens: int | None = None, names: list[str] | None = None,
                 ) -> list[str]:
        """Answers, in order (greedy unless `--gen-kwargs` says otherwise; cut before a stop string); the
        response cache answers what it holds, `_generate` the rest. (`names`, the rows' names in a
        served model's errors, are not needed here: a batch fails as a whole.)"""
        from core.progress import progress

        generation = self.generation if max_new_tokens is None else \
            dataclasses.replace(self.generation, max_new_tokens=max_new_tokens)
        keys = ([self._key(t, {"generation": generation.record(), "reasoning": self.reasoning.record()})
                 for t in turns]
                if self.cache is not None and generation.greedy else [None] * len(turns))
        out: list[str | None] = [None] * len(turns)
        for i, text in self.cached(keys, "content").items():
            out[i] = generation.cut(text)
        todo = [i for i in range(len(turns)) if out[i] is None]
        with progress(total=len(todo), desc="generating", unit="sample") as bar:
            for idx, texts in self._generate(turns, todo, generation):
                for i, text in zip(idx, texts):
                    out[i] = generation.cut(text)
                    self.keep(keys[i], "content", text)
                bar.update(len(idx))
        return out

    def score(self, turns: list[Turn], continuations: list[list[str]], names: list[str] | None = None,
              ) -> list[list[float]]:
        """Per turn, the log-likelihood of each of its continuations. Each distinct continuation of a
        turn is scored once and its value shared by its duplicates, so that equal options always tie
        (in a batch, a row's position can move a score by a rounding step); the response cache answers
        what it holds, `_score` the rest, turn by turn as they finish."""
        from core.progress import progress

        distinct = [list(dict.fromkeys(c)) for c in continuations]
        keys = ([self._key(t, {"continuations": c, "loglik": self.options.loglik, "answer_lead": self.answer_lead})
                 for t, c in zip(turns, distinct)] if self.cache is not None else [None] * len(turns))
        scored: list[dict[str, float]] = [{} for _ in turns]
        for i, values in self.cached(keys, "loglik", [len(d) for d in distinct]).items():
            scored[i] = dict(zip(distinct[i], values))
        todo = [i for i in range(len(turns)) if not scored[i]]
        with progress(total=len(todo), desc="scoring", unit="sample") as bar:
            for idx, values in self._score(turns, distinct, todo):
                for i, v in zip(idx, values):
                    scored[i] = dict(zip(distinct[i], v))
                    self.keep(keys[i], "loglik", list(v))
                bar.update(len(idx))
        return [[scored[i][c] for c in conts] for i, conts in enumerate(continuations)]

    @abstractmethod
    def _generate(self, turns: list[Turn], todo: list[int], generation):
        """Yield (turn indices, raw answers) for the turns `todo`, a batch at a time."""

    @abstractmethod
    def _score(self, turns: list[Turn], distinct: list[list[str]], todo: list[int]):
        """Yield (turn indices, per turn the log-likelihoods of its `distinct` continuations), a batch of
        turns at a time (a killed run keeps what it scored)."""
