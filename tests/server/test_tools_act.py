"""`act`: the Flow-Director text dialect through the MCP tool (prompt turns, cancel, lenient mode, budget)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.scripted_runner import ScriptedRunner
from tests.support.servers import ToolCaller

PROMPT_A = "Outline the steps needed to solve the problem."
PROMPT_B = "Solve the problem carefully and show the result."
PROMPT_C = "Check the candidate answer against the problem."


def add(operator: str, *, prompt: str | None = None, position: int | None = None) -> str:
    text = f"<action>add</action><operator>{operator}</operator>"
    if position is not None:
        text += f"<position>{position}</position>"
    if prompt is not None:
        text += f"<prompt>{prompt}</prompt>"
    return text


async def wasted_turn(tools: ToolCaller, workflow_id: str, text: str, error_code: str) -> dict[str, Any]:
    """An invalid turn is a normal result: ok=false, one round used, one history entry, the graph untouched."""
    before = await tools.snapshot(workflow_id)
    step = await tools.act(workflow_id, text)
    after = await tools.snapshot(workflow_id)
    assert step["ok"] is False, step["message"]
    assert step["error_code"] == error_code, step["message"]
    assert step["feedback"].startswith("<feedback>\n[Status]: Failed")
    assert after["graph"] == before["graph"]
    assert after["awaiting_prompt_for"] == before["awaiting_prompt_for"]
    assert after["round"] == before["round"] + 1 == step["state"]["round"]
    assert after["history_length"] == before["history_length"] + 1
    return step


async def test_add_with_prompt_turn_applies_only_when_the_prompt_arrives(
    tools: ToolCaller, runner: ScriptedRunner
) -> None:
    workflow_id = await tools.create()
    asked = await tools.act(workflow_id, add("Plan"))
    assert asked["ok"] is True
    assert asked["state"]["status"] == "awaiting_prompt"
    assert asked["state"]["awaiting_prompt_for"] == {
        "node_id": "node_1",
        "operator": "Plan",
        "slot": "operator",
        "index": 1,
        "total": 1,
        "edit": "add",
    }
    assert asked["state"]["dsl"] == "" and asked["state"]["round"] == 1
    assert "[Prompt Request]: write the prompt for node_1 (Plan" in asked["feedback"]
    assert runner.calls == []
    done = await tools.act(workflow_id, f"<think>what should Plan do?</think>{PROMPT_A}")
    assert done["ok"] is True
    assert done["state"]["status"] == "building" and done["state"]["awaiting_prompt_for"] is None
    assert done["state"]["dsl"] == "Plan" and done["state"]["round"] == 2
    assert done["state"]["nodes"] == [
        {
            "id": "node_1",
            "kind": "operator",
            "operator": "Plan",
            "parent": None,
            "slot": None,
            "count": None,
            "prompt": PROMPT_A,
        }
    ]
    assert runner.dsls == ["Plan"]
    assert done["execution"]["ok"] is True and done["execution"]["output"] == "Plan"


@pytest.mark.parametrize(
    "text",
    [
        "<action>add</action><operator>Custom</operator><prompt>Solve it step by step.</prompt>",
        "[action]add[/action][operator]Custom[/operator][prompt]Solve it step by step.[/prompt]",
        "<ACTION>Add</ACTION><Operator>custom</Operator><PROMPT>Solve it step by step.</PROMPT>",
        "I will add a solver.\n```\n<action>delete</action>\n```\n<action>add</action><operator>Custom</operator>"
        "<prompt>Solve it step by step.</prompt>",
        "<think>maybe <action>delete</action><target>node_1</target></think>"
        "<action>add</action><operator>Custom</operator><prompt>Solve it step by step.</prompt>",
    ],
    ids=["angle", "square", "case-insensitive", "code-fence-ignored", "think-ignored"],
)
async def test_both_tag_styles_and_ignored_regions(tools: ToolCaller, text: str) -> None:
    workflow_id = await tools.create()
    step = await tools.act(workflow_id, text)
    assert step["ok"] is True, step["message"]
    assert step["state"]["dsl"] == "Custom"
    assert step["state"]["nodes"][0]["prompt"] == "Solve it step by step."
    assert step["state"]["round"] == 1 and step["state"]["awaiting_prompt_for"] is None


async def test_first_action_wins(tools: ToolCaller) -> None:
    workflow_id = await tools.create()
    step = await tools.act(
        workflow_id, add("Programmer", prompt="Compute the product in Python.") + add("Format", prompt=PROMPT_A)
    )
    assert step["state"]["dsl"] == "Programmer"


async def test_parallel_asks_one_prompt_per_branch(tools: ToolCaller, runner: ScriptedRunner) -> None:
    workflow_id = await tools.create()
    step = await tools.act(
        workflow_id, "<action>add</action><structure>parallel</structure><operators>Programmer, Custom</operators>"
    )
    assert step["ok"] is True
    request = step["state"]["awaiting_prompt_for"]
    assert (request["node_id"], request["operator"], request["index"], request["total"]) == (
        "node_1_p0",
        "Programmer",
        1,
        2,
    )
    step = await tools.act(workflow_id, PROMPT_B)
    request = step["state"]["awaiting_prompt_for"]
    assert (request["node_id"], request["operator"], request["index"], request["total"]) == (
        "node_1_p1",
        "Custom",
        2,
        2,
    )
    assert step["state"]["dsl"] == "" and runner.calls == []
    assert "Prompt recorded for node_1_p0" in step["message"]
    step = await tools.act(workflow_id, f"<prompt>{PROMPT_A}</prompt>")
    assert step["state"]["dsl"] == "[Programmer, Custom]"
    prompts = {n["id"]: n["prompt"] for n in step["state"]["nodes"]}
    assert prompts == {"node_1": None, "node_1_p0": PROMPT_B, "node_1_p1": PROMPT_A}
    assert step["state"]["round"] == 3
    assert runner.dsls == ["[Programmer, Custom]"]


@pytest.mark.parametrize(
    ("false_tag", "dsl", "slots"),
    [
        ("<false>done</false>", "Verify ? Revise : done", ["node_1_cond", "node_1_fail"]),
        ("", "Verify ? Revise : done", ["node_1_cond", "node_1_fail"]),
        ("<false>Format</false>", "Verify ? Revise : Format", ["node_1_cond", "node_1_fail", "node_1_pass"]),
    ],
)
async def test_conditional_true_tag_is_the_branch_run_on_failure(
    tools: ToolCaller, false_tag: str, dsl: str, slots: list[str]
) -> None:
    workflow_id = await tools.create()
    text = f"<action>add</action><structure>conditional</structure><condition>Verify</condition><true>Revise</true>{false_tag}"
    step = await tools.act(workflow_id, text)
    asked = [step["state"]["awaiting_prompt_for"]["node_id"]]
    for _ in slots[1:]:
        step = await tools.act(workflow_id, PROMPT_C)
        asked.append(step["state"]["awaiting_prompt_for"]["node_id"])
    step = await tools.act(workflow_id, PROMPT_C)
    assert asked == slots
    assert step["state"]["dsl"] == dsl
    roles = {n["id"]: n["slot"] for n in step["state"]["nodes"] if n["parent"]}
    assert roles["node_1_cond"] == "check" and roles["node_1_fail"] == "on_fail"
    ops = {n["id"]: n["operator"] for n in step["state"]["nodes"]}
    assert ops["node_1_fail"] == "Revise"


async def test_loop_with_and_without_count(tools: ToolCaller) -> None:
    workflow_id = await tools.create(options={"prompt_turns": False})
    step = await tools.act(
        workflow_id,
        "[action]add[/action][structure]loop[/structure][operators]Test, Revise[/operators][count]4[/count]",
    )
    assert step["state"]["dsl"] == "(Test -> Revise) * 4"
    step = await tools.act(workflow_id, "<action>add</action><structure>LOOP</structure><operators>Verify</operators>")
    assert step["state"]["dsl"] == "(Test -> Revise) * 4 -> (Verify) * 3"
    assert [n["id"] for n in step["state"]["nodes"]] == ["node_1", "node_1_l0", "node_1_l1", "node_2", "node_2_l0"]


async def test_structure_with_inline_prompts_is_not_possible_so_prompt_turns_off_applies_at_once(
    tools: ToolCaller,
) -> None:
    workflow_id = await tools.create(options={"prompt_turns": False})
    step = await tools.act(workflow_id, add("Plan"))
    assert step["state"]["dsl"] == "Plan" and step["state"]["awaiting_prompt_for"] is None
    assert step["state"]["nodes"][0]["prompt"] is None


async def test_positional_insert_via_act(tools: ToolCaller) -> None:
    workflow_id = await tools.create()
    await tools.act(workflow_id, add("Custom", prompt=PROMPT_B))
    await tools.act(workflow_id, add("Format", prompt="Return only the final number."))
    step = await tools.act(workflow_id, add("Plan", prompt=PROMPT_A, position=0))
    assert step["state"]["dsl"] == "Plan -> Custom -> Format"
    assert [n["id"] for n in step["state"]["nodes"]] == ["node_3", "node_1", "node_2"]
    await wasted_turn(tools, workflow_id, add("Plan", prompt=PROMPT_A, position=9), "invalid_position")
    await wasted_turn(tools, workflow_id, add("Plan", prompt=PROMPT_A) + "<position>two</position>", "parse_error")


async def test_modify_asks_for_a_prompt_and_keeps_the_id(tools: ToolCaller) -> None:
    workflow_id = await tools.create()
    await tools.act(workflow_id, add("Custom", prompt=PROMPT_B))
    step = await tools.act(workflow_id, "<action>modify</action><target>node_1</target><operator>Programmer</operator>")
    assert step["ok"] is True and step["state"]["dsl"] == "Custom"
    assert step["state"]["awaiting_prompt_for"]["edit"] == "modify"
    assert step["state"]["awaiting_prompt_for"]["node_id"] == "node_1"
    step = await tools.act(workflow_id, "Write Python that computes the product.")
    assert step["state"]["dsl"] == "Programmer"
    assert step["state"]["nodes"][0] == {
        "id": "node_1",
        "kind": "operator",
        "operator": "Programmer",
        "parent": None,
        "slot": None,
        "count": None,
        "prompt": "Write Python that computes the product.",
    }
    step = await tools.act(
        workflow_id,
        "<action>modify</action><target>node_1</target><operator>Custom</operator><prompt>Just solve it.</prompt>",
    )
    assert step["state"]["dsl"] == "Custom" and step["state"]["awaiting_prompt_for"] is None


async def test_delete_and_set_prompt_via_act(tools: ToolCaller) -> None:
    workflow_id = await tools.create()
    await tools.act(workflow_id, add("Plan", prompt=PROMPT_A))
    await tools.act(workflow_id, add("Custom", prompt=PROMPT_B))
    step = await tools.act(
        workflow_id, "<action>set_prompt</action><target>node_2</target><prompt>Answer in one line.</prompt>"
    )
    assert step["ok"] is True and step["state"]["nodes"][1]["prompt"] == "Answer in one line."
    step = await tools.act(workflow_id, "[action]delete[/action][target]node_1[/target]")
    assert step["state"]["dsl"] == "Custom" and [n["id"] for n in step["state"]["nodes"]] == ["node_2"]
    await wasted_turn(tools, workflow_id, "<action>delete</action><target>node_1</target>", "unknown_node")
    await wasted_turn(tools, workflow_id, "<action>delete</action>", "parse_error")
    await wasted_turn(
        tools, workflow_id, "<action>set_prompt</action><target>node_2</target><prompt>ok</prompt>", "invalid_prompt"
    )


async def test_conditional_alias_ids_through_act(tools: ToolCaller) -> None:
    workflow_id = await tools.create(options={"prompt_turns": False})
    await tools.act(
        workflow_id,
        "<action>add</action><structure>conditional</structure><condition>Verify</condition><true>Revise</true>"
        "<false>Format</false>",
    )
    step = await tools.act(
        workflow_id, "<action>set_prompt</action><target>node_1_true</target><prompt>Fix the error.</prompt>"
    )
    assert step["ok"] is True
    assert {n["id"]: n["prompt"] for n in step["state"]["nodes"]}["node_1_fail"] == "Fix the error."
    step = await tools.act(workflow_id, "<action>delete</action><target>node_1_false</target>")
    assert step["ok"] is True and step["state"]["dsl"] == "Verify ? Revise : done"


async def test_cancel_abandons_the_pending_edit(tools: ToolCaller, runner: ScriptedRunner) -> None:
    workflow_id = await tools.create()
    await tools.act(workflow_id, add("Custom", prompt=PROMPT_B))
    before = await tools.snapshot(workflow_id)
    await tools.act(
        workflow_id, "<action>add</action><structure>parallel</structure><operators>Custom, Programmer</operators>"
    )
    await tools.act(workflow_id, PROMPT_B)
    step = await tools.act(workflow_id, "<think>never mind</think>[action]cancel[/action]")
    assert step["ok"] is True and "cancelled" in step["message"]
    after = await tools.snapshot(workflow_id)
    assert after["graph"] == before["graph"]
    assert after["status"] == "building" and after["awaiting_prompt_for"] is None
    assert after["round"] == before["round"] + 3
    assert runner.dsls == ["Custom"]
    # a later add gets the next id: the cancelled structure consumed none
    step = await tools.act(workflow_id, add("Format", prompt="Return only the number."))
    assert [n["id"] for n in step["state"]["nodes"]] == ["node_1", "node_2"]


async def test_cancel_without_pending_prompt_is_a_wasted_turn(tools: ToolCaller) -> None:
    workflow_id = await tools.create()
    step = await wasted_turn(tools, workflow_id, "<action>cancel</action>", "wrong_state")
    assert "Nothing to cancel" in step["message"]


@pytest.mark.parametrize(
    ("text", "code", "phrase"),
    [
        ("<action>delete</action><target>node_1</target>", "wrong_state", "A prompt is expected now"),
        ("[action]add[/action][operator]Plan[/operator]", "wrong_state", "A prompt is expected now"),
        ("hey", "invalid_prompt", "too short"),
        ("<think>Long thought about the prompt</think>   ", "invalid_prompt", "too short"),
        ("<think>never closed", "parse_error", "Unclosed <think>"),
    ],
)
async def test_invalid_prompt_turns_keep_the_request_pending(
    tools: ToolCaller, text: str, code: str, phrase: str
) -> None:
    workflow_id = await tools.create()
    await tools.act(workflow_id, add("Plan"))
    step = await wasted_turn(tools, workflow_id, text, code)
    assert phrase in step["message"]
    assert step["state"]["awaiting_prompt_for"]["node_id"] == "node_1"
    done = await tools.act(workflow_id, PROMPT_A)
    assert done["state"]["dsl"] == "Plan" and done["state"]["nodes"][0]["prompt"] == PROMPT_A


@pytest.mark.parametrize(
    ("text", "code", "phrase"),
    [
        ("", "parse_error", "No <action> tag found"),
        ("I think we should add a planner.", "parse_error", "No <action> tag found"),
        ("<think>add Plan</think>", "parse_error", "No <action> tag found"),
        ("<think>unclosed <action>add</action><operator>Plan</operator>", "parse_error", "Unclosed <think>"),
        ("<action>dance</action>", "parse_error", "Unknown action 'dance'"),
        ("<action>add</action><operator>Wizard</operator>", "unknown_operator", "Valid operators: Plan"),
        ("<action>add</action>", "parse_error", "Missing <operator>"),
        (
            "<action>add</action><structure>tree</structure><operators>Custom, Plan</operators>",
            "parse_error",
            "Unknown structure",
        ),
        (
            "<action>add</action><structure>parallel</structure><operators>Custom</operators>",
            "invalid_structure",
            "2 to 6 branches",
        ),
        (
            "<action>add</action><structure>parallel</structure><operators>Custom, ScEnsemble</operators>",
            "invalid_structure",
            "cannot be a parallel branch",
        ),
        (
            "<action>add</action><structure>parallel</structure><operators>Custom, Wizard</operators>",
            "unknown_operator",
            "Wizard",
        ),
        (
            "<action>add</action><structure>conditional</structure><condition>Custom</condition><true>Revise</true>",
            "invalid_structure",
            "must be a checker",
        ),
        (
            "<action>add</action><structure>conditional</structure><condition>Verify</condition>",
            "parse_error",
            "Missing <true>",
        ),
        (
            "<action>add</action><structure>loop</structure><operators>Revise</operators><count>11</count>",
            "invalid_structure",
            "between 1 and 10",
        ),
        (
            "<action>add</action><structure>loop</structure><operators>Revise</operators><count>x</count>",
            "parse_error",
            "integer",
        ),
        ("<action>modify</action><target>node_9</target><operator>Custom</operator>", "unknown_node", "node_9"),
        ("<action>modify</action><target>node_1</target><operator>Wizard</operator>", "unknown_operator", "Wizard"),
        ("<action>add</action><operator>Plan</operator><prompt>ab</prompt>", "invalid_prompt", "too short"),
    ],
)
async def test_invalid_turns_waste_a_round_and_change_nothing(
    tools: ToolCaller, runner: ScriptedRunner, text: str, code: str, phrase: str
) -> None:
    workflow_id = await tools.create()
    await tools.act(workflow_id, add("Custom", prompt=PROMPT_B))
    runs = len(runner.calls)
    step = await wasted_turn(tools, workflow_id, text, code)
    assert phrase in step["message"]
    assert step["state"]["awaiting_prompt_for"] is None, "a rejected add must never open a prompt turn"
    assert len(runner.calls) == runs


async def test_lenient_mode_off_by_default_and_reported_when_on(tools: ToolCaller) -> None:
    strict = await tools.create()
    await wasted_turn(tools, strict, "Programmer", "parse_error")
    await wasted_turn(tools, strict, "Let's finish the workflow.", "parse_error")

    lenient = await tools.create(options={"lenient": True, "prompt_turns": False, "finish": "relaxed"})
    step = await tools.act(lenient, "I would use the Programmer here")
    assert step["ok"] is True and step["state"]["dsl"] == "Programmer"
    assert "[Parser]: lenient fallback used" in step["feedback"]
    ambiguous = await tools.act(lenient, "Programmer or Custom?")
    assert ambiguous["ok"] is False and ambiguous["error_code"] == "parse_error"
    explicit = await tools.act(lenient, add("Format", prompt="Return only the number."))
    assert "[Parser]" not in explicit["feedback"]
    finished = await tools.act(lenient, "ok, let's finish")
    assert finished["done"] is True and finished["end_reason"] == "finished"
    assert "[Parser]: lenient fallback used" in finished["feedback"]

    gated = await tools.create(options={"lenient": True})
    rejected = await tools.act(gated, "I am done building")
    assert rejected["ok"] is False and rejected["error_code"] == "finish_rejected"
    assert "[Parser]: lenient fallback used" in rejected["feedback"]


async def test_round_budget_exhaustion_ends_the_episode(tools: ToolCaller, runner: ScriptedRunner) -> None:
    workflow_id = await tools.create(options={"max_rounds": 3})
    first = await tools.act(workflow_id, add("Custom", prompt=PROMPT_B))
    second = await tools.act(workflow_id, "nonsense")
    assert (first["done"], second["done"]) == (False, False)
    last = await tools.act(workflow_id, add("Plan"))  # would open a prompt turn, but the budget is spent
    assert last["done"] is True
    assert last["end_reason"] == "budget_exhausted"
    assert last["state"]["status"] == "exhausted" and last["state"]["awaiting_prompt_for"] is None
    assert last["state"]["round"] == 3
    assert last["final_answer"] == "Custom" == runner.dsls[-1]
    assert "Budget exhausted" in last["feedback"] and "[BLOCK_FINISH]" not in last["feedback"]
    detail = await tools.detail(workflow_id)
    assert detail["end"]["reason"] == "budget_exhausted" and detail["end"]["round"] == 3
    before = await tools.snapshot(workflow_id)
    for tool, extra in (
        ("act", {"text": add("Format", prompt=PROMPT_A)}),
        ("add_operator", {"operator": "Format"}),
        ("finish", {}),
    ):
        message = await tools.error(tool, workflow_id=workflow_id, **extra)
        assert "episode is over (budget_exhausted)" in message
    assert await tools.snapshot(workflow_id) == before


async def test_act_text_over_the_limit_is_a_tool_error_and_uses_no_round(tools: ToolCaller) -> None:
    workflow_id = await tools.create()
    before = await tools.snapshot(workflow_id)
    message = await tools.error("act", workflow_id=workflow_id, text="x" * 32_001)
    assert "32001 characters" in message and "32000" in message
    assert await tools.snapshot(workflow_id) == before
    step = await tools.act(workflow_id, add("Custom", prompt="y" * 4000) + " " * (32_000 - 4064))
    assert step["ok"] is True


async def test_act_feedback_carries_state_execution_and_hints(tools: ToolCaller) -> None:
    workflow_id = await tools.create(task_type="math")
    step = await tools.act(workflow_id, add("Programmer", prompt="Compute the product in Python."))
    feedback = step["feedback"]
    assert "[Status]: Success" in feedback
    assert "[DSL]: Programmer" in feedback
    assert '[Nodes]: node_1: Programmer "Compute the product in Python."' in feedback
    assert "[Statistics]: 1 operators, 1 unique types, structures: none" in feedback
    assert "[Execution]: ok (1 LLM calls, 10 tokens)" in feedback
    assert "[Output]: Programmer" in feedback
    assert "[Round]: 1/20" in feedback
    assert "[BLOCK_FINISH]=1" in feedback
    assert step["execution"] == {
        "fresh": True,  # the workflow ran during this step
        "status": "ok",
        "ok": True,
        "output": "Programmer",
        "error": None,
        "llm_calls": 1,
        "tokens": 10,
        "duration_s": 0.0,
        "cache_hits": 0,
        "evidence": None,  # one greedy call without public tests establishes nothing
    }
    no_hints = await tools.create(options={"hints": False})
    quiet = await tools.act(no_hints, add("Programmer", prompt="Compute the product in Python."))
    assert "[BLOCK_FINISH]" not in quiet["feedback"] and "[NEXT]" not in quiet["feedback"]
