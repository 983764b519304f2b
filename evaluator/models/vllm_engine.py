"""`vllm:MODEL` (a hub id or a local folder): an image-text-to-text checkpoint run by vLLM's offline engine
(`vllm.LLM`) in this process, asked exactly what an `hf:` model is asked. The prompts are built here by
the same code as `hf:` (evaluator/models/templated.py's `TemplatedVLM`: the checkpoint's processor and
chat template, `--system-prompt`, `--chat-template`, images inside the user message, video frames as
images) and handed to vLLM as token ids with the images beside them, so vLLM sees the tokens
transformers sees; vLLM expands each image placeholder as the checkpoint's processor does.

- `generate`: vLLM's sampling with the run's settings (greedy by default, `--max-new-tokens`, `--stop`,
  `--gen-kwargs` temperature / top_p / top_k / repetition_penalty / do_sample with `--seed`); the answer
  is the generated token ids decoded by the checkpoint's tokenizer, as `hf:` decodes them.
- `score`: the log-likelihood of each continuation (tokenised as `hf:` tokenises it) from next-token
  log-probabilities with automatic prefix caching on. The continuations of a turn form a token trie;
  each node of the trie is one request whose prompt is the turn followed by the node's tokens, asking
  the log-probabilities of exactly the node's next tokens (`logprob_token_ids`, raw log-softmax over
  the vocabulary). The turn itself is sent first, so every other node of its trie reads the image and
  question from the prefix cache and computes only its last block. vLLM's `prompt_logprobs`, the
  obvious way, cannot use the prefix cache: vLLM 0.32 turns cache reads off for such requests, and
  with them forced on, the positions it skips come back as uninitialised memory (measured). Prompt
  log-probabilities are kept for `score_full` (one full sequence per continuation; the bench's
  baseline and the tests' cross-check).
- Several GPUs: `--tensor-parallel-size N` splits the model over N GPUs of a node; vLLM's own
  mechanisms (Ray, `--engine-arg distributed_executor_backend=ray`) span nodes. See docs/models/vllm.md.

vLLM writes its log from its own worker processes: while the engine starts it goes to a temporary file
(or to `$VLBENCH_VLLM_LOG`), and a failed start is one error line with the root cause read from it."""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import os
import re
import sys
import tempfile

from core.errors import ModelError, ParamsError
from core.params import json_or_text
from core.sanitise import names_a_secret, sanitise
from evaluator.models.backend import Turn
from evaluator.models.images import open_image
from evaluator.models.options import ModelOptions
from evaluator.models.templated import TemplatedVLM

# The answer to an engine argument vlbench sets itself from its own flags or recipe
SET_BY_VLBENCH = {"model": "--model", "tokenizer": "--model", "revision": "--revision", "dtype": "--dtype",
                  "seed": "--seed", "tensor_parallel_size": "--tensor-parallel-size",
                  "data_parallel_size": "--data-parallel-size", "gpu_memory_utilization": "--gpu-memory-utilization",
                  "max_model_len": "--max-model-len", "enforce_eager": "--enforce-eager",
                  "limit_mm_per_prompt": "--frames"}
MAX_LOGPROB_TOKEN_IDS = 128  # vLLM's bound on one request's logprob_token_ids
# One engine per process and settings: the suite and the perceptual score ask several benchmarks or
# passes of one model, and a second engine would take the accelerator's memory again. The prompts are
# built here, so an engine serves any benchmark.
_ENGINES: dict[str, object] = {}


def check_vllm_options(options: ModelOptions, spec: str) -> None:
    """A vllm: model's bounds and engine arguments, checked before vLLM is imported (the options it cannot take
    are refused by the resolver, from their declared readers)."""
    if options.tensor_parallel_size < 1 or options.data_parallel_size < 1:
        raise ModelError("--tensor-parallel-size and --data-parallel-size must be >= 1")
    if options.gpu_memory_utilization is not None and not 0 < options.gpu_memory_utilization <= 1:
        raise ModelError(f"--gpu-memory-utilization {options.gpu_memory_utilization}: expected a share in (0, 1]")
    if options.max_model_len is not None and options.max_model_len < 1:
        raise ModelError(f"--max-model-len {options.max_model_len}: expected >= 1")
    launcher = dict(options.engine_args).get("distributed_executor_backend")
    if options.data_parallel_size > 1 and launcher != "external_launcher":
        raise ModelError(f"--data-parallel-size {options.data_parallel_size}: vLLM's offline engine runs one copy per "
                         "process; serve the model with `vllm serve MODEL --data-parallel-size N` and evaluate it as "
                         "openai:MODEL, or launch N processes with torchrun and --engine-arg "
                         "distributed_executor_backend=external_launcher (docs/models/vllm.md)")
    for name, _ in options.engine_args:
        if name in SET_BY_VLBENCH:
            raise ModelError(f"--engine-arg {name}: set by vlbench from {SET_BY_VLBENCH[name]}; give that instead")


def parse_engine_args(values: list[str]) -> tuple[tuple[str, object], ...]:
    """`--engine-arg KEY=VALUE` (repeatable) -> ((key, value), ...): the value read as JSON where it is
    JSON (numbers, true/false, null, lists, objects), else as text; a key given twice, or one whose name says it
    is a secret (token, key, secret, password: `hf_token`, not `max_num_batched_tokens`), is refused."""
    out: dict[str, object] = {}
    for text in values:
        key, sep, value = text.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key.isidentifier():
            raise ModelError(f"--engine-arg {text!r}: expected KEY=VALUE, e.g. --engine-arg kv_cache_dtype=fp8")
        if key in out:
            raise ModelError(f"--engine-arg {key}: given twice")
        if names_a_secret(key):
            raise ModelError(f"--engine-arg {key}: a secret is not taken on the command line (the prediction record "
                             "lists the engine arguments); vLLM reads the Hub token from HF_TOKEN")
        try:
            out[key] = json_or_text(value, f"--engine-arg {key}")
        except ParamsError as exc:
            raise ModelError(str(exc)) from None
    return tuple(out.items())


def import_vllm(spec: str):
    """The vllm module, or one line saying how to install it."""
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    try:
        with vllm_log():  # its import prints notes about the platform it finds
            import vllm
    except ImportError as exc:
        raise ModelError(f"{spec}: vLLM is not installed ({exc}); GPUs: pip install 'vlbench[vllm]'; CPUs: "
                         "scripts/vllm_venv.sh builds a venv with vLLM's CPU build (docs/models/vllm.md)") from None
    return vllm


@contextlib.contextmanager
def vllm_log():
    """Standard output and error of this process, and so of the engine's worker processes it starts
    (they inherit them), go to a log file while the engine starts: `$VLBENCH_VLLM_LOG`, or a temporary
    file that nothing keeps. Yields the open file, for the root cause of a failed start."""
    path = os.environ.get("VLBENCH_VLLM_LOG")
    log = open(path, "a+b") if path else tempfile.TemporaryFile()  # noqa: SIM115 -- closed below
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        for fd in (1, 2):
            os.dup2(log.fileno(), fd)
        yield log
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in zip((1, 2), saved):
            os.dup2(copy, fd)
            os.close(copy)
        log.close()


@contextlib.contextmanager
def signals_stop_the_start():
    """Ctrl-C and SIGTERM while vLLM's engine starts end the process at once: the engine's processes (this
    process's children) are killed, the command's one line is printed (`core.errors.stopped_line`) and the
    process exits 130 / 143. An interrupt cannot be left to unwind there: vLLM's start-up wait takes it and goes
    on polling its engine's handshake for up to ten minutes (measured with vLLM 0.32 on a CPU: still waiting
    after 300 s). Nothing of vlbench's is being written while an engine starts (predictions, reports and cards
    are written after it), so there is nothing to clean up. A signal ignored by the caller (a background job's
    Ctrl-C) stays ignored."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    import psutil

    from core.errors import stopped_line
    from core.sanitise import sanitise

    def stop(signum, frame):
        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                child.kill()
        os.write(saved_stderr, (sanitise(stopped_line(signum), (), None) + "\n").encode("utf-8", "backslashreplace"))
        os._exit(128 + signum)

    saved_stderr = os.dup(2)  # taken before vllm_log sends fd 2 to its log: the line goes to the terminal
    signals = [s for s in (signal.SIGINT, signal.SIGTERM) if callable(signal.getsignal(s))]
    previous = {s: signal.signal(s, stop) for s in signals}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        os.close(saved_stderr)


def root_cause(log, exc: BaseException) -> str:
    """The most telling error line of a failed engine start: the last `SomethingError: text` line of
    vLLM's log that is not one of its wrappers ("Engine core initialization failed"), else the
    exception's own first line. Bounded in length, without control characters."""
    log.flush()
    log.seek(0)
    text = log.read().decode("utf-8", "replace")[-200_000:]
    wrappers = ("Engine core initialization failed", "WorkerProc initialization failed", "WorkerProc hit an exception")
    found = [m.group(1) for m in re.finditer(r"((?:[A-Za-z_][\w.]*)?(?:Error|Exception): [^\n]+)", text)
             if not any(w in m.group(1) for w in wrappers)]
    cause = found[-1] if found else (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    cause = re.sub(r"^\(\w+ pid=\d+\)\s*", "", re.sub(r"[\x00-\x1f\x7f]", " ", cause)).strip()
    return cause[:300]


class VllmVLM(TemplatedVLM):
    """`vllm:`: a checkpoint run by vLLM's offline engine (see the module docstring)."""

    prefix = "vllm"

    def __init__(self, path: str, config, options: ModelOptions, chat_template: str | None = None):
        spec = f"vllm:{path}"
        check_vllm_options(options, spec)
        vllm = import_vllm(spec)
        super().__init__(path, config, options, chat_template)
        self.vllm_version = vllm.__version__
        # the engine's start stops at once on Ctrl-C or SIGTERM; vLLM's own notes and its workers' log are kept
        # off the terminal
        with signals_stop_the_start(), vllm_log() as log:
            from vllm.platforms import current_platform

            self.platform = "cpu" if current_platform.is_cpu() else str(current_platform.device_name)
            self.dtype = options.dtype if options.dtype != "auto" else \
                "float32" if self.platform == "cpu" else "bfloat16"
            self._check_model(config)
            self.engine_settings = self._engine_kwargs(vllm)
            key = json.dumps(self.engine_settings, sort_keys=True, default=str)
            if key not in _ENGINES:
                if not _ENGINES:
                    atexit.register(shutdown_engines)
                try:
                    _ENGINES[key] = vllm.LLM(**self.engine_settings)
                except Exception as exc:  # noqa: BLE001 -- vLLM raises anything from its workers: one line
                    raise ModelError(f"{spec}: vLLM could not start the engine ({root_cause(log, exc)})") from None
            self.llm = _ENGINES[key]
            # the engine's context: --max-model-len, else the model's (what `check_length` holds a request to)
            self.context_length = getattr(getattr(self.llm, "model_config", None), "max_model_len",
                                          self.context_length)
        self.identity |= {"engine": "vllm", "vllm": self.vllm_version, "dtype": self.dtype, "platform": self.platform}

    def _check_model(self, config) -> None:
        """A checkpoint vLLM cannot run, found before the engine starts: an architecture it does not
        know, a head size its CPU attention refuses."""
        from vllm import ModelRegistry

        archs = list(config.architectures or [])
        if not any(a in ModelRegistry.get_supported_archs() for a in archs):
            raise ModelError(f"{self.spec}: vLLM {self.vllm_version} does not support "
                             f"{', '.join(archs) or 'a model without architectures'}")
        if self.platform == "cpu":
            from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

            text = config.get_text_config()
            head = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
            sizes = CPUAttentionBackend.get_supported_head_sizes()
            if head not in sizes:
                raise ModelError(f"{self.spec}: head size {head}: vLLM's CPU attention takes "
                                 f"{', '.join(map(str, sizes))} only")
            if "linear_attention" in (getattr(text, "layer_types", None) or ()) and self.dtype != "bfloat16":
                raise ModelError(f"{self.spec}: vLLM's CPU build runs the linear-attention (gated delta net) layers "
                                 f"of a {config.model_type} model in bfloat16 only; pass --dtype bfloat16")

    def _engine_kwargs(self, vllm) -> dict:
        """vLLM's engine arguments: the run's settings, prefix caching on, then `--engine-arg`s, each
        checked to be one of vLLM's own engine arguments."""
        options = self.options
        known = {f.name for f in dataclasses.fields(vllm.EngineArgs)}
        unknown = [k for k, _ in options.engine_args if k not in known]
        if unknown:
            raise ModelError(f"--engine-arg {unknown[0]}: not an engine argument of vLLM {self.vllm_version}")
        images = options.frames if options.videos is not None else 1
        kwargs = {"model": self.path, "tokenizer": self.path, "dtype": self.dtype, "seed": options.seed,
                  "enable_prefix_caching": True, "limit_mm_per_prompt": {"image": images},
                  "tensor_parallel_size": options.tensor_parallel_size,
                  "data_parallel_size": options.data_parallel_size, "enforce_eager": options.enforce_eager,
                  **({"revision": options.revision} if options.revision else {}),
                  **({"gpu_memory_utilization": options.gpu_memory_utilization}
                     if options.gpu_memory_utilization is not None else {}),
                  **({"max_model_len": options.max_model_len} if options.max_model_len is not None else {})}
        pixels = {k: getattr(options, k) for k in ("min_pixels", "max_pixels") if getattr(options, k) is not None}
        if pixels:
            kwargs["mm_processor_kwargs"] = pixels
        return {**kwargs, **dict(options.engine_args)}

    # -- inputs -----------------------------------------------------------------------------------
    def _prompt_ids(self, turn: Turn) -> list[int]:
        """The turn's tokens as the checkpoint's processor tokenises its prompt (special tokens as it adds
        them: none where the template writes BOS itself), each image a single placeholder that vLLM expands."""
        text = self.prompt_text(turn)
        return self.tokenizer(text, **self.special_tokens([text]))["input_ids"]

    def _request(self, turn: Turn, ids: list[int], images: list) -> dict:
        request = {"prompt_token_ids": ids}
        if images:
            request["multi_modal_data"] = {"image": images if len(images) > 1 else images[0]}
        return request

    def _run(self, requests: list[dict], params, answer_tokens: int = 0) -> list:
        """vLLM's generate, each request's length checked first against the engine's context (`--max-model-len`
        or the model's), as `hf:` checks its own: the prompt's tokens (an image counted as its one placeholder)
        and the `answer_tokens` a generation may add. What vLLM still refuses (its images expanded past the
        context, ...) is one error line with vLLM's reason."""
        for request in requests:
            self.check_length(len(request["prompt_token_ids"]), answer_tokens)
        try:
            return self.llm.generate(requests, params, use_tqdm=False)
        except Exception as exc:  # noqa: BLE001 -- vLLM's request errors (VLLMValidationError is no ValueError)
            raise ModelError(f"{self.spec}: vLLM refused a request ({sanitise(exc, (), 300)})") from None

    # -- generation -------------------------------------------------------------------------------
    def _sampling(self, generation):
        from vllm import SamplingParams

        given = dict(generation.kwargs)
        if given.get("num_beams", 1) != 1 or "length_penalty" in given or "no_repeat_ngram_size" in given:
            bad = next(k for k in ("num_beams", "length_penalty", "no_repeat_ngram_size") if k in given)
            raise ModelError(f"--gen-kwargs {bad}: not a vLLM sampling parameter (vllm: takes temperature, top_p, "
                             "top_k, repetition_penalty and do_sample)")
        if generation.sampling:
            settings = {"temperature": given.get("temperature", 1.0), "seed": self.options.seed,
                        **{k: given[k] for k in ("top_p", "top_k", "repetition_penalty") if k in given}}
        else:
            settings = {"temperature": 0.0,
                        **({"repetition_penalty": given["repetition_penalty"]} if "repetition_penalty" in given
                           else {})}
        return SamplingParams(max_tokens=generation.max_new_tokens, stop=list(generation.stop) or None,
                              skip_special_tokens=True, **settings)

    def _generate(self, turns: list[Turn], todo: list[int], generation):
        """`--batch-size` turns at a time handed to the engine (it batches them continuously; a killed run
        keeps every finished batch in the response cache)."""
        params = self._sampling(generation)
        for b in range(0, len(todo), self.batch_size):
            idx = todo[b:b + self.batch_size]
            requests = [self._request(turns[i], self._prompt_ids(turns[i]),
                                      [open_image(s) for s in turns[i].images]) for i in idx]
            outputs = self._run(requests, params, generation.max_new_tokens)
            yield idx, self.decode([list(o.outputs[0].token_ids) for o in outputs])

    # -- log-likelihoods --------------------------------------------------------------------------
    def _score(self, turns: list[Turn], distinct: list[list[str]], todo: list[int]):
        """Per batch of turns: each turn's continuation trie, its root (the turn) first, then every other
        node, reading the turn from the prefix cache (see the module docstring)."""
        from vllm import SamplingParams

        for b in range(0, len(todo), self.batch_size):
            idx = todo[b:b + self.batch_size]
            prompts, conts, tries, images = {}, {}, {}, {}
            for i in idx:
                prompts[i] = self._prompt_ids(turns[i])
                conts[i] = self.continuation_ids([self.prompt_text(turns[i])] * len(distinct[i]), distinct[i])
                tries[i] = continuation_trie(conts[i])
                images[i] = [open_image(s) for s in turns[i].images]
            logprobs: dict[tuple, dict[int, float]] = {}
            for wave in ([(i, ()) for i in idx], [(i, node) for i in idx for node in tries[i] if node]):
                asked = [(i, node, group) for i, node in wave for group in _groups(sorted(tries[i][node]))]
                params = [SamplingParams(max_tokens=1, temperature=0.0, logprob_token_ids=group, detokenize=False)
                          for _, _, group in asked]
                outputs = self._run([self._request(turns[i], prompts[i] + list(node), images[i])
                                     for i, node, _ in asked], params)
                for (i, node, group), output in zip(asked, outputs):
                    returned = output.outputs[0].logprobs[0]
                    missing = [t for t in group if t not in returned]
                    if missing:
                        raise ModelError(f"{self.spec}: vLLM returned no log-probability for token {missing[0]}")
                    logprobs.setdefault((i, node), {}).update({t: returned[t].logprob for t in group})
            yield idx, [[self._reduce([logprobs[(i, tuple(c[:j]))][c[j]] for j in range(len(c))], len(c))
                         for c in conts[i]] for i in idx]

    def score_full(self, turns: list[Turn], continuations: list[str]) -> list[float]:
        """log P(continuation | turn) for each (turn, continuation), each sent as one full sequence with
        vLLM's prompt log-probabilities (no prefix cache: vLLM reads none for such requests). The
        returned token ids are checked to be the continuation's."""
        from vllm import SamplingParams

        conts = self.continuation_ids([self.prompt_text(t) for t in turns], continuations)
        requests = [self._request(turn, self._prompt_ids(turn) + cont, [open_image(s) for s in turn.images])
                    for turn, cont in zip(turns, conts)]
        outputs = self._run(requests, SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0,
                                                     detokenize=False))
        out = []
        for output, cont in zip(outputs, conts):
            tail = output.prompt_logprobs[-len(cont):]
            if [output.prompt_token_ids[-len(cont) + j] for j in range(len(cont))] != cont or any(
                    t not in entry for t, entry in zip(cont, tail)):
                raise ModelError(f"{self.spec}: vLLM's prompt log-probabilities do not end with the continuation")
            out.append(self._reduce([entry[t].logprob for t, entry in zip(cont, tail)], len(cont)))
        return out

    def describe(self) -> dict:
        """What the prediction record says: the prompts (as hf:), vLLM's version and engine settings."""
        import torch
        import transformers

        settings = {k: (v if isinstance(v, (int, float, str, bool, type(None), list, dict)) else str(v))
                    for k, v in self.engine_settings.items() if k not in ("model", "tokenizer")}
        return {**self.describe_prompts(), "engine": "vllm", "dtype": self.dtype, "device": self.platform,
                "batch_size": self.batch_size, "engine_settings": settings,
                "loglik_method": "next-token log-probabilities over each continuation's token trie, prefix "
                                 "caching " + ("on" if self.engine_settings.get("enable_prefix_caching") else
                                               "off (--engine-arg enable_prefix_caching=false)"),
                "versions": {"vllm": self.vllm_version, "transformers": transformers.__version__,
                             "torch": torch.__version__},
                **self.cache_stats()}


def shutdown_engines() -> None:
    """Stop the engines' worker processes on the way out. Registered after multiprocessing's own exit
    handler, it runs before it: that handler joins the engine's processes, which would wait for ever
    for a shutdown nobody sent (measured: a process that kept its engine to the end hung at exit)."""
    while _ENGINES:
        _, llm = _ENGINES.popitem()
        with contextlib.suppress(Exception):  # an engine that already died has nothing left to stop
            llm.llm_engine.engine_core.shutdown(timeout=30)


def continuation_trie(continuations: list[list[int]]) -> dict[tuple, set[int]]:
    """{token prefix: the tokens that follow it in some continuation}: the requests that score every
    continuation, each prefix once."""
    trie: dict[tuple, set[int]] = {}
    for tokens in continuations:
        for j, token in enumerate(tokens):
            trie.setdefault(tuple(tokens[:j]), set()).add(token)
    return trie


def _groups(tokens: list[int]) -> list[list[int]]:
    """The tokens in requests of at most vLLM's MAX_LOGPROB_TOKEN_IDS."""
    return [tokens[k:k + MAX_LOGPROB_TOKEN_IDS] for k in range(0, len(tokens), MAX_LOGPROB_TOKEN_IDS)]
