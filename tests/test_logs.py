"""Logging goes to stderr (stdout is the stdio transport) and follows stderr if it is replaced later."""

from __future__ import annotations

import io
import sys

import pytest
import structlog

from flowsteer_mcp.logs import configure_logging


def test_logs_follow_the_current_stderr_and_redact_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    configure_logging("INFO")
    first, second, out = io.StringIO(), io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", first)
    structlog.get_logger("t").info("one", api_key="sk-secret")
    monkeypatch.setattr(sys, "stderr", second)
    structlog.get_logger("t").info("two")
    assert '"event": "one"' in first.getvalue() and "sk-secret" not in first.getvalue()
    assert '"api_key": "***"' in first.getvalue()
    assert '"event": "two"' in second.getvalue()
    assert out.getvalue() == ""


def test_token_counts_are_logged_but_token_strings_are_not(monkeypatch: pytest.MonkeyPatch) -> None:
    configure_logging("INFO")
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    structlog.get_logger("t").info("run", tokens=1234, prompt_tokens=56, token="abc-secret", mcp_token_env=True)
    text = err.getvalue()
    assert '"tokens": 1234' in text and '"prompt_tokens": 56' in text
    assert "abc-secret" not in text and '"token": "***"' in text and '"mcp_token_env": "***"' in text
