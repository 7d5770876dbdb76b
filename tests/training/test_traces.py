"""`flowsteer traces collect`: scripted Flow-Director episodes of library workflows, through the real in-memory
MCP server on the scripted runner (no model runs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from flowsteer_mcp.canvas.blueprint import slot_prompts
from flowsteer_mcp.canvas.observation import ObservationBuilder
from flowsteer_mcp.canvas.options import TaskSpec
from flowsteer_mcp.canvas.step import StateView
from flowsteer_mcp.director.library import LIBRARY
from flowsteer_mcp.server import build_server
from operators.registry import default_registry
from tests.support.scripted_runner import ScriptedRunner
from training.cli import main
from training.data import Problem
from training.evaluate.clients import in_process_clients
from training.evaluate.tasks import task_for
from training.scoring import ScoreResult
from training.traces.collect import (
    DEFAULT_CANVAS,
    TRACES_NAME,
    TraceCollectionError,
    TraceJournal,
    collect_traces,
    interleave_sources,
    plan_workflows,
    run_trace,
    training_problems,
)
from training.traces.transcript import TraceEpisode, read_episodes
from training.traces.variations import is_valid, variations

# In-process CLI calls must not configure (and cache) structlog for the tests after these.
pytestmark = pytest.mark.usefixtures("no_cli_logging_setup")


REGISTRY = default_registry()
CODE_META = {"entry_point": "add", "test": "assert add(1, 2) == 3", "public_tests": "assert add(0, 0) == 0"}
PROBLEMS = [
    Problem(id="m/1", source="gsm8k", problem_type="math", problem="What is 8 + 8?", ground_truth="16"),
    Problem(id="q/1", source="nq", problem_type="qa", problem="Who wrote Emma?", ground_truth="Jane Austen"),
    Problem(
        id="c/1",
        source="mbpp",
        problem_type="code",
        problem="Write add(a, b) returning the sum.",
        ground_truth="def add(a, b):\n    return a + b\n",
        meta=CODE_META,
    ),
]


async def right_when_voted(problem: Problem, answer: str | None) -> ScoreResult:
    """C = 1 when the executed workflow (its DSL is the scripted runner's answer) contains a vote."""
    voted = "ScEnsemble" in (answer or "")
    return ScoreResult(score=float(voted), correct=voted, method="stub", extracted=answer or "")


def make_client() -> Any:
    return in_process_clients(build_server(registry=REGISTRY, runner=ScriptedRunner()).mcp)


def collect(problems: list[Problem], **kwargs: Any) -> list[TraceEpisode]:
    options: dict[str, Any] = {"make_client": make_client(), "dev_ids": frozenset(), "score_fn": right_when_voted}
    return anyio.run(lambda: collect_traces(problems, **{**options, **kwargs}))


def test_every_library_workflow_and_variation_is_built_with_accepted_dialect_turns() -> None:
    episodes = collect(PROBLEMS, variation_count=1, seed=3)
    shown = set(default_registry().names())
    expected = sum(sum(2 for w in LIBRARY[p.problem_type].values() if w.operators() <= shown) for p in PROBLEMS)
    assert len(episodes) == expected
    for episode in episodes:
        assert all(turn.ok for turn in episode.turns), (episode.workflow, [t.feedback for t in episode.turns])
        assert episode.finished and episode.error is None, episode.workflow
        assert episode.dsl == episode.intended_dsl
        assert episode.turns[0].text.startswith("<action>add</action>")
        assert episode.turns[-1].text == "<action>finish</action>"
        assert episode.turns[1].kind == "prompt" and "<" not in episode.turns[1].text
        assert episode.system and episode.valid_share == 1.0
        voted = "ScEnsemble" in episode.dsl
        assert episode.correctness == float(voted)
        if episode.variation == 0:  # a slot left to the operator's default needs a stand-in prompt turn
            stages = LIBRARY[episode.task_type][episode.workflow].stages
            assert (episode.filled_prompts > 0) == any(p is None for s in stages for p in slot_prompts(s))
        assert episode.reward == pytest.approx(episode.reward_breakdown.total if episode.reward_breakdown else 0.0)
    assert {e.variation for e in episodes} == {0, 1}


def test_each_observation_is_what_the_builder_gives_for_the_state_before_the_turn() -> None:
    problem = PROBLEMS[0]
    (episode,) = [e for e in collect([problem], workflows=["classic"]) if e.workflow == "classic"]
    observer, task = ObservationBuilder.default(), task_for(problem)

    async def replay() -> None:
        async with make_client()() as client:
            created = await _call(client, "create_workflow", _create_args(task))
            assert created["system_prompt"] == episode.system
            state, feedback = StateView.model_validate(created["state"]), None
            for turn in episode.turns:
                if turn.kind == "prompt":
                    assert turn.observation == observer.prompt_turn(task, state, REGISTRY)
                    assert episode.messages(turn.index)[0] == {"role": "user", "content": turn.observation}
                else:
                    assert turn.observation == observer.turn(task, state, feedback)
                    assert episode.messages(turn.index)[0] == {"role": "system", "content": episode.system}
                step = await _call(client, "act", {"workflow_id": created["workflow_id"], "text": turn.text})
                assert step["feedback"] == turn.feedback
                state, feedback = StateView.model_validate(step["state"]), step["feedback"]

    anyio.run(replay)


def _create_args(task: TaskSpec) -> dict[str, Any]:
    fields = {"task": task.problem, "task_type": task.task_type, "options": DEFAULT_CANVAS}
    return {k: v for k, v in fields.items() if v is not None}


async def _call(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error and result.structured_content is not None, result.content
    return result.structured_content


def test_a_rejected_turn_is_recorded_as_invalid_with_its_feedback_and_the_script_stops() -> None:
    workflow = LIBRARY["math"]["pot4-vote"]
    canvas = {**DEFAULT_CANVAS, "disabled_operators": ["ScEnsemble"]}
    episode = anyio.run(
        lambda: run_trace(
            PROBLEMS[0], workflow, make_client=make_client(), canvas_options=canvas, score_fn=right_when_voted
        )
    )
    last = episode.turns[-1]
    assert [t.ok for t in episode.turns] == [True, True, False]
    assert "<operator>ScEnsemble</operator>" in last.text and "disabled" in last.feedback
    assert not episode.finished and episode.dsl == "Programmer{4}"


def test_without_prompt_turns_operator_prompts_ride_inline_in_the_add() -> None:
    canvas = {**DEFAULT_CANVAS, "prompt_turns": False}
    workflow = LIBRARY["math"]["pot4-vote"]
    episode = anyio.run(
        lambda: run_trace(
            PROBLEMS[0], workflow, make_client=make_client(), canvas_options=canvas, score_fn=right_when_voted
        )
    )
    assert [t.kind for t in episode.turns] == ["action"] * 3 and all(t.ok for t in episode.turns)
    assert episode.turns[0].text.endswith("<prompt>Compute the answer exactly in solve() and return it.</prompt>")
    assert episode.finished and episode.correctness == 1.0


def test_dev_items_are_left_out_and_refused(tmp_path: Path) -> None:
    records = [
        {
            "id": f"gsm8k/{i}",
            "source": "gsm8k",
            "problem_type": "math",
            "problem": f"{i} + 1?",
            "ground_truth": str(i + 1),
        }
        for i in range(5)
    ]
    data = tmp_path / "gsm8k.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    problems, dev = training_problems([data], skip_per_source=2)
    assert [p.id for p in problems] == ["gsm8k/2", "gsm8k/3", "gsm8k/4"]
    assert dev == {"gsm8k/0", "gsm8k/1"}
    dev_problem = Problem.model_validate(records[1])
    with pytest.raises(TraceCollectionError, match="gsm8k/1"):
        collect([problems[0], dev_problem], dev_ids=dev)


def test_variations_are_deterministic_per_seed_and_always_valid() -> None:
    for entries in LIBRARY.values():
        for workflow in entries.values():
            first = variations(workflow, 4, seed=11)
            assert first == variations(workflow, 4, seed=11)
            for item in first:
                assert is_valid(list(item.stages)), item.name
                assert item.stages != workflow.stages and item.name.startswith(f"{workflow.name}~")
    specs = [item.spec() for w in LIBRARY["math"].values() for item in variations(w, 4, seed=11)]
    assert specs != [item.spec() for w in LIBRARY["math"].values() for item in variations(w, 4, seed=12)]


def test_resume_skips_done_episodes_and_drops_a_cut_off_last_line(tmp_path: Path) -> None:
    identity = {"seed": 0, "variations": 0}
    journal, done = TraceJournal.open(tmp_path, identity, resume=False)
    first = collect(PROBLEMS[:1], workflows=["classic", "pot"], on_episode=journal.append)
    journal.close()
    assert done == [] and len(first) == 2
    with (tmp_path / TRACES_NAME).open("a", encoding="utf-8") as handle:
        handle.write(first[0].model_dump_json()[:40])  # a kill mid-write

    with pytest.raises(TraceCollectionError, match="seed"):
        TraceJournal.open(tmp_path, {**identity, "seed": 1}, resume=True)
    journal, done = TraceJournal.open(tmp_path, identity, resume=True)
    assert {e.key for e in done} == {e.key for e in first}
    runner = ScriptedRunner()
    server = build_server(registry=REGISTRY, runner=runner)
    more = anyio.run(
        lambda: collect_traces(
            PROBLEMS[:1],
            make_client=in_process_clients(server.mcp),
            dev_ids=frozenset(),
            workflows=["classic", "pot", "greedy-cot"],
            score_fn=right_when_voted,
            done=done,
            on_episode=journal.append,
        )
    )
    journal.close()
    assert [e.workflow for e in more] == ["greedy-cot"] and len(runner.calls) == 1
    assert [e.workflow for e in read_episodes(tmp_path / TRACES_NAME)] == [e.workflow for e in [*first, *more]]


def test_sources_take_turns_so_a_collection_cut_short_covers_each() -> None:
    def problem(source: str, n: int) -> Problem:
        return Problem(id=f"{source}/{n}", source=source, problem_type="math", problem="1 + 1?", ground_truth="2")

    problems = [problem("gsm8k", n) for n in range(3)] + [problem("mbpp", n) for n in range(2)]
    order = [p.id for p in interleave_sources(problems)]
    assert order == ["gsm8k/0", "mbpp/0", "gsm8k/1", "mbpp/1", "gsm8k/2"]
    assert interleave_sources([]) == []


def test_plan_covers_the_task_types_entries_and_their_variations() -> None:
    names = [w.name for w in plan_workflows("qa", ["vote5", "pot"], 2, seed=0)]
    assert names == ["vote5", "vote5~1", "vote5~2"]  # pot is no qa workflow: nothing for it here


EXECUTOR_TOML = """
[executor]
model = "script"

[models.script]
backend = "scripted"
default_reply = "Final answer: 16"
"""


def test_cli_collects_training_problems_into_traces_jsonl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLOWSTEER_CONFIG", raising=False)
    (tmp_path / "executor.toml").write_text(EXECUTOR_TOML, encoding="utf-8")
    data = tmp_path / "gsm8k.jsonl"
    rows = [{"id": f"g/{i}", "source": "gsm8k", "problem": "What is 8 + 8?", "ground_truth": "16"} for i in range(3)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    args = ["traces", "collect", "--data", str(data), "--skip-per-source", "2", "--workflows", "greedy-cot"]
    args += ["--variations", "1", "--config", str(tmp_path / "executor.toml"), "--out", str(tmp_path / "out")]
    assert main(args) == 0
    episodes = list(read_episodes(tmp_path / "out" / TRACES_NAME))
    assert [(e.problem_id, e.workflow) for e in episodes] in (
        [("g/2", "greedy-cot"), ("g/2", "greedy-cot~1")],
        [("g/2", "greedy-cot~1"), ("g/2", "greedy-cot")],
    )
    assert all(e.finished for e in episodes)
    assert main(args) == 2  # the folder holds a collection: --resume or another --out
    assert main([*args, "--resume"]) == 0
    assert len(list(read_episodes(tmp_path / "out" / TRACES_NAME))) == 2
    # Another engine (here: broken samples dropped) would run other episodes: the journal refuses to mix them.
    lean = tmp_path / "lean.toml"
    lean.write_text(EXECUTOR_TOML + "\n[engine]\nsampled_reasks = 0\n", encoding="utf-8")
    assert main([*args[: args.index("--config") + 1], str(lean), "--out", str(tmp_path / "out"), "--resume"]) == 2


def test_the_default_plan_leaves_out_entries_built_on_operators_a_policy_is_not_shown() -> None:
    """The CodeT peer's selector is a legacy operator: a warm start must not demonstrate it."""
    planned = {w.name for w in plan_workflows("code", None, 0, seed=0)}
    assert "direct8-exec" in planned and "aflow-mbpp" in planned
    assert "codet8" not in planned
    assert [w.name for w in plan_workflows("code", ["codet8"], 0, seed=0)] == ["codet8"], "named entries still run"
