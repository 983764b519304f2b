"""One sanitiser for text that comes from outside and reaches a terminal, an error line or a recorded
field: a server's error message, its answers, the model name it reports.

`sanitise(text, secrets, limit)`: every secret is masked first (in any letter case, and any run of
MIN_SECRET_RUN or more of its characters reaching past the key's public prefix, so a key echoed in part,
or cut by a length bound, or upper-cased, never shows, while text that merely holds `sk-proj-` stays);
then control characters (escape sequences that retitle or clear a terminal, NUL, carriage returns, tabs
and newlines: the text is one line) become spaces, and bidirectional controls and bytes that are not UTF-8
are escaped; then the text is bounded. The order matters: bounding first could cut a key so that the
part left no longer matches it."""

from __future__ import annotations

import re
import string

MIN_SECRET_RUN = 8  # the shortest run of a secret's characters that is masked on its own
PRIVATE_RUN = 4  # of which at least this many past the key's public prefix
MASK = "***"
# Control characters, tabs and newlines included (a newline in a one-line context forges another line)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
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
    text = _ESCAPED.sub(_escape, _CONTROL.sub(" ", mask_secrets(str(text), secrets)))
    if limit is not None and len(text) > limit:
        text = text[:limit] + "..."
    return text
