"""One sanitiser for text that comes from outside and reaches a terminal, an error line or a recorded
field: a server's error message, its answers, the model name it reports.

`sanitise(text, secrets, limit)`: every secret is masked first (in any letter case, and any run of
MIN_SECRET_RUN or more of its characters, so a key echoed in part, or cut by a length bound, or
upper-cased, never shows); then control characters (escape sequences that retitle or clear a terminal,
NUL, carriage returns) become spaces; then the text is bounded. The order matters: bounding first
could cut a key so that the part left no longer matches it."""

from __future__ import annotations

import re

MIN_SECRET_RUN = 8  # the shortest run of a secret's characters that is masked on its own
MASK = "***"
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def mask_secrets(text: str, secrets) -> str:
    """`text` with every secret, and every run of at least MIN_SECRET_RUN consecutive characters of one,
    replaced by ***, case-insensitively."""
    for secret in secrets:
        if not secret:
            continue
        run = min(MIN_SECRET_RUN, len(secret))
        lowered, key = text.lower(), secret.lower()
        spans, i = [], 0
        while i <= len(text) - run:
            start = key.find(lowered[i:i + run])
            if start < 0:
                i += 1
                continue
            end = i + run  # extend the match while the text keeps following the secret
            while end < len(text) and start + (end - i) < len(key) and lowered[end] == key[start + end - i]:
                end += 1
            spans.append((i, end))
            i = end
        for a, b in reversed(spans):
            text = text[:a] + MASK + text[b:]
    return text


def sanitise(text, secrets=(), limit: int | None = 300) -> str:
    """Secrets masked, control characters (other than tab and newline) made spaces, then at most `limit`
    characters (an ellipsis marks a cut)."""
    text = _CONTROL.sub(" ", mask_secrets(str(text), secrets))
    if limit is not None and len(text) > limit:
        text = text[:limit] + "..."
    return text
