"""export_workflow (json, dsl, mermaid) and import_workflow (json round trip, dsl, malformed input)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from flowsteer_mcp.server import ServerSettings
from tests.server.conftest import Connect
from tests.support.servers import ToolCaller

FULL_DSL = "Plan -> [Programmer, Custom] -> ScEnsemble -> Verify ? Revise : done -> Format"


async def build_full_with_prompts(tools: ToolCaller) -> str:
    """The full example with prompts, built through act with a delete in the middle (so ids have a gap)."""
    workflow_id = await tools.create(options={"prompt_turns": False})
    for text in (
        "<action>add</action><operator>Plan</operator><prompt>Plan the computation.</prompt>",
        "<action>add</action><operator>Custom</operator><prompt>Throwaway node.</prompt>",
        "<action>delete</action><target>node_2</target>",
        "<action>add</action><structure>parallel</structure><operators>Programmer, Custom</operators>",
        "<action>set_prompt</action><target>node_3_p0</target><prompt>Compute it in Python.</prompt>",
        "<action>add</action><operator>ScEnsemble</operator>",
        "<action>add</action><structure>conditional</structure><condition>Verify</condition><true>Revise</true>",
        "<action>set_prompt</action><target>node_5_true</target><prompt>Fix the failed check.</prompt>",
        "<action>add</action><operator>Format</operator><prompt>Return only the number.</prompt>",
    ):
        step = await tools.act(workflow_id, text)
        assert step["ok"] is True, step["message"]
    assert await tools.dsl(workflow_id) == FULL_DSL
    return workflow_id


async def workflow_count(tools: ToolCaller) -> int:
    return len((await tools.ok("list_workflows"))["workflows"])


async def test_export_formats(tools: ToolCaller) -> None:
    workflow_id = await build_full_with_prompts(tools)
    exported = await tools.ok("export_workflow", workflow_id=workflow_id, format="json")
    assert exported["workflow_id"] == workflow_id and exported["format"] == "json"
    document = json.loads(exported["content"])
    assert document["format"] == "flowsteer.workflow/v1"
    assert document["dsl"] == FULL_DSL
    assert document["graph"] == (await tools.detail(workflow_id))["graph"]
    assert document["graph"]["next_index"] == 7
    assert [s["id"] for s in document["graph"]["stages"]] == ["node_1", "node_3", "node_4", "node_5", "node_6"]

    dsl = await tools.ok("export_workflow", workflow_id=workflow_id, format="dsl")
    assert dsl["content"] == FULL_DSL

    mermaid = (await tools.ok("export_workflow", workflow_id=workflow_id, format="mermaid"))["content"]
    lines = mermaid.splitlines()
    assert lines[0] == "flowchart LR"
    assert "    node_5_cond -- fail --> node_5_fail" in lines
    assert "    node_5_cond -- pass --> node_5_done" in lines
    assert "    node_1 --> node_3_p0" in lines and "    node_3_p1 --> node_4" in lines
    assert lines[-1] == "    node_6 --> answer"
    default = await tools.ok("export_workflow", workflow_id=workflow_id)
    assert default["format"] == "json" and default["content"] == exported["content"]


async def test_json_round_trip_keeps_ids_prompts_and_the_counter(tools: ToolCaller) -> None:
    source = await build_full_with_prompts(tools)
    spec = (await tools.ok("export_workflow", workflow_id=source, format="json"))["content"]
    created = await tools.ok("import_workflow", spec=spec, task="What is 17 * 23?", task_type="math")
    assert created["message"] == "Workflow imported from json."
    copy = created["workflow_id"]
    assert copy != source
    original, imported = await tools.detail(source), await tools.detail(copy)
    assert imported["graph"] == original["graph"]
    assert imported["state"]["nodes"] == original["state"]["nodes"]
    assert imported["state"]["round"] == 0 and imported["history_length"] == 0
    assert imported["task"]["task_type"] == "math"
    step = await tools.ok("add_operator", workflow_id=copy, operator="Review")
    assert step["state"]["nodes"][-1]["id"] == "node_7", "the imported counter continues; no id is reused"
    again = (await tools.ok("export_workflow", workflow_id=source, format="json"))["content"]
    assert again == spec, "exporting is read-only"


async def test_dsl_import_builds_fresh_ids_without_prompts(tools: ToolCaller) -> None:
    created = await tools.ok(
        "import_workflow",
        spec="Plan->[Programmer,Custom]->ScEnsemble->Verify?Revise:done->Format",
        task="Compute 17 * 23.",
    )
    assert created["message"] == "Workflow imported from dsl."
    state = created["state"]
    assert state["dsl"] == FULL_DSL
    assert [n["id"] for n in state["nodes"]] == [
        "node_1",
        "node_2",
        "node_2_p0",
        "node_2_p1",
        "node_3",
        "node_4",
        "node_4_cond",
        "node_4_fail",
        "node_5",
    ]
    assert all(n["prompt"] is None for n in state["nodes"])
    loop = await tools.ok(
        "import_workflow", spec="Programmer -> (Test -> Revise) * 3 -> Format", task="Write add(a, b).", format="dsl"
    )
    assert loop["state"]["dsl"] == "Programmer -> (Test -> Revise) * 3 -> Format"
    empty = await tools.ok("import_workflow", spec="", task="Anything at all.", format="dsl")
    assert empty["state"]["dsl"] == "" and empty["state"]["nodes"] == []


async def test_imported_workflow_uses_its_options(tools: ToolCaller) -> None:
    created = await tools.ok(
        "import_workflow", spec="Custom", task="Add 2 and 3.", options={"finish": "relaxed", "max_rounds": 4}
    )
    assert created["state"]["max_rounds"] == 4
    done = await tools.ok("finish", workflow_id=created["workflow_id"])
    assert done["done"] is True and done["final_answer"] == "Custom"


def mutate(spec: str, change: Any) -> str:
    document = json.loads(spec)
    change(document)
    return json.dumps(document)


def _set(path: list[Any], value: Any) -> Any:
    def change(document: Any) -> None:
        target = document
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return change


@pytest.mark.parametrize(
    ("change", "phrase"),
    [
        (_set(["dsl"], "Plan"), "the dsl field does not match the graph"),
        (_set(["graph", "next_index"], 3), "would reuse the id"),
        (_set(["graph", "stages", 0, "operator"], "Wizard"), "Unknown operator 'Wizard'"),
        (_set(["graph", "stages", 0, "operator"], "plan"), "canonical operator names"),
        (_set(["graph", "stages", 0, "id"], "first"), "stage ids look like node_<n>"),
        (_set(["graph", "stages", 1, "branches", 0, "id"], "node_9_p0"), "not named after node_3"),
        (_set(["graph", "stages", 1, "branches", 1, "id"], "node_3_p0"), "node ids are not unique"),
        (_set(["graph", "stages", 1, "branches"], []), "2 to 6 branches"),
        (_set(["graph", "stages", 0, "prompt"], "ab"), "Prompt is too short"),
        (_set(["graph", "stages", 0, "kind"], "tree"), "Invalid workflow JSON at graph.stages.0"),
        (_set(["format"], "other/v9"), "Invalid workflow JSON at format"),
        (_set(["extra"], 1), "Invalid workflow JSON at extra"),
    ],
)
async def test_invalid_json_imports_are_tool_errors_and_create_nothing(
    tools: ToolCaller, change: Any, phrase: str
) -> None:
    source = await build_full_with_prompts(tools)
    spec = (await tools.ok("export_workflow", workflow_id=source, format="json"))["content"]
    count = await workflow_count(tools)
    message = await tools.error("import_workflow", spec=mutate(spec, change), task="Compute 17 * 23.")
    assert "invalid_import" in message or "unknown_operator" in message or "invalid_" in message
    assert phrase in message
    assert await workflow_count(tools) == count


@pytest.mark.parametrize(
    ("spec", "arguments", "phrase"),
    [
        ("{not json", {}, "Invalid workflow JSON"),
        ("{}", {}, "Invalid workflow JSON at dsl"),
        ("[1, 2]", {"format": "json"}, "Invalid workflow JSON"),
        ("Plan -> -> Custom", {}, "Invalid DSL: expected name at position 8"),
        ("Plan -> [Custom]", {}, "2 to 6 branches"),
        ("Plan -> Wizard", {}, "Unknown operator 'Wizard'"),
        ("(Revise) * 11", {}, "between 1 and 10"),
        ("Custom ? Revise : done", {}, "must be a checker"),
        ("Plan -> done", {}, "'done' is only allowed"),
        ("Plan ->", {}, "Invalid DSL"),
        ("Plan; Custom", {}, "unexpected character ';'"),
        ("Plan -> Custom", {"format": "json"}, "Invalid workflow JSON"),
        ("Plan", {"task": "  "}, "task is empty"),
        ("Plan", {"options": {"max_rounds": 5000}}, "cap of 200"),
    ],
)
async def test_malformed_imports_are_tool_errors_and_create_nothing(
    tools: ToolCaller, spec: str, arguments: dict[str, Any], phrase: str
) -> None:
    count = await workflow_count(tools)
    message = await tools.error("import_workflow", **({"spec": spec, "task": "Compute 17 * 23."} | arguments))
    assert phrase in message
    assert await workflow_count(tools) == count


async def test_import_size_limit(connect: Connect) -> None:
    async with connect(ServerSettings(max_import_chars=2000)) as tools:
        message = await tools.error("import_workflow", spec="Plan" + " " * 2000, task="Compute 17 * 23.")
        assert "2004 characters; the limit is 2000" in message
        assert (await tools.ok("list_workflows"))["workflows"] == []


async def test_export_of_an_unknown_format_is_refused(tools: ToolCaller) -> None:
    workflow_id = await tools.create()
    message = await tools.error("export_workflow", workflow_id=workflow_id, format="python")
    assert "format" in message
