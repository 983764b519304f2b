"""Generative vision-language models: checkpoints of transformers' image-text-to-text family
(`AutoModelForImageTextToText`: Qwen2-VL / Qwen2.5-VL, LLaVA, LLaVA-OneVision, Idefics3 / SmolVLM,
PaliGemma, Gemma 3, InternVL...) loaded with their processor, and the two things a benchmark asks of
them (evaluator/models/ask.py):

- `generate`: greedy decoding of the user turn (the processor's chat template, the images inside the
  message content), batched with left padding; only the new tokens are decoded.
- `score`: the log-likelihood of each continuation (an answer, a response, a dialogue option) given
  the user turn: the sum of its tokens' log-probabilities (or their mean). A context with many
  continuations (VisDial's 100 options) is run once; its keys and values are reused for the
  continuations in batches (`score_cached`), instead of 100 full sequences (`score_full`).
"""

from __future__ import annotations

import copy
import dataclasses
import json
from abc import abstractmethod
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from builders.model_files import exception_line, load_part, load_pretrained
from core.errors import ModelError
from evaluator.models.backend import VLMBackend
from evaluator.models.families import prefix_format
from evaluator.models.images import open_image
from evaluator.models.options import ModelOptions
from evaluator.models.reasoning import ANSWER_WRAPPERS, DEFAULT_TAGS, Reasoning, answer_budget, thinking_switched_on
from evaluator.models.response_cache import ResponseCache, folder_identity, image_digest, request_key, vlbench_version
from evaluator.models.template_kwargs import check_template_reads

DTYPES = ("auto", "float32", "bfloat16", "float16")
ATTENTION = ("eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")
DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")
PREFIX_CACHE_MIN_CONTINUATIONS = 8  # fewer continuations per context are batched as full sequences
IMAGE_MARKERS = ("image_token", "boi_token", "start_image_token")  # processor attributes naming image markers
SEAM_CHARACTERS = 64  # how much of a prompt is tokenised with a continuation to find the seam between them


@dataclass(frozen=True)
class Turn:
    """One user turn: its text and its images (paths or bytes, opened batch by batch), in the order
    the message shows them."""

    text: str
    images: tuple = ()


def read_chat_template(path: Path | None) -> str | None:
    """`--chat-template FILE`: its text, checked to be a Jinja template (before the weights load)."""
    if path is None:
        return None
    from jinja2 import Environment, TemplateSyntaxError

    try:
        text = Path(path).read_text(encoding="utf-8")
        Environment().parse(text)
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelError(f"--chat-template {path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    except TemplateSyntaxError as exc:
        raise ModelError(f"--chat-template {path}: not a Jinja template (line {exc.lineno}: {exc.message})") from None
    return text


def _template_text(template) -> str:
    """A processor's chat template as one text (a processor may hold several named ones)."""
    return "\n".join(template.values()) if isinstance(template, dict) else str(template)


def is_generative(config) -> bool:
    """Whether a transformers config belongs to the image-text-to-text family."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    return config.model_type in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES


def _image_only_processor(path: str, config, spec: str):
    """The processor without its video part, for installs without torchvision: the image processor,
    the tokenizer and the chat template of the checkpoint, in the checkpoint's processor class, with the
    settings its processor_config.json saves (LLaVA-OneVision's image-token count, InternVL's image sequence
    length...). A processor that cannot be built without its video part (its image processor or its
    constructor needs torchvision) is one error line saying to install torchvision."""
    import transformers
    from transformers import AutoImageProcessor, AutoTokenizer
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    base = getattr(transformers, PROCESSOR_MAPPING_NAMES.get(config.model_type, ""), None)
    if base is None:
        raise ModelError(f"{spec}: no processor class known for a {config.model_type} model")
    try:
        attributes = [a for a in base.get_attributes() if "video" not in a]
    except ImportError:  # a processor class transformers offers only with torchvision (Mistral 3's Pixtral)
        raise ModelError(f"{spec}: the {PROCESSOR_MAPPING_NAMES[config.model_type]} needs torchvision; "
                         "pip install torchvision") from None
    if set(attributes) != {"image_processor", "tokenizer"}:
        raise ModelError(f"{spec}: the {base.__name__} needs torchvision for more than videos; pip install torchvision")
    image_only = type(f"ImageOnly{base.__name__}", (base,), {"get_attributes": classmethod(lambda cls: attributes)})
    template = None
    jinja = Path(path) / "chat_template.jinja"
    if jinja.is_file():
        template = jinja.read_text()
    tokenizer = load_part(AutoTokenizer, path, spec, "tokenizer")
    image_processor = load_part(AutoImageProcessor, path, spec, "image processor")
    try:
        saved, _ = base.get_processor_dict(path)
        for key in (*base.get_attributes(), "chat_template", "auto_map", "processor_class"):
            saved.pop(key, None)  # the parts (built here, the video part left out) and what is passed below
        processor = image_only.from_args_and_dict([image_processor, tokenizer], {**saved, **without_video(base)},
                                                  chat_template=template or getattr(tokenizer, "chat_template", None))
    except (ImportError, OSError, ValueError, TypeError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ModelError(f"{spec}: the {base.__name__} cannot be built without torchvision ({first[:200]}); "
                         "pip install torchvision") from None
    video = Path(path) / "video_preprocessor_config.json"
    if video.is_file():  # the saved video settings some templates read (SmolVLM's frame count and rate), no processor
        processor.video_processor = SimpleNamespace(**json.loads(video.read_text()))
    return processor


def without_video(processor_class) -> dict:
    """The video arguments PROCESSOR_CLASS's constructor requires (SmolVLM's `video_processor`), as None: the
    processor is built from its image and text parts."""
    import inspect

    parameters = inspect.signature(processor_class.__init__).parameters.values()
    return {p.name: None for p in parameters if "video" in p.name and p.default is inspect.Parameter.empty}


def load_processor(path: str, config, revision: str | None = None, spec: str | None = None,
                   ) -> tuple[object, str | None]:
    """(processor, note): the note says when only the image and text parts could be loaded."""
    from transformers import AutoProcessor

    try:
        return AutoProcessor.from_pretrained(path, **({"revision": revision} if revision else {})), None
    except MemoryError:
        raise
    except Exception as exc:  # noqa: BLE001 -- files the processor cannot be built from: the model's, one line
        if not isinstance(exc, (ImportError, OSError)) or "torchvision" not in str(exc).lower():
            raise ModelError(f"{spec or 'hf:' + path}: cannot load the processor ({exception_line(exc)})") from None
    return _image_only_processor(path, config, spec or f"hf:{path}"), (
        "the processor's video part needs torchvision (not installed): loaded its image and text parts only "
        "(no benchmark here reads video)")


def _snapshot(path: str, config) -> str | None:
    """The revision of the weights: the hub cache's snapshot hash, or the config's commit hash."""
    parts = Path(path).expanduser().resolve().parts if Path(path).expanduser().exists() else ()
    if "snapshots" in parts[:-1]:
        return parts[parts.index("snapshots") + 1]
    return getattr(config, "_commit_hash", None)


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
        self.processor, self.note = load_processor(path, config, options.revision, self.spec)
        self._bound_pixels(options)
        self.tokenizer = self.processor.tokenizer
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
            check_template_reads(self.template_kwargs, _template_text(self.processor.chat_template), self.spec)
        self.reasoning = Reasoning(options.reasoning_tags or DEFAULT_TAGS)
        self.thinking_opened = self.reasoning.opened_by(self.prompt_text(Turn("?")))
        self.thinking = self.thinking_opened is not None or thinking_switched_on(self.template_kwargs)
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        self.context_length: int | None = getattr(text, "max_position_embeddings", None)
        self.generation = Generation(answer_budget(options, self.thinking, self.context_length),
                                     tuple(options.gen_kwargs), tuple(options.stop))
        self._kept_special = self._marker_special_ids()
        self.revision = options.revision or _snapshot(path, config)
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
        size = _size_dict(image_processor.size)
        size = {"shortest_edge": bounds.get("min_pixels", size.get("shortest_edge")),
                "longest_edge": bounds.get("max_pixels", size.get("longest_edge"))}
        if None not in size.values() and size["shortest_edge"] > size["longest_edge"]:
            raise ModelError(f"--min-pixels {size['shortest_edge']} is larger than --max-pixels {size['longest_edge']}")
        image_processor.size = {k: v for k, v in size.items() if v is not None}

    # -- inputs -----------------------------------------------------------------------------------
    def _messages(self, turn: Turn) -> list[dict]:
        content = [{"type": "image"} for _ in turn.images] + [{"type": "text", "text": turn.text}]
        system = self.options.system_prompt
        return ([{"role": "system", "content": [{"type": "text", "text": system}]}] if system else []) + [
            {"role": "user", "content": content}]

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
            user = [{"role": "user", "content": [{"type": "text", "text": "?"}]}]
            marker = "\u2063"  # an invisible separator no template writes itself
            try:
                ask = self.processor.apply_chat_template(user, add_generation_prompt=True, tokenize=False,
                                                         **self.template_kwargs)
                full = self.processor.apply_chat_template(
                    user + [{"role": "assistant", "content": [{"type": "text", "text": marker}]}], tokenize=False,
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
        size = _size_dict(getattr(self.processor.image_processor, "size", None))
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
                    if keys[i] is not None and text:
                        self.cache.put(keys[i], {"content": text})
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
                    if keys[i] is not None:
                        self.cache.put(keys[i], {"loglik": list(v)})
                bar.update(len(idx))
        return [[scored[i][c] for c in conts] for i, conts in enumerate(continuations)]

    @abstractmethod
    def _generate(self, turns: list[Turn], todo: list[int], generation):
        """Yield (turn indices, raw answers) for the turns `todo`, a batch at a time."""

    @abstractmethod
    def _score(self, turns: list[Turn], distinct: list[list[str]], todo: list[int]):
        """Yield (turn indices, per turn the log-likelihoods of its `distinct` continuations), a batch of
        turns at a time (a killed run keeps what it scored)."""


class GenerativeVLM(TemplatedVLM):
    """`hf:`: a loaded image-text-to-text checkpoint and its processor, run by transformers."""

    def __init__(self, path: str, config, options: ModelOptions, chat_template: str | None = None):
        import torch
        from transformers import AutoModelForImageTextToText

        from builders.nlp import torch_device
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
        self.model = load_pretrained(AutoModelForImageTextToText, path, self.spec, dtype=getattr(torch, dtype),
                                     **loading)
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
        are batched as full sequences (score_full), in chunks."""
        few = [i for i in todo if len(distinct[i]) < PREFIX_CACHE_MIN_CONTINUATIONS]
        many = [i for i in todo if len(distinct[i]) >= PREFIX_CACHE_MIN_CONTINUATIONS]
        for chunk in (few[b:b + 4 * self.batch_size] for b in range(0, len(few), 4 * self.batch_size)):
            flat = [(i, c) for i in chunk for c in distinct[i]]
            scores = iter(self.score_full([turns[i] for i, _ in flat], [c for _, c in flat]))
            yield chunk, [[next(scores) for _ in distinct[i]] for i in chunk]
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


def _size_dict(size) -> dict:
    """An image processor's `size` (a dict or transformers' SizeDict) as a dict of its set entries."""
    if size is None:
        return {}
    items = size.items() if hasattr(size, "items") else vars(size).items()
    return {k: v for k, v in items if v is not None}


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
