"""The order in which problems are drawn, with a cursor that a checkpoint can store and restore exactly.

Each pass over the dataset is a permutation derived from (seed, pass number) alone, so the cursor (pass,
position) is the whole state: a resumed run draws the very batch the killed run would have drawn next.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from training.data import Problem


class StreamCursor(BaseModel):
    model_config = ConfigDict(frozen=True)

    epoch: int = Field(default=0, ge=0)  # passes over the dataset completed
    position: int = Field(default=0, ge=0)  # problems of the current pass already drawn


class ProblemStream:
    """Batches of distinct problems, pass after pass; a batch never holds the same problem twice."""

    def __init__(self, problems: Sequence[Problem], *, seed: int, shuffle: bool = True) -> None:
        if not problems:
            raise ValueError("the training data holds no problems")
        ids = [p.id for p in problems]
        if len(set(ids)) != len(ids):
            raise ValueError("problem ids must be unique across the training data")
        self._problems = list(problems)
        self._seed = seed
        self._shuffle = shuffle
        self.cursor = StreamCursor()

    def __len__(self) -> int:
        return len(self._problems)

    def _order(self, epoch: int) -> list[int]:
        order = list(range(len(self._problems)))
        if self._shuffle:
            random.Random(f"{self._seed}:{epoch}").shuffle(order)
        return order

    def next_batch(self, size: int) -> list[Problem]:
        """The next `size` problems; a batch that crosses a pass boundary continues with the next pass."""
        if not 1 <= size <= len(self._problems):
            raise ValueError(
                f"batch size must be between 1 and the number of problems ({len(self._problems)}), got {size}"
            )
        batch: list[Problem] = []
        taken: set[str] = set()
        epoch, position = self.cursor.epoch, self.cursor.position
        order = self._order(epoch)
        while len(batch) < size:
            if position >= len(order):
                epoch, position = epoch + 1, 0
                order = self._order(epoch)
            problem = self._problems[order[position]]
            position += 1
            if problem.id in taken:  # only across a pass boundary: skip its repeat so the batch stays distinct
                continue
            taken.add(problem.id)
            batch.append(problem)
        self.cursor = StreamCursor(epoch=epoch, position=position)
        return batch
