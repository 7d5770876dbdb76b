"""`flowsteer-mcp`: the MCP server command, and `flowsteer-mcp view` (the live canvas viewer of a sqlite store
that another server process writes). The `flowsteer` command lives in `training.cli`."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from flowsteer_mcp.logs import configure_logging

if TYPE_CHECKING:
    from pydantic import SecretStr, ValidationError

    from flowsteer_mcp.canvas.observation import ObservationBuilder
    from flowsteer_mcp.director.served import DirectorServing


def _server_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="flowsteer-mcp",
        description="FlowSteer workflow-canvas MCP server.",
        epilog="`flowsteer-mcp view --store sqlite:PATH` serves the live canvas viewer of a store a server writes.",
    )
    parser.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    parser.add_argument(
        "--host", default="127.0.0.1", help="HTTP: address to listen on; beyond loopback a token is required"
    )
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--path", default="/mcp", help="HTTP endpoint path")
    parser.add_argument(
        "--store",
        default="memory",
        help="'memory', 'sqlite:PATH' (persistent, one server) or 'postgresql://USER@HOST/DB' (persistent, shared by "
        "a fleet of servers; password via PGPASSWORD or ~/.pgpass)",
    )
    parser.add_argument("--config", type=Path, default=None, help="executor config file (TOML/YAML)")
    parser.add_argument("--no-executor", action="store_true", help="edit only; never run workflows")
    parser.add_argument(
        "--director-template",
        type=Path,
        default=None,
        metavar="FILE",
        help="the directors' system prompt template (e.g. configs/templates/director_compact.txt for a small "
        "policy; default: the built-in one)",
    )
    parser.add_argument(
        "--token-env", default="FLOWSTEER_MCP_TOKEN", help="environment variable holding the HTTP bearer token"
    )
    parser.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="HTTP: a host name clients may use (Host/Origin, any port); turns the Host check on with a token",
    )
    parser.add_argument(
        "--allowed-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="HTTP: a browser origin (scheme://host[:port]) that may call the server besides loopback pages",
    )
    _add_oauth_arguments(parser)
    parser.add_argument(
        "--tools",
        metavar="NAME[,NAME...]",
        help="offer only these tools (for clients that cap the tool count), e.g. solve,list_library,get_job",
    )
    parser.add_argument(
        "--read-only", action="store_true", help="offer only the read-only tools (get_workflow, list_*, export...)"
    )
    _add_director_arguments(parser)
    parser.add_argument("--max-workflows", type=int, default=1000)
    parser.add_argument("--ttl", type=float, default=3600.0, help="idle seconds before an in-memory workflow expires")
    parser.add_argument(
        "--persistent-ttl",
        type=float,
        default=None,
        help="seconds without an edit before a stored (sqlite, postgresql) workflow is deleted (default 30 days; 0 = never)",
    )
    parser.add_argument("--log-level", default=os.environ.get("FLOWSTEER_LOG_LEVEL", "INFO"))
    return parser


def _add_oauth_arguments(parser: argparse.ArgumentParser) -> None:
    oauth = parser.add_argument_group("OAuth 2.1 (HTTP; instead of a bearer token)")
    oauth.add_argument("--oauth-issuer", metavar="URL", help="the authorization server whose JWT access tokens count")
    oauth.add_argument(
        "--oauth-resource", metavar="URL", help="this server's public MCP URL: the audience tokens must carry"
    )
    oauth.add_argument(
        "--oauth-jwks-url", metavar="URL", help="the issuer's JWKS (default: from its discovery document)"
    )
    oauth.add_argument("--oauth-read-scope", metavar="SCOPE", help="scope of the read-only tools (flowsteer:read)")
    oauth.add_argument("--oauth-write-scope", metavar="SCOPE", help="scope of the editing tools (flowsteer:write)")


def _add_director_arguments(parser: argparse.ArgumentParser) -> None:
    from flowsteer_mcp.director.served import SERVE_MODES_WITH_EXECUTOR

    director = parser.add_argument_group("Flow-Director (solve with director='policy')")
    director.add_argument("--policy-url", metavar="URL", help="OpenAI-compatible base URL of a running policy server")
    director.add_argument("--policy-model", metavar="NAME", help="the model name that server serves the policy as")
    director.add_argument(
        "--serve-director",
        nargs="?",
        const="auto",
        choices=SERVE_MODES_WITH_EXECUTOR,
        help="serve the shipped director from startup to shutdown (vLLM, the local server, auto, or on the "
        "executor's own vLLM server named by --config); `flowsteer serve` only",
    )


def _http_token(variable: str) -> SecretStr | None:
    """The bearer token held by environment variable `variable`; set but unusable (empty, padded...) is an error."""
    from pydantic import SecretStr

    from flowsteer_mcp.server.auth import TOKEN_ADVICE, token_problem

    value = os.environ.get(variable)
    if value is None:
        return None
    if problem := token_problem(value):
        raise ValueError(
            f"{variable} {problem}. Set it to a random secret, e.g. `{TOKEN_ADVICE}`, or unset it to serve "
            "on loopback only without a token."
        )
    return SecretStr(value)


_OAUTH_FLAGS = {
    "oauth_issuer": "issuer",
    "oauth_resource": "resource",
    "oauth_jwks_url": "jwks_url",
    "oauth_read_scope": "read_scope",
    "oauth_write_scope": "write_scope",
}


def _oauth_settings(args: argparse.Namespace) -> dict[str, str] | None:
    """The OAuth settings the `--oauth-*` flags give, or None without any; both URLs are required."""
    given = {field: getattr(args, flag) for flag, field in _OAUTH_FLAGS.items() if getattr(args, flag) is not None}
    if not given:
        return None
    if args.transport != "http":
        raise ValueError("the --oauth-* options apply to --transport http only")
    missing = [f"--oauth-{field}" for field in ("issuer", "resource") if field not in given]
    if missing:
        raise ValueError(
            f"OAuth needs {' and '.join(missing)}: the authorization server's issuer URL and this server's public "
            "MCP URL (e.g. --oauth-issuer https://login.example.com --oauth-resource https://mcp.example.com/mcp)"
        )
    return given


def _tool_names(value: str | None) -> list[str] | None:
    """`--tools a,b`: the names, blanks dropped; an empty list offers nothing, which is refused as a mistake."""
    if value is None:
        return None
    names = [name.strip() for name in value.split(",") if name.strip()]
    if not names:
        raise ValueError("--tools needs at least one tool name (comma-separated)")
    return names


def _settings_problem(error: ValidationError) -> str:
    """One line per invalid setting, without pydantic's input echo and documentation links."""
    return "; ".join(
        f"{'.'.join(map(str, issue['loc'])) or 'settings'}: {issue['msg'].removeprefix('Value error, ')}"
        for issue in error.errors()
    )


def _view_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="flowsteer-mcp view",
        description="Serve the read-only live canvas viewer of a sqlite store that a flowsteer-mcp server writes.",
    )
    parser.add_argument("--store", required=True, help="'sqlite:PATH', the --store of the server to follow")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on; beyond loopback a token is required")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument(
        "--token-env", default="FLOWSTEER_MCP_TOKEN", help="environment variable holding the viewer's bearer token"
    )
    parser.add_argument("--poll", type=float, default=0.5, help="seconds between looks at the store for changes")
    parser.add_argument("--log-level", default=os.environ.get("FLOWSTEER_LOG_LEVEL", "WARNING"))
    return parser


def _view_store_path(store: str) -> Path:
    if store == "memory":
        raise ValueError(
            "a memory store lives inside its server process, so there is nothing to follow: start the server "
            "with --store sqlite:PATH and view that, or open /view/ on a server run with --transport http"
        )
    if not store.startswith("sqlite:") or not store.removeprefix("sqlite:"):
        raise ValueError(f"--store must be sqlite:PATH, not {store!r}")
    return Path(store.removeprefix("sqlite:")).expanduser()


def view_main(argv: list[str]) -> int:
    """`flowsteer-mcp view`: exit 2, with a one-line reason, for anything it refuses before listening."""
    from flowsteer_mcp.host_policy import check_bind
    from flowsteer_mcp.store.sqlite import SQLiteStore
    from flowsteer_mcp.viewer.app import serve_viewer

    args = _view_parser().parse_args(argv)
    configure_logging(args.log_level)
    try:
        if args.poll <= 0:
            raise ValueError("--poll must be a positive number of seconds")
        path = _view_store_path(args.store)
        token = _http_token(args.token_env)
        check_bind(args.host, authenticated=token is not None)
        store = SQLiteStore(path, read_only=True)
    except (ValueError, RuntimeError) as error:
        print(f"flowsteer-mcp view: {error}", file=sys.stderr)
        return 2
    secret = token.get_secret_value() if token is not None else None
    try:
        anyio.run(serve_viewer, store, args.host, args.port, secret, args.poll)
    finally:
        anyio.run(store.close)
    return 0


def _observer(template: Path | None) -> ObservationBuilder | None:
    """The observation builder of `--director-template`; a missing or unreadable file is a clear error."""
    from flowsteer_mcp.canvas.observation import ObservationBuilder

    if template is None:
        return None
    try:
        return ObservationBuilder.from_file(template)
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"--director-template {template}: cannot read it ({error})") from error


def mcp_main(argv: list[str] | None = None, serve_director: DirectorServing | None = None) -> int:
    """The server command; `serve_director` (passed by `flowsteer serve`) serves the shipped director on
    `--serve-director`, which `flowsteer-mcp` alone cannot (the model servers live in the training layer)."""
    from pydantic import ValidationError

    from flowsteer_mcp.canvas.execution import NoRunner
    from flowsteer_mcp.runner_choice import build_runner
    from flowsteer_mcp.server import ServerSettings, build_server
    from flowsteer_mcp.server.http import UnsafeBindError, serve_http
    from operators.backends.config import single_server_url
    from operators.registry import default_registry

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["view"]:
        return view_main(argv[1:])
    args = _server_parser().parse_args(argv)
    configure_logging(args.log_level)
    try:
        settings = ServerSettings(
            store=args.store,
            host=args.host,
            port=args.port,
            path=args.path,
            token=_http_token(args.token_env) if args.transport == "http" else None,
            max_workflows=args.max_workflows,
            workflow_ttl_s=args.ttl,
            allowed_hosts=args.allowed_host,
            allowed_origins=args.allowed_origin,
            oauth=_oauth_settings(args),
            tools=_tool_names(args.tools),
            read_only=args.read_only,
            policy_url=args.policy_url,
            policy_model=args.policy_model,
            serve_director=args.serve_director,
            director_executor_url=single_server_url(args.config) if args.serve_director == "executor" else None,
            **({} if args.persistent_ttl is None else {"persistent_ttl_s": args.persistent_ttl or None}),
        )
        registry = default_registry()
        runner = NoRunner() if args.no_executor else build_runner(registry, args.config)
        observer = _observer(args.director_template)
        server = build_server(
            settings, registry=registry, runner=runner, observer=observer, serve_director=serve_director
        )
    except ValidationError as error:
        print(f"flowsteer-mcp: {_settings_problem(error)}", file=sys.stderr)
        return 2
    except (ValueError, RuntimeError) as error:
        print(f"flowsteer-mcp: {error}", file=sys.stderr)
        return 2
    if args.transport == "stdio":
        from flowsteer_mcp.server.stdio import serve_stdio

        anyio.run(serve_stdio, server.mcp)
        return 0
    try:
        anyio.run(serve_http, server)
    except UnsafeBindError as error:
        print(f"flowsteer-mcp: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(mcp_main())
