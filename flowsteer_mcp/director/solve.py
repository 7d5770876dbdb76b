"""`flowsteer solve "TASK"`: one episode with a chosen director; prints the workflow, its trace and the answer.

`--director policy` without `--policy-url/--policy-model` plays the Flow-Director that ships with the install
(flowsteer_mcp/director/card.py), served for this one episode by the `DirectorServing` function the caller
passes (`flowsteer` passes the training layer's server launcher, which this package cannot import).
"""

from __future__ import annotations

import argparse
import sys
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass
from pathlib import Path

import anyio
from mcp import Client
from openai import AsyncOpenAI

from flowsteer_mcp.canvas.options import TaskSpec
from flowsteer_mcp.director.card import DirectorCardError, ShippedDirector, shipped_director
from flowsteer_mcp.director.episode import Director, EpisodeResult
from flowsteer_mcp.director.generation import PolicySampling
from flowsteer_mcp.director.served import SERVE_MODES_WITH_EXECUTOR, DirectorServing, ServedDirector, ServeMode


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


@dataclass(frozen=True)
class ShippedPlay:
    """The shipped director and the context that serves it while an episode plays."""

    director: ShippedDirector
    serving: AbstractAsyncContextManager[ServedDirector]


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
    parser.add_argument(
        "--policy-serve",
        choices=SERVE_MODES_WITH_EXECUTOR,
        help="without --policy-url: serve the shipped director with vLLM, the local transformers server, "
        "whichever is available (auto, the default), or on the executor's own vLLM server (executor: --config "
        "names an openai executor with one base_url, serving the director's base model)",
    )
    # The shipped director plays the game on its card (docs/design/shipped-director.md); these three set the game
    # of a policy given by --policy-url.
    parser.add_argument("--max-rounds", type=int, default=20, help="round budget of a --policy-url policy")
    parser.add_argument("--finish", choices=["paper", "relaxed"], default="paper", help="finish gate (--policy-url)")
    parser.add_argument("--thinking", choices=["on", "off", "unset"], default="unset", help="(--policy-url)")
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


async def solve(args: argparse.Namespace, shipped: ShippedPlay | None = None) -> EpisodeResult:
    """One episode; `shipped` serves the shipped director while it plays (policy without --policy-url)."""
    from flowsteer_mcp.runner_choice import build_runner
    from flowsteer_mcp.server import build_server
    from operators.registry import default_registry

    task = TaskSpec(
        problem=_text(args.task) or "",
        task_type=args.task_type,
        entry_point=args.entry_point,
        public_tests=_text(args.public_tests),
    )
    registry = default_registry()
    async with AsyncExitStack() as stack:  # holds the shipped director's server, if one is started
        director = await _director(args, stack, shipped)
        connection: AbstractAsyncContextManager[Client]
        if args.mcp_url:
            connection = Client(args.mcp_url)
        else:
            runner = build_runner(registry, args.config)
            connection = Client(build_server(registry=registry, runner=runner).mcp)
        async with connection as client:
            return await director.run(task, client)


async def _director(args: argparse.Namespace, stack: AsyncExitStack, shipped: ShippedPlay | None) -> Director:
    if args.director == "direct":
        from flowsteer_mcp.director.direct import DirectDirector
        from operators.backends.factory import build_executor_backend

        return DirectDirector(build_executor_backend(args.config))
    if args.director == "template" or args.director.startswith("template:"):
        from flowsteer_mcp.director.template import TemplateDirector

        named = args.director.removeprefix("template").removeprefix(":")
        return TemplateDirector(named or None)
    from flowsteer_mcp.director.policy import PolicyDirector

    url, model = args.policy_url, args.policy_model
    if not url:
        if shipped is None:
            raise ValueError("the policy director needs --policy-url/--policy-model or a shipped director to serve")
        served = await stack.enter_async_context(shipped.serving)
        shared = f"; base model {served.base_model!r} at the same url" if served.base_model else ""
        print(
            f"policy: shipped director served by {served.via} at {served.url} as {served.model!r}{shared}",
            file=sys.stderr,
        )
        # it plays the game it was trained on (its card's play settings), not this command's defaults
        client = AsyncOpenAI(base_url=served.url, api_key="not-needed", max_retries=2)
        stack.push_async_callback(client.close)
        return shipped.director.director(client, served.model)
    thinking = {"on": True, "off": False, "unset": None}[args.thinking]
    return PolicyDirector.from_url(
        url,
        model,
        sampling=PolicySampling(enable_thinking=thinking),
        canvas_options={"max_rounds": args.max_rounds, "finish": args.finish},
    )


def _check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if bool(args.policy_url) != bool(args.policy_model):
        parser.error("--policy-url and --policy-model go together (leave both out to use the shipped director)")
    if args.policy_serve and args.policy_url:
        parser.error("--policy-serve serves the shipped director; it cannot be combined with --policy-url")
    if args.director != "policy" and args.policy_serve:
        parser.error("--policy-serve is only used with --director policy")


def solve_main(argv: list[str], serve_director: DirectorServing | None = None) -> int:
    """`serve_director` serves the shipped director when `--director policy` comes without `--policy-url`."""
    from operators.backends.config import ConfigError, single_server_url

    parser = _parser()
    args = parser.parse_args(argv)
    _check_arguments(parser, args)
    try:
        # reading the executor's config refuses a bad one before anything starts; its one server (None: there
        # is none, and serving says what it needs) is where `--policy-serve executor` loads the director
        executor_server = single_server_url(args.config)
    except ConfigError as error:
        print(f"flowsteer solve: error: {error}", file=sys.stderr)
        return 2
    shipped = None
    if args.director == "policy" and not args.policy_url:
        try:
            director = shipped_director()
        except DirectorCardError as error:
            print(f"flowsteer solve: error: {error}", file=sys.stderr)
            return 2
        if serve_director is None:
            print(
                "flowsteer solve: error: this entry point cannot serve the shipped director; run `flowsteer solve` "
                "or pass --policy-url/--policy-model",
                file=sys.stderr,
            )
            return 2
        print(
            f"policy: the shipped director {director.card.name!r} (LoRA on {director.card.base_model})", file=sys.stderr
        )
        mode: ServeMode = args.policy_serve or "auto"
        executor_url = executor_server if mode == "executor" else None
        shipped = ShippedPlay(director, serve_director(director, mode, executor_url=executor_url))
    result = anyio.run(solve, args, shipped)
    print_episode(result)
    return 0 if result.answer is not None else 1
