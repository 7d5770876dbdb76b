"""The private verdict channel, parent side: a per-run nonce and the parsing of what came back.

The harness gets the nonce through a descriptor it empties and closes before the solution runs, and
writes it back (to a second, private memfd) only after every test passed. Anything the program prints,
exits with, or writes to files therefore has no bearing on ``passed``.
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass

_MAX_VERDICT_BYTES = 64 * 1024
_KNOWN_FAILURES = frozenset({"failed", "error", "killed", "sandbox_error"})


def new_nonce() -> str:
    """A fresh 256-bit secret for one run."""
    return secrets.token_hex(32)


@dataclass(frozen=True)
class Verdict:
    """What the verdict channel said: whether the genuine pass record is there, else the last failure."""

    passed: bool
    outcome: str | None
    reason: str


def read_verdict(fd: int, nonce: str) -> Verdict:
    """Parse the verdict memfd. Failure records are untrusted text; only the nonce decides ``passed``."""
    raw = os.pread(fd, _MAX_VERDICT_BYTES, 0)
    passed = False
    outcome: str | None = None
    reason = ""
    for line in raw.splitlines():
        try:
            record = json.loads(line)
        except (ValueError, UnicodeDecodeError):
            continue
        if not isinstance(record, dict):
            continue
        if record.get("outcome") == "passed":
            if secrets.compare_digest(str(record.get("nonce", "")), nonce):
                passed = True
            continue
        if record.get("outcome") in _KNOWN_FAILURES and isinstance(record.get("reason"), str):
            outcome, reason = record["outcome"], record["reason"]
    return Verdict(passed=passed, outcome=outcome, reason=reason)
