"""Run directors over benchmark problems concurrently and grade every answer with the one scorer.

Each (director, problem) pair is one episode with its own MCP client context; a shared in-process server is
fine because workflows are isolated by workflow_id. A bounded number of episodes run at once (grading
included, since code grading occupies the sandbox). An episode that raises, or overruns its time limit, is
recorded as a failed item with score 0 and never stops the run; one that raised (or could not be graded) is a
run failure, which the CLI refuses to turn into figures and a resumed run tries again. How one episode is run,
cleaned up and graded is `training.episodes`, shared with the rollout worker.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import anyio
import structlog

from flowsteer_mcp.director.episode import Director, EpisodeResult
from flowsteer_mcp.director.graded import DirectorTurn, ItemResult
from operators.backends.replicas import AFFINITY
from training.data import Problem
from training.episodes import MakeClient, ScoreFn, describe_error, grade, run_director
from training.evaluate.journal import item_key
from training.evaluate.oracle import oracle_correct
from training.evaluate.results import EvalConfig, EvalReport
from training.evaluate.tasks import task_for
from training.scoring import score

__all__ = ["MakeClient", "ScoreFn", "describe_error", "evaluate", "run_episode"]  # the first three: older imports

log = structlog.get_logger(__name__)

TRACE_OUTPUT_CHARS = 2000  # a trace row's output kept in the journal: enough to read, not a copy of every run


def _clipped_trace(trace: Sequence[dict[str, object]]) -> list[dict[str, object]]:
    """The final run's trace as the journal keeps it: each row's `output` cut to `TRACE_OUTPUT_CHARS`."""
    rows = []
    for row in trace:
        output = row.get("output")
        if isinstance(output, str) and len(output) > TRACE_OUTPUT_CHARS:
            row = {**row, "output": output[:TRACE_OUTPUT_CHARS]}
        rows.append(row)
    return rows


def executor_unavailable(episode: EpisodeResult) -> str | None:
    """Why the executor failed the episode (a call it could not answer after its retries, or one past the per-call
    limit), or None. Such an episode is a run failure: scoring it would charge the workflow for the server."""
    if episode.executor_unavailable:
        return f"the executor could not answer: {episode.error}"
    for row in episode.trace:
        if row.get("unavailable"):
            return f"the executor could not answer {row.get('node_id')} ({row.get('operator')}): {row.get('error')}"
    return None


def _failed_item(base: ItemResult, error: str, wall_s: float, *, method: str = "episode_error") -> ItemResult:
    return base.model_copy(update={"error": error, "wall_s": wall_s, "score_method": method})


def _item_from_episode(base: ItemResult, episode: EpisodeResult, wall_s: float) -> ItemResult:
    return base.model_copy(
        update={
            "answer": episode.answer,
            "workflow_id": episode.workflow_id,
            "dsl": episode.dsl,
            "finished": episode.finished,
            "end_reason": episode.end_reason,
            "turns": episode.turns,
            "llm_calls": episode.llm_calls,
            "tokens": episode.tokens,
            "policy_tokens": episode.policy_tokens,
            "wall_s": wall_s,
            "error": episode.error,
            "trace": _clipped_trace(episode.trace),
            "stats": episode.stats,
            "director_turns": [
                DirectorTurn(round=turn.round, kind=turn.kind, sent=turn.sent, ok=turn.ok) for turn in episode.records
            ],
        }
    )


async def run_episode(
    director: Director,
    problem: Problem,
    *,
    make_client: MakeClient,
    score_fn: ScoreFn = score,
    timeout_s: float | None = None,
    delete_workflow: bool = True,
) -> ItemResult:
    """One graded episode; every failure becomes a value on the returned item, never an exception."""
    base = ItemResult(
        director=director.name, problem_id=problem.id, source=problem.source, problem_type=problem.problem_type
    )
    started = time.monotonic()
    run = await run_director(
        director, task_for(problem), make_client=make_client, timeout_s=timeout_s, delete_workflow=delete_workflow
    )
    wall_s = time.monotonic() - started
    if run.error is not None:
        log.warning("episode_failed", director=director.name, problem=problem.id, error=run.error)
        return _failed_item(base, run.error, wall_s)
    if run.episode is None:  # only reachable when the time limit cancelled the episode
        if run.timed_out:  # the user's limit: an outcome of the director (too slow), scored 0 like a wrong answer
            detail = f"episode exceeded its time limit of {timeout_s} s"
            return _failed_item(base, detail, wall_s, method="episode_timeout")
        return _failed_item(base, "no result", wall_s)
    item = _item_from_episode(base, run.episode, wall_s)
    unavailable = executor_unavailable(run.episode)
    if unavailable is not None:  # the executor failed the episode, not the director: measure it again
        log.warning("episode_executor_unavailable", director=director.name, problem=problem.id, error=unavailable)
        return item.model_copy(update={"error": unavailable, "score_method": "executor_unavailable"})
    graded = await grade(score_fn, problem, run.episode.answer, director=director.name)
    if graded.result is None:
        return item.model_copy(update={"error": f"scoring failed: {graded.error}", "score_method": "scoring_error"})
    oracle = await oracle_correct(score_fn, problem, run.episode.trace)
    return item.model_copy(
        update={
            "oracle": oracle,
            "score": graded.result.score,
            "correct": graded.result.correct,
            "score_method": graded.result.method,
            "score_details": json.loads(json.dumps(graded.result.details, default=str)),  # the report must serialise
        }
    )


def _check_run(directors: Sequence[Director], concurrency: int) -> list[str]:
    """The directors' names, refused when they would collide in one report (or nothing could run)."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    names = [director.name for director in directors]
    duplicated = sorted({name for name in names if names.count(name) > 1})
    if duplicated:
        raise ValueError(f"director names must be unique in one report; repeated: {', '.join(duplicated)}")
    return names


def _progress_bar(total: int, done: int, *, enabled: bool) -> Any:
    """A tqdm bar on stderr (disabled: silent); tqdm is the [train] extra's, so `flowsteer --help` needs none."""
    from tqdm import tqdm

    return tqdm(
        total=total, initial=done, desc="eval", unit="episode", file=sys.stderr, disable=not enabled, dynamic_ncols=True
    )


async def evaluate(
    problems: Sequence[Problem],
    directors: Sequence[Director],
    *,
    make_client: MakeClient,
    concurrency: int,
    progress: bool = True,
    score_fn: ScoreFn = score,
    episode_timeout_s: float | None = None,
    config: EvalConfig | None = None,
    delete_workflows: bool = True,
    done: Sequence[ItemResult] = (),
    on_item: Callable[[ItemResult], None] | None = None,
) -> EvalReport:
    """Run every director on every problem, at most `concurrency` episodes at a time.

    Items come back in schedule order: for each problem, each director in turn (so an interrupted or
    partial run still compares directors on the same problems). `progress` shows a tqdm bar on stderr.
    Pairs already graded in `done` (a resumed run) are reused, not run again, except run failures
    (`ItemResult.run_failure`), which run again; `on_item` sees each newly graded item as soon as it exists
    (the journal makes it durable there).
    """
    names = _check_run(directors, concurrency)
    config = config or EvalConfig(directors=names, concurrency=concurrency)
    pairs = [(director, problem) for problem in problems for director in directors]
    reused = {item_key(item): item for item in done if not item.run_failure}
    items: list[ItemResult | None] = [
        reused.get((director.name, problem.source, problem.id)) for director, problem in pairs
    ]
    resumed = sum(item is not None for item in items)
    limiter = anyio.CapacityLimiter(concurrency)
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    started = time.monotonic()
    failures = sum(item.failed for item in items if item is not None)
    bar = _progress_bar(len(pairs), resumed, enabled=progress)

    async def run_pair(index: int, director: Director, problem: Problem) -> None:
        nonlocal failures
        # The episode's policy requests stick to one replica of a policy fleet (a task's own context).
        AFFINITY.set(f"{director.name}/{problem.source}/{problem.id}")
        async with limiter:
            item = await run_episode(
                director,
                problem,
                make_client=make_client,
                score_fn=score_fn,
                timeout_s=episode_timeout_s,
                delete_workflow=delete_workflows,
            )
        items[index] = item
        if on_item is not None:
            on_item(item)
        failures += item.failed
        bar.update(1)
        bar.set_postfix_str(f"failures={failures}", refresh=False)

    try:
        async with anyio.create_task_group() as group:
            for index, (director, problem) in enumerate(pairs):
                if items[index] is None:
                    group.start_soon(run_pair, index, director, problem)
    finally:
        bar.close()
    finished = [item for item in items if item is not None]
    wall_s = time.monotonic() - started
    log.info("eval_finished", episodes=len(finished), resumed=resumed, failures=failures, wall_s=round(wall_s, 2))
    return EvalReport(config=config, started_at=started_at, wall_s=wall_s, items=finished, resumed_items=resumed)
