"""The README's client configurations work as written: each snippet, with only the placeholders replaced (the
install path, the store, the port, the token, the public host name), starts the server the way that client
would and is connected to with the official TypeScript SDK (tests/conformance/ts/snippet_client.mjs).

Snippets are read from the README's "Client configuration" section: every ```json block, every `claude mcp add`
line, and the remote server's command line. A snippet that stops working, or a placeholder the test does not
know, fails here.
"""

from __future__ import annotations

import json
import re
import secrets
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.test_ts_client import ANNOTATIONS
from tests.conformance.ts_scripts import flowsteer_mcp, run_script
from tests.support.servers import REPO_ROOT, HttpServerProcess, free_port, server_env

pytestmark = pytest.mark.slow

README = REPO_ROOT / "README.md"
INSTALLED = "/path/to/flowsteer-mcp/.venv/bin/flowsteer-mcp"
EXECUTOR_CONFIG = "/path/to/executor.toml"
PUBLIC_URL = "https://flowsteer.example.com"
TOKEN_PLACEHOLDERS = ("<token>", "${FLOWSTEER_MCP_TOKEN}", "${input:flowsteer-token}")
SCRIPTED_EXECUTOR = """
[executor]
model = "script"

[models.script]
backend = "scripted"
default_reply = "Final answer: 42"
"""


@dataclass
class Snippets:
    configs: list[dict[str, Any]]  # one per server entry of a JSON block or a `claude mcp add` line
    server_command: list[str]  # the remote server's command line, env assignments first


def client_section() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index("### Client configuration")
    return text[start : text.index("\n### ", start + 1)]


def read_snippets() -> Snippets:
    section = client_section()
    configs: list[dict[str, Any]] = []
    for block in re.findall(r"```json\n(.*?)\n```", section, flags=re.DOTALL):
        document = json.loads(block)
        servers = document.get("mcpServers") or document.get("servers")
        assert servers, f"a JSON snippet without servers: {block[:80]}"
        configs.extend(
            {"label": f"json:{name}:{index}", **entry} for index, (name, entry) in enumerate(servers.items())
        )
    server_command: list[str] = []
    for line in (line.strip() for line in section.splitlines() if line.startswith("    ")):
        words = shlex.split(line)
        if words[:3] == ["claude", "mcp", "add"]:
            configs.append(claude_code_config(words))
        elif "flowsteer-mcp" in words and "--transport" in words:
            server_command = words
    for index, config in enumerate(configs):
        config["label"] = f"{index}:{config['label']}"
    return Snippets(configs=configs, server_command=server_command)


def claude_code_config(words: list[str]) -> dict[str, Any]:
    """`claude mcp add NAME -- CMD ARGS...` or `claude mcp add --transport http NAME URL --header "K: V"`."""
    if "--" in words:
        command = words[words.index("--") + 1 :]
        return {"label": "claude-code:stdio", "command": command[0], "args": command[1:]}
    rest = words[3:]
    headers: dict[str, str] = {}
    positional: list[str] = []
    while rest:
        word = rest.pop(0)
        if word == "--transport":
            assert rest.pop(0) == "http"
        elif word == "--header":
            key, _, value = rest.pop(0).partition(":")
            headers[key.strip()] = value.strip()
        else:
            positional.append(word)
    _name, url = positional
    return {"label": "claude-code:http", "type": "http", "url": url, "headers": headers}


def with_token(value: str, token: str) -> str:
    for placeholder in TOKEN_PLACEHOLDERS:
        value = value.replace(placeholder, token)
    assert "<" not in value and "${" not in value, f"an unknown placeholder in {value!r}"
    return value


def local_path(argument: str, tmp_path: Path) -> str:
    return argument.replace("sqlite:~/.flowsteer/", f"sqlite:{tmp_path}/").replace(
        "sqlite:/var/lib/flowsteer/", f"sqlite:{tmp_path}/"
    )


def client_spec(config: dict[str, Any], tmp_path: Path, server_url: str, token: str) -> dict[str, Any]:
    if "command" in config:
        assert config["command"] == INSTALLED, config
        env = dict(server_env())
        for key, value in (config.get("env") or {}).items():
            assert value == EXECUTOR_CONFIG, f"an unknown env value in {config['label']}"
            env[key] = str(tmp_path / "executor.toml")
        return {
            "label": config["label"],
            "transport": "stdio",
            "command": flowsteer_mcp()[0],
            "args": [local_path(argument, tmp_path) for argument in config["args"]],
            "env": env,
        }
    assert config["url"].startswith(PUBLIC_URL), config
    return {
        "label": config["label"],
        "transport": "http",
        "url": config["url"].replace(PUBLIC_URL, server_url.removesuffix("/mcp")),
        "headers": {key: with_token(value, token) for key, value in (config.get("headers") or {}).items()},
    }


def readme_server(words: list[str], tmp_path: Path, token: str) -> tuple[dict[str, str], list[str], int]:
    """The README's remote server command line with its token, port and store replaced: env, argv, port."""
    assignments = [word for word in words if re.fullmatch(r"[A-Z_]+=.*", word)]
    argv = [word for word in words if word not in assignments]
    assert argv[0] == "flowsteer-mcp" and "--port" in argv, argv
    port = free_port()
    argv[argv.index("--port") + 1] = str(port)
    command = [
        *flowsteer_mcp(),
        *(local_path(a, tmp_path) for a in argv[1:]),
        "--config",
        str(tmp_path / "executor.toml"),
    ]
    env = {key: with_token(value, token) for key, _, value in (word.partition("=") for word in assignments)}
    return env, command, port


def expected_tools(config: dict[str, Any]) -> set[str]:
    args: list[str] = config.get("args") or []
    if "--tools" in args:
        return set(args[args.index("--tools") + 1].split(","))
    return set(ANNOTATIONS)


def test_the_readme_client_snippets_connect_with_the_typescript_sdk(tmp_path: Path) -> None:
    snippets = read_snippets()
    labels = [config["label"] for config in snippets.configs]
    assert sum("command" in c for c in snippets.configs) >= 4 and sum("url" in c for c in snippets.configs) >= 4
    (tmp_path / "executor.toml").write_text(SCRIPTED_EXECUTOR)
    token = secrets.token_urlsafe(32)

    env, command, port = readme_server(snippets.server_command, tmp_path, token)
    with HttpServerProcess(env=env, port=port, command=command) as live:
        specs = [client_spec(config, tmp_path, live.url_via("127.0.0.1"), token) for config in snippets.configs]
        spec_file = tmp_path / "specs.json"
        spec_file.write_text(json.dumps(specs))
        summary = run_script("snippet_client.mjs", str(spec_file), timeout_s=240).summary
    results = {result["label"]: result for result in summary["results"]}
    assert list(results) == labels
    for config in snippets.configs:
        result = results[config["label"]]
        assert result["connected"], result
        assert result["server"] == "flowsteer" and result["error"] is None, result
        assert set(result["tools"]) == expected_tools(config), (config["label"], result["tools"])
        assert result["codeDefault"] == "direct8-redraw"
