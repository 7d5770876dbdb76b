"""`flowsteer eval`: its arguments, their cross-checks, and the run (docs/design/evaluation.md).

The harness itself is `training.evaluate`; this module turns a command line into problems, directors, an
executor and a canvas, runs them through `evaluate` with a journal, and prints the report. Exit codes: 0 with
the report, `RUN_FAILED` when episodes did not run (no figures are printed then), `USAGE_ERROR` on bad input.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, get_args

import anyio

from flowsteer_mcp.director.served import ServeMode
from flowsteer_mcp.logs import configure_logging

if TYPE_CHECKING:
    from flowsteer_mcp.api import FlowSteerServer
    from flowsteer_mcp.director.episode import Director
    from flowsteer_mcp.engine.memo_store import MemoStore
    from operators.backends.base import ChatBackend
    from operators.backends.config import EngineConfig
    from training.data import Problem
    from training.evaluate.policy_play import PolicyPlay
    from training.evaluate.results import EvalConfig
    from training.evaluate.runner import MakeClient
    from training.serve_director import ShippedPolicy

RUN_FAILED = 1  # the command ran but some of its work failed (e.g. episodes that did not run): no figures
USAGE_ERROR = 2
MEMO_FILE_NAME = "memo.sqlite"  # the run's shared draws, beside its journal (`_shared_draws`)


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


def add_eval_arguments(parser: argparse.ArgumentParser) -> None:
    """Every `flowsteer eval` option, in its help group."""
    _add_problem_arguments(parser.add_argument_group("problems"))
    _add_director_arguments(parser.add_argument_group("directors"))
    _add_execution_arguments(parser.add_argument_group("execution"))
    _add_output_arguments(parser.add_argument_group("output"))


def _add_problem_arguments(data: argparse._ArgumentGroup) -> None:
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


def _add_director_arguments(who: argparse._ArgumentGroup) -> None:
    from training.evaluate.directors import DIRECTOR_NAMES

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
        "observation template (default: the shipped director's card, else the director's own defaults)",
    )
    who.add_argument(
        "--policy-temperature",
        type=_non_negative_float,
        metavar="T",
        help="the policy's sampling temperature instead of --policy-config's or the card's (e.g. 0: its most "
        "likely workflow)",
    )
    who.add_argument(
        "--policy-serve",
        choices=get_args(ServeMode),
        help="without --policy-url: how to serve the Flow-Director that ships with this install: vLLM, the local "
        "transformers server, or whichever is available (auto, the default); executor: load it onto the executor's "
        "own vLLM server (one server for both when the director's base model is the executor's)",
    )


def _add_execution_arguments(run: argparse._ArgumentGroup) -> None:
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


def _add_output_arguments(out: argparse._ArgumentGroup) -> None:
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


def check_eval_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
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
    if args.policy_temperature is not None and args.policy_config is None and (args.policy_url or args.replay):
        parser.error(
            "--policy-temperature needs --policy-config or the shipped director's card (the rollout settings it "
            "overrides)"
        )
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
    from operators.backends.config import single_server_url
    from training.serve_director import DirectorServingError, ShippedPolicy, serve_shipped_director

    try:
        shipped = shipped_director()
    except DirectorCardError as error:
        print(f"flowsteer eval: error: {error}", file=sys.stderr)
        return USAGE_ERROR
    try:
        mode: ServeMode = args.policy_serve or "auto"
        executor_url = single_server_url(args.config) if mode == "executor" else None
        async with serve_shipped_director(shipped, mode, executor_url=executor_url) as served:
            print(f"policy: shipped director {shipped.card.name!r} ({served.via}, {served.url})", file=sys.stderr)
            return await _evaluate(args, ShippedPolicy(shipped, served))
    except DirectorServingError as error:
        print(f"flowsteer eval: error: {error}", file=sys.stderr)
        return RUN_FAILED


@dataclass
class _Run:
    """What an evaluation is made of, from its arguments: problems, directors and the executor they share."""

    problems: list[Problem]
    directors: list[Director]
    backend: ChatBackend | None
    engine: EngineConfig
    executor_urls: list[str]
    play: PolicyPlay | None
    policy_urls: list[str]


def _prepare(args: argparse.Namespace, shipped: ShippedPolicy | None) -> _Run:
    """Load the problems and build the directors and the executor; raises on bad input (nothing is running)."""
    from operators.backends.config import EngineConfig, load_config
    from training.evaluate.directors import PolicyEndpoint, build_director, build_workflow_director
    from training.evaluate.policy_play import policy_play, shipped_play
    from training.evaluate.recording import executor_backend, start_recording

    names: list[str] = args.director or []
    problems = _load_problems(args)
    if args.record is not None:
        start_recording(args.record)
    needs_executor = "direct" in names or args.mcp_url is None
    backend = (
        executor_backend(args.config, seed=args.seed, record=args.record, replay=args.replay)
        if needs_executor
        else None
    )
    play = None
    if args.policy_config:
        play = policy_play(args.policy_config, temperature=args.policy_temperature)
    elif shipped is not None:  # the shipped director plays the game on its card
        play = shipped_play(shipped.director, temperature=args.policy_temperature)
    if play is not None and play.system_template and args.mcp_url:
        raise ValueError(
            f"the policy plays on its own observation template ({play.source}), which only the in-process server "
            "can use; drop --mcp-url or start that server with the same template"
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
    own_engine = needs_executor and not args.replay
    return _Run(
        problems=problems,
        directors=directors,
        backend=backend,
        engine=load_config(args.config).engine if own_engine else EngineConfig(),
        executor_urls=_executor_urls(args) if own_engine else [],
        play=play,
        policy_urls=policy_urls,
    )


async def _policy_weights(args: argparse.Namespace, run: _Run, shipped: ShippedPolicy | None) -> str | None:
    """What the policy director's server serves (one table must not mix two policies); None without one."""
    if shipped is not None:
        return await anyio.to_thread.run_sync(shipped.director.identity)
    if "policy" in [director.name for director in run.directors] and args.replay is None:
        key = os.environ.get(args.policy_api_key_env) if args.policy_api_key_env else None
        return await _fleet_weights(args.policy_url, args.policy_model, key)
    return None


def _canvas(
    args: argparse.Namespace, run: _Run, memo_store: MemoStore | None
) -> tuple[MakeClient, FlowSteerServer | None]:
    """The MCP clients the episodes use: the remote fleet, or an in-process server on the run's executor."""
    from flowsteer_mcp.api import in_process_server
    from training.evaluate.clients import in_process_clients, remote_clients

    if args.mcp_url:
        token = os.environ.get(args.mcp_token_env) if args.mcp_token_env else None
        return remote_clients(args.mcp_url, token), None
    assert run.backend is not None
    template = run.play.system_template if run.play is not None else None
    server = in_process_server(run.backend, run.engine, template=template, memo_store=memo_store)
    return in_process_clients(server.mcp), server


def _eval_config(
    args: argparse.Namespace, run: _Run, shipped: ShippedPolicy | None, weights: str | None, in_process: bool
) -> EvalConfig:
    """What the results depend on, as the journal and the report record it."""
    from training.evaluate.results import EvalConfig

    workflows = args.workflow or []
    backend = run.backend
    return EvalConfig(
        directors=[director.name for director in run.directors],
        workflows=[str(path) for path in workflows],
        workflow_digests={f"workflow:{p.stem}": hashlib.sha256(p.read_bytes()).hexdigest() for p in workflows},
        concurrency=args.concurrency,
        data=[str(path) for path in args.data],
        limit=args.limit,
        skip=args.skip,
        sources=args.sources,
        seed=args.seed,
        executor=f"{type(backend).__name__}:{backend.model}" if backend is not None else None,
        engine=run.engine.model_dump(mode="json") if in_process else None,
        mcp_url=args.mcp_url[0] if args.mcp_url else None,
        mcp_urls=list(args.mcp_url or []),
        # the shipped director's loopback url changes every run; its name and weights identify it
        policy_url=f"shipped:{shipped.director.card.name}" if shipped else next(iter(run.policy_urls), None),
        policy_urls=[] if shipped else run.policy_urls,
        executor_urls=run.executor_urls,
        policy_model=shipped.served.model if shipped else args.policy_model,
        policy_weights=weights,
        policy_play=run.play.identity() if run.play is not None else None,
        record=str(args.record) if args.record else None,
        replay=str(args.replay) if args.replay else None,
        episode_timeout_s=args.episode_timeout,
    )


def _shared_draws(args: argparse.Namespace, run: _Run, out: Path) -> Path | None:
    """The file that keeps the run's shared draws across resumes: `OUT/memo.sqlite`, for an in-process canvas
    under `memo_scope = "charged"` (the scope whose workflows are judged on the same draws); else None.

    A new run refuses a folder that already holds one: its draws belong to an earlier run's journal."""
    from flowsteer_mcp.engine.memo_store import MemoStoreError

    if args.mcp_url or run.engine.memo_scope != "charged":
        return None
    path = out / MEMO_FILE_NAME
    if not args.resume and path.exists():
        raise MemoStoreError(
            f"{path} holds the shared draws of an earlier run: pass --resume to continue it, or choose another --out"
        )
    return path


def _refused(error: BaseException) -> int:
    print(f"flowsteer eval: error: {error}", file=sys.stderr)
    return USAGE_ERROR


async def _evaluate(args: argparse.Namespace, shipped: ShippedPolicy | None) -> int:
    """Prepare, check the policy's weights, open the journal, run every episode, then report (or say what did
    not run and exit non-zero without figures)."""
    from flowsteer_mcp.engine.memo_store import MemoStore, MemoStoreError
    from operators.backends.config import ConfigError
    from training.data import DatasetError
    from training.evaluate.journal import ItemJournal, JournalError
    from training.evaluate.policy_weights import PolicyServerError
    from training.evaluate.report import markdown_report, write_report
    from training.evaluate.run_failures import run_failure_message, run_failures
    from training.evaluate.runner import evaluate

    try:
        run = _prepare(args, shipped)
    except (ConfigError, DatasetError, OSError, ValueError) as error:
        return _refused(error)
    try:
        weights = await _policy_weights(args, run, shipped)
    except PolicyServerError as error:
        await _close_eval_resources(run.directors, run.backend, None)
        return _refused(error)
    config = _eval_config(args, run, shipped, weights, in_process=not args.mcp_url)
    out = args.out or Path("flowsteer-eval") / datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    try:
        shared_draws = _shared_draws(args, run, out)
        journal, done = ItemJournal.open(out, config, resume=args.resume)
    except (JournalError, MemoStoreError, OSError) as error:
        await _close_eval_resources(run.directors, run.backend, None)
        return _refused(error)
    memo_store = MemoStore(shared_draws) if shared_draws is not None else None
    make_client, server = _canvas(args, run, memo_store)
    try:
        report = await evaluate(
            run.problems,
            run.directors,
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
        await _close_eval_resources(run.directors, run.backend, server)
        if memo_store is not None:
            memo_store.close()
    failures = run_failures(report.items)
    if failures:
        print(run_failure_message(failures, len(report.items), journal.path), file=sys.stderr)
        return RUN_FAILED
    json_path, markdown_path = write_report(report, out)
    print(markdown_report(report), end="")
    print(f"report: {json_path} and {markdown_path}", file=sys.stderr)
    return 0


def eval_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="flowsteer eval",
        description="Run directors over benchmark problems concurrently; write report.json and report.md "
        "(one table per dataset) and print the Markdown.",
    )
    add_eval_arguments(parser)
    return parser


def eval_main(argv: list[str]) -> int:
    """`flowsteer eval ...`: exit 0 with the report, 1 when episodes did not run (no figures), 2 on bad input."""
    parser = eval_parser()
    args = parser.parse_args(argv)
    check_eval_arguments(parser, args)
    configure_logging(args.log_level)
    return anyio.run(_run_eval, args)
