"""`flowsteer solve "TASK"`: one episode with a chosen director; prints the workflow, its trace and the answer."""

from __future__ import annotations

import argparse
import sys
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import anyio
from mcp import Client

from flowsteer_mcp.canvas.options import TaskSpec
from flowsteer_mcp.director.episode import Director, EpisodeResult
from flowsteer_mcp.director.generation import PolicySampling


def _director_name(name: str) -> str:
    """argparse type: the known directors, or template:NAME for a library workflow (checked against the library)."""
    if name in ("direct", "template", "policy"):
        return name
    if name.startswith("template:"):
        from flowsteer_mcp.director.library import require_known

        try:
            require_known(name.removeprefix("template:"))
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
        return name
    raise argparse.ArgumentTypeError(f"invalid choice: {name!r} (choose from direct, template, template:NAME, policy)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="flowsteer solve", description="Solve one task with a director.")
    parser.add_argument("task", help="the task text (or @FILE to read it from a file)")
    parser.add_argument("--task-type", choices=["math", "code", "qa", "general"], default="general")
    parser.add_argument("--entry-point")
    parser.add_argument("--public-tests", help="visible tests (code tasks), or @FILE")
    parser.add_argument(
        "--director",
        type=_director_name,
        default="template",
        help="direct, template, template:NAME (a library workflow; see flowsteer eval --list-workflows) or policy",
    )
    parser.add_argument("--config", type=Path, help="executor config file (TOML/YAML)")
    parser.add_argument("--mcp-url", help="use a running flowsteer-mcp server instead of an in-process one")
    parser.add_argument("--policy-url", help="OpenAI-compatible base URL of the policy (policy director)")
    parser.add_argument("--policy-model", help="served model name of the policy")
    parser.add_argument("--max-rounds", type=int, default=20)
    parser.add_argument("--finish", choices=["paper", "relaxed"], default="paper")
    parser.add_argument("--thinking", choices=["on", "off", "unset"], default="unset")
    return parser


def _text(value: str | None) -> str | None:
    if value and value.startswith("@"):
        return Path(value[1:]).read_text(encoding="utf-8")
    return value


def print_episode(result: EpisodeResult) -> None:
    out = sys.stdout
    print(f"director: {result.director}", file=out)
    print(f"workflow: {result.dsl or '(none)'}", file=out)
    print(
        f"end: {result.end_reason or ('answered' if result.answer else 'no answer')}; turns: {result.turns}", file=out
    )
    if result.trace:
        print("trace of the final run:", file=out)
        for row in result.trace:
            verdict = "" if row.get("verdict") is None else (" pass" if row["verdict"] else " fail")
            state = "skipped" if row.get("skipped") else ("ok" if row.get("ok") else "FAILED")
            text = " ".join(str(row.get("error") or row.get("output") or "").split())[:80]
            print(f"  {row['node_id']:<12} {row['operator']:<12} {state}{verdict}  {text}", file=out)
    if result.error:
        print(f"error: {result.error}", file=out)
    print(f"executor LLM calls: {result.llm_calls}, tokens: {result.tokens}, wall: {result.wall_s:.1f} s", file=out)
    print("answer:", file=out)
    print(result.answer if result.answer is not None else "(none)", file=out)


async def solve(args: argparse.Namespace) -> EpisodeResult:
    from flowsteer_mcp.executor import build_executor
    from flowsteer_mcp.server import build_server
    from operators.registry import default_registry

    task = TaskSpec(
        problem=_text(args.task) or "",
        task_type=args.task_type,
        entry_point=args.entry_point,
        public_tests=_text(args.public_tests),
    )
    registry = default_registry()
    canvas_options = {"max_rounds": args.max_rounds, "finish": args.finish}
    director: Director
    if args.director == "direct":
        from flowsteer_mcp.director.direct import DirectDirector
        from operators.backends.factory import build_executor_backend

        director = DirectDirector(build_executor_backend(args.config))
    elif args.director == "template" or args.director.startswith("template:"):
        from flowsteer_mcp.director.template import TemplateDirector

        named = args.director.removeprefix("template").removeprefix(":")
        director = TemplateDirector(named or None)
    else:
        from flowsteer_mcp.director.policy import PolicyDirector

        if not args.policy_url or not args.policy_model:
            raise SystemExit("flowsteer solve: the policy director needs --policy-url and --policy-model")
        thinking = {"on": True, "off": False, "unset": None}[args.thinking]
        director = PolicyDirector.from_url(
            args.policy_url,
            args.policy_model,
            sampling=PolicySampling(enable_thinking=thinking),
            canvas_options=canvas_options,
        )
    connection: AbstractAsyncContextManager[Client]
    if args.mcp_url:
        connection = Client(args.mcp_url)
    else:
        executor = build_executor(registry, args.config)
        connection = Client(build_server(registry=registry, executor=executor).mcp)
    async with connection as client:
        return await director.run(task, client)


def solve_main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    result = anyio.run(solve, args)
    print_episode(result)
    return 0 if result.answer is not None else 1
