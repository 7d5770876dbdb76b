"""Bounded integers at the canvas boundary.

Python refuses to convert integers of more than 4,300 digits to or from text, and no count, position or
node index on a canvas is ever that large. So every number the canvas reads from text is parsed with a digit
cap first, and numbers echoed in messages are abbreviated: hostile input gets a clear error, never a crash.
"""

from __future__ import annotations

import re

MAX_DIGITS = 6
MAX_NUMBER = 10**MAX_DIGITS - 1  # the largest count, position or node index the canvas ever accepts
_BOUNDED_INT = re.compile(rf"[+-]?[0-9]{{1,{MAX_DIGITS}}}")


def parse_bounded_int(raw: str) -> int | None:
    """The integer written in `raw` (surrounding spaces allowed), or None unless it has 1..MAX_DIGITS digits."""
    text = raw.strip()
    if _BOUNDED_INT.fullmatch(text) is None:
        return None
    return int(text)


def show_int(value: int) -> str:
    """`value` for a message; a huge one is described instead of printed (printing it may even fail)."""
    if -MAX_NUMBER <= value <= MAX_NUMBER:
        return str(value)
    return f"a number of more than {MAX_DIGITS} digits"
