"""`flowsteer demo`: one real episode through the MCP tools, executed by a local model.

The server is started the way assistants start it (`flowsteer-mcp` over stdio, executor = the prepared local
model); the client is the official MCP SDK client. The edits come from a fixed per-task-type template (the
`template` baseline director), written partly in the Flow-Director dialect through `act` (with prompt turns) and
partly through the typed tools. The final program is then checked against the task's hidden tests in the sandbox.

`--director policy` (`make demo DIRECTOR=policy`) lets the shipped Flow-Director build the workflow instead
(flowsteer_mcp/demo_policy.py); everything around the edits (server, executor, trace, hidden tests) is the same.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from flowsteer_mcp.demo_policy import DemoPolicy, policy_episode
from flowsteer_mcp.demo_viewer import demo_store_path, live_viewer
from flowsteer_mcp.director.card import DirectorCardError, shipped_director
from flowsteer_mcp.director.served import SERVE_MODES, DirectorServing

DEFAULT_TASK = Path(__file__).resolve().parent.parent / "examples" / "tasks" / "second_largest.json"

# The demo builds the measured default code workflow (`template`'s, `DEFAULT_WORKFLOW["code"]`: direct's own
# request drawn greedily, then in waves of 3 and 4 sampled drafts only while no draft passes the public tests, a
# greedy program that fails to load counting as a failed check rather than being re-asked; the sandbox picks by
# the public tests and by behaviour), half through a typed tool (a Programmer without a prompt,
# which is what makes its draws direct's request, with its stopping rule) and half in the Flow-Director dialect (an
# add with its prompt turn, then finish). tests/test_demo_steps.py keeps it equal to the default, prompts included.
# (kind, payload): "act" sends dialect text; "tool" calls a typed tool with arguments.
CODE_TEMPLATE: list[tuple[str, Any]] = [
    ("tool", ("add_operator", {"operator": "Programmer", "samples": 8, "until": "redraw"})),
    ("act", "<action>add</action><operator>ScEnsemble</operator>"),
    ("act", "Pick the program that passes the public tests."),
    ("act", "<action>finish</action>"),
]
# The relaxed gate: the paper preset's >= 5 operators would force steps the measurement found no better.
DEMO_OPTIONS = {"finish": "relaxed"}


def _line(text: str = "") -> None:
    print(text, flush=True)


def _viewer_hint(store: Path) -> str:
    return f"flowsteer-mcp view --store sqlite:{store}"


def _executor_config(model: str, folder: Path) -> Path:
    """The in-process local model; engine limits sized for a busy 2-core CPU, where up to 8 drafts of a 0.5B model
    can take longer than the engine's default 300 s per call (the greedy draft runs alone, then each wave of
    sampled drafts shares one batched `generate`); a broken sampled draft is dropped, not repaired, as in the
    evaluation that chose the workflow (docs/runs/full34-code)."""
    config = folder / "executor.toml"
    config.write_text(
        '[executor]\nmodel = "demo"\n\n[models.demo]\nbackend = "local"\n'
        f'path = "{model}"\n\n[models.demo.sampling]\ntemperature = 0.0\nmax_tokens = 768\n\n'
        "[engine]\ncall_timeout_s = 1200\nrun_timeout_s = 2400\nsampled_reasks = 0\n",
        encoding="utf-8",
    )
    return config


def _preview(text: str | None, limit: int = 70) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


async def _episode(model: str, task: dict[str, Any], workdir: Path, view: bool, policy: DemoPolicy | None) -> int:
    meta = task.get("meta", {})
    store = demo_store_path()
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "flowsteer_mcp", "--config", str(_executor_config(model, workdir)), "--store", f"sqlite:{store}"],
        env={"FLOWSTEER_LOG_LEVEL": "WARNING", "PYTHONUNBUFFERED": "1"},
    )
    totals = {"llm_calls": 0, "tokens": 0}
    started = time.monotonic()

    async with Client(params) as client:
        if policy is not None:
            workflow_id = await policy_episode(client, task, policy, totals, DEMO_OPTIONS)
        else:
            workflow_id = await _template_episode(client, task, store, view, totals)
        detail = (await client.call_tool("get_workflow", {"workflow_id": workflow_id})).structured_content
    assert detail is not None
    elapsed = time.monotonic() - started
    _report(detail)
    passed = await _check_hidden_tests(_final_code(detail), meta)
    _line()
    _line(
        f"hidden tests: {'PASSED' if passed else 'FAILED'} ({len(meta.get('test', '').splitlines())} asserts, "
        "never shown to the workflow)"
    )
    _line(
        f"LLM calls: {totals['llm_calls']}, tokens: {totals['tokens']}, wall time: {elapsed:.1f} s "
        f"(executor: {model} on CPU)"
    )
    _line(f"look at this and earlier demo workflows in a browser: {_viewer_hint(store)}")
    return 0


async def _template_episode(
    client: Client, task: dict[str, Any], store: Path, view: bool, totals: dict[str, int]
) -> str:
    """The fixed demo steps, watched in the live viewer when `view`; returns the workflow's id."""
    meta = task.get("meta", {})
    created = await client.call_tool(
        "create_workflow",
        {
            "task": task["problem"],
            "task_type": "code",
            "entry_point": meta.get("entry_point"),
            "public_tests": meta.get("public_tests"),
            "options": DEMO_OPTIONS,
        },
    )
    if created.is_error or created.structured_content is None:
        raise RuntimeError(f"create_workflow failed: {created.content}")
    workflow_id: str = created.structured_content["workflow_id"]
    _line(f"workflow {workflow_id} created (finish preset: {DEMO_OPTIONS['finish']})")
    async with AsyncExitStack() as stack:
        if view:
            url = await stack.enter_async_context(live_viewer(store))
            _line(
                f"watch it being built: {url}w/{workflow_id}  (live until the demo ends)"
                if url
                else f"(the live viewer did not start; try: {_viewer_hint(store)})"
            )
        await _build(client, workflow_id, totals)
    return workflow_id


def _final_code(detail: dict[str, Any]) -> str | None:
    end = detail.get("end") or {}
    last = detail.get("last_execution") or {}
    code = end.get("final_code") or end.get("final_answer") or (last.get("execution") or {}).get("output")
    return str(code) if code else None


def _report(detail: dict[str, Any]) -> None:
    """The built workflow, its end, the per-node trace of its final run and its answer."""
    _line()
    _line(f"workflow: {detail['state']['dsl']}")
    _line(f"episode end: {(detail.get('end') or {}).get('reason', 'not finished')}")
    last = detail.get("last_execution") or {}
    _line("per-node trace of the final run (cached = reused from an earlier run of this episode):")
    _line(
        f"  {'node':<13}{'operator':<12}{'ok':<4}{'verdict':<8}{'cached':<7}{'calls':>5}{'tokens':>7}{'secs':>7}  output"
    )
    for row in last.get("trace", []):
        verdict = "-" if row.get("verdict") is None else ("pass" if row["verdict"] else "fail")
        shown = "(skipped)" if row.get("skipped") else _preview(row.get("error") or row.get("output"), 50)
        _line(
            f"  {row['node_id']:<13}{row['operator']:<12}{'y' if row['ok'] else 'n':<4}{verdict:<8}"
            f"{'y' if row.get('cached') else 'n':<7}{row.get('llm_calls', 0):>5}{row.get('tokens', 0):>7}"
            f"{row.get('latency_s', 0.0):>7.1f}  {shown}"
        )
    _line()
    _line("final answer (the executed workflow's program):")
    _line(_final_code(detail) or "(none: the workflow produced no answer)")


async def _show_progress(progress: float, total: float | None, message: str | None) -> None:
    _line(f"      .. {message} ({int(progress)}/{int(total or 0)})")


async def _build(client: Client, workflow_id: str, totals: dict[str, int]) -> None:
    """Send the demo's steps, printing each one's outcome."""
    for number, (kind, payload) in enumerate(CODE_TEMPLATE, start=1):
        if kind == "act":
            name, arguments = "act", {"workflow_id": workflow_id, "text": payload}
            label = _preview(payload, 90)
        else:
            name, extra = payload
            arguments = {"workflow_id": workflow_id, **extra}
            label = f"{name}({_preview(json.dumps(extra), 80)})"
        _line(f"[{number}] {name}: {label}")
        result = await client.call_tool(name, arguments, progress_callback=_show_progress)
        step = result.structured_content
        if result.is_error or step is None:
            raise RuntimeError(f"{name} failed: {result.content}")
        execution = step.get("execution") or {}
        if execution.get("fresh"):
            totals["llm_calls"] += execution.get("llm_calls", 0)
            totals["tokens"] += execution.get("tokens", 0)
        if step["state"]["awaiting_prompt_for"]:
            ran = "waiting for the next prompt turn"
        elif execution.get("fresh"):
            ran = (
                f"ran: {execution['status']}, {execution.get('llm_calls', 0)} LLM calls, "
                f"{execution.get('cache_hits', 0)} nodes reused from cache"
            )
            if execution.get("error"):
                ran += f" ({_preview(execution['error'], 90)})"
        else:
            ran = "not run"
        _line(f"    ok={step['ok']} dsl={step['state']['dsl'] or '(empty)'} | {ran}")
        if not step["ok"]:
            _line(f"    message: {step['message']}")


async def _check_hidden_tests(code: str | None, meta: dict[str, Any]) -> bool:
    if not code:
        return False
    from operators.sandbox import run_code

    result = await run_code(code, tests=meta.get("test"), entry_point=meta.get("entry_point"))
    if not result.passed:
        _line(f"  sandbox: {result.status} {result.reason or ''} (isolation: {result.isolation.mode})")
    return bool(result.passed)


def demo_main(argv: list[str], serve_director: DirectorServing | None = None) -> int:
    """`serve_director` serves the shipped director for `--director policy` (`flowsteer demo` passes one)."""
    parser = argparse.ArgumentParser(prog="flowsteer demo", description="One real episode on a local model.")
    parser.add_argument("--model", default=os.environ.get("FLOWSTEER_DEMO_MODEL", "qwen2.5-coder-0.5b-instruct"))
    parser.add_argument("--task", type=Path, default=DEFAULT_TASK, help="a JSON task record (code task)")
    parser.add_argument(
        "--no-view", dest="view", action="store_false", help="do not start the live viewer (flowsteer-mcp view)"
    )
    parser.add_argument(
        "--director",
        choices=("template", "policy"),
        default="template",
        help="who builds the workflow: the fixed demo steps (default) or the shipped Flow-Director",
    )
    parser.add_argument("--policy-serve", choices=SERVE_MODES, default="auto", help="how to serve the director")
    args = parser.parse_args(argv)
    policy = None
    if args.director == "policy":
        try:
            policy = DemoPolicy(shipped_director(), args.policy_serve, _require(serve_director))
        except DirectorCardError as error:
            print(f"flowsteer demo: error: {error}", file=sys.stderr)
            return 2
    from operators.models import prepare

    task = json.loads(args.task.read_text(encoding="utf-8"))
    _line(f"task: {args.task.name}: {_preview(task['problem'], 100)}")
    started = time.monotonic()
    folder = prepare(args.model)
    _line(f"executor model {args.model} ready at {folder} ({time.monotonic() - started:.1f} s)")
    with tempfile.TemporaryDirectory(prefix="flowsteer-demo-") as workdir:
        return anyio.run(_episode, args.model, task, Path(workdir), args.view, policy)


def _require(serve_director: DirectorServing | None) -> DirectorServing:
    if serve_director is None:
        raise SystemExit("flowsteer demo: this entry point cannot serve the shipped director; run `flowsteer demo`")
    return serve_director
