"""Typed editing tools: add_operator, add_structure, delete_node, modify_node, set_prompt, and node ids."""

from __future__ import annotations

from typing import Any

import pytest

from flowsteer_mcp.canvas.options import CanvasLimits
from flowsteer_mcp.server import ServerSettings
from tests.server.conftest import Connect
from tests.support.scripted_runner import ScriptedRunner
from tests.support.servers import ToolCaller

PROMPT = "Solve the problem step by step."


async def refused(tools: ToolCaller, tool: str, workflow_id: str, *phrases: str, **arguments: Any) -> str:
    """A typed edit that must be a ToolError naming `phrases` and leave the workflow exactly as it was."""
    before = await tools.snapshot(workflow_id)
    message = await tools.error(tool, workflow_id=workflow_id, **arguments)
    for phrase in phrases:
        assert phrase in message, message
    assert await tools.snapshot(workflow_id) == before
    return message


async def node_ids(tools: ToolCaller, workflow_id: str) -> list[str]:
    detail = await tools.detail(workflow_id)
    return [n["id"] for n in detail["state"]["nodes"]]


async def build(tools: ToolCaller, *stages: dict[str, Any]) -> str:
    workflow_id = await tools.create()
    for stage in stages:
        tool = "add_structure" if "structure" in stage else "add_operator"
        await tools.ok(tool, workflow_id=workflow_id, **stage)
    return workflow_id


async def test_add_operator_appends_inserts_and_uses_one_round_each(tools: ToolCaller, runner: ScriptedRunner) -> None:
    workflow_id = await tools.create()
    first = await tools.ok("add_operator", workflow_id=workflow_id, operator="custom", prompt=f"  {PROMPT}  ")
    assert first["ok"] is True and first["message"] == "Added Custom as node_1 (appended)."
    assert first["state"]["nodes"][0]["prompt"] == PROMPT  # canonical name, trimmed prompt
    second = await tools.ok("add_operator", workflow_id=workflow_id, operator="Plan", position=0)
    assert second["message"] == "Added Plan as node_2 (inserted at position 0)."
    assert second["state"]["dsl"] == "Plan -> Custom"
    assert second["state"]["round"] == 2 and second["state"]["awaiting_prompt_for"] is None
    assert second["state"]["nodes"][0]["prompt"] is None  # typed tools never open prompt turns
    assert runner.dsls == ["Custom", "Plan -> Custom"]
    assert second["execution"]["output"] == "Plan -> Custom"
    detail = await tools.detail(workflow_id)
    assert detail["history_length"] == 2
    assert detail["last_execution"]["execution"]["output"] == "Plan -> Custom"
    assert [t["node_id"] for t in detail["last_execution"]["trace"]] == ["node_2", "node_1"]


@pytest.mark.parametrize(
    ("arguments", "phrases"),
    [
        ({"operator": "Wizard"}, ("Unknown operator 'Wizard'", "Valid operators: Plan")),
        ({"operator": "Plan", "position": 5}, ("Position 5 is out of range", "0..1")),
        ({"operator": "Plan", "position": -1}, ("Position -1 is out of range",)),
        ({"operator": "Plan", "prompt": "hi"}, ("Prompt is too short",)),
        ({"operator": "Plan", "prompt": "x" * 4001}, ("`prompt` is 4001 characters; the limit is 4000",)),
        ({"operator": ""}, ("operator",)),
        ({"operator": "MdEnsemble" * 10}, ("operator",)),
        (
            {"operator": "ScEnsemble"},
            ("node_2 (ScEnsemble) would have no candidates", "node_1 before it is a single draw"),
        ),
    ],
)
async def test_add_operator_errors_change_nothing(
    tools: ToolCaller, arguments: dict[str, Any], phrases: tuple[str, ...]
) -> None:
    workflow_id = await build(tools, {"operator": "Custom", "prompt": PROMPT})
    await refused(tools, "add_operator", workflow_id, *phrases, **arguments)


async def test_add_structure_of_each_kind(tools: ToolCaller) -> None:
    workflow_id = await tools.create()
    step = await tools.ok(
        "add_structure",
        workflow_id=workflow_id,
        structure="parallel",
        operators=["Programmer", "Custom", "AnswerGenerate"],
        prompts=["Write Python for it.", None],
    )
    assert step["state"]["dsl"] == "[Programmer, Custom, AnswerGenerate]"
    assert [(n["id"], n["slot"], n["prompt"]) for n in step["state"]["nodes"]] == [
        ("node_1", None, None),
        ("node_1_p0", "branch 1/3", "Write Python for it."),
        ("node_1_p1", "branch 2/3", None),
        ("node_1_p2", "branch 3/3", None),
    ]
    await tools.ok("add_operator", workflow_id=workflow_id, operator="ScEnsemble")
    step = await tools.ok(
        "add_structure",
        workflow_id=workflow_id,
        structure="conditional",
        condition="Verify",
        on_fail="Revise",
        on_pass="done",
    )
    assert step["state"]["dsl"].endswith("Verify ? Revise : done")
    step = await tools.ok(
        "add_structure",
        workflow_id=workflow_id,
        structure="conditional",
        condition="test",
        on_fail="Revise",
        on_pass="Format",
    )
    assert step["state"]["dsl"].endswith("Test ? Revise : Format")
    step = await tools.ok(
        "add_structure", workflow_id=workflow_id, structure="loop", operators=["Review", "Revise"], count=2
    )
    assert step["state"]["dsl"] == (
        "[Programmer, Custom, AnswerGenerate] -> ScEnsemble -> Verify ? Revise : done -> Test ? Revise : Format "
        "-> (Review -> Revise) * 2"
    )
    assert step["state"]["stats"]["total_operators"] == 11
    assert step["state"]["stats"]["has_parallel"] and step["state"]["stats"]["has_conditional"]
    assert step["state"]["stats"]["has_loop"]
    assert step["state"]["round"] == 5
    loop = next(n for n in step["state"]["nodes"] if n["id"] == "node_5")
    assert loop == {
        "id": "node_5",
        "kind": "loop",
        "operator": None,
        "parent": None,
        "slot": None,
        "count": 2,
        "prompt": None,
    }


@pytest.mark.parametrize(
    ("arguments", "phrases"),
    [
        ({"structure": "conditional", "on_fail": "Revise"}, ("needs `condition`",)),
        ({"structure": "conditional", "condition": "Verify"}, ("`on_fail`",)),
        (
            {"structure": "conditional", "condition": "Verify", "on_fail": "Revise", "operators": ["Custom"]},
            ("not `operators`",),
        ),
        ({"structure": "conditional", "condition": "Custom", "on_fail": "Revise"}, ("must be a checker", "Verify")),
        ({"structure": "conditional", "condition": "Verify", "on_fail": "Wizard"}, ("Unknown operator 'Wizard'",)),
        (
            {"structure": "conditional", "condition": "Verify", "on_fail": "Revise", "count": 2},
            ("`count` only applies to loops",),
        ),
        ({"structure": "parallel"}, ("needs `operators`",)),
        ({"structure": "parallel", "operators": []}, ("needs `operators`",)),
        ({"structure": "parallel", "operators": ["Custom"]}, ("2 to 6 branches; got 1",)),
        ({"structure": "parallel", "operators": ["Custom"] * 7}, ("2 to 6 branches; got 7",)),
        ({"structure": "parallel", "operators": ["Custom", "Aggregate"]}, ("Aggregate cannot be a parallel branch",)),
        ({"structure": "parallel", "operators": ["Custom", "Wizard"]}, ("Unknown operator 'Wizard'",)),
        ({"structure": "parallel", "operators": ["Custom", "Plan"], "count": 2}, ("`count` only applies to loops",)),
        (
            {"structure": "parallel", "operators": ["Custom", "Plan"], "condition": "Verify"},
            ("only apply to conditionals",),
        ),
        (
            {
                "structure": "parallel",
                "operators": ["Custom", "Plan"],
                "prompts": ["a b c d e", "f g h i j", "k l m n o"],
            },
            ("3 prompts for 2 operators",),
        ),
        ({"structure": "parallel", "operators": ["Custom", "Plan"], "prompts": ["no"]}, ("Prompt is too short",)),
        ({"structure": "parallel", "operators": ["Custom", "Plan"], "position": 4}, ("Position 4 is out of range",)),
        ({"structure": "loop", "operators": ["Revise"]}, ("needs `count`",)),
        ({"structure": "loop", "operators": ["Revise"], "count": 0}, ("between 1 and 10; got 0",)),
        ({"structure": "loop", "operators": ["Revise"], "count": 11}, ("between 1 and 10; got 11",)),
        ({"structure": "loop", "operators": ["Revise"] * 7, "count": 2}, ("1 to 6 operators; got 7",)),
        ({"structure": "loop", "count": 2}, ("needs `operators`",)),
        (
            {"structure": "loop", "operators": ["Revise"], "count": 2, "on_pass": "Format"},
            ("only apply to conditionals",),
        ),
        ({"structure": "tree", "operators": ["Custom", "Plan"]}, ("structure",)),
    ],
)
async def test_add_structure_invalid_combinations_change_nothing(
    tools: ToolCaller, arguments: dict[str, Any], phrases: tuple[str, ...]
) -> None:
    workflow_id = await build(tools, {"operator": "Custom", "prompt": PROMPT})
    await refused(tools, "add_structure", workflow_id, *phrases, **arguments)


async def test_removing_an_ensembles_candidate_source_is_a_tool_error(tools: ToolCaller) -> None:
    workflow_id = await build(tools, {"operator": "Custom", "samples": 3}, {"operator": "ScEnsemble"})
    await refused(tools, "delete_node", workflow_id, "node_2 (ScEnsemble) would have no candidates", node_id="node_1")
    await refused(tools, "modify_node", workflow_id, "samples > 1", node_id="node_1", operator="Custom")


async def test_operator_limit_per_workflow(connect: Connect) -> None:
    async with connect(ServerSettings(limits=CanvasLimits(max_operators=4))) as tools:
        parallel = {"structure": "parallel", "operators": ["Custom", "Programmer", "AnswerGenerate"]}
        workflow_id = await build(tools, parallel)
        await refused(
            tools,
            "add_structure",
            workflow_id,
            "5 operators",
            "at most 4",
            structure="parallel",
            operators=["Custom", "Plan"],
        )
        step = await tools.ok("add_operator", workflow_id=workflow_id, operator="ScEnsemble")
        assert step["state"]["stats"]["total_operators"] == 4
        await refused(tools, "add_operator", workflow_id, "at most 4", operator="Format")


@pytest.fixture
async def structured(tools: ToolCaller) -> str:
    """`Custom -> [Programmer, Custom, AnswerGenerate] -> Verify ? Revise : Format -> (Test -> Revise) * 2 -> [Plan, Custom]`"""
    return await build(
        tools,
        {"operator": "Custom", "prompt": PROMPT},
        {"structure": "parallel", "operators": ["Programmer", "Custom", "AnswerGenerate"]},
        {"structure": "conditional", "condition": "Verify", "on_fail": "Revise", "on_pass": "Format"},
        {"structure": "loop", "operators": ["Test", "Revise"], "count": 2},
        {"structure": "parallel", "operators": ["Plan", "Custom"]},
    )


@pytest.mark.parametrize(
    ("node_id", "with_parent", "dsl"),
    [
        (
            "node_1",
            False,
            "[Programmer, Custom, AnswerGenerate] -> Verify ? Revise : Format -> (Test -> Revise) * 2 -> [Plan, Custom]",
        ),
        ("node_2", False, "Custom -> Verify ? Revise : Format -> (Test -> Revise) * 2 -> [Plan, Custom]"),
        (
            "node_2_p1",
            False,
            "Custom -> [Programmer, AnswerGenerate] -> Verify ? Revise : Format -> (Test -> Revise) * 2 -> [Plan, Custom]",
        ),
        (
            "node_3_pass",
            False,
            "Custom -> [Programmer, Custom, AnswerGenerate] -> Verify ? Revise : done -> (Test -> Revise) * 2 -> [Plan, Custom]",
        ),
        (
            "node_3_false",
            False,
            "Custom -> [Programmer, Custom, AnswerGenerate] -> Verify ? Revise : done -> (Test -> Revise) * 2 -> [Plan, Custom]",
        ),
        (
            "node_4_l0",
            False,
            "Custom -> [Programmer, Custom, AnswerGenerate] -> Verify ? Revise : Format -> (Revise) * 2 -> [Plan, Custom]",
        ),
        (
            "node_5_p0",
            True,
            "Custom -> [Programmer, Custom, AnswerGenerate] -> Verify ? Revise : Format -> (Test -> Revise) * 2",
        ),
        (
            "node_3_true",
            True,
            "Custom -> [Programmer, Custom, AnswerGenerate] -> (Test -> Revise) * 2 -> [Plan, Custom]",
        ),
        (
            " node_4 ",
            False,
            "Custom -> [Programmer, Custom, AnswerGenerate] -> Verify ? Revise : Format -> [Plan, Custom]",
        ),
    ],
)
async def test_delete_node_variants(
    tools: ToolCaller, structured: str, node_id: str, with_parent: bool, dsl: str
) -> None:
    before = await tools.snapshot(structured)
    step = await tools.ok("delete_node", workflow_id=structured, node_id=node_id, with_parent=with_parent)
    assert step["state"]["dsl"] == dsl
    assert step["state"]["round"] == before["round"] + 1
    remaining = {n["id"] for n in step["state"]["nodes"]}
    assert node_id.strip() not in remaining


@pytest.mark.parametrize(
    ("node_id", "phrases"),
    [
        (
            "node_5_p0",
            (
                "Cannot delete node_5_p0 alone",
                "node_5 would no longer be a valid parallel",
                "Delete the whole stage node_5",
            ),
        ),
        ("node_3_cond", ("Cannot delete node_3_cond alone", "conditional")),
        ("node_3_fail", ("Cannot delete node_3_fail alone",)),
        ("node_3_true", ("Cannot delete node_3_fail alone",)),
        ("node_9", ("Node 'node_9' not found", "Existing node ids: node_1, node_2, node_2_p0")),
        ("node_2_p3", ("not found",)),
    ],
)
async def test_delete_node_refusals_change_nothing(
    tools: ToolCaller, structured: str, node_id: str, phrases: tuple[str, ...]
) -> None:
    await refused(tools, "delete_node", structured, *phrases, node_id=node_id)


async def test_delete_last_loop_body_node_is_refused(tools: ToolCaller) -> None:
    workflow_id = await build(tools, {"structure": "loop", "operators": ["Revise"], "count": 3})
    await refused(tools, "delete_node", workflow_id, "Cannot delete node_1_l0 alone", "loop", node_id="node_1_l0")
    step = await tools.ok("delete_node", workflow_id=workflow_id, node_id="node_1_l0", with_parent=True)
    assert step["state"]["dsl"] == "" and step["state"]["nodes"] == []


async def test_modify_node_top_level_and_child(tools: ToolCaller, structured: str) -> None:
    step = await tools.ok(
        "modify_node", workflow_id=structured, node_id="node_1", operator="plan", prompt="Plan the solution first."
    )
    assert step["message"] == "Modified node_1: Custom -> Plan."
    assert step["state"]["nodes"][0] == {
        "id": "node_1",
        "kind": "operator",
        "operator": "Plan",
        "parent": None,
        "slot": None,
        "count": None,
        "prompt": "Plan the solution first.",
    }
    step = await tools.ok("modify_node", workflow_id=structured, node_id="node_2_p1", operator="Programmer")
    assert step["state"]["dsl"].startswith("Plan -> [Programmer, Programmer, AnswerGenerate]")
    child = next(n for n in step["state"]["nodes"] if n["id"] == "node_2_p1")
    assert (child["operator"], child["parent"], child["prompt"]) == ("Programmer", "node_2", None)
    step = await tools.ok("modify_node", workflow_id=structured, node_id="node_3_true", operator="Custom")
    assert "Verify ? Custom : Format" in step["state"]["dsl"]
    step = await tools.ok("modify_node", workflow_id=structured, node_id="node_3_cond", operator="Review")
    assert "Review ? Custom : Format" in step["state"]["dsl"]
    assert (await node_ids(tools, structured))[:6] == [
        "node_1",
        "node_2",
        "node_2_p0",
        "node_2_p1",
        "node_2_p2",
        "node_3",
    ]


@pytest.mark.parametrize(
    ("arguments", "phrases"),
    [
        ({"node_id": "node_2", "operator": "Custom"}, ("node_2 is a parallel stage, not an operator", "node_2_p0")),
        ({"node_id": "node_4", "operator": "Custom"}, ("node_4 is a loop stage",)),
        ({"node_id": "node_2_p0", "operator": "ScEnsemble"}, ("ScEnsemble cannot be a parallel branch",)),
        ({"node_id": "node_3_cond", "operator": "Custom"}, ("must be a checker",)),
        ({"node_id": "node_1", "operator": "Wizard"}, ("Unknown operator 'Wizard'",)),
        ({"node_id": "node_1", "operator": "Plan", "prompt": "no"}, ("Prompt is too short",)),
        ({"node_id": "node_77", "operator": "Plan"}, ("Node 'node_77' not found",)),
    ],
)
async def test_modify_node_errors_change_nothing(
    tools: ToolCaller, structured: str, arguments: dict[str, Any], phrases: tuple[str, ...]
) -> None:
    await refused(tools, "modify_node", structured, *phrases, **arguments)


async def test_set_prompt_sets_and_is_idempotent(tools: ToolCaller, structured: str) -> None:
    first = await tools.ok(
        "set_prompt", workflow_id=structured, node_id="node_3_fail", prompt="Fix what the check found."
    )
    second = await tools.ok(
        "set_prompt", workflow_id=structured, node_id="node_3_true", prompt="Fix what the check found."
    )
    assert first["state"]["nodes"] == second["state"]["nodes"]
    assert first["message"] == "Prompt set for node_3_fail (Revise)."
    assert second["state"]["round"] == first["state"]["round"] + 1  # every edit is a round, even a no-op one
    prompts = {n["id"]: n["prompt"] for n in second["state"]["nodes"]}
    assert prompts["node_3_fail"] == "Fix what the check found."
    assert prompts["node_1"] == PROMPT


@pytest.mark.parametrize(
    ("arguments", "phrases"),
    [
        ({"node_id": "node_1", "prompt": "    "}, ("Prompt is too short (0 characters)",)),
        ({"node_id": "node_1", "prompt": "tiny"}, ("Prompt is too short (4 characters)", "at least 5")),
        ({"node_id": "node_1", "prompt": "p" * 4001}, ("`prompt` is 4001 characters; the limit is 4000",)),
        ({"node_id": "node_2", "prompt": PROMPT}, ("node_2 is a parallel stage",)),
        ({"node_id": "node_8", "prompt": PROMPT}, ("Node 'node_8' not found",)),
    ],
)
async def test_set_prompt_errors_change_nothing(
    tools: ToolCaller, structured: str, arguments: dict[str, Any], phrases: tuple[str, ...]
) -> None:
    await refused(tools, "set_prompt", structured, *phrases, **arguments)


async def test_typed_edits_are_refused_while_a_prompt_turn_is_pending(tools: ToolCaller) -> None:
    workflow_id = await tools.create()
    await tools.act(workflow_id, "<action>add</action><operator>Plan</operator>")
    for tool, arguments in (
        ("add_operator", {"operator": "Custom"}),
        ("add_structure", {"structure": "parallel", "operators": ["Custom", "Plan"]}),
        ("delete_node", {"node_id": "node_1"}),
        ("modify_node", {"node_id": "node_1", "operator": "Custom"}),
        ("set_prompt", {"node_id": "node_1", "prompt": PROMPT}),
        ("finish", {}),
    ):
        await refused(tools, tool, workflow_id, "A prompt turn is pending for node_1 (Plan)", "cancel", **arguments)


async def test_ids_are_never_reused_after_deletes(tools: ToolCaller) -> None:
    workflow_id = await tools.create()
    for operator in ("Plan", "Custom", "Verify"):
        await tools.ok("add_operator", workflow_id=workflow_id, operator=operator)
    await tools.ok("delete_node", workflow_id=workflow_id, node_id="node_3")
    await tools.ok("delete_node", workflow_id=workflow_id, node_id="node_2")
    step = await tools.ok("add_operator", workflow_id=workflow_id, operator="Verify")
    assert [n["id"] for n in step["state"]["nodes"]] == ["node_1", "node_4"]
    for _ in range(2):
        await tools.ok("delete_node", workflow_id=workflow_id, node_id=step["state"]["nodes"][0]["id"])
        step = await tools.detail(workflow_id)
    assert step["state"]["nodes"] == []
    step = await tools.ok("add_structure", workflow_id=workflow_id, structure="parallel", operators=["Custom", "Plan"])
    assert [n["id"] for n in step["state"]["nodes"]] == ["node_5", "node_5_p0", "node_5_p1"]
    step = await tools.act(
        workflow_id,
        "<action>add</action><operator>Format</operator><position>0</position><prompt>Return the number.</prompt>",
    )
    assert [n["id"] for n in step["state"]["nodes"]] == ["node_6", "node_5", "node_5_p0", "node_5_p1"]
    assert (await tools.detail(workflow_id))["graph"]["next_index"] == 7


async def test_positional_inserts_keep_ids_unique(tools: ToolCaller) -> None:
    workflow_id = await tools.create()
    for position in (None, 0, 1, 0, 3, 2):
        await tools.ok("add_operator", workflow_id=workflow_id, operator="Custom", position=position)
    ids = await node_ids(tools, workflow_id)
    assert sorted(ids, key=lambda i: int(i.split("_")[1])) == [f"node_{k}" for k in range(1, 7)]
    assert ids == ["node_4", "node_2", "node_6", "node_3", "node_5", "node_1"]


async def test_a_stopping_rule_is_set_by_the_typed_tool_and_the_dialect(tools: ToolCaller) -> None:
    typed = await tools.create(
        "Write add(a, b).", task_type="code", entry_point="add", public_tests="assert add(1, 2) == 3"
    )
    step = await tools.ok("add_operator", workflow_id=typed, operator="Programmer", samples=8, until="tests")
    assert step["state"]["dsl"] == "Programmer{8|tests}"
    refused = await tools.error("add_operator", workflow_id=typed, operator="Programmer", until="tests")
    assert "needs samples >= 2" in refused
    turned = await tools.create("What is 6 * 7?", task_type="math")
    text = (
        "<action>add</action><operator>Custom</operator><samples>8</samples><until>vote</until><prompt>Solve.</prompt>"
    )
    step = await tools.act(turned, text)
    assert step["ok"] is True and step["state"]["dsl"] == "Custom{8|vote}"
