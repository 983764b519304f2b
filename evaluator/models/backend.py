"""The backend contract: every way of running a generative VLM implements `VLMBackend`, and
`GenerativeAdapter` (evaluator/models/ask.py) sees nothing else.

Backends: `TransformersVLM` (`hf:`, transformers in-process, evaluator/models/transformers_vlm.py), `VllmVLM`
(`vllm:`, vLLM's offline engine in-process, evaluator/models/vllm_engine.py), both on the templated base
`TemplatedVLM` (evaluator/models/templated.py), and `ServedVLM` (`openai:`, any OpenAI-compatible endpoint,
evaluator/models/served.py). A backend asks one user `Turn` at a time. Each one:

- `generate(turns)`: an answer per user turn, cut before a stop string (greedy unless `--gen-kwargs`
  samples);
- `score(turns, continuations)`: per turn, the log-likelihood of each continuation given the turn, the
  continuation written where the chat template writes an assistant answer (its lead, LLaVA-1.5's space
  after "ASSISTANT:", is the continuation's first text): the sum of its tokens' log-probabilities, or
  their mean (`--loglik`); a backend that cannot (a server that returns no prompt log-probabilities)
  says so in one error line on the first request;
- `describe()`: what the prediction record says about the model and how it ran;
- `replies(outputs)`: each raw answer read into its answer and its thinking (evaluator/models/reasoning.py),
  by the run's markers (`reasoning`) and the marker a chat template opens the answer with
  (`thinking_opened`); `thinking` says whether thinking is on (a template that opens it, or a
  `--chat-template-kwarg` that switches it on), which raises the default answer length;
- resumes through the response cache (evaluator/models/response_cache.py): `cache` holds answers and
  scores as they are computed, keyed by what determines them, and a rerun asks only what it lacks.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from evaluator.models.reasoning import Reasoning, Reply


@dataclass(frozen=True)
class Turn:
    """One user turn: its text and its images (paths or bytes, opened batch by batch), in the order
    the message shows them."""

    text: str
    images: tuple = ()


class VLMBackend(ABC):
    """One way of running a generative VLM (see the module docstring)."""

    spec: str  # the model as the user named it: hf:..., vllm:..., openai:...
    generation = None  # evaluator.models.generation.Generation: the decoding settings
    cache = None  # evaluator.models.response_cache.ResponseCache, or None
    reasoning = Reasoning()  # the markers thinking is separated by
    thinking_opened: str | None = None  # the opening marker the chat template ends its prompt with
    thinking = False  # whether thinking is on (known: a template that opens it, or a switch that turns it on)
    template_kwargs: dict = {}  # --chat-template-kwarg switches

    @abstractmethod
    def generate(self, turns: list, max_new_tokens: int | None = None, names: list[str] | None = None) -> list[str]:
        """An answer per turn, in order. `names` name the rows in a per-request error."""

    @abstractmethod
    def score(self, turns: list, continuations: list[list[str]], names: list[str] | None = None) -> list[list[float]]:
        """Per turn, the log-likelihood of each of its continuations."""

    @abstractmethod
    def describe(self) -> dict:
        """What the prediction record says about the model: its spec, versions, settings, cache use."""

    def replies(self, outputs: list[str]) -> list[Reply]:
        """Each raw answer read into its answer (None: unfinished) and its thinking."""
        return [self.reasoning.split(text, self.thinking_opened) for text in outputs]

    def describe_reasoning(self) -> dict:
        """The record's `reasoning` entry: the markers, whether thinking was on, the template switches."""
        return {**self.reasoning.record(), "thinking": self.thinking, "opened_by_template": self.thinking_opened,
                "chat_template_kwargs": dict(self.template_kwargs)}

    # The response cache, as every backend reads and writes it (the way lm-evaluation-harness's CachingLM
    # wraps a model): `cached` answers a batch of requests from it, `keep` stores what the backend computed.
    def cached(self, keys: list[str | None], field: str, sizes: list[int] | None = None) -> dict[int, object]:
        """{request index: the cached value of `field`} of the requests whose key the response cache holds
        with a value of the shape vlbench writes (`sizes`: how many values each request's entry holds); a
        key None is never cached."""
        from evaluator.models.response_cache import well_formed

        found = {}
        for i, key in enumerate(keys):
            hit = None if key is None or self.cache is None else self.cache.get(key)
            if hit is not None and well_formed(field, hit.get(field), None if sizes is None else sizes[i]):
                found[i] = hit[field]
                self.note_provenance(hit)
        return found

    def keep(self, key: str | None, field: str, value) -> None:
        """Store a computed value under `key` (an empty answer is not kept: it is asked again), with what the
        backend knows of the weights that computed it (`provenance`)."""
        if self.cache is not None and key is not None and value not in ("", None):
            self.cache.put(key, {field: value, **self.provenance()})

    def provenance(self) -> dict:
        """What names the weights that answered, kept with each cached answer so that a rerun answered from the
        cache names them too (a server's reported model and fingerprint); nothing by default (a local
        checkpoint's identity is in the cache key)."""
        return {}

    def note_provenance(self, entry: dict) -> None:
        """Take what a cached answer's entry says of the weights that gave it (see `provenance`)."""

    def cache_stats(self) -> dict:
        """The record's `cache` entry (nothing when no cache is used)."""
        if self.cache is None:
            return {}
        return {"cache": {"file": str(self.cache.path), "hits": self.cache.hits, "stored": self.cache.stored,
                          "damaged": self.cache.damaged}}
