"""Workflow stores: where canvas states live between tool calls (memory, or a SQLite file)."""

from flowsteer_mcp.store.base import StoredWorkflow, WorkflowStore, open_store
from flowsteer_mcp.store.memory import MemoryStore
from flowsteer_mcp.store.sqlite import SQLiteStore

__all__ = ["MemoryStore", "SQLiteStore", "StoredWorkflow", "WorkflowStore", "open_store"]
