"""One sanitiser for text that comes from outside and reaches a terminal, an error line or a recorded
field: a server's error message, its answers, the model name it reports.

`sanitise(text, secrets, limit)`: every secret is masked first (in any letter case, and any run of
MIN_SECRET_RUN or more of its characters reaching past the key's public prefix, so a key echoed in part,
or cut by a length bound, or upper-cased, never shows, while text that merely holds `sk-proj-` stays);
then control characters (escape sequences that retitle or clear a terminal, NUL, carriage returns, tabs
and newlines: the text is one line) become spaces, and bidirectional controls and bytes that are not UTF-8
are escaped; then the text is bounded. The order matters: bounding first could cut a key so that the
part left no longer matches it.

The keys themselves: `environment_secrets()` are the values of the variables vlbench reads keys from (HF_TOKEN,
OPENAI_API_KEY, the one --api-key-env names); `MaskedStream` masks them in everything the CLI prints, and
`looks_like_credential` tells a value that must never be written into a record, a cache or a log."""

from __future__ import annotations

import re
import string

MIN_SECRET_RUN = 8  # the shortest run of a secret's characters that is masked on its own
PRIVATE_RUN = 4  # of which at least this many past the key's public prefix
MASK = "***"
# Control characters, tabs and newlines included (a newline in a one-line context forges another line)
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# Shown escaped: bidirectional overrides and isolates (they reorder what a terminal shows), and lone surrogates
# (a file name's bytes that are not UTF-8, which a terminal cannot be sent)
_ESCAPED = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)  # keeps every length
# The public start of an API key, the same in every key of its kind: `sk-proj-`, `sk-ant-`, `hf_`, `gsk_`
PUBLIC_PREFIX = re.compile(r"[a-z]{1,4}(?:[-_][a-z]{1,5})?[-_]")


def _secret_spans(lowered: str, key: str, public: int):
    """(start, end) of each run in `lowered` of at least MIN_SECRET_RUN consecutive characters of `key` (both in
    ASCII lower case) holding PRIVATE_RUN or more past its `public` prefix, left to right. Linear in the text:
    only stretches made of the key's characters are looked at, and a run is consumed once found."""
    run = min(MIN_SECRET_RUN, len(key))
    need = min(PRIVATE_RUN, len(key) - public)
    starts: dict[str, list[int]] = {}
    for j in range(len(key) - run + 1):
        starts.setdefault(key[j:j + run], []).append(j)
    stretches = re.compile("[" + re.escape("".join(sorted(set(key)))) + "]{%d,}" % run)
    for stretch in stretches.finditer(lowered):
        i, stop = stretch.start(), stretch.end()
        while i <= stop - run:
            best = None
            for s in starts.get(lowered[i:i + run], ()):
                end = i + run  # extend the match while the text keeps following the secret
                while end < stop and s + end - i < len(key) and lowered[end] == key[s + end - i]:
                    end += 1
                if s + (end - i) - max(s, public) >= need and (best is None or end > best):
                    best = end
            if best is None:
                i += 1
                continue
            yield i, best
            i = best


def mask_secrets(text: str, secrets) -> str:
    """`text` with every secret, and every run of at least MIN_SECRET_RUN consecutive characters of one that
    reaches PRIVATE_RUN characters past the key's public prefix (`sk-proj-` alone is no secret: every OpenAI
    project key starts so), replaced by ***, in any ASCII letter case."""
    for secret in secrets:
        if not secret:
            continue
        prefix = PUBLIC_PREFIX.match(secret)
        key = secret.translate(_ASCII_LOWER)
        pieces, last = [], 0
        for start, end in _secret_spans(text.translate(_ASCII_LOWER), key, prefix.end() if prefix else 0):
            pieces += [text[last:start], MASK]
            last = end
        text = "".join(pieces) + text[last:] if pieces else text
    return text


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code - 0xdc00:02x}" if 0xdc80 <= code <= 0xdcff else f"\\u{code:04x}"


def sanitise(text, secrets=(), limit: int | None = 300) -> str:
    """One line of outside text: secrets masked, control characters (tabs and newlines too) made spaces,
    bidirectional controls and bytes that are not UTF-8 escaped (`\\u202e`, `\\xff`), then at most `limit`
    characters (an ellipsis marks a cut)."""
    text = _ESCAPED.sub(_escape, CONTROL.sub(" ", mask_secrets(str(text), secrets)))
    if limit is not None and len(text) > limit:
        text = text[:limit] + "..."
    return text


# Words that make a variable or argument name a secret's (split at `_`, `-` and `.`: `hf_token`, `api-key`,
# never `max_num_batched_tokens`)
SECRET_WORDS = frozenset({"token", "key", "secret", "password", "passwd", "apikey", "credential", "credentials"})
# The variables vlbench (or what it calls: huggingface_hub, openai, an exported task's Inspect provider) reads keys
# from; --api-key-env may name another
KEY_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "OPENAI_API_KEY", "VLBENCH_API_KEY", "VLBENCH_TOKEN")
MIN_SECRET_LENGTH = 8  # a shorter value (`1`, `none`) is no key, and masking it would mangle ordinary text
# The published shapes of common keys: Hugging Face, OpenAI and Anthropic, GitHub, Slack, AWS, Google, Groq, and
# the tokens of vlbench's own challenge service (pipelines/serve/store.py)
_KEY_SHAPE = re.compile(r"(?<![A-Za-z0-9])(?:hf_[A-Za-z0-9]{30,}|sk-[A-Za-z0-9_\-]{20,}|gh[pousr]_[A-Za-z0-9]{30,}|"
                        r"github_pat_[A-Za-z0-9_]{30,}|xox[abprs]-[A-Za-z0-9\-]{10,}|AKIA[0-9A-Z]{16}|"
                        r"AIza[0-9A-Za-z_\-]{35}|gsk_[A-Za-z0-9]{30,}|vlb_[0-9a-f]{12}_[A-Za-z0-9_\-]{40,})")


def names_a_secret(name: str) -> bool:
    """True for a name that says it holds a secret (`hf_token`, `OPENAI_API_KEY`, `db-password`)."""
    return bool(SECRET_WORDS & set(re.split(r"[_\-.]", str(name).lower())))


def environment_secrets(extra_variables=()) -> tuple[str, ...]:
    """The values of the key variables vlbench reads (KEY_VARIABLES and `extra_variables`, the one --api-key-env
    names) that are long enough to be keys: what is masked in every line vlbench prints. Variables vlbench never
    reads (a shell's GPG_KEY) are left alone."""
    import os

    names = {*KEY_VARIABLES, *(n for n in extra_variables if n)}
    return tuple(sorted({os.environ[n] for n in names if len(os.environ.get(n) or "") >= MIN_SECRET_LENGTH}))


def looks_like_credential(text: str, secrets=()) -> bool:
    """True when `text` holds a key: one of `secrets` (or a long enough run of one), or a value shaped like a
    published kind of key."""
    return bool(_KEY_SHAPE.search(text)) or mask_secrets(text, secrets) != text


class MaskedStream:
    """A text stream whose every write has `secrets` masked (the CLI's stdout and stderr while a command runs: a
    key pasted into any flag never reaches the terminal or a captured log)."""

    def __init__(self, stream, secrets: tuple[str, ...]):
        self._stream, self._secrets = stream, secrets

    def write(self, text: str) -> int:
        self._stream.write(mask_secrets(text, self._secrets))
        return len(text)

    def onto(self, stream) -> "MaskedStream":
        """The same masking, writing to STREAM."""
        return MaskedStream(stream, self._secrets)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name):
        return getattr(self._stream, name)
