"""A SQLite file that keeps memoised node results beyond one process.

Why: under `memo_scope = "charged"` the workflows an evaluation compares are judged on the same draws, which
makes the paired comparison exact. A long evaluation on a CPU runs over several sessions (`flowsteer eval
--resume`); without this file each restart would draw anew for the workflows still to run, and a director added
on resume would be judged on other samples than the baselines it is compared with. The entries' keys hold the
backend identity and every setting a result depends on (`memo.memo_key`), so a file reused under another
executor simply finds nothing.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from flowsteer_mcp.engine.memo import MemoEntry
from flowsteer_mcp.errors import FlowSteerError

MEMO_STORE_FORMAT = 1


class MemoStoreError(FlowSteerError, RuntimeError):
    """A memo file that cannot be opened or is not a memo file; the message names the file and what to do."""


class MemoStore:
    """Memo entries by key in one SQLite file, written through on every store (a kill loses at most the
    entries of calls still running, which the next run simply makes again)."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._check_format()
        except sqlite3.DatabaseError as error:
            raise MemoStoreError(
                f"{self.path} is not a memo file ({error}); delete it or choose another output folder"
            ) from None

    def _check_format(self) -> None:
        tables = {row[0] for row in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            self._db.execute("CREATE TABLE memo_format (version INTEGER NOT NULL)")
            self._db.execute("INSERT INTO memo_format VALUES (?)", (MEMO_STORE_FORMAT,))
            self._db.execute("CREATE TABLE memo (key TEXT PRIMARY KEY, entry TEXT NOT NULL)")
            return
        version = self._db.execute("SELECT version FROM memo_format").fetchone() if "memo_format" in tables else None
        if version is None or version[0] != MEMO_STORE_FORMAT or "memo" not in tables:
            raise MemoStoreError(
                f"{self.path} is not a format-{MEMO_STORE_FORMAT} memo file; delete it or choose another output folder"
            )

    def get(self, key: str) -> MemoEntry | None:
        row = self._db.execute("SELECT entry FROM memo WHERE key = ?", (key,)).fetchone()
        return MemoEntry.model_validate_json(row[0]) if row is not None else None

    def put(self, key: str, entry: MemoEntry) -> None:
        self._db.execute(
            "INSERT INTO memo (key, entry) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET entry = excluded.entry",
            (key, entry.model_dump_json()),
        )

    def __len__(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM memo").fetchone()[0])

    def close(self) -> None:
        self._db.close()
