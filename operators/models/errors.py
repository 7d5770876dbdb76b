"""Errors raised while materialising a local model."""

from __future__ import annotations


class ModelPrepareError(RuntimeError):
    """Preparing a model failed; the message says which step and what to do about it."""
