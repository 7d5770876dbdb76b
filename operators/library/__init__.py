"""Built-in operator implementations, one module per category."""

from __future__ import annotations

from operators.base import Operator

BUILTIN_OPERATORS: list[type[Operator]] = []
