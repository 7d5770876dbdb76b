"""The workflow canvas core: typed graph, edits, DSL, dialect, finish gate and feedback (no MCP here)."""
