"""The `flowsteer` command: models, demo, serve, solve, eval, train, traces, view.

`models`, `demo`, `serve`, `solve`, `traces` and `view` hand their arguments to the module that owns them; `eval`
runs the evaluation harness (`training.evaluate`). Logs go to stderr; stdout carries only results (the Markdown
report).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import os
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from flowsteer_mcp.logs import configure_logging

if TYPE_CHECKING:
    from collections.abc import Sequence

    from flowsteer_mcp.director.card import ShippedDirector
    from flowsteer_mcp.director.episode import Director
    from flowsteer_mcp.director.served import ServedDirector, ServeMode
    from flowsteer_mcp.server.app import FlowSteerServer
    from operators.backends.base import ChatBackend
    from training.data import Problem
    from training.serve_director import ShippedPolicy

RUN_FAILED = 1  # the command ran but some of its work failed (e.g. episodes that did not run): no figures
USAGE_ERROR = 2


def _whole_number_from(minimum: int) -> Callable[[str], int]:
    """An argparse type for whole numbers of at least `minimum`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


_positive_int = _whole_number_from(1)
_non_negative_int = _whole_number_from(0)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def _source_list(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise argparse.ArgumentTypeError("expected comma-separated source names, e.g. gsm8k,mbpp")
    return names


def _director_name(text: str) -> str:
    from training.evaluate.directors import check_director_name

    try:
        return check_director_name(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


class _ListWorkflows(argparse.Action):
    """`--list-workflows`: print the library and exit at once, like --help (no other argument needed)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=str(kwargs.get("help", "")))

    def __call__(self, parser: argparse.ArgumentParser, *_: object, **__: object) -> None:
        from flowsteer_mcp.director.library import library_listing

        print(library_listing())
        parser.exit()


def _add_eval_arguments(parser: argparse.ArgumentParser) -> None:
    from training.evaluate.directors import DIRECTOR_NAMES

    data = parser.add_argument_group("problems")
    data.add_argument(
        "--data",
        action="append",
        type=Path,
        required=True,
        metavar="FILE_OR_DIR",
        help="JSONL file or folder (repeatable)",
    )
    data.add_argument("--limit", type=_positive_int, help="at most N problems per source")
    data.add_argument(
        "--skip",
        type=_non_negative_int,
        default=0,
        metavar="N",
        help="leave out each source's first N problems, e.g. --skip 100 to screen on the training problems "
        "(the trainer's data.skip_per_source) and keep the dev slices unseen",
    )
    data.add_argument("--sources", type=_source_list, metavar="A,B", help="keep only these sources, e.g. gsm8k,mbpp")

    who = parser.add_argument_group("directors")
    who.add_argument(
        "--director",
        action="append",
        type=_director_name,
        metavar="NAME",
        help=f"who drives the canvas: {', '.join(DIRECTOR_NAMES)}, or template:NAME for a library workflow "
        "(see --list-workflows); repeat to compare several side by side",
    )
    who.add_argument(
        "--workflow",
        action="append",
        type=Path,
        metavar="FILE",
        help="also evaluate the workflow in FILE (export_workflow JSON), reported as workflow:STEM; repeatable",
    )
    who.add_argument(
        "--list-workflows", action=_ListWorkflows, help="print the workflow library (template:NAME) and exit"
    )
    who.add_argument(
        "--policy-url",
        action="append",
        metavar="URL",
        help="OpenAI-compatible endpoint of the policy (e.g. http://127.0.0.1:8000/v1); repeat for replicas serving "
        "the same model (least in flight, one episode per replica)",
    )
    who.add_argument("--policy-model", help="model name served at --policy-url")
    who.add_argument("--policy-api-key-env", metavar="VAR", help="environment variable holding the policy's API key")
    who.add_argument(
        "--policy-reask-tokens",
        type=_positive_int,
        metavar="N",
        help="token budget of the policy's one re-ask when a turn has no action (default 128)",
    )

    who.add_argument(
        "--policy-config",
        type=Path,
        metavar="TRAIN.yaml",
        help="play the policy as its training rollouts did: that config's sampling, canvas options, re-ask and "
        "observation template (default: the director's own defaults)",
    )
    who.add_argument(
        "--policy-temperature",
        type=_non_negative_float,
        metavar="T",
        help="the policy's sampling temperature instead of --policy-config's (e.g. 0: its most likely workflow)",
    )
    who.add_argument(
        "--policy-serve",
        choices=("auto", "vllm", "local"),
        help="without --policy-url: how to serve the Flow-Director that ships with this install: vLLM, the local "
        "transformers server, or whichever is available (auto, the default)",
    )

    run = parser.add_argument_group("execution")
    run.add_argument("--config", type=Path, help="executor config file (TOML/YAML); default: $FLOWSTEER_CONFIG")
    run.add_argument(
        "--mcp-url",
        action="append",
        metavar="URL",
        help="use a running FlowSteer MCP server (streamable HTTP) instead of an in-process one; repeat to spread "
        "the episodes over several servers (least busy first, one episode per server)",
    )
    run.add_argument(
        "--mcp-token-env", metavar="VAR", help="environment variable holding the --mcp-url server's bearer token"
    )
    run.add_argument("--concurrency", type=_positive_int, default=4, help="episodes at once (default 4)")
    run.add_argument("--episode-timeout", type=_positive_float, metavar="SECONDS", help="wall limit per episode")
    run.add_argument("--seed", type=int, help="sampling seed passed to the executor and the policy")
    replay = run.add_mutually_exclusive_group()
    replay.add_argument("--record", type=Path, metavar="FILE", help="record every LLM request/response to JSONL")
    replay.add_argument("--replay", type=Path, metavar="FILE", help="answer every LLM request from a recording")

    out = parser.add_argument_group("output")
    out.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="report folder (default: flowsteer-eval/<UTC time>); items.jsonl there grows as episodes finish",
    )
    out.add_argument(
        "--resume",
        action="store_true",
        help="continue the interrupted run in --out: reuse its graded episodes, run the rest",
    )
    out.add_argument("--no-progress", action="store_true", help="no progress bar")
    out.add_argument("--log-level", default=os.environ.get("FLOWSTEER_LOG_LEVEL", "WARNING"))


def _parsers() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """The top-level parser and its `eval` sub-parser (kept for the cross-argument checks)."""
    parser = argparse.ArgumentParser(
        prog="flowsteer", description="FlowSteer: models, demo, serve, solve, eval, train, traces, view."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("models", help="prepare or list local executor models (models prepare NAME | models list)")
    commands.add_parser("demo", help="one real episode on a local model")
    commands.add_parser("serve", help="run the MCP server (the options of flowsteer-mcp)")
    commands.add_parser("solve", help='run one episode: solve "TASK" --task-type ... --director ...')
    eval_parser = commands.add_parser(
        "eval",
        help="evaluate directors on benchmark data",
        description="Run directors over benchmark problems concurrently; write report.json and report.md "
        "(one table per dataset) and print the Markdown.",
    )
    _add_eval_arguments(eval_parser)
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
    return parser, eval_parser


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
async def _serve_shipped_director(shipped: ShippedDirector, mode: ServeMode) -> AsyncIterator[ServedDirector]:
    """The shipped director's server, imported only when a command serves one: its vLLM launcher needs the
    training extra, which `flowsteer demo`, `solve` and `serve` do not otherwise need."""
    from training.serve_director import serve_shipped_director

    async with serve_shipped_director(shipped, mode) as served:
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
    parser.add_argument("--log-level", default=os.environ.get("FLOWSTEER_LOG_LEVEL", "INFO"))
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    from operators.models.catalog import UnknownModelError
    from operators.models.errors import ModelPrepareError
    from training.errors import TrainingError
    from training.sft.trainer import SftRun
    from training.train.config import load_train_config

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
    from flowsteer_mcp.server.auth import token_problem
    from flowsteer_mcp.server.host_policy import UnsafeBindError, check_bind
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


_DELEGATED: dict[str, Callable[[list[str]], int]] = {
    "models": _models,
    "demo": _demo,
    "serve": _serve,
    "solve": _solve,
    "train": _train,
    "traces": _traces,
    "view": _view,
}


# ---------------------------------------------------------------------------------------------------- eval


def _check_eval_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Cross-argument rules argparse cannot express; each failure exits with code 2 and says what to change."""
    names: list[str] = args.director or []
    stems = [path.stem for path in args.workflow or []]
    if not names and not stems:
        parser.error("give at least one --director or --workflow")
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        parser.error(f"--director {', '.join(repeated)} given more than once")
    repeated = sorted({stem for stem in stems if stems.count(stem) > 1})
    if repeated:
        parser.error(f"--workflow files named {', '.join(repeated)} given more than once (reports name them by stem)")
    uses_policy = "policy" in names
    if uses_policy and args.replay is None and bool(args.policy_url) != bool(args.policy_model):
        parser.error("--policy-url and --policy-model go together (leave both out to use the shipped director)")
    if args.policy_serve and (args.policy_url or args.replay):
        parser.error("--policy-serve serves the shipped director; drop it with --policy-url or --replay")
    if not uses_policy and (
        args.policy_url
        or args.policy_model
        or args.policy_api_key_env
        or args.policy_reask_tokens
        or args.policy_config
        or args.policy_temperature is not None
        or args.policy_serve
    ):
        parser.error(
            "--policy-url/--policy-model/--policy-api-key-env/--policy-reask-tokens/--policy-config/"
            "--policy-temperature/--policy-serve are only used with --director policy"
        )
    if args.policy_temperature is not None and args.policy_config is None:
        parser.error("--policy-temperature needs --policy-config (the rollout settings it overrides)")
    if args.mcp_url and (args.record or args.replay):
        parser.error(
            "--record/--replay need the in-process server (the remote server's executor is not ours); drop --mcp-url"
        )
    if args.mcp_token_env and not args.mcp_url:
        parser.error("--mcp-token-env is only used with --mcp-url")
    if args.mcp_token_env and not os.environ.get(args.mcp_token_env):
        parser.error(f"environment variable {args.mcp_token_env} (--mcp-token-env) is not set or empty")
    for option, urls in (("--mcp-url", args.mcp_url or []), ("--policy-url", args.policy_url or [])):
        for url in urls:
            if not url.startswith(("http://", "https://")):
                parser.error(f"{option} must be an http(s) URL, got {url!r}")
        cleaned = [url.rstrip("/") for url in urls]
        repeated = sorted({url for url in cleaned if cleaned.count(url) > 1})
        if repeated:
            parser.error(f"{option} {', '.join(repeated)} given more than once")
    if args.resume and args.out is None:
        parser.error("--resume needs --out, the folder of the run to continue")


def _load_problems(args: argparse.Namespace) -> list[Problem]:
    from training.data import load_inputs

    problems = load_inputs(args.data, limit=args.limit, sources=args.sources, skip=args.skip)
    if not problems:
        wanted = f" with sources {', '.join(args.sources)}" if args.sources else ""
        raise ValueError(f"no problems found in {', '.join(map(str, args.data))}{wanted}")
    return problems


async def _close_eval_resources(
    directors: Sequence[Director], backend: ChatBackend | None, server: FlowSteerServer | None
) -> None:
    """Close what an eval run opened (policy clients, the executor backend, the in-process server)."""
    for director in directors:
        closer = getattr(getattr(director, "client", None), "close", None)
        if closer is not None:
            await closer()
    if backend is not None:
        await backend.aclose()
    if server is not None:
        await server.aclose()


def _serves_shipped(args: argparse.Namespace) -> bool:
    """The policy director runs, and neither a server (--policy-url) nor a recording (--replay) answers it."""
    return "policy" in (args.director or []) and args.replay is None and not args.policy_url


def _executor_urls(args: argparse.Namespace) -> list[str]:
    """The openai executor's endpoints (its replicas), as logs show them; none for a local or scripted one."""
    from operators.backends.config import OpenAIModelConfig, load_executor_config
    from operators.backends.openai_compat import display_url

    config = load_executor_config(args.config).config
    return [display_url(url) for url in config.endpoints] if isinstance(config, OpenAIModelConfig) else []


async def _fleet_weights(urls: Sequence[str], model: str, key: str | None) -> str | None:
    """What the policy's replicas serve as `model`: the same weights on each, else `PolicyServerError` (one
    table must not mix two policies). An unreachable replica is left out; None when none could be asked."""
    from training.evaluate.policy_weights import PolicyServerError, served_weights

    answers = {url: await served_weights(url, model, api_key=key) for url in urls}
    known = {url: weights for url, weights in answers.items() if weights is not None}
    if len(set(known.values())) > 1:
        listing = "; ".join(f"{url}: {weights}" for url, weights in known.items())
        raise PolicyServerError(f"the --policy-url replicas serve different weights as {model!r} ({listing})")
    return next(iter(known.values()), None)


async def _run_eval(args: argparse.Namespace) -> int:
    """The evaluation; with the shipped director, served around it (docs/design/shipped-director.md)."""
    if not _serves_shipped(args):
        return await _evaluate(args, None)
    from flowsteer_mcp.director.card import DirectorCardError, shipped_director
    from training.serve_director import DirectorServingError, ShippedPolicy, serve_shipped_director

    try:
        shipped = shipped_director()
    except DirectorCardError as error:
        print(f"flowsteer eval: error: {error}", file=sys.stderr)
        return USAGE_ERROR
    try:
        async with serve_shipped_director(shipped, args.policy_serve or "auto") as served:
            print(f"policy: shipped director {shipped.card.name!r} ({served.via}, {served.url})", file=sys.stderr)
            return await _evaluate(args, ShippedPolicy(shipped, served))
    except DirectorServingError as error:
        print(f"flowsteer eval: error: {error}", file=sys.stderr)
        return RUN_FAILED


async def _evaluate(args: argparse.Namespace, shipped: ShippedPolicy | None) -> int:
    from flowsteer_mcp.canvas.observation import ObservationBuilder
    from flowsteer_mcp.executor import engine_with
    from flowsteer_mcp.server import ServerSettings, build_server
    from operators.backends.config import ConfigError, EngineConfig, load_config
    from operators.registry import default_registry
    from training.data import DatasetError
    from training.evaluate.clients import in_process_clients, remote_clients
    from training.evaluate.directors import PolicyEndpoint, build_director, build_workflow_director
    from training.evaluate.journal import ItemJournal, JournalError
    from training.evaluate.policy_play import policy_play
    from training.evaluate.policy_weights import PolicyServerError
    from training.evaluate.recording import executor_backend, start_recording
    from training.evaluate.report import markdown_report, write_report
    from training.evaluate.results import EvalConfig
    from training.evaluate.run_failures import run_failure_message, run_failures
    from training.evaluate.runner import MakeClient, evaluate

    names: list[str] = args.director or []
    try:
        problems = _load_problems(args)
        if args.record is not None:
            start_recording(args.record)
        needs_executor = "direct" in names or args.mcp_url is None
        backend = (
            executor_backend(args.config, seed=args.seed, record=args.record, replay=args.replay)
            if needs_executor
            else None
        )
        play = policy_play(args.policy_config, temperature=args.policy_temperature) if args.policy_config else None
        if play is not None and play.system_template and args.mcp_url:
            raise ValueError(
                f"{args.policy_config} sets rollout.system_template, which only the in-process server can use; "
                "drop --mcp-url or start that server with the same template"
            )
        policy_urls: list[str] = args.policy_url or []
        policy = PolicyEndpoint(
            url=shipped.served.url if shipped else (policy_urls[0] if policy_urls else None),
            urls=[] if shipped else policy_urls,
            model=shipped.served.model if shipped else args.policy_model,
            api_key_env=args.policy_api_key_env,
            seed=args.seed,
            record=args.record,
            replay=args.replay,
            reask_max_tokens=args.policy_reask_tokens,
            play=play,
        )
        directors = [build_director(name, executor_backend=backend, policy=policy) for name in names]
        directors += [build_workflow_director(path) for path in args.workflow or []]
        engine_settings = load_config(args.config).engine if needs_executor and not args.replay else EngineConfig()
        executor_urls = _executor_urls(args) if needs_executor and not args.replay else []
        names = [director.name for director in directors]
    except (ConfigError, DatasetError, OSError, ValueError) as error:
        print(f"flowsteer eval: error: {error}", file=sys.stderr)
        return USAGE_ERROR

    policy_weights = None
    if shipped is not None:
        policy_weights = await anyio.to_thread.run_sync(shipped.director.identity)
    elif "policy" in names and args.replay is None:
        key = os.environ.get(args.policy_api_key_env) if args.policy_api_key_env else None
        try:
            policy_weights = await _fleet_weights(args.policy_url, args.policy_model, key)
        except PolicyServerError as error:
            await _close_eval_resources(directors, backend, None)
            print(f"flowsteer eval: error: {error}", file=sys.stderr)
            return USAGE_ERROR

    server = None
    make_client: MakeClient
    if args.mcp_url:
        token = os.environ.get(args.mcp_token_env) if args.mcp_token_env else None
        make_client = remote_clients(args.mcp_url, token)
    else:
        assert backend is not None
        registry = default_registry()
        template = play.system_template if play is not None else None
        observer = ObservationBuilder.from_file(Path(template)) if template else ObservationBuilder.default()
        server = build_server(
            ServerSettings(),
            registry=registry,
            executor=engine_with(registry, backend, engine_settings),
            observer=observer,
        )
        make_client = in_process_clients(server.mcp)

    config = EvalConfig(
        directors=names,
        workflows=[str(path) for path in args.workflow or []],
        workflow_digests={
            f"workflow:{path.stem}": hashlib.sha256(path.read_bytes()).hexdigest() for path in args.workflow or []
        },
        concurrency=args.concurrency,
        data=[str(path) for path in args.data],
        limit=args.limit,
        skip=args.skip,
        sources=args.sources,
        seed=args.seed,
        executor=f"{type(backend).__name__}:{backend.model}" if backend is not None else None,
        engine=engine_settings.model_dump(mode="json") if server is not None else None,
        mcp_url=args.mcp_url[0] if args.mcp_url else None,
        mcp_urls=list(args.mcp_url or []),
        # the shipped director's loopback url changes every run; its name and weights identify it
        policy_url=f"shipped:{shipped.director.card.name}" if shipped else (policy_urls[0] if policy_urls else None),
        policy_urls=[] if shipped else policy_urls,
        executor_urls=executor_urls,
        policy_model=shipped.served.model if shipped else args.policy_model,
        policy_weights=policy_weights,
        policy_play=play.identity() if play is not None else None,
        record=str(args.record) if args.record else None,
        replay=str(args.replay) if args.replay else None,
        episode_timeout_s=args.episode_timeout,
    )
    out = args.out or Path("flowsteer-eval") / datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    try:
        journal, done = ItemJournal.open(out, config, resume=args.resume)
    except (JournalError, OSError) as error:
        await _close_eval_resources(directors, backend, server)
        print(f"flowsteer eval: error: {error}", file=sys.stderr)
        return USAGE_ERROR
    try:
        report = await evaluate(
            problems,
            directors,
            make_client=make_client,
            concurrency=args.concurrency,
            progress=not args.no_progress,
            episode_timeout_s=args.episode_timeout,
            config=config,
            done=done,
            on_item=journal.append,
        )
    finally:
        journal.close()
        await _close_eval_resources(directors, backend, server)

    failures = run_failures(report.items)
    if failures:
        print(run_failure_message(failures, len(report.items), journal.path), file=sys.stderr)
        return RUN_FAILED
    json_path, markdown_path = write_report(report, out)
    print(markdown_report(report), end="")
    print(f"report: {json_path} and {markdown_path}", file=sys.stderr)
    return 0


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
    parser, eval_parser = _parsers()
    try:
        args = parser.parse_args(argv)
        if args.command == "eval":
            _check_eval_arguments(eval_parser, args)
    except SystemExit as exit_:  # argparse: --help (0) or a usage error (2, message already on stderr)
        return _exit_code(exit_)
    configure_logging(args.log_level)
    return anyio.run(_run_eval, args)


if __name__ == "__main__":
    raise SystemExit(main())
