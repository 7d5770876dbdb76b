"""Stage runners by stage-kind name: the engine's half of a kind (the canvas declares the kind itself).

Why a registry rather than a fixed table: a kind registered at run time (`canvas.kinds.register_kind`) needs
its stage runner found the same way; the engine imports the canvas, never the reverse, so the stage runner is
registered here, by name.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import MappingProxyType

from flowsteer_mcp.engine.kinds.base import StageRunner
from flowsteer_mcp.errors import FlowSteerError


class StageRunnerRegistrationError(FlowSteerError, ValueError):
    """A stage runner that cannot be registered, or a stage kind that has none."""


_STAGE_RUNNERS: dict[str, StageRunner] = {}
_BUILTIN: set[str] = set()
STAGE_RUNNERS: Mapping[str, StageRunner] = MappingProxyType(_STAGE_RUNNERS)  # read-only, always current


def register_stage_runner(kind: str, runner: StageRunner, *, builtin: bool = False) -> None:
    """Run stages of `kind` (a registered canvas kind's name) with `runner`."""
    if kind in _STAGE_RUNNERS:
        raise StageRunnerRegistrationError(f"Stage kind {kind!r} already has a stage runner.")
    _STAGE_RUNNERS[kind] = runner
    if builtin:
        _BUILTIN.add(kind)


def unregister_stage_runner(kind: str) -> None:
    if kind in _BUILTIN:
        raise StageRunnerRegistrationError(f"{kind!r} is a built-in stage kind; its stage runner stays.")
    if _STAGE_RUNNERS.pop(kind, None) is None:
        raise StageRunnerRegistrationError(f"Stage kind {kind!r} has no stage runner to unregister.")


@contextmanager
def registered_stage_runner(kind: str, runner: StageRunner) -> Iterator[StageRunner]:
    """`runner` registered for the `with` block only (tests, experiments)."""
    register_stage_runner(kind, runner)
    try:
        yield runner
    finally:
        unregister_stage_runner(kind)


def stage_runner_for(kind: str) -> StageRunner:
    runner = _STAGE_RUNNERS.get(kind)
    if runner is None:
        raise StageRunnerRegistrationError(
            f"No stage runner for stage kind {kind!r}: register one with `register_stage_runner` "
            f"(known: {', '.join(_STAGE_RUNNERS)})."
        )
    return runner
