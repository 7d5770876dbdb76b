"""structlog setup: logs go to stderr (stdout carries the stdio transport), JSON when not a terminal."""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

_SECRET_KEYS = ("token", "api_key", "authorization", "password", "secret")


def _is_token_count(key: str, value: Any) -> bool:
    """`tokens=1234`, `prompt_tokens=...`: a number under a *token* key counts LLM tokens; it is no credential."""
    return "token" in key.lower() and isinstance(value, int | float) and not isinstance(value, bool)


def _redact(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    for key in list(event):
        if any(marker in key.lower() for marker in _SECRET_KEYS) and not _is_token_count(key, event[key]):
            event[key] = "***"
    return event


class _CurrentStderr:
    """Writes to whatever `sys.stderr` is at the moment of writing (it may be swapped after configuration,
    e.g. by a test runner's capture), so a configured logger never holds on to a closed stream."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure_logging(level: str = "INFO") -> None:
    renderer: structlog.types.Processor = (
        structlog.dev.ConsoleRenderer() if sys.stderr.isatty() else structlog.processors.JSONRenderer()
    )
    logging.basicConfig(stream=_CurrentStderr(), level=level.upper(), format="%(message)s")
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            _redact,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=_CurrentStderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=True,
    )
