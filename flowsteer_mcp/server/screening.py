"""Screening raw request arguments before they are validated: text no store can hold, names nobody declared.

Why in the middlewares (server/errors.py) rather than per tool: the check then holds for every tool, prompt and
resource, including those added later, and it runs before any tool code, so a refused request changes nothing.
Names and paths quoted back are clipped: a hostile key must not come back whole in the error.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from flowsteer_mcp.canvas.errors import CanvasError
from flowsteer_mcp.canvas.text import clip, require_unicode

NAME_CHARS = 40  # a key or name as quoted in an error
PATH_CHARS = 120  # a whole argument path (`options.finish.solver_operators[3]`) as quoted in an error
SHOWN_NAMES = 5  # unknown names quoted in one error; the rest are counted

_Link = tuple[str, "_Link"] | None  # a path, innermost part first: built only for the value that is wrong


def shown(name: str, limit: int = NAME_CHARS) -> str:
    """`name` clipped and made printable (an unpaired surrogate becomes `\\ud800`), for quoting in an error."""
    return clip(name, limit).encode("utf-8", "backslashreplace").decode("utf-8")


def unknown_names(given: Iterable[str], known: Collection[str]) -> list[str]:
    return [name for name in given if name not in known]


def describe_unknown(kind: str, unknown: list[str], known: Iterable[str]) -> str:
    """`unknown argument x` or `unknown arguments a, b and 3 more`, each name clipped, then what is accepted."""
    names = ", ".join(f"`{shown(name)}`" for name in unknown[:SHOWN_NAMES])
    more = f" and {len(unknown) - SHOWN_NAMES} more" if len(unknown) > SHOWN_NAMES else ""
    plural = "s" if len(unknown) > 1 else ""
    accepted = ", ".join(known) or "none"
    return f"unknown {kind}{plural} {names}{more} (accepted: {accepted})"


def invalid_text(value: Any, where: str = "") -> str | None:
    """The `invalid_text` message for the first string in `value` (a value or a key, at any depth) that UTF-8
    cannot encode (an unpaired surrogate), naming its path; None when all of it is valid Unicode.

    Iterative, so a deeply nested request cannot exhaust the stack."""
    stack: list[tuple[Any, _Link]] = [(value, (where, None) if where else None)]
    while stack:
        item, link = stack.pop()
        if isinstance(item, str):
            if problem := _problem(item, f"`{_path(link)}`" if link else "the value"):
                return problem
        elif isinstance(item, Mapping):
            for key, child in item.items():
                name = str(key)
                if problem := _problem(name, f"the argument name `{shown(name)}`"):
                    return problem
                stack.append((child, (f".{name}" if link else name, link)))
        elif isinstance(item, list | tuple):
            stack.extend((child, (f"[{index}]", link)) for index, child in enumerate(item))
    return None


def _problem(text: str, what: str) -> str | None:
    try:
        require_unicode(text, what)
    except CanvasError as error:
        return f"{error.code.value}: {error.message}"
    return None


def _path(link: _Link) -> str:
    parts: list[str] = []
    while link is not None:
        part, link = link
        parts.append(shown(part))
    return shown("".join(reversed(parts)), PATH_CHARS)
