"""Fixtures every test folder shares: the workflow stores, the one PostgreSQL server of a session, and loggers
that never outlive their test."""

from __future__ import annotations

from typing import Any

import pytest
import structlog

pytest_plugins = ("tests.support.postgres", "tests.support.stores")


@pytest.fixture(autouse=True)
def uncached_loggers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Commands run in-process configure structlog with loggers cached on first use; a logger cached under one
    test's configuration would keep writing past the `capture_logs` of every later test. Tests keep them uncached
    (subprocesses, which are what users run, are untouched)."""
    configure = structlog.configure

    def uncached(**settings: Any) -> None:
        configure(**{**settings, "cache_logger_on_first_use": False})

    monkeypatch.setattr(structlog, "configure", uncached)
