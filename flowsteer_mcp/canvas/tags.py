"""Tag extraction for the Flow-Director dialect in one linear scan.

A lazy `<name>(.*?)</name>` search restarts at every unclosed opening tag, so text such as
`"<action>" * n` costs O(n²). Here one pass records, per tag name and form (`<x>` or `[x]`), the first opening
tag and the first matching closing tag after it; the value is the same one the regex would find: the
earliest opening tag that is closed, first closing tag wins.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_TAG = re.compile(r"<(/?)([A-Za-z_][A-Za-z0-9_]*)>|\[(/?)([A-Za-z_][A-Za-z0-9_]*)\]")


@dataclass
class _Span:
    opened_at: int  # where the first opening tag starts
    content_start: int  # just after it
    content_end: int | None = None  # where the first closing tag after it starts


@dataclass
class Tags:
    """The tags of one text; `get(name)` is the stripped value of the first closed `<name>` or `[name]`."""

    text: str
    _spans: dict[tuple[str, str], _Span] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        for match in _TAG.finditer(self.text):
            angle = match.group(2) is not None
            form = "<" if angle else "["
            closing = bool(match.group(1) if angle else match.group(3))
            key = ((match.group(2) if angle else match.group(4)).lower(), form)
            span = self._spans.get(key)
            if span is None:
                if not closing:
                    self._spans[key] = _Span(opened_at=match.start(), content_start=match.end())
            elif closing and span.content_end is None:
                span.content_end = match.start()

    def get(self, name: str) -> str | None:
        closed = [
            span
            for form in ("<", "[")
            if (span := self._spans.get((name.lower(), form))) is not None and span.content_end is not None
        ]
        if not closed:
            return None
        first = min(closed, key=lambda span: span.opened_at)
        assert first.content_end is not None
        return self.text[first.content_start : first.content_end].strip()
