"""The `flowsteer` command: models, demo, serve, solve, eval, train, traces, view.

Each command hands its arguments to the module that owns it (`eval`: `training/evaluate/cli.py`). Logs go to
stderr; stdout carries only results (the Markdown report).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from flowsteer_mcp.logs import configure_logging

if TYPE_CHECKING:
    from flowsteer_mcp.director.card import ShippedDirector
    from flowsteer_mcp.director.served import ServedDirector, ServeMode

RUN_FAILED = 1  # the command ran but some of its work failed (e.g. episodes that did not run): no figures
USAGE_ERROR = 2


def _parser() -> argparse.ArgumentParser:
    """The top-level parser: the command list and its help (each command parses its own arguments)."""
    parser = argparse.ArgumentParser(
        prog="flowsteer", description="FlowSteer: models, demo, serve, solve, eval, train, traces, view."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("models", help="prepare or list local executor models (models prepare NAME | models list)")
    commands.add_parser("demo", help="one real episode on a local model")
    commands.add_parser("serve", help="run the MCP server (the options of flowsteer-mcp)")
    commands.add_parser("solve", help='run one episode: solve "TASK" --task-type ... --director ...')
    commands.add_parser("eval", help="evaluate directors on benchmark data (eval --help)")
    commands.add_parser(
        "train",
        help="CWRPO training: train --config configs/cpu-smoke.yaml [--resume]; warm start: train sft --config; "
        "did it learn: train trend RUN_DIR; what it would decide: train probe --config C --adapter DIR",
    )
    commands.add_parser(
        "traces",
        help="scripted Flow-Director transcripts for warm start: traces collect --data FILE --out DIR ...; traces summary DIR",
    )
    commands.add_parser("view", help="browse an evaluation or training run folder in a web browser: view RUN_DIR")
    return parser


# ------------------------------------------------------------------------------------- delegated commands


def _models(argv: list[str]) -> int:
    from operators.models import cli_prepare

    if not argv or argv[0] not in ("prepare", "list", "serve"):
        print(
            "usage: flowsteer models prepare NAME [--home DIR] [--force] [--verify] | flowsteer models list"
            " | flowsteer models serve NAME [--port N]",
            file=sys.stderr,
        )
        return USAGE_ERROR
    if argv[0] == "serve":
        from operators.models.serve import cli_serve

        return cli_serve(argv[1:])
    return cli_prepare(argv[1:] if argv[0] == "prepare" else ["list", *argv[1:]])


@asynccontextmanager
async def _serve_shipped_director(
    shipped: ShippedDirector, mode: ServeMode, *, executor_url: str | None = None
) -> AsyncIterator[ServedDirector]:
    """The shipped director's server, imported only when a command serves one: its vLLM launcher needs the
    training extra, which `flowsteer demo`, `solve` and `serve` do not otherwise need."""
    from training.serve_director import serve_shipped_director

    async with serve_shipped_director(shipped, mode, executor_url=executor_url) as served:
        yield served


def _serving_failed(error: BaseException) -> bool:
    """Whether `error` is the serving module's own error (it can be only if that module was imported)."""
    module = sys.modules.get("training.serve_director")
    return module is not None and isinstance(error, module.DirectorServingError)


def _demo(argv: list[str]) -> int:
    from flowsteer_mcp.demo import demo_main

    try:
        return demo_main(argv, serve_director=_serve_shipped_director)
    except Exception as error:
        if not _serving_failed(error):
            raise
        print(f"flowsteer demo: error: {error}", file=sys.stderr)
        return RUN_FAILED


def _serve(argv: list[str]) -> int:
    from flowsteer_mcp.cli import mcp_main

    return mcp_main(argv, serve_director=_serve_shipped_director)  # --serve-director serves the shipped director


def _solve(argv: list[str]) -> int:
    module_name = "flowsteer_mcp.director.solve"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name != module_name:
            raise
        print(f"flowsteer solve: not available in this build ({module_name} is missing)", file=sys.stderr)
        return USAGE_ERROR
    try:
        return int(module.solve_main(argv, serve_director=_serve_shipped_director))
    except Exception as error:
        if not _serving_failed(error):
            raise
        print(f"flowsteer solve: error: {error}", file=sys.stderr)
        return RUN_FAILED


def _train(argv: list[str]) -> int:
    if argv[:1] == ["sft"]:
        return _train_sft(argv[1:])
    if argv[:1] == ["trend"]:
        from training.train.cli import trend_main

        return trend_main(argv[1:])
    if argv[:1] == ["probe"]:
        from training.train.cli import probe_main

        return probe_main(argv[1:])
    from training.train.cli import train_main

    return train_main(argv)


def _train_sft(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="flowsteer train sft",
        description="Supervised warm start: LoRA fine-tuning of the policy on Flow-Director transcripts (the "
        "config's sft: section), loss on the action tokens only; reports the held-out valid-action share.",
    )
    parser.add_argument("--config", required=True, help="training config (YAML) with an sft: section")
    parser.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in sft.out_dir")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")
    parser.add_argument(
        "--check",
        action="store_true",
        help="read the config and transcripts, print each family's episodes, turns and mix share, and exit "
        "(non-zero when the mix names a family no transcript has)",
    )
    parser.add_argument("--log-level", default=os.environ.get("FLOWSTEER_LOG_LEVEL", "INFO"))
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    from operators.models.catalog import UnknownModelError
    from operators.models.errors import ModelPrepareError
    from training.errors import TrainingError
    from training.sft.trainer import SftRun
    from training.train.config import load_train_config

    if args.check:
        return _check_sft(args.config, args.overrides)
    try:
        summary = SftRun(load_train_config(args.config, args.overrides), resume=args.resume).run()
    except (TrainingError, ModelPrepareError, UnknownModelError, ValueError) as error:
        print(f"flowsteer train sft: error: {error}", file=sys.stderr)
        return USAGE_ERROR
    print(
        f"warm start steps {summary.first_step}..{summary.last_step}: loss {summary.final_loss}, held-out loss "
        f"{summary.heldout_loss}, valid-action share {summary.valid_action_share}, same-action share "
        f"{summary.same_action_share}; adapter: {summary.adapter}"
        + (f", merged model: {summary.merged}" if summary.merged else "")
    )
    return 0


def _check_sft(config_path: str, overrides: list[str]) -> int:
    from training.errors import TrainingError
    from training.sft.check import sft_plan
    from training.train.config import load_train_config

    try:
        plan = sft_plan(load_train_config(config_path, overrides))
    except (TrainingError, ValueError, OSError) as error:
        print(f"flowsteer train sft: error: {error}", file=sys.stderr)
        return USAGE_ERROR
    print(plan.render())
    if plan.absent:
        print("flowsteer train sft: error: fix sft.mix's family names (task type/workflow)", file=sys.stderr)
        return USAGE_ERROR
    return 0


def _traces(argv: list[str]) -> int:
    from training.traces.collect import traces_main

    return traces_main(argv)


def _view_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="flowsteer view",
        description="Serve a read-only web browser over a run folder: an evaluation (items.jsonl, report.json) "
        "or a training run (metrics.jsonl, plots).",
    )
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="the run folder (e.g. an eval --out folder)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on; beyond loopback a token is required")
    parser.add_argument("--port", type=int, default=8766, help="port (default 8766)")
    parser.add_argument(
        "--token-env",
        default="FLOWSTEER_MCP_TOKEN",
        metavar="NAME",
        help="environment variable holding the viewer's token (default FLOWSTEER_MCP_TOKEN; unset: no token)",
    )
    return parser


def _view(argv: list[str]) -> int:
    from flowsteer_mcp.api import UnsafeBindError, check_bind, token_problem
    from flowsteer_mcp.viewer.episodes import RUN_FILES, RunFolder, serve_episodes

    args = _view_parser().parse_args(argv)
    if not RunFolder(args.run_dir).is_run():
        print(
            f"flowsteer view: error: {args.run_dir} is not a run folder: it holds none of {', '.join(RUN_FILES)} "
            "(give the --out folder of `flowsteer eval` or the run.out_dir of `flowsteer train`)",
            file=sys.stderr,
        )
        return USAGE_ERROR
    token = os.environ.get(args.token_env)
    if token is not None and (problem := token_problem(token)):
        print(f"flowsteer view: error: {args.token_env} {problem}", file=sys.stderr)
        return USAGE_ERROR
    try:
        check_bind(args.host, authenticated=token is not None)
    except UnsafeBindError as error:
        print(f"flowsteer view: error: {error}", file=sys.stderr)
        return USAGE_ERROR
    print(f"episodes: http://{args.host}:{args.port}/", flush=True)
    if token is not None:
        print(f"sign in once: open http://{args.host}:{args.port}/#token=<the token in {args.token_env}>", flush=True)
    anyio.run(lambda: serve_episodes(args.run_dir, host=args.host, port=args.port, token=token))
    return 0


def _eval(argv: list[str]) -> int:
    from training.evaluate.cli import eval_main

    return eval_main(argv)


_DELEGATED: dict[str, Callable[[list[str]], int]] = {
    "models": _models,
    "eval": _eval,
    "demo": _demo,
    "serve": _serve,
    "solve": _solve,
    "train": _train,
    "traces": _traces,
    "view": _view,
}


# ---------------------------------------------------------------------------------------------------- main


def _exit_code(exit_: SystemExit) -> int:
    """SystemExit's code as an int: None is success, a message (str) is a failure."""
    if exit_.code is None:
        return 0
    return exit_.code if isinstance(exit_.code, int) else USAGE_ERROR


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in _DELEGATED:
        configure_logging(os.environ.get("FLOWSTEER_LOG_LEVEL", "WARNING"))
        try:
            return _DELEGATED[argv[0]](argv[1:])
        except SystemExit as exit_:  # a delegate's argparse: --help (0) or a usage error (2)
            return _exit_code(exit_)
    try:
        _parser().parse_args(argv)  # no command, --help, or an unknown one: argparse says so and exits
    except SystemExit as exit_:
        return _exit_code(exit_)
    return USAGE_ERROR  # unreachable: every command is delegated


if __name__ == "__main__":
    raise SystemExit(main())
