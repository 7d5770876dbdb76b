"""Fixtures shared by the training tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def no_cli_logging_setup(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI configures structlog with cached loggers; a test that calls it in-process must not freeze the
    logging of the tests that run after it (their `capture_logs` would see nothing)."""
    monkeypatch.setattr("training.cli.configure_logging", lambda *args, **kwargs: None)
