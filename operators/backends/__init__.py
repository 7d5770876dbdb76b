"""Executor LLM backends behind one interface (`ChatBackend`)."""
