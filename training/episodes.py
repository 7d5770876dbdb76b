"""One episode through the MCP canvas, as evaluation and rollouts both run it: time-limited, cleaned up, graded.

Why one home: the evaluation harness and the rollout worker must agree on what a timeout, a crashed client or
a failing scorer means, or a policy would be trained on outcomes the evaluation counts differently. Failures
are values here (`EpisodeRun.error`, `EpisodeRun.timed_out`, `Graded.error`); only `SandboxRefusedError`
propagates, because a host that cannot run code safely must stop the run rather than record zeros.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

import anyio
import structlog
from mcp import Client

from flowsteer_mcp.api import TaskSpec
from flowsteer_mcp.director.episode import Director, EpisodeResult
from operators.sandbox import SandboxRefusedError
from training.data import Problem
from training.scoring import ScoreResult

log = structlog.get_logger(__name__)

MakeClient = Callable[[], AbstractAsyncContextManager[Client]]
ScoreFn = Callable[[Problem, str | None], Awaitable[ScoreResult]]


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


def describe_error(error: BaseException) -> str:
    """`Type: message` of the underlying errors (the MCP client wraps them in nested exception groups)."""
    return "; ".join(f"{type(leaf).__name__}: {leaf}" for leaf in _leaves(error))


@dataclass(frozen=True)
class EpisodeRun:
    """What running a director produced: its episode, or why there is none (or both, see `timed_out`)."""

    episode: EpisodeResult | None
    error: str | None = None  # the client or the director raised (described, never raised)
    timed_out: bool = False  # the time limit cancelled something (the episode itself, or only the cleanup)


async def forget_workflow(client: Client, workflow_id: str) -> None:
    """Delete a finished episode's workflow so long runs never fill the server's workflow limit."""
    try:
        await client.call_tool("delete_workflow", {"workflow_id": workflow_id})
    except Exception as error:  # cleanup only: the episode's result is already collected
        log.warning("workflow_cleanup_failed", workflow_id=workflow_id, error=str(error))


async def run_director(
    director: Director,
    task: TaskSpec,
    *,
    make_client: MakeClient,
    timeout_s: float | None = None,
    delete_workflow: bool = True,
) -> EpisodeRun:
    """Run `director` on `task` in its own MCP client within `timeout_s`, then delete its workflow."""
    episode: EpisodeResult | None = None
    try:
        with anyio.move_on_after(timeout_s) as scope:
            async with make_client() as client:
                episode = await director.run(task, client)
                if delete_workflow and episode.workflow_id:
                    await forget_workflow(client, episode.workflow_id)
    except Exception as error:  # the client or director failed: a failed episode, not a failed run
        return EpisodeRun(episode=None, error=describe_error(error))
    return EpisodeRun(episode=episode, timed_out=scope.cancelled_caught)


@dataclass(frozen=True)
class Graded:
    """The scorer's verdict on an answer, or why the scorer failed (then `result` is None)."""

    result: ScoreResult | None
    error: str | None = None


async def grade(score_fn: ScoreFn, problem: Problem, answer: str | None, **log_context: Any) -> Graded:
    """Score `answer`; a scorer bug becomes `Graded.error` so it cannot sink a run of many episodes."""
    try:
        return Graded(result=await score_fn(problem, answer))
    except SandboxRefusedError:
        raise  # the host cannot run code safely: stop, never report (or train on) a zero it did not earn
    except Exception as error:
        described = describe_error(error)
        log.warning("scoring_failed", problem=problem.id, error=described, **log_context)
        return Graded(result=None, error=described)
