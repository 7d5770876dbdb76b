"""Fixtures every test folder shares: the workflow stores, and the one PostgreSQL server of a session."""

pytest_plugins = ("tests.support.postgres", "tests.support.stores")
