"""`OperatorsError`: the root of every exception the `operators` package defines.

Why: a caller (the engine, a plug-in host) can catch "anything the operators layer raised on purpose" in one
clause. Each class keeps its standard base as well (`class ConfigError(OperatorsError, ValueError)`), so an
existing `except ValueError` keeps its meaning.
"""

from __future__ import annotations

__all__ = ["OperatorsError"]


class OperatorsError(Exception):
    """Base of the exceptions defined in `operators`."""
