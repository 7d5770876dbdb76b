"""Fixtures shared by the training tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from flowsteer_mcp.director.card import ShippedDirector


@pytest.fixture
def no_cli_logging_setup(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI configures structlog with cached loggers; a test that calls it in-process must not freeze the
    logging of the tests that run after it (their `capture_logs` would see nothing)."""
    for module in ("training.cli", "training.evaluate.cli", "training.train.cli"):  # each command configures it
        monkeypatch.setattr(f"{module}.configure_logging", lambda *args, **kwargs: None)


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    """One intra-op thread: on a 2-core machine shared with other work, two spinning OpenMP threads made a step
    ~15x slower than one."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def random_director(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ShippedDirector]:
    """A shipped-director folder with a real, random (untrained) LoRA on smollm2-135m-instruct, made once per
    module with one torch thread (a busy 2-core machine: one spinning OpenMP thread per process)."""
    import torch

    from flowsteer_mcp.director.card import shipped_director
    from tests.support.shipped_director import random_lora_director

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield shipped_director(random_lora_director(tmp_path_factory.mktemp("director")))
    finally:
        torch.set_num_threads(threads)
