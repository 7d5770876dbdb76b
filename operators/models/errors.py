"""Errors raised while materialising a local model."""

from __future__ import annotations

from operators.errors import OperatorsError


class ModelPrepareError(OperatorsError, RuntimeError):
    """Preparing a model failed; the message says which step and what to do about it."""
