"""`flowsteer traces collect`: run library workflows (and seeded variations) as scripted Flow-Director episodes.

A `ScriptedDirector` builds a fixed workflow through the MCP `act` tool in the released tag dialect (an add turn,
the prompt turns the canvas asks for, ..., then finish) and records each turn as the `policy` director would
see it: the observation comes from the same `ObservationBuilder` in markovian mode, the system prompt from
`create_workflow`. Each episode is graded by the one scorer and rewarded as rollouts are, then appended to
`traces.jsonl` at once, so a killed collection resumes where it stopped (`--resume`). Only training problems
run: the first `skip_per_source` items of each source are the evaluation's and are refused.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

import anyio
import structlog
from mcp import Client

from flowsteer_mcp.api import (
    ObservationBuilder,
    StageBlueprint,
    StateView,
    TaskSpec,
    kind_of,
    slot_prompts,
    slot_samples,
    slots,
)
from flowsteer_mcp.director.episode import EpisodeResult, TurnRecord
from flowsteer_mcp.director.finalize import add_usage, collect
from flowsteer_mcp.director.library import LIBRARY, LibraryWorkflow, require_known
from flowsteer_mcp.director.link import CanvasCallError, CanvasLink
from operators.registry import OperatorRegistry, default_registry
from training.data import Problem, load_inputs
from training.episodes import MakeClient, ScoreFn, grade, run_director
from training.errors import TrainingError
from training.evaluate.tasks import task_for
from training.reward import RewardConfig, compute_reward
from training.scoring import score
from training.scoring.registry import task_type_of
from training.traces.transcript import TraceEpisode, TraceTurn
from training.traces.variations import PROMPT_CHOICES, variations

log = structlog.get_logger(__name__)

TRACES_NAME = "traces.jsonl"
HEADER_NAME = "collection.json"
# Build without running after each edit (one run, at finish) under the relaxed gate, as `template` does; a
# train config's `rollout.canvas` replaces this so the transcripts match what its policy will face.
DEFAULT_CANVAS: dict[str, Any] = {"finish": "relaxed", "execute_each_step": False}
FINISH = "<action>finish</action>"
GENERIC_PROMPT = "Handle this problem carefully and output only what the next stage needs."
EMPTY_STATS: dict[str, int] = {"total_operators": 0, "unique_types": 0}


class TraceCollectionError(TrainingError, ValueError):
    """A collection that must not run (a dev item, a mismatched resume); the message says what to change."""


# ------------------------------------------------------------------------------------------ the director


def fill_prompt(task_type: str, operator: str) -> str:
    """The prompt written when a workflow leaves a slot's prompt to the operator: a prompt turn needs text."""
    return PROMPT_CHOICES.get(task_type, {}).get(operator, (GENERIC_PROMPT,))[0]


def add_turn(stage: StageBlueprint, *, inline_prompt: bool = False) -> str:
    """The dialect add turn of a stage (prompts follow in prompt turns; branch samples in modify turns). With
    `inline_prompt` (a canvas without prompt turns) an operator's prompt rides in the add itself. The stage's
    kind writes its own tags, so a kind registered later is scripted too."""
    return "<action>add</action>" + kind_of(stage).to_tags(stage, inline_prompt=inline_prompt)


class _ScriptOver(TrainingError):
    """The episode ended, or the canvas rejected a scripted turn (recorded as invalid): the script stops."""


class ScriptedDirector:
    """Drives the canvas through `act` to build one fixed workflow, recording each turn as the policy sees it."""

    def __init__(
        self,
        workflow: LibraryWorkflow,
        *,
        canvas_options: dict[str, Any] | None = None,
        observer: ObservationBuilder | None = None,
        registry: OperatorRegistry | None = None,
    ) -> None:
        self.workflow = workflow
        self.name = f"scripted:{workflow.name}"
        self.canvas_options = dict(DEFAULT_CANVAS if canvas_options is None else canvas_options)
        self.observer = observer or ObservationBuilder.default()
        self.registry = registry or default_registry()
        self.filled_prompts = 0  # prompt turns of the last run written with `fill_prompt`

    async def run(self, task: TaskSpec, client: Client) -> EpisodeResult:
        started = time.monotonic()
        episode = _Episode(self, task, CanvasLink(client))
        result = EpisodeResult(director=self.name, task=task)
        try:
            result = await episode.play(result)
        except CanvasCallError as error:
            result = result.model_copy(update={"error": str(error)})
        self.filled_prompts = episode.filled_prompts
        return result.model_copy(update={"wall_s": time.monotonic() - started})


class _Episode:
    """The mutable state of one scripted episode (the director itself stays reusable)."""

    def __init__(self, director: ScriptedDirector, task: TaskSpec, link: CanvasLink) -> None:
        self.director = director
        self.task = task
        self.link = link
        self.records: list[TurnRecord] = []
        self.prompts: list[str | None] = []  # the pending edit's prompts, in the canvas's slot order
        self.feedback: str | None = None
        self.filled_prompts = 0

    async def play(self, result: EpisodeResult) -> EpisodeResult:
        created = await self.link.create(self.task, self.director.canvas_options)
        self.workflow_id = created["workflow_id"]
        self.system = created["system_prompt"]
        self.state = StateView.model_validate(created["state"])
        self.result = result
        try:
            for stage in self.director.workflow.stages:
                await self._stage(stage)
            await self._send(FINISH)
        except _ScriptOver:
            pass
        done = self.result.model_copy(update={"records": self.records})
        return await collect(self.link, self.workflow_id, done)

    async def _stage(self, stage: StageBlueprint) -> None:
        self.prompts = slot_prompts(stage)
        inline = not self.director.canvas_options.get("prompt_turns", True)
        await self._send(add_turn(stage, inline_prompt=inline))
        if not kind_of(stage).child_samples:
            return  # an operator stage's draws ride in its add; other kinds' children draw once
        # A structure's add carries no draws: each child drawn more than once gets a modify turn.
        stage_id = [node.id for node in self.state.nodes if node.parent is None][-1]
        for slot, prompt, draws in zip(slots(stage), slot_prompts(stage), slot_samples(stage), strict=True):
            if draws > 1:
                prompt_tag = f"<prompt>{prompt}</prompt>" if prompt else ""
                self.prompts = [prompt]
                await self._send(
                    f"<action>modify</action><target>{stage_id}{slot.suffix}</target>"
                    f"<operator>{slot.operator}</operator><samples>{draws}</samples>{prompt_tag}"
                )

    async def _send(self, text: str) -> None:
        """One turn; then every prompt turn the canvas asks for. Raises `_ScriptOver` when the script must stop."""
        await self._turn(text)
        while (request := self.state.awaiting_prompt_for) is not None:
            given = self.prompts[request.index - 1] if request.index - 1 < len(self.prompts) else None
            if given is None:  # the workflow leaves this slot to the operator's default, but a prompt turn needs text
                self.filled_prompts += 1
            await self._turn(given or fill_prompt(self.task.task_type, request.operator))

    async def _turn(self, text: str) -> None:
        prompt_turn = self.state.awaiting_prompt_for is not None
        director = self.director
        if prompt_turn:
            observation = director.observer.prompt_turn(self.task, self.state, director.registry)
        else:
            observation = director.observer.turn(self.task, self.state, self.feedback)
        step = await self.link.call("act", workflow_id=self.workflow_id, text=text)
        self.records.append(
            TurnRecord(
                round=step["state"]["round"],
                kind="prompt" if prompt_turn else "action",
                system=None if prompt_turn else self.system,
                prompt=observation,
                completion=text,
                sent=text,
                ok=bool(step["ok"]),
                feedback=step["feedback"],
            )
        )
        self.result = add_usage(self.result, step)
        self.feedback = step["feedback"]
        self.state = StateView.model_validate(step["state"])
        if not step["ok"] or step["done"]:
            raise _ScriptOver


# ------------------------------------------------------------------------------------------- the plan


def plan_workflows(task_type: str, names: Sequence[str] | None, count: int, seed: int) -> list[LibraryWorkflow]:
    """The workflows run on a problem of `task_type`: the chosen library entries, each then `count` variations.

    Without names, the entries built on operators a policy is shown (not on a legacy operator such as the CodeT
    peer's), since a warm start should demonstrate only what the policy can write itself."""
    entries = LIBRARY.get(task_type, {})
    shown = set(default_registry().names())
    default_names = [name for name, entry in entries.items() if entry.operators() <= shown]
    chosen = [entries[name] for name in (names or default_names) if name in entries]
    return [item for entry in chosen for item in (entry, *variations(entry, count, seed))]


def training_problems(
    paths: Sequence[str | Path],
    *,
    skip_per_source: int,
    limit: int | None = None,
    sources: Sequence[str] | None = None,
) -> tuple[list[Problem], frozenset[str]]:
    """The training problems (each source's items after its first `skip_per_source`, as the trainer's
    `data.skip_per_source` takes them) and the ids of the dev items left out."""
    problems = load_inputs(paths, limit=limit, sources=sources, skip=skip_per_source)
    dev = load_inputs(paths, limit=skip_per_source, sources=sources) if skip_per_source else []
    return problems, frozenset(problem.id for problem in dev)


def interleave_sources(problems: Sequence[Problem]) -> list[Problem]:
    """The problems with their sources taken in turn (each source's own order kept), so that a collection cut
    short (`--resume` continues it) has covered every source about equally, not the first source only."""
    by_source: dict[str, list[Problem]] = {}
    for problem in problems:
        by_source.setdefault(problem.source, []).append(problem)
    queues = list(by_source.values())
    return [queue[i] for i in range(max(map(len, queues), default=0)) for queue in queues if i < len(queue)]


def refuse_dev_items(problems: Sequence[Problem], dev_ids: frozenset[str]) -> None:
    leaked = sorted(problem.id for problem in problems if problem.id in dev_ids)
    if leaked:
        raise TraceCollectionError(
            f"{len(leaked)} dev item(s) would be collected ({', '.join(leaked[:5])}); transcripts are for "
            "training problems only: raise the skip per source or remove them"
        )


# ---------------------------------------------------------------------------------------------- the journal


class TraceJournal:
    """`collection.json` (what the transcripts depend on) and `traces.jsonl` (one episode per line, durable)."""

    def __init__(self, path: Path, handle: IO[str]) -> None:
        self.path = path
        self._handle = handle

    @classmethod
    def open(
        cls, folder: str | Path, identity: dict[str, Any], *, resume: bool
    ) -> tuple[TraceJournal, list[TraceEpisode]]:
        """Start a collection in `folder`, or (`resume`) continue it; returns the journal and the episodes done."""
        folder = Path(folder)
        header, path = folder / HEADER_NAME, folder / TRACES_NAME
        if resume and not header.exists():
            raise TraceCollectionError(f"nothing to resume: {header} does not exist (drop --resume)")
        if not resume and (header.exists() or path.exists()):
            raise TraceCollectionError(f"{folder} already holds a collection: pass --resume or choose another --out")
        done: list[TraceEpisode] = []
        if resume:
            recorded = json.loads(header.read_text(encoding="utf-8"))
            changed = sorted(k for k in {*recorded, *identity} if recorded.get(k) != identity.get(k))
            if changed:
                raise TraceCollectionError(
                    f"{folder} was collected with other settings ({', '.join(changed)}); resume with the same ones"
                )
            done = _intact(path) if path.exists() else []
        folder.mkdir(parents=True, exist_ok=True)
        header.write_text(json.dumps(identity, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        staging = path.with_suffix(".jsonl.tmp")
        staging.write_text("".join(episode.model_dump_json() + "\n" for episode in done), encoding="utf-8")
        os.replace(staging, path)
        return cls(path, path.open("a", encoding="utf-8")), done

    def append(self, episode: TraceEpisode) -> None:
        self._handle.write(episode.model_dump_json() + "\n")
        self._handle.flush()
        os.fsync(self._handle.fileno())

    def close(self) -> None:
        self._handle.close()


def _intact(path: Path) -> list[TraceEpisode]:
    """The episodes of a journal; a last line cut off by a kill is dropped (that episode runs again)."""
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    episodes = []
    for number, line in enumerate(lines, start=1):
        try:
            episodes.append(TraceEpisode.model_validate_json(line))
        except ValueError:
            if number == len(lines):
                break
            raise TraceCollectionError(f"{path}:{number}: not a trace episode; choose another --out") from None
    return episodes


# ------------------------------------------------------------------------------------------ the collector


def trace_episode(
    problem: Problem,
    workflow: LibraryWorkflow,
    episode: EpisodeResult | None,
    error: str | None,
    filled_prompts: int = 0,
) -> TraceEpisode:
    """The record of one run before grading (turns, workflow, usage)."""
    base, _, number = workflow.name.partition("~")
    turns = [
        TraceTurn(index=i, kind=r.kind, observation=r.prompt, text=r.sent, ok=r.ok, feedback=r.feedback)
        for i, r in enumerate(episode.records if episode else [])
    ]
    system = next((r.system for r in (episode.records if episode else []) if r.system is not None), "")
    return TraceEpisode(
        problem_id=problem.id,
        source=problem.source,
        task_type=task_type_of(problem.problem_type),
        workflow=workflow.name,
        base_workflow=base,
        variation=int(number or 0),
        rationale=workflow.rationale,
        filled_prompts=filled_prompts,
        intended_dsl=workflow.dsl(),
        dsl=episode.dsl if episode else "",
        system=system,
        turns=turns,
        finished=bool(episode and episode.finished),
        end_reason=episode.end_reason if episode else None,
        answer=episode.answer if episode else None,
        error=error or (episode.error if episode else None),
        llm_calls=episode.llm_calls if episode else 0,
        tokens=episode.tokens if episode else 0,
        wall_s=episode.wall_s if episode else 0.0,
    )


async def run_trace(
    problem: Problem,
    workflow: LibraryWorkflow,
    *,
    make_client: MakeClient,
    canvas_options: dict[str, Any] | None = None,
    observer: ObservationBuilder | None = None,
    reward_config: RewardConfig | None = None,
    score_fn: ScoreFn = score,
    timeout_s: float | None = None,
) -> TraceEpisode:
    """One scripted, graded, rewarded episode (failures are recorded in `error`, never raised)."""
    director = ScriptedDirector(workflow, canvas_options=canvas_options, observer=observer)
    run = await run_director(director, task_for(problem), make_client=make_client, timeout_s=timeout_s)
    error = run.error or (f"episode exceeded its time limit of {timeout_s} s" if run.timed_out else None)
    episode = None if run.error else run.episode
    record = trace_episode(problem, workflow, episode, error, director.filled_prompts)
    correctness, method = 0.0, None
    if episode is not None and not run.timed_out:
        graded = await grade(score_fn, problem, episode.answer, workflow=workflow.name)
        correctness, method = (graded.result.score, graded.result.method) if graded.result else (0.0, "scoring_error")
    stats = episode.stats if episode is not None and episode.stats else EMPTY_STATS
    tokens = episode.tokens if episode is not None else 0
    reward = compute_reward(
        stats, correctness=correctness, finished=record.finished, config=reward_config, executor_tokens=tokens
    )
    return record.model_copy(
        update={
            "structure": reward.structure,
            "correctness": correctness,
            "reward": reward.total,
            "reward_breakdown": reward,
            "score_method": method,
        }
    )


async def collect_traces(
    problems: Sequence[Problem],
    *,
    make_client: MakeClient,
    dev_ids: frozenset[str],
    workflows: Sequence[str] | None = None,
    variation_count: int = 0,
    seed: int = 0,
    concurrency: int = 4,
    canvas_options: dict[str, Any] | None = None,
    observer: ObservationBuilder | None = None,
    reward_config: RewardConfig | None = None,
    score_fn: ScoreFn = score,
    timeout_s: float | None = None,
    done: Sequence[TraceEpisode] = (),
    on_episode: Callable[[TraceEpisode], None] | None = None,
) -> list[TraceEpisode]:
    """Every (problem, workflow) episode not in `done`, at most `concurrency` at a time; returns the new ones.

    Raises `TraceCollectionError` before running anything when a problem is a dev item.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    refuse_dev_items(problems, dev_ids)
    for name in workflows or []:
        require_known(name)
    finished = {episode.key for episode in done}
    jobs = [
        (problem, workflow)
        for problem in interleave_sources(problems)
        for workflow in plan_workflows(task_type_of(problem.problem_type), workflows, variation_count, seed)
        if (problem.id, workflow.name) not in finished
    ]
    results: list[TraceEpisode] = []
    limiter = anyio.CapacityLimiter(concurrency)

    async def one(problem: Problem, workflow: LibraryWorkflow) -> None:
        async with limiter:
            episode = await run_trace(
                problem,
                workflow,
                make_client=make_client,
                canvas_options=canvas_options,
                observer=observer,
                reward_config=reward_config,
                score_fn=score_fn,
                timeout_s=timeout_s,
            )
        results.append(episode)
        if on_episode is not None:
            on_episode(episode)

    async with anyio.create_task_group() as group:
        for problem, workflow in jobs:
            group.start_soon(one, problem, workflow)
    log.info("traces_collected", episodes=len(results), skipped=len(finished))
    return results


# ---------------------------------------------------------------------------------------------------- CLI


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value


def _positive(text: str) -> int:
    value = _count(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="flowsteer traces collect",
        description="Run library workflows and seeded variations as scripted Flow-Director episodes on training "
        f"problems; write {TRACES_NAME} (one episode per line) in --out.",
    )
    parser.add_argument("--data", action="append", type=Path, required=True, metavar="FILE_OR_DIR")
    parser.add_argument("--limit", type=_positive, help="at most N training problems per source")
    parser.add_argument("--sources", help="keep only these sources, e.g. gsm8k,mbpp")
    split = parser.add_mutually_exclusive_group(required=True)
    split.add_argument(
        "--train-config", type=Path, help="take the dev split, canvas options, template and reward of a train config"
    )
    split.add_argument("--skip-per-source", type=_count, metavar="N", help="each source's first N items are dev items")
    parser.add_argument("--workflows", default="all", help="all, or library names: classic,pot4-vote,...")
    parser.add_argument("--variations", type=_count, default=0, metavar="K", help="seeded variations per workflow")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--config", type=Path, help="executor config file (TOML/YAML); default: $FLOWSTEER_CONFIG")
    parser.add_argument("--concurrency", type=_positive, default=4)
    parser.add_argument("--episode-timeout", type=float, metavar="SECONDS")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR")
    parser.add_argument("--resume", action="store_true", help="continue the collection in --out")
    return parser


def _settings(args: argparse.Namespace) -> tuple[int, dict[str, Any], str | None, RewardConfig]:
    """(skip per source, canvas options, system template path, reward) from the train config or the defaults."""
    if args.train_config is None:
        return args.skip_per_source, dict(DEFAULT_CANVAS), None, RewardConfig()
    from training.train.config import load_train_config

    config = load_train_config(args.train_config)
    canvas = config.rollout.canvas.model_dump(mode="json")
    return config.data.skip_per_source, canvas, config.rollout.system_template, config.reward


async def _collect_main(args: argparse.Namespace) -> int:
    from flowsteer_mcp.api import in_process_server
    from operators.backends.config import load_config
    from training.evaluate.clients import in_process_clients
    from training.evaluate.recording import executor_backend

    skip, canvas, template, reward = _settings(args)
    sources = [s.strip() for s in args.sources.split(",") if s.strip()] if args.sources else None
    names = None if args.workflows == "all" else [n.strip() for n in args.workflows.split(",") if n.strip()]
    problems, dev_ids = training_problems(args.data, skip_per_source=skip, limit=args.limit, sources=sources)
    observer = ObservationBuilder.from_file(Path(template)) if template else ObservationBuilder.default()
    backend = executor_backend(args.config, seed=args.seed)
    engine_settings = load_config(args.config).engine
    identity = {
        "data": sorted(str(path) for path in args.data),
        "skip_per_source": skip,
        "workflows": args.workflows,
        "variations": args.variations,
        "seed": args.seed,
        "executor": f"{type(backend).__name__}:{backend.model}",
        "canvas": canvas,
        "system_template": hashlib.sha256(observer.system_template.encode()).hexdigest()[:16],
        "reward": reward.model_dump(mode="json"),
        "engine": engine_settings.model_dump(mode="json"),
    }
    journal, done = TraceJournal.open(args.out, identity, resume=args.resume)
    server = in_process_server(backend, engine_settings, observer=observer)
    try:
        new = await collect_traces(
            problems,
            make_client=in_process_clients(server.mcp),
            dev_ids=dev_ids,
            workflows=names,
            variation_count=args.variations,
            seed=args.seed,
            concurrency=args.concurrency,
            canvas_options=canvas,
            observer=observer,
            reward_config=reward,
            timeout_s=args.episode_timeout,
            done=done,
            on_episode=journal.append,
        )
    finally:
        journal.close()
        await backend.aclose()
        await server.aclose()
    print(f"{len(new)} new episodes ({len(done)} resumed) in {journal.path}")
    return 0


def traces_main(argv: list[str]) -> int:
    """`flowsteer traces collect ...` or `flowsteer traces summary DIR`; 2 on a usage error."""
    if argv and argv[0] == "summary":
        from training.traces.summary import summary_main

        return summary_main(argv[1:])
    if not argv or argv[0] != "collect":
        print(
            "usage: flowsteer traces collect --data FILE ... --out DIR [options] | flowsteer traces summary DIR "
            "(see --help)",
            file=sys.stderr,
        )
        return 2
    args = _parser().parse_args(argv[1:])
    try:
        return anyio.run(_collect_main, args)
    except (TrainingError, OSError, ValueError) as error:
        print(f"flowsteer traces collect: error: {error}", file=sys.stderr)
        return 2
