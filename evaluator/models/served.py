"""A served model, `openai:MODEL --base-url URL`: any OpenAI-compatible chat-completions endpoint
(`vllm serve`, SGLang, TGI, llama.cpp's server, `transformers serve`, a hosted API) in place of a
checkpoint loaded in-process. `ServedVLM` answers the turns `GenerativeAdapter` builds, so a served
model is asked exactly what an `hf:` one is (same prompt templates, images inside the user message,
a system turn with `--system-prompt`); multiple choice goes by letter (`--choice-mode letter`,
evaluator/models/ask.py).

Images travel as base64 data URLs of the files' own bytes (a decoded video frame as PNG). Requests run
`--concurrency` at a time per endpoint on daemon worker threads over one httpx client; a 429, a 5xx, a timeout or a
dropped connection is retried `--retries` times with exponential backoff and jitter (a server's Retry-After is
honoured), and the last failure is one error naming the endpoint and the row. Several `--base-url`s (one per
data-parallel server or node of one model) share the requests: each worker thread asks its own endpoint, so a faster
one takes more, and a failed request is retried at once on the next endpoint (backing off only once every endpoint
has failed it). The key is read from the
environment variable `--api-key-env` names: it is sent in the Authorization header and nowhere else
(never printed, logged, cached or recorded). Deterministic requests are answered from the response
cache when it holds them (evaluator/models/response_cache.py)."""

from __future__ import annotations

import base64
import io
import json
import math
import os
import queue
import random
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

from core.errors import ModelError
from core.http_exchange import Answer, bounded_exchange, checked_url, shown_url
from core.sanitise import mask_secrets, sanitise
from evaluator.models.backend import VLMBackend
from evaluator.models.options import ModelOptions
from evaluator.models.reasoning import DEFAULT_TAGS, Reasoning, answer_budget, served_output, thinking_switched_on
from evaluator.models.response_cache import ResponseCache, request_key, vlbench_version

RETRIED_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
BACKOFF_SECONDS, BACKOFF_CAP_SECONDS = 0.5, 30.0
MAX_ANSWER_BYTES = 64 << 20  # a chat-completions answer larger than this is refused unread
MAX_TIMEOUT_SECONDS = 86_400.0  # --request-timeout: a day at most (an infinite one would never give up)
# --gen-kwargs that chat completions take: OpenAI's own, and top_k / repetition_penalty, which vLLM,
# SGLang and TGI accept beside them
REQUEST_KWARGS = ("temperature", "top_p", "top_k", "repetition_penalty")
_MAGIC = ((b"\xff\xd8\xff", "image/jpeg"), (b"\x89PNG\r\n\x1a\n", "image/png"), (b"GIF87a", "image/gif"),
          (b"GIF89a", "image/gif"), (b"BM", "image/bmp"))


def check_endpoint(base_url: str | None, spec: str) -> str:
    """The endpoint's base URL without a trailing slash; a missing or malformed one is a ModelError. An
    error line shows the URL without credentials, query or fragment (where a secret may sit)."""
    if not base_url:
        raise ModelError(f"--model {spec}: a served model needs --base-url (e.g. http://localhost:8000/v1)")
    return checked_url(base_url, "--base-url", ModelError, "put the key in the environment variable --api-key-env "
                       "names", "http://localhost:8000/v1")


def parse_base_urls(values) -> str | tuple[str, ...] | None:
    """`--base-url URL` (repeatable): one URL as itself, several as a tuple (one served model's endpoints), none as
    None; a URL given twice is refused."""
    values = list(values or ())
    repeated = next((v for k, v in enumerate(values) if v in values[:k]), None)
    if repeated is not None:
        raise ModelError(f"--base-url {shown_url(repeated)}: given twice")
    return None if not values else values[0] if len(values) == 1 else tuple(values)


def check_endpoints(base_url, spec: str) -> tuple[str, ...]:
    """Every endpoint of `--base-url` (one URL, or several: parse_base_urls), checked (check_endpoint)."""
    urls = base_url if isinstance(base_url, (tuple, list)) else (base_url,)
    return tuple(check_endpoint(url, spec) for url in urls)


def check_served_options(options: ModelOptions, spec: str) -> None:
    """A served model's bounds (the options it cannot take are refused by the resolver, from their declared
    readers)."""
    if options.concurrency < 1 or options.retries < 0 or not 0 < options.request_timeout <= MAX_TIMEOUT_SECONDS:
        raise ModelError(f"--concurrency must be >= 1, --retries >= 0 and --request-timeout in "
                         f"(0, {MAX_TIMEOUT_SECONDS:g}] seconds")


def _logprob(value) -> float | None:
    """A log-probability from a server's JSON: a finite number <= 0 (a 400-digit integer, which no float holds,
    or -1e999, read as infinite, is none)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) and number <= 0 else None


def image_url(source) -> str:
    """A data URL of one image: a file's own bytes (its type read from its first bytes), embedded bytes,
    or a decoded frame as PNG; other formats are decoded and sent as PNG."""
    if isinstance(source, Path):
        try:
            data = source.read_bytes()
        except OSError as exc:
            raise ModelError(f"{source}: cannot read image ({exc.strerror or exc})") from None
    elif isinstance(source, (bytes, bytearray)):
        data = bytes(source)
    else:  # a PIL image (a video frame)
        buffer = io.BytesIO()
        source.convert("RGB").save(buffer, format="PNG")
        data = buffer.getvalue()
    mime = next((m for magic, m in _MAGIC if data.startswith(magic)), None)
    if mime is None and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        mime = "image/webp"
    if mime is None:
        from evaluator.models.images import open_image

        buffer = io.BytesIO()
        open_image(source if isinstance(source, Path) else data).save(buffer, format="PNG")
        data, mime = buffer.getvalue(), "image/png"
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def messages(turn, system_prompt: str | None) -> list[dict]:
    """The chat messages of one turn: the images inside the user message, before its text (as `hf:`
    models are shown them), after an optional system turn."""
    content = [{"type": "image_url", "image_url": {"url": image_url(s)}} for s in turn.images]
    content.append({"type": "text", "text": turn.text})
    return ([{"role": "system", "content": system_prompt}] if system_prompt else []) + [
        {"role": "user", "content": content}]


class ServedVLM(VLMBackend):
    """`openai:MODEL`: the backend (evaluator/models/backend.py) of a model behind an OpenAI-compatible
    endpoint: `generate` by chat completions; `score` from the prompt log-probabilities a server such as
    vLLM returns (`score`'s docstring)."""

    def __init__(self, model: str, options: ModelOptions):
        import httpx

        from evaluator.models.generation import Generation

        self.spec = f"openai:{model}"
        self.model, self.options = model, options
        self.endpoints = check_endpoints(options.base_url, self.spec)
        self.endpoint = ", ".join(self.endpoints)  # what names the model's endpoints: in error lines, cache keys
        check_served_options(options, self.spec)
        self.reasoning = Reasoning(options.reasoning_tags or DEFAULT_TAGS)
        self.template_kwargs = dict(options.chat_template_kwargs)
        self.thinking = thinking_switched_on(self.template_kwargs)
        self.generation = Generation(answer_budget(options, self.thinking), tuple(options.gen_kwargs),
                                     tuple(options.stop))
        self.extra = self._request_kwargs()
        key = os.environ.get(options.api_key_env) if options.api_key_env else None
        if key and not all(" " <= c <= "~" for c in key):
            raise ModelError(f"${options.api_key_env}: the key has characters an HTTP header cannot carry "
                             "(non-ASCII or control characters; it is not shown)")
        self._key = key or None
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.workers = options.concurrency * len(self.endpoints)
        self.client = httpx.Client(timeout=options.request_timeout, headers=self._headers,
                                   limits=httpx.Limits(max_connections=self.workers,
                                                       max_keepalive_connections=self.workers))
        self.cache = (ResponseCache(options.response_cache)
                      if options.response_cache is not None and self.generation.greedy else None)
        self.requests = self.retries = 0
        self.prompt_logprobs: bool | None = None  # whether the server returns them (asked once, on the first score)
        self.served_model: str | None = None
        self.system_fingerprint: str | None = None
        self._count = threading.Lock()

    def _request_kwargs(self) -> dict:
        given = dict(self.generation.kwargs)
        unknown = [k for k in given if k not in (*REQUEST_KWARGS, "do_sample")]
        if unknown:
            raise ModelError(f"--gen-kwargs {unknown[0]}: not a chat-completions parameter (a served model takes "
                             f"{', '.join(REQUEST_KWARGS)} and do_sample)")
        if not self.generation.sampling:
            return {"temperature": 0.0}
        out = {k: v for k, v in given.items() if k != "do_sample"}
        return {"temperature": out.pop("temperature", 1.0), **out, "seed": self.options.seed}

    def body(self, turn, max_new_tokens: int) -> dict:
        """The chat-completions request of one turn."""
        return {"model": self.model, "messages": messages(turn, self.options.system_prompt),
                "max_tokens": max_new_tokens, **self.extra,
                **({"stop": list(self.generation.stop)} if self.generation.stop else {}),
                **({"chat_template_kwargs": self.template_kwargs} if self.template_kwargs else {})}

    def request(self, turn, max_new_tokens: int) -> tuple[dict, str]:
        """A turn's request body and its response-cache key (the endpoint, the body with its images,
        generation settings and template switches, the thinking markers, vlbench's version)."""
        body = self.body(turn, max_new_tokens)
        return body, self._key_of(body, reasoning=self.reasoning.record())

    # -- requests ---------------------------------------------------------------------------------
    def generate(self, turns: list, max_new_tokens: int | None = None, names: list[str] | None = None) -> list[str]:
        """Answers, in order: cached ones first, the rest `--concurrency` at a time. The first request
        that fails for good stops the run (the answers already received stay cached)."""
        from core.progress import progress

        tokens = self.generation.max_new_tokens if max_new_tokens is None else max_new_tokens
        names = names or [f"request {k + 1}" for k in range(len(turns))]
        asked = [self.request(turn, tokens) for turn in turns]
        hits = self.cached([key for _, key in asked], "content")
        out: list[str | None] = [None] * len(turns)
        for k, content in hits.items():
            out[k] = self.generation.cut(content)
        todo = [(k, body, key) for k, (body, key) in enumerate(asked) if k not in hits]
        with progress(total=len(todo), desc="requests", unit="request") as bar:
            for k, content in self._ask_all(todo, names, lambda response, name, k: self._content(response, name),
                                            "content"):
                out[k] = self.generation.cut(content)
                bar.update()
                if self.retries:
                    bar.set_postfix(retries=self.retries, refresh=False)
        return out

    # -- log-likelihoods --------------------------------------------------------------------------
    def context_body(self, turn) -> dict:
        """The request that returns a turn's own prompt tokens: the generation prompt, one token asked."""
        return {"model": self.model, "messages": messages(turn, self.options.system_prompt), "max_tokens": 1,
                "temperature": 0.0, "return_token_ids": True}

    def score_body(self, turn, continuation: str) -> dict:
        """The request that returns a continuation's log-probabilities (vLLM's chat completions): the turn
        and an assistant message holding the continuation, continued rather than closed, no generation
        prompt, the prompt's log-probabilities and token ids returned."""
        return {"model": self.model, "max_tokens": 1, "temperature": 0.0,
                "messages": messages(turn, self.options.system_prompt) + [
                    {"role": "assistant", "content": [{"type": "text", "text": continuation}]}],
                "add_generation_prompt": False, "continue_final_message": True, "prompt_logprobs": 0,
                "return_token_ids": True}

    def _key_of(self, body: dict, **extra) -> str:
        return request_key({"endpoint": self.endpoint, "body": body, "vlbench": vlbench_version(), **extra})

    def score(self, turns: list, continuations: list[list[str]], names: list[str] | None = None) -> list[list[float]]:
        """Per turn, the log-likelihood of each continuation, read from the server's prompt
        log-probabilities. A turn's own prompt tokens come from one request with its generation prompt;
        each continuation's request renders the same turn with the continuation as the assistant's answer,
        and the continuation's tokens are the ones after the turn's own (the hf: split: the template's
        answer lead, LLaVA-1.5's space, is the continuation's first text). They are checked by the
        returned token ids and their decoded text: a template that writes closing tokens after an
        answer is refused, never scored. Whether the server returns prompt log-probabilities is asked
        once, on the first request, and recorded; one that does not is one error line quoting its answer."""
        names = names or [f"request {k + 1}" for k in range(len(turns))]
        distinct = [list(dict.fromkeys(c)) for c in continuations]
        flat = [(k, c) for k, conts in enumerate(distinct) for c in conts]

        def read(response, name, n):
            k, text = flat[n]
            return self._continuation_logprobs(response, name, contexts[k], text)

        probing = self.prompt_logprobs is None
        try:
            contexts = self._gather([(k, self.context_body(t)) for k, t in enumerate(turns)], names,
                                    self._prompt_ids, "prompt_token_ids", "turns", probe=probing)
            token_lps = self._gather([(n, self.score_body(turns[k], c)) for n, (k, c) in enumerate(flat)],
                                     [names[k] for k, _ in flat], read, "token_logprobs", "continuations",
                                     probe=probing, probed=lambda: setattr(self, "prompt_logprobs", True))
        except ModelError as exc:
            if self.prompt_logprobs is None:  # nothing scored yet: the server cannot
                self.prompt_logprobs = False
                raise ModelError(f"--choice-mode loglik: {self.endpoint} cannot score continuations: {exc}") from None
            raise
        scored = [{} for _ in turns]
        for n, (k, text) in enumerate(flat):
            values = token_lps[n]
            total = float(sum(values))
            scored[k][text] = total / len(values) if self.options.loglik == "mean" else total
        return [[scored[k][c] for c in conts] for k, conts in enumerate(continuations)]

    def _gather(self, asked: list, names: list[str], read, field: str, what: str, probe: bool = False,
                probed=None) -> list:
        """`read(response, name, n)` of every request `asked` ((n, body), ...): the cached ones first, the
        rest `--concurrency` at a time. With `probe`, the first request the cache lacks is asked alone
        first (what the server can answer is learnt there), then `probed()` is called."""
        from core.progress import progress

        keys = [self._key_of(body) for _, body in asked]
        hits = self.cached(keys, field)
        out: list = [None] * len(asked)
        todo = []
        for position, ((n, body), key) in enumerate(zip(asked, keys)):
            if position in hits:
                out[n] = hits[position]
            else:
                todo.append((n, body, key))
        if probe and todo:
            n, body, key = todo.pop(0)
            out[n] = self._ask(body, key, names[n], lambda r, name: read(r, name, n), field)
            if probed is not None:
                probed()
        with progress(total=len(todo), desc=f"requests ({what})", unit="request") as bar:
            for n, value in self._ask_all(todo, names, read, field):
                out[n] = value
                bar.update()
        return out

    def _prompt_ids(self, response, name: str, n: int) -> list[int]:
        """The prompt's token ids in a scoring answer (every scoring answer passes here: the server it names is
        noted for the record, as on the generation path)."""
        ids = response.get("prompt_token_ids") if isinstance(response, dict) else None
        if isinstance(response, dict):
            self._note_server(response)
        if not isinstance(ids, list) or not ids or not all(isinstance(t, int) for t in ids):
            raise ModelError(f"{self.endpoint}: {name}: the answer has no prompt token ids (return_token_ids); "
                             f"its answer: {self._shown(response)}")
        return ids

    def _continuation_logprobs(self, response, name: str, context: list[int], text: str) -> list[float]:
        """The log-probabilities of the continuation's tokens in one scoring answer (see `score`)."""
        ids = self._prompt_ids(response, name, 0)
        logprobs = response.get("prompt_logprobs")
        if not isinstance(logprobs, list) or len(logprobs) != len(ids):
            raise ModelError(f"{self.endpoint}: {name}: the answer has no prompt log-probabilities; its answer: "
                             f"{self._shown(response)}")
        start = len(context) if ids[:len(context)] == context else _common_prefix(ids, context)
        if start >= len(ids):
            raise ModelError(f"{self.endpoint}: {name}: the continuation {text[:60]!r} has no tokens of its own")
        values, decoded = [], []
        for position in range(start, len(ids)):
            entry = logprobs[position].get(str(ids[position])) if isinstance(logprobs[position], dict) else None
            value = _logprob(entry.get("logprob") if isinstance(entry, dict) else None)
            if value is None:
                raise ModelError(f"{self.endpoint}: {name}: no log-probability for prompt token {position} "
                                 f"(id {ids[position]}): expected a finite number <= 0")
            values.append(value)
            decoded.append(entry.get("decoded_token"))
        if all(isinstance(d, str) for d in decoded) and "".join(decoded).strip() != text.strip():
            raise ModelError(f"{self.endpoint}: {name}: the tokens after the turn read {''.join(decoded)[:80]!r}, "
                             f"not the continuation {text[:80]!r}: the server's chat template writes more after an "
                             "assistant answer, which would be scored with it")
        return values

    def _ask_all(self, todo: list, names: list[str], read, field: str):
        """(index, read(response)) of every request as it arrives, `--concurrency` workers per endpoint asking at a
        time (worker n asks endpoint n modulo their number first).
        The workers are daemon threads: when a request fails for good, or Ctrl-C / SIGTERM stops the
        run, nothing more is sent and the process ends without waiting for the requests in flight."""
        tasks: queue.Queue = queue.Queue()
        for item in todo:
            tasks.put(item)
        results: queue.Queue = queue.Queue()
        stop = threading.Event()

        def worker(home: int) -> None:
            while not stop.is_set():
                try:
                    k, body, key = tasks.get_nowait()
                except queue.Empty:
                    return
                try:
                    results.put((k, self._ask(body, key, names[k], lambda r, n: read(r, n, k), field, home), None))
                except BaseException as exc:  # noqa: BLE001 -- handed to the main thread, which raises it
                    results.put((k, None, exc))
                    return

        for n in range(min(self.workers, len(todo))):
            threading.Thread(target=worker, args=(n % len(self.endpoints),), name=f"vlbench-request-{n}",
                             daemon=True).start()
        try:
            for _ in range(len(todo)):
                k, content, exc = results.get()
                if exc is not None:
                    raise exc
                yield k, content
        finally:
            stop.set()

    def _ask(self, body: dict, key: str, name: str, read, field: str, home: int = 0):
        """One request's value, `read(response, name)`, kept in the response cache under `field`; asked of endpoint
        `home` first."""
        try:
            value = read(self._post(body, name, home), name)
        except ModelError as exc:  # a server may echo the key in its error message: it never reaches a line
            raise ModelError(self.clean(exc, 1000)) from None
        self.keep(key, field, value)
        return value

    def _post(self, body: dict, name: str, home: int = 0) -> dict:
        """The answer to one request, asked of endpoint `home` and, after a failure that a retry may mend, of the next
        endpoint at once; the backoff comes once every endpoint has failed it in turn (at once with one endpoint)."""
        import httpx

        count = len(self.endpoints)
        for attempt in range(self.options.retries + 1):
            endpoint = self.endpoints[(home + attempt) % count]
            url = f"{endpoint}/chat/completions"
            wait = None
            try:
                with self._count:
                    self.requests += 1
                response = self._fetch("POST", url, self.options.request_timeout, MAX_ANSWER_BYTES, json=body)
            except httpx.TimeoutException:
                reason = f"no whole answer within {self.options.request_timeout:g} s"
            except httpx.TransportError as exc:
                reason = f"connection failed ({type(exc).__name__})"
            else:
                if response.status_code == 200:
                    try:
                        return response.json()
                    except ValueError:
                        raise ModelError(f"{endpoint}: {name}: the answer is not JSON") from None
                if response.status_code not in RETRIED_STATUS:
                    raise ModelError(f"{endpoint}: {name}: {self._refusal(response)}")
                reason = f"HTTP {response.status_code}{self._server_message(response)}"
                wait = _retry_after(response)
            if attempt == self.options.retries:
                tried = f" (the last of {min(attempt + 1, count)} endpoints asked)" if count > 1 else ""
                raise ModelError(f"{endpoint}: {name}: {reason}, {attempt + 1} tries{tried}")
            with self._count:
                self.retries += 1
            if (attempt + 1) % count == 0:  # every endpoint has failed it in turn (or the only one has)
                round_ = attempt // count
                time.sleep(wait if wait is not None else
                           min(BACKOFF_CAP_SECONDS, BACKOFF_SECONDS * 2 ** round_) * (0.5 + random.random()))
        raise AssertionError("unreachable")

    def _fetch(self, method: str, url: str, seconds: float, cap: int, **kwargs) -> Answer:
        """One HTTP exchange within `seconds` for the whole answer and `cap` bytes of body
        (core.http_exchange.bounded_exchange): past the deadline httpx.TimeoutException, past the cap a ModelError."""
        return bounded_exchange(self.client, method, url, seconds, cap, lambda: ModelError(
            f"{shown_url(url)}: the answer is larger than {cap // 2 ** 20} MiB; not read"), **kwargs)

    def _refusal(self, response) -> str:
        """What a non-retried error status means, in one line."""
        meaning = {400: "the server refused the request", 401: "the key was refused (401): check the variable "
                   f"{self.options.api_key_env}", 403: "access denied (403)",
                   404: f"not found (404): is {self.model!r} a model this endpoint serves, and does the URL end "
                   "where /chat/completions follows (often /v1)?", 413: "the request is too large (413)",
                   422: "the server cannot process the request (422)"}
        return meaning.get(response.status_code, f"HTTP {response.status_code}") + self._server_message(response)

    @property
    def _secrets(self) -> tuple:
        return (self._key,) if self._key else ()

    def clean(self, text, limit: int | None = 300) -> str:
        """Server-derived text for an error line or the record (core.sanitise: the key masked first)."""
        return sanitise(text, self._secrets, limit)

    def _shown(self, response) -> str:
        """A server's JSON answer, cleaned and shortened, for an error line."""
        try:
            text = json.dumps(response, default=str)
        except (TypeError, ValueError, RecursionError):
            text = type(response).__name__
        return self.clean(text, 200)

    def _recorded(self, value):
        """A field of the server's answer kept in the record: text, cleaned; anything else dropped."""
        return self.clean(value, 200) if isinstance(value, str) and value else None

    def _server_message(self, response) -> str:
        """The server's own error message, cleaned and shortened, as `: message` (empty when it gave none)."""
        try:
            payload = response.json()
            error = payload.get("error", payload.get("detail", payload.get("message")))
            text = error.get("message") if isinstance(error, dict) else error
        except (ValueError, AttributeError, RecursionError):
            text = None
        text = " ".join(self.clean(text, None).split()) if text else ""
        return f": {self.clean(text, 200)}" if text else ""

    def _content(self, response: dict, name: str) -> str:
        choices = response.get("choices") if isinstance(response, dict) else None
        if not choices or not isinstance(choices, list) or not isinstance(choices[0], dict):
            raise ModelError(f"{self.endpoint}: {name}: the response has no choices")
        message = choices[0].get("message") or {}
        if not isinstance(message, dict):
            raise ModelError(f"{self.endpoint}: {name}: the answer's message is not an object")
        if message.get("refusal"):
            raise ModelError(f"{self.endpoint}: {name}: the model refused ({self.clean(message['refusal'], 120)!r})")
        if choices[0].get("finish_reason") == "content_filter":
            raise ModelError(f"{self.endpoint}: {name}: the answer was withheld by the server's content filter")
        content = message.get("content")
        # a server's reasoning parser puts the thinking in its own field (vLLM, SGLang: reasoning_content;
        # OpenRouter and newer vLLM: reasoning)
        thinking = next((message[k] for k in ("reasoning_content", "reasoning") if message.get(k)), None)
        for value, what in ((content, "content"), (thinking, "reasoning")):
            if value is not None and not isinstance(value, str):
                raise ModelError(f"{self.endpoint}: {name}: the answer's {what} is not text")
        self._note_server(response)
        text = served_output(content or "", thinking, choices[0].get("finish_reason") != "length", self.reasoning.tags)
        return mask_secrets(text, self._secrets) if text else ""

    def _note_server(self, response: dict) -> None:
        """The model and fingerprint the server says answered, from its first answer that names them. Endpoints
        that say they serve different models are an error: their answers would be mixed in one run."""
        named = self._recorded(response.get("model"))
        with self._count:
            if len(self.endpoints) > 1 and named and self.served_model and named != self.served_model:
                raise ModelError(f"--base-url: the endpoints serve different models ({self.served_model!r}, then "
                                 f"{named!r}); give the endpoints of one model")
            self.served_model = self.served_model or named
            self.system_fingerprint = self.system_fingerprint or self._recorded(response.get("system_fingerprint"))

    def provenance(self) -> dict:
        """The served model's name and fingerprint as the server reported them, kept with each cached answer."""
        return {k: v for k, v in (("served_model", self.served_model),
                                  ("system_fingerprint", self.system_fingerprint)) if v is not None}

    def note_provenance(self, entry: dict) -> None:
        self._note_server({"model": entry.get("served_model"), "system_fingerprint": entry.get("system_fingerprint")})

    def server_version(self, endpoint: str) -> str | None:
        """The version an endpoint's server reports, where it has a way to (vLLM's GET /version), within 5 s and
        64 KiB."""
        import httpx

        parts = urlsplit(endpoint)
        try:
            response = self._fetch("GET", f"{parts.scheme}://{parts.netloc}/version", 5.0, 1 << 16)
            version = response.json().get("version") if response.status_code == 200 else None
        except (httpx.HTTPError, ModelError, ValueError, AttributeError):
            return None
        return self._recorded(version)

    def describe(self) -> dict:
        """What the prediction record says about the served model (never the key): its endpoint, or every one of
        them, and the server's version (one per endpoint where they differ)."""
        import httpx

        versions = [self.server_version(endpoint) for endpoint in self.endpoints]
        where = {"endpoint": self.endpoints[0]} if len(self.endpoints) == 1 else {"endpoints": list(self.endpoints)}
        return {"model": self.spec, **where, "served_model": self.served_model,
                "server_version": versions[0] if len(set(versions)) == 1 else versions,
                "system_fingerprint": self.system_fingerprint,
                "api_key_env": self.options.api_key_env, "key_given": bool(self._headers),
                "concurrency": self.options.concurrency, "request_timeout": self.options.request_timeout,
                "requests": self.requests, "retries": self.retries, "prompt_logprobs": self.prompt_logprobs,
                "cache": self.cache_stats().get("cache"), "reasoning": self.describe_reasoning(),
                **({"system_prompt": self.options.system_prompt} if self.options.system_prompt else {}),
                "versions": {"httpx": httpx.__version__}}


def _common_prefix(a: list, b: list) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _retry_after(response) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return min(BACKOFF_CAP_SECONDS, max(0.0, float(value))) if value is not None else None
    except ValueError:
        return None
