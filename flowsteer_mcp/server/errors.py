"""JSON-RPC error codes and argument messages that clients written against the MCP spec expect.

Why: MCPServer answers an unknown tool with an `isError` result, a prompt call without its required arguments
with a generic internal error (with a traceback in the server log), an unknown resource with -32602 even on a
handshake-era connection, and a bad tool argument with raw pydantic text ending in a URL. Two middlewares (the
SDK's public hook around every request) put the spec's answers in place:

- unknown tool, unknown prompt, missing prompt arguments: JSON-RPC -32602 "Invalid params";
- unknown resource: -32002 on handshake-era connections (spec revisions up to 2025-11-25); 2026-07-28 retired
  that code for -32602 (SEP-2164), which the SDK already sends there;
- tool arguments that do not match the input schema: still an `isError` result (the spec wants the model to
  read and fix them), but one short line per problem: which argument, what was expected, what came;
- strict input (server/screening.py): an argument key the tool does not take, a prompt argument the prompt does
  not declare, and text with an unpaired surrogate anywhere are refused by name before anything runs; prompt
  arguments and resource URIs are bounded like tool arguments. Every error quotes what came only as a short
  excerpt, so no error is much longer than its fixed text.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog
from mcp import MCPError
from mcp.server import MCPServer
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver.utilities.context_injection import find_context_parameter
from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata, func_metadata
from mcp.types import INVALID_PARAMS, CallToolResult, ListToolsResult, TextContent
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from flowsteer_mcp.canvas.text import excerpt
from flowsteer_mcp.server.arguments import MAX_PROMPT_ARGUMENT_CHARS, MAX_URI_CHARS
from flowsteer_mcp.server.screening import describe_unknown, invalid_text, shown, unknown_names

log = structlog.get_logger(__name__)

RESOURCE_NOT_FOUND = -32002  # "Resource not found" in the MCP spec revisions 2024-11-05 .. 2025-11-25
MAX_PROBLEMS = 5
PREVIEW_CHARS = 40


class ToolArguments:
    """The argument models of our tools, built the way MCPServer builds them, so both agree on what is valid.

    A model is built on a tool's first call (building all of them up front would slow every server start)."""

    def __init__(self) -> None:
        self._functions: dict[str, Callable[..., Any]] = {}
        self._models: dict[str, FuncMetadata] = {}

    def learn(self, fn: Callable[..., Any]) -> None:
        self._functions[fn.__name__] = fn

    def knows(self, name: str) -> bool:
        return name in self._functions

    def problems(self, name: str, arguments: Mapping[str, Any]) -> str | None:
        """None when `arguments` are valid for tool `name`, else the message the model should read: invalid
        Unicode first (nothing else may quote it), then keys the tool does not take, then the schema's checks."""
        model = self._model(name)
        parsed = model.pre_parse_json(dict(arguments))  # what MCPServer validates: JSON strings already decoded
        if problem := invalid_text(parsed):
            return f"Error executing tool {name}: {problem}"
        known = _argument_names(model)
        if unknown := unknown_names(parsed, known):
            return _invalid(name, describe_unknown("argument", unknown, known))
        try:
            model.arg_model.model_validate(parsed)
        except ValidationError as error:
            return describe_invalid_arguments(name, error.errors(include_url=False))
        return None

    def _model(self, name: str) -> FuncMetadata:
        model = self._models.get(name)
        if model is None:
            fn = self._functions[name]
            context = find_context_parameter(fn)
            model = self._models[name] = func_metadata(
                fn, skip_names=[context] if context else [], structured_output=False
            )
        return model


def _argument_names(model: FuncMetadata) -> list[str]:
    """The keys a tool call may carry: its parameters as the input schema names them (aliases included)."""
    return [field.alias or name for name, field in model.arg_model.model_fields.items()]


def _invalid(tool: str, details: str) -> str:
    # The prefix every other tool error of MCPServer carries, so clients and tests can treat them alike.
    return (
        f"Error executing tool {tool}: invalid arguments: {details}. Fix them (see the tool's inputSchema) and retry."
    )


def describe_invalid_arguments(tool: str, errors: Sequence[ErrorDetails]) -> str:
    """One short clause per wrong argument (the alternatives of a union merged into one), no pydantic jargon."""
    problems: dict[tuple[str, str], list[str]] = {}
    for error in errors:
        kind = error["type"]
        if kind == "extra_forbidden":  # the last part of the path is the unknown key, however it looks
            *parent, key = error["loc"]
            where = ".".join(part for part in (_path(tuple(parent)), shown(str(key))) if part)
            problems.setdefault((where, "is not a known field"), [])
            continue
        where = _path(error["loc"]) or "arguments"
        if kind == "missing":
            problems.setdefault((where, "is required but missing"), [])
        elif (size := _too_long(error)) is not None:
            problems.setdefault((where, size), [])
        else:
            expected = error["msg"].removeprefix("Input should be ").removeprefix("Value error, ")
            problems.setdefault((where, f"got {_preview(error.get('input'))}"), []).append(expected)
    clauses = [
        f"`{where}` should be {' or '.join(expected)}, {got}" if expected else f"`{where}` {got}"
        for (where, got), expected in problems.items()
    ]
    listed = clauses[:MAX_PROBLEMS] + ([f"{len(clauses) - MAX_PROBLEMS} more"] if len(clauses) > MAX_PROBLEMS else [])
    return _invalid(tool, "; ".join(listed))


def _too_long(error: ErrorDetails) -> str | None:
    """The clause for a string or list past its schema bound (`is 40000 characters; the limit is 32000`)."""
    limit = (error.get("ctx") or {}).get("max_length")
    value = error.get("input")
    if error["type"] == "string_too_long" and isinstance(value, str):
        return f"is {len(value)} characters; the limit is {limit}"
    if error["type"] == "too_long" and isinstance(value, list | tuple | dict):
        return f"has {len(value)} items; the limit is {limit}"
    return None


def _path(loc: tuple[int | str, ...]) -> str:
    """`options.finish`, `operators[1]`: field names and list indexes, without pydantic's union-member tags."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif not _is_union_tag(part):
            path += f".{shown(part)}" if path else shown(part)
    return path


def _is_union_tag(part: str) -> bool:
    """pydantic names the alternative of a union it tried (`literal['a','b']`, `FinishPolicy`, `int`) in `loc`;
    our argument and option fields are snake_case names that never look like that."""
    return not part.isidentifier() or part[:1].isupper() or part in {"str", "int", "float", "bool", "none"}


def _preview(value: Any) -> str:
    """A short rendering of what came: the JSON type, and the value itself when it is small."""
    kind = {
        str: "string",
        bool: "boolean",
        int: "integer",
        float: "number",
        list: "array",
        dict: "object",
        type(None): "null",
    }.get(type(value), type(value).__name__)
    if isinstance(value, dict | list):
        return f"an {kind} of {len(value)} item(s)"
    text = shown(json.dumps(value, ensure_ascii=False, default=str), PREVIEW_CHARS)
    return f"{text} ({kind})"


def _is_handshake_era(ctx: ServerRequestContext[Any, Any]) -> bool:
    return ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS


def _is_resource_not_found(error: MCPError) -> bool:
    """How MCPServer reports a ResourceNotFoundError: -32602 with the URI as data."""
    return error.code == INVALID_PARAMS and isinstance(error.data, dict) and "uri" in error.data


def _name_and_arguments(params: Mapping[str, Any] | None) -> tuple[str | None, Mapping[str, Any]]:
    """Raw (not yet validated) request params; anything malformed is left to the SDK's own validation."""
    name = params.get("name") if params else None
    arguments = params.get("arguments") if params else None
    return (name if isinstance(name, str) else None), (arguments if isinstance(arguments, Mapping) else {})


class ToolCallErrors:
    """Middleware for tools/call: unknown tool -> -32602; invalid arguments -> a short `isError` result. On
    tools/list it publishes what the check enforces: no argument beyond those listed (`additionalProperties`)."""

    def __init__(self, server: MCPServer, tools: ToolArguments) -> None:
        self.server = server
        self.tools = tools

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method == "tools/list":
            return self._closed_schemas(await call_next(ctx))
        if ctx.method != "tools/call":
            return await call_next(ctx)
        name, arguments = _name_and_arguments(ctx.params)
        if name is None:
            return await call_next(ctx)
        if not self.tools.knows(name):
            registered = sorted(tool.name for tool in await self.server.list_tools())
            if name in registered:  # registered without `learn`: the SDK's own validation applies
                return await call_next(ctx)
            raise MCPError(
                INVALID_PARAMS,
                f"Unknown tool {excerpt(name)}. Available tools: {', '.join(registered)}.",
                data={"tool": shown(name)},
            )
        problems = self.tools.problems(name, arguments)
        if problems is None:
            return await call_next(ctx)
        log.info("tool_arguments_rejected", tool=name)  # the values are the caller's data: never logged
        return CallToolResult(content=[TextContent(type="text", text=problems)], is_error=True)

    def _closed_schemas(self, result: HandlerResult) -> HandlerResult:
        """The listing (a model or, after other middleware, its dict) with our tools' schemas closed."""
        if isinstance(result, ListToolsResult):
            tools = [
                tool.model_copy(update={"input_schema": _closed(tool.input_schema)})
                if self.tools.knows(tool.name)
                else tool
                for tool in result.tools
            ]
            return result.model_copy(update={"tools": tools})
        if isinstance(result, dict) and isinstance(result.get("tools"), list):
            listed = [
                {**tool, "inputSchema": _closed(tool["inputSchema"])}
                if isinstance(tool, dict) and self.tools.knows(str(tool.get("name"))) and "inputSchema" in tool
                else tool
                for tool in result["tools"]
            ]
            return {**result, "tools": listed}
        return result


def _closed(schema: dict[str, Any]) -> dict[str, Any]:
    return {**schema, "additionalProperties": False}


class PromptAndResourceErrors:
    """Middleware for prompts/get and resources/read: the spec's error codes instead of generic ones."""

    def __init__(self, server: MCPServer) -> None:
        self.server = server

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method == "prompts/get":
            await self._check_prompt(ctx.params)
            return await call_next(ctx)
        if ctx.method == "resources/read":
            self._check_uri(ctx)
            try:
                return await call_next(ctx)
            except MCPError as error:
                if _is_resource_not_found(error) and _is_handshake_era(ctx):
                    raise MCPError(RESOURCE_NOT_FOUND, error.message, error.data) from None
                raise
        return await call_next(ctx)

    async def _check_prompt(self, params: Mapping[str, Any] | None) -> None:
        name, arguments = _name_and_arguments(params)
        if name is None:
            return
        prompts = {prompt.name: prompt for prompt in await self.server.list_prompts()}
        prompt = prompts.get(name)
        if prompt is None:
            raise MCPError(
                INVALID_PARAMS, f"Unknown prompt {excerpt(name)}. Available prompts: {', '.join(sorted(prompts))}."
            )
        if problem := invalid_text(dict(arguments)):
            raise MCPError(INVALID_PARAMS, f"Prompt {name}: {problem}")
        declared = [arg.name for arg in prompt.arguments or []]
        if unknown := unknown_names(arguments, declared):
            raise MCPError(INVALID_PARAMS, f"Prompt {name}: {describe_unknown('argument', unknown, declared)}.")
        for key, value in arguments.items():
            if isinstance(value, str) and len(value) > MAX_PROMPT_ARGUMENT_CHARS:
                raise MCPError(
                    INVALID_PARAMS,
                    f"Prompt {name}: `{key}` is {len(value)} characters; the limit is {MAX_PROMPT_ARGUMENT_CHARS}.",
                )
        missing = [arg for arg in prompt.arguments or [] if arg.required and arg.name not in arguments]
        if missing:
            needed = "; ".join(f"`{arg.name}` ({arg.description or 'required'})" for arg in missing)
            raise MCPError(INVALID_PARAMS, f"Prompt {name} is missing required argument(s): {needed}.")

    @staticmethod
    def _check_uri(ctx: ServerRequestContext[Any, Any]) -> None:
        """A URI no resource can have (too long, invalid Unicode) is not found, quoted only as an excerpt."""
        uri = ctx.params.get("uri") if ctx.params else None
        if not isinstance(uri, str):
            return
        problem = invalid_text(uri, "uri")
        if problem is None and len(uri) <= MAX_URI_CHARS:
            return
        reason = problem or f"resource URIs have at most {MAX_URI_CHARS} characters"
        code = RESOURCE_NOT_FOUND if _is_handshake_era(ctx) else INVALID_PARAMS
        raise MCPError(code, f"Unknown resource {excerpt(uri)}: {reason}.", data={"uri": shown(uri)})
