"""Per-call usage records for executor backends, kept in a bounded in-memory log.

Why: rewards, traces and benchmarks need tokens, latency and retry counts per call, attributed to the
operator and canvas node that made it. Recent records are kept for inspection (bounded, so a long training
run cannot grow memory without limit); totals cover every call ever recorded.
"""

from __future__ import annotations

import threading
import time
from collections import deque

from pydantic import BaseModel, Field

__all__ = ["UsageLog", "UsageRecord", "UsageTotals"]


class UsageRecord(BaseModel):
    """One executor call as seen by the backend, successful or not."""

    backend: str
    model: str
    operator: str | None = None
    node_id: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0  # wall time of the whole call, retries and backoff included
    attempts: int = 1
    ok: bool = True
    error: str | None = None
    finished_at: float = Field(default_factory=time.time)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class UsageTotals(BaseModel):
    calls: int = 0
    failed_calls: int = 0
    attempts: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def add(self, record: UsageRecord) -> None:
        self.calls += 1
        self.failed_calls += 0 if record.ok else 1
        self.attempts += record.attempts
        self.prompt_tokens += record.prompt_tokens
        self.completion_tokens += record.completion_tokens
        self.latency_s += record.latency_s


class UsageLog:
    """Thread-safe log keeping the last `capacity` records and running totals over all of them."""

    def __init__(self, capacity: int = 10_000) -> None:
        if capacity < 1:
            raise ValueError("UsageLog capacity must be at least 1")
        self._records: deque[UsageRecord] = deque(maxlen=capacity)
        self._totals = UsageTotals()
        self._lock = threading.Lock()

    def add(self, record: UsageRecord) -> None:
        with self._lock:
            self._records.append(record)
            self._totals.add(record)

    def records(self) -> list[UsageRecord]:
        """The retained records, oldest first."""
        with self._lock:
            return list(self._records)

    def totals(self) -> UsageTotals:
        """A snapshot of the totals over every record ever added (also the evicted ones)."""
        with self._lock:
            return self._totals.model_copy()

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)
