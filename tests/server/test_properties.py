"""Property-based tests: arbitrary `act` text and arbitrary typed-tool arguments never crash the server and never
half-apply an edit (the graph is unchanged, or changed by exactly one complete edit)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from mcp import Client

from flowsteer_mcp.canvas.export import export_json, import_json
from flowsteer_mcp.canvas.model import WorkflowGraph
from flowsteer_mcp.canvas.options import CanvasOptions
from flowsteer_mcp.canvas.validate import CanvasRules
from flowsteer_mcp.server import ServerSettings, build_server
from flowsteer_mcp.store.memory import MemoryStore
from operators.registry import OperatorRegistry
from tests.support.scripted_runner import ScriptedRunner
from tests.support.servers import ToolCaller, result_text

START_DSL = "Plan -> [Programmer, Custom] -> Verify ? Revise : Format -> (Test -> Revise) * 2"
MAX_ACT_CHARS = 32_000
PROPERTY_SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

OPERATOR_NAMES = [
    "Plan",
    "Decompose",
    "Custom",
    "AnswerGenerate",
    "Programmer",
    "Test",
    "Review",
    "Verify",
    "Revise",
    "ScEnsemble",
    "Aggregate",
    "Format",
    "MdEnsemble",
    "CustomCodeGenerate",
    "plan",
    "Wizard",
    "",
]
NODE_IDS = [
    "node_1",
    "node_2",
    "node_2_p0",
    "node_2_p1",
    "node_3",
    "node_3_cond",
    "node_3_fail",
    "node_3_pass",
    "node_3_true",
    "node_3_false",
    "node_4",
    "node_4_l0",
    "node_4_l1",
    "node_5",
    "node_0",
    " node_1 ",
    "",
]
FRAGMENTS = [
    "<action>",
    "</action>",
    "[action]",
    "[/action]",
    "add",
    "delete",
    "modify",
    "set_prompt",
    "finish",
    "cancel",
    "<operator>",
    "</operator>",
    "<structure>",
    "</structure>",
    "parallel",
    "conditional",
    "loop",
    "<operators>",
    "</operators>",
    "<condition>",
    "</condition>",
    "<true>",
    "</true>",
    "<false>",
    "</false>",
    "done",
    "<count>",
    "</count>",
    "<position>",
    "</position>",
    "<target>",
    "</target>",
    "<prompt>",
    "</prompt>",
    "<answer>",
    "</answer>",
    "<think>",
    "</think>",
    "```",
    ", ",
    " ",
    "\n",
    "-1",
    "0",
    "3",
    "99",
    "Let's finish",
    *OPERATOR_NAMES,
    *NODE_IDS,
]


def mostly(likely: st.SearchStrategy[Any], odd: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`likely` three times out of four, `odd` otherwise (keeps valid edits common enough to matter)."""
    return st.integers(0, 3).flatmap(lambda k: odd if k == 0 else likely)


tag_soup = st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join)
well_formed = st.builds(
    lambda verb, body: f"<action>{verb}</action>{body}",
    st.sampled_from(["add", "delete", "modify", "set_prompt", "finish", "cancel"]),
    tag_soup,
)
any_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=400)
huge = st.builds(
    lambda n, head: (head + "x" * n)[: n + len(head)],
    st.integers(min_value=MAX_ACT_CHARS - 40, max_value=MAX_ACT_CHARS + 40),
    st.sampled_from(["", "<action>add</action><operator>Custom</operator><prompt>", "<think>"]),
)
valid_operator = st.sampled_from(OPERATOR_NAMES[:12])
prompt_text = st.one_of(st.text(max_size=40), st.just("Solve it step by step."))
near_valid = st.one_of(
    st.builds(
        lambda op, pos, prompt: f"<action>add</action><operator>{op}</operator>{pos}{prompt}",
        valid_operator,
        st.sampled_from(["", "<position>0</position>", "<position>2</position>", "<position>9</position>"]),
        st.one_of(st.just(""), prompt_text.map(lambda t: f"<prompt>{t}</prompt>")),
    ),
    st.builds(
        lambda kind, ops, n: (
            f"[action]add[/action][structure]{kind}[/structure][operators]{', '.join(ops)}[/operators][count]{n}[/count]"
        ),
        st.sampled_from(["parallel", "loop"]),
        st.lists(valid_operator, min_size=1, max_size=7),
        st.integers(0, 11),
    ),
    st.builds(
        lambda c, f, p: (
            f"<action>add</action><structure>conditional</structure><condition>{c}</condition><true>{f}</true><false>{p}</false>"
        ),
        valid_operator,
        valid_operator,
        st.one_of(st.just("done"), valid_operator),
    ),
    st.builds(lambda node: f"<action>delete</action><target>{node}</target>", st.sampled_from(NODE_IDS)),
    st.builds(
        lambda node, op: (
            f"<action>modify</action><target>{node}</target><operator>{op}</operator><prompt>Use it well.</prompt>"
        ),
        st.sampled_from(NODE_IDS),
        valid_operator,
    ),
    st.builds(
        lambda node, text: f"<action>set_prompt</action><target>{node}</target><prompt>{text}</prompt>",
        st.sampled_from(NODE_IDS),
        prompt_text,
    ),
)
noisy = st.builds(
    lambda a, b, c: a + b + c, st.sampled_from(["", "<think>hmm</think>", "```x```", "<think>"]), near_valid, any_text
)
arbitrary = st.one_of(tag_soup, well_formed, any_text, huge, st.binary(max_size=200).map(lambda b: b.decode("latin-1")))
act_texts = mostly(st.one_of(near_valid, noisy), arbitrary)


@pytest.fixture(scope="module")
def remote(registry: OperatorRegistry) -> Iterator[tuple[BlockingPortal, ToolCaller]]:
    """One server and client for all examples, driven from sync hypothesis tests through a blocking portal."""
    server = build_server(ServerSettings(), registry=registry, runner=ScriptedRunner(), store=MemoryStore())
    with start_blocking_portal() as portal, portal.wrap_async_context_manager(Client(server.mcp)) as client:
        yield portal, ToolCaller(client)


def fresh_workflow(portal: BlockingPortal, tools: ToolCaller, *, lenient: bool, pending: bool) -> str:
    async def make() -> str:
        options = {"lenient": lenient, "max_rounds": 200}
        created = await tools.ok("import_workflow", spec=START_DSL, task="What is 17 * 23?", options=options)
        workflow_id: str = created["workflow_id"]
        if pending:
            step = await tools.act(
                workflow_id,
                "<action>add</action><structure>parallel</structure><operators>Custom, AnswerGenerate</operators>",
            )
            assert step["state"]["awaiting_prompt_for"] is not None
        return workflow_id

    return portal.call(make)


def assert_valid_graph(graph: dict[str, Any], registry: OperatorRegistry) -> None:
    """The graph is a complete, valid workflow: its JSON export imports back under the canvas rules."""
    parsed = WorkflowGraph.model_validate(graph)
    import_json(export_json(parsed), CanvasRules(registry, CanvasOptions()))


def one_edit_apart(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """True when `after` is `before` changed by at most one complete edit (add, delete, modify, prompt)."""
    old, new = before["stages"], after["stages"]
    if after == before:
        return True
    if after["next_index"] == before["next_index"] + 1:
        added = f"node_{before['next_index']}"
        return [s for s in new if s["id"] != added] == old and len(new) == len(old) + 1
    if after["next_index"] != before["next_index"]:
        return False
    if len(new) == len(old) - 1:
        return any(old[:k] + old[k + 1 :] == new for k in range(len(old)))
    if len(new) == len(old):
        changed = [k for k in range(len(old)) if old[k] != new[k]]
        return len(changed) == 1 and old[changed[0]]["id"] == new[changed[0]]["id"]
    return False


def assert_no_internal_crash(tool: str, text: str) -> None:
    assert text.strip() != f"Error executing tool {tool}", "an unexpected exception escaped as an opaque error"
    assert text.startswith(f"Error executing tool {tool}: "), text


@PROPERTY_SETTINGS
@given(text=act_texts, lenient=st.booleans(), pending=mostly(st.just(False), st.just(True)))
def test_act_never_crashes_and_never_half_applies(
    remote: tuple[BlockingPortal, ToolCaller], registry: OperatorRegistry, text: str, lenient: bool, pending: bool
) -> None:
    portal, tools = remote
    workflow_id = fresh_workflow(portal, tools, lenient=lenient, pending=pending)
    before = portal.call(tools.snapshot, workflow_id)
    result = portal.call(tools.client.call_tool, "act", {"workflow_id": workflow_id, "text": text})
    after = portal.call(tools.snapshot, workflow_id)
    if result.is_error:
        message = result_text(result)
        assert_no_internal_crash("act", message)
        assert len(text) > MAX_ACT_CHARS and "limit" in message
        assert after == before
    else:
        step = result.structured_content
        assert step is not None
        assert after["round"] == before["round"] + 1 == step["state"]["round"]
        assert after["history_length"] == before["history_length"] + 1
        assert step["feedback"].startswith("<feedback>") and step["feedback"].endswith("</feedback>")
        if not step["ok"]:
            assert after["graph"] == before["graph"]
            assert step["error_code"]
        assert one_edit_apart(before["graph"], after["graph"]), (before["dsl"], after["dsl"])
        event(
            "rejected turn"
            if not step["ok"]
            else "graph edited"
            if after["graph"] != before["graph"]
            else "accepted, graph unchanged"
        )
    assert_valid_graph(after["graph"], registry)
    portal.call(lambda: tools.ok("delete_workflow", workflow_id=workflow_id))


loose: st.SearchStrategy[Any] = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-3, max_value=12), st.text(max_size=30), st.just([])
)


operator_arg = mostly(st.sampled_from(OPERATOR_NAMES), loose)
node_arg = mostly(st.sampled_from(NODE_IDS), loose)
prompt_arg = mostly(
    st.one_of(st.none(), st.text(max_size=60), st.just("Solve it step by step.")), st.one_of(st.just("p" * 4001), loose)
)
position_arg = mostly(st.integers(-1, 5), loose)
operator_list = mostly(
    st.lists(st.sampled_from(OPERATOR_NAMES), min_size=1, max_size=7),
    st.one_of(st.lists(operator_arg, max_size=8), loose),
)


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """An argument that may be omitted (hypothesis draws a sentinel we drop)."""
    return st.one_of(st.just(OMIT), strategy)


OMIT = object()
TOOL_ARGUMENTS: dict[str, dict[str, st.SearchStrategy[Any]]] = {
    "add_operator": {"operator": operator_arg, "prompt": maybe(prompt_arg), "position": maybe(position_arg)},
    "add_structure": {
        "structure": mostly(st.sampled_from(["parallel", "conditional", "loop"]), loose),
        "operators": maybe(operator_list),
        "condition": maybe(operator_arg),
        "on_fail": maybe(operator_arg),
        "on_pass": maybe(st.one_of(st.just("done"), operator_arg)),
        "count": maybe(mostly(st.integers(0, 11), loose)),
        "prompts": maybe(st.one_of(st.lists(st.one_of(st.none(), prompt_arg), max_size=4), loose)),
        "position": maybe(position_arg),
    },
    "delete_node": {"node_id": node_arg, "with_parent": maybe(mostly(st.booleans(), loose))},
    "modify_node": {"node_id": node_arg, "operator": operator_arg, "prompt": maybe(prompt_arg)},
    "set_prompt": {"node_id": node_arg, "prompt": prompt_arg},
    "finish": {"answer": maybe(prompt_arg)},
    "export_workflow": {"format": maybe(mostly(st.sampled_from(["json", "dsl", "mermaid", "python"]), loose))},
    "get_workflow": {},
    "run_workflow": {},
}
EDITS = {"add_operator", "add_structure", "delete_node", "modify_node", "set_prompt"}


@st.composite
def tool_calls(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    tool = draw(st.sampled_from(sorted(TOOL_ARGUMENTS)))
    arguments = {name: draw(strategy) for name, strategy in TOOL_ARGUMENTS[tool].items()}
    arguments = {name: value for name, value in arguments.items() if value is not OMIT}
    if draw(st.integers(0, 7)) == 0:
        arguments["unexpected"] = draw(loose)
    return tool, arguments


@PROPERTY_SETTINGS
@given(call=tool_calls(), bad_id=mostly(st.none(), st.sampled_from(["wf_missing", "", 7, None])))
def test_typed_tools_never_crash_and_never_half_apply(
    remote: tuple[BlockingPortal, ToolCaller],
    registry: OperatorRegistry,
    call: tuple[str, dict[str, Any]],
    bad_id: Any,
) -> None:
    portal, tools = remote
    tool, arguments = call
    workflow_id = fresh_workflow(portal, tools, lenient=False, pending=False)
    before = portal.call(tools.snapshot, workflow_id)
    target = workflow_id if bad_id is None else bad_id
    result = portal.call(tools.client.call_tool, tool, {"workflow_id": target, **arguments})
    after = portal.call(tools.snapshot, workflow_id)
    if result.is_error:
        assert_no_internal_crash(tool, result_text(result))
        assert after == before
        event(f"{tool}: error")
    else:
        event(f"{tool}: ok")
        assert bad_id is None, "a call with a wrong workflow_id must fail"
        assert one_edit_apart(before["graph"], after["graph"]), (before["dsl"], after["dsl"])
        if tool in EDITS:
            assert after["round"] == before["round"] + 1
            assert after["history_length"] == before["history_length"] + 1
        elif tool == "finish":
            assert after["round"] == before["round"] + 1 and after["graph"] == before["graph"]
        else:
            assert after == before
    assert_valid_graph(after["graph"], registry)
    portal.call(lambda: tools.ok("delete_workflow", workflow_id=workflow_id))


@PROPERTY_SETTINGS
@given(
    spec=st.one_of(
        tag_soup,
        any_text,
        st.lists(
            st.sampled_from(
                [*OPERATOR_NAMES, " -> ", "[", "]", ", ", "(", ")", " * ", "3", " ? ", " : ", "done", "{", "}"]
            ),
            max_size=20,
        ).map("".join),
    )
)
def test_import_of_arbitrary_specs_never_crashes(
    remote: tuple[BlockingPortal, ToolCaller], registry: OperatorRegistry, spec: str
) -> None:
    portal, tools = remote
    result = portal.call(tools.client.call_tool, "import_workflow", {"spec": spec, "task": "What is 17 * 23?"})
    if result.is_error:
        assert_no_internal_crash("import_workflow", result_text(result))
        listed = portal.call(lambda: tools.ok("list_workflows"))
        assert listed["workflows"] == []
    else:
        created = result.structured_content
        assert created is not None
        detail = portal.call(tools.detail, created["workflow_id"])
        assert_valid_graph(detail["graph"], registry)
        assert detail["state"]["round"] == 0
        portal.call(lambda: tools.ok("delete_workflow", workflow_id=created["workflow_id"]))
