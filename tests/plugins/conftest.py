"""Each plug-in test starts and ends with registries that hold only the built-ins and the installed plug-ins."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from operators.backends.registry import backend_registry
from training.reward_schedules import reward_schedules
from training.scoring.registry import scorers


@pytest.fixture(autouse=True)
def fresh_registries() -> Iterator[None]:
    caches = (backend_registry, reward_schedules, scorers)
    for cache in caches:
        cache.cache_clear()
    yield
    for cache in caches:
        cache.cache_clear()
