"""`TrainingError`: the root of every exception the `training` package defines.

Why: the training and evaluation commands can tell their own, explained failures from bugs in one clause. Each
class keeps its standard base as well (`class DatasetError(TrainingError, ValueError)`), so an existing
`except ValueError` keeps its meaning.
"""

from __future__ import annotations

__all__ = ["TrainingError"]


class TrainingError(Exception):
    """Base of the exceptions defined in `training`."""
