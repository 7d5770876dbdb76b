"""Text at the canvas boundary: only valid Unicode gets in, only short excerpts of it get echoed.

Stores write canvas state as UTF-8, so text with an unpaired surrogate is rejected before any change rather
than failing at the store after the live copy changed. Error messages quote user input as a short excerpt:
they are stored every round (history, last feedback), so a hostile name must not be copied into them whole.
"""

from __future__ import annotations

from flowsteer_mcp.canvas.errors import CanvasError, ErrorCode

EXCERPT_CHARS = 60


def require_unicode(text: str, what: str) -> None:
    """Raise CanvasError(INVALID_TEXT) naming the index of the first code point UTF-8 cannot encode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise CanvasError(
            ErrorCode.INVALID_TEXT,
            f"{what} contains an unpaired surrogate (invalid Unicode) at index {error.start}; "
            "send valid UTF-8 text (remove or replace that character).",
        ) from None


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """A quoted, escaped excerpt of `text`, cut to `limit` characters with "…" and the full length."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}… ({len(text)} characters)"


def clip(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, marking the cut with "…"."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
