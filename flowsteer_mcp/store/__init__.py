"""Workflow stores: where canvas states live between tool calls (memory, a SQLite file, or PostgreSQL).

`postgres` is not imported here: it needs the optional `postgres` extra, and `open_store` loads it on demand.
"""

from flowsteer_mcp.store.base import StoredWorkflow, WorkflowStore, open_store
from flowsteer_mcp.store.memory import MemoryStore
from flowsteer_mcp.store.sqlite import SQLiteStore

__all__ = ["MemoryStore", "SQLiteStore", "StoredWorkflow", "WorkflowStore", "open_store"]
