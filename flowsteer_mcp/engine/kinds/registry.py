"""Executors by stage-kind name: the engine's half of a kind (the canvas declares the kind itself).

Why a registry rather than a fixed table: a kind registered at run time (`canvas.kinds.register_kind`) needs
its executor found the same way; the engine imports the canvas, never the reverse, so the executor is
registered here, by name.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import MappingProxyType

from flowsteer_mcp.engine.kinds.base import StageExecutor
from flowsteer_mcp.errors import FlowSteerError


class ExecutorRegistrationError(FlowSteerError, ValueError):
    """An executor that cannot be registered, or a stage kind that has none."""


_EXECUTORS: dict[str, StageExecutor] = {}
_BUILTIN: set[str] = set()
EXECUTORS: Mapping[str, StageExecutor] = MappingProxyType(_EXECUTORS)  # read-only, always current


def register_executor(kind: str, executor: StageExecutor, *, builtin: bool = False) -> None:
    """Run stages of `kind` (a registered canvas kind's name) with `executor`."""
    if kind in _EXECUTORS:
        raise ExecutorRegistrationError(f"Stage kind {kind!r} already has an executor.")
    _EXECUTORS[kind] = executor
    if builtin:
        _BUILTIN.add(kind)


def unregister_executor(kind: str) -> None:
    if kind in _BUILTIN:
        raise ExecutorRegistrationError(f"{kind!r} is a built-in stage kind; its executor stays.")
    if _EXECUTORS.pop(kind, None) is None:
        raise ExecutorRegistrationError(f"Stage kind {kind!r} has no executor to unregister.")


@contextmanager
def registered_executor(kind: str, executor: StageExecutor) -> Iterator[StageExecutor]:
    """`executor` registered for the `with` block only (tests, experiments)."""
    register_executor(kind, executor)
    try:
        yield executor
    finally:
        unregister_executor(kind)


def executor_for(kind: str) -> StageExecutor:
    executor = _EXECUTORS.get(kind)
    if executor is None:
        raise ExecutorRegistrationError(
            f"No executor for stage kind {kind!r}: register one with `register_executor` "
            f"(known: {', '.join(_EXECUTORS)})."
        )
    return executor
