"""The memo file (`engine/memo_store.py`): node results outlive the process that made them, and a file that is
not a memo file is refused unchanged."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from flowsteer_mcp.engine import MemoCache
from flowsteer_mcp.engine.memo import MemoEntry
from flowsteer_mcp.engine.memo_store import MemoStore, MemoStoreError
from operators.base import OperatorOutput


def entry(answer: str, tokens: int = 10) -> MemoEntry:
    return MemoEntry(output=OperatorOutput(ok=True, text=answer), llm_calls=1, tokens=tokens, requested=True)


def test_an_entry_and_who_paid_for_it_are_found_by_the_next_process(tmp_path: Path) -> None:
    path = tmp_path / "memo.sqlite"
    first = MemoCache(store=MemoStore(path))
    first.put("k1", entry("42"))
    assert first.charge("k1", "wf_a") is True
    assert first.store is not None
    first.store.close()

    second = MemoCache(store=MemoStore(path))
    found = second.get("k1")
    assert found is not None and found.output.text == "42" and found.tokens == 10
    assert found.paid_by == {"wf_a"}
    assert second.charge("k1", "wf_a") is False and second.charge("k1", "wf_b") is True
    assert "k1" in second and "k2" not in second
    assert second.get("k2") is None and (second.hits, second.misses) == (1, 1)


def test_an_entry_evicted_from_memory_is_still_found_in_the_file(tmp_path: Path) -> None:
    memo = MemoCache(max_entries=1, store=MemoStore(tmp_path / "memo.sqlite"))
    memo.put("k1", entry("1"))
    memo.put("k2", entry("2"))
    assert len(memo) == 1 and memo.store is not None and len(memo.store) == 2
    found = memo.get("k1")
    assert found is not None and found.output.text == "1"


def test_a_file_that_is_not_a_memo_file_is_refused_unchanged(tmp_path: Path) -> None:
    text = tmp_path / "notes.sqlite"
    text.write_text("not a database, just notes\n" * 100, encoding="utf-8")
    with pytest.raises(MemoStoreError, match=r"notes\.sqlite is not a memo file"):
        MemoStore(text)
    assert text.read_text(encoding="utf-8") == "not a database, just notes\n" * 100

    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE results (id INTEGER)")
    with pytest.raises(MemoStoreError, match=r"other\.sqlite is not a format-1 memo file"):
        MemoStore(other)
    with sqlite3.connect(other) as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert tables == {"results"}
