"""Remote HTTP mode end to end: the README's remote command and client configuration, verbatim, from another
process, and the Host/Origin policy on every bind form, with and without a bearer token (Origin in every mode)."""

from __future__ import annotations

import json
import re
import shlex
import socket
import subprocess
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.servers import (
    REPO_ROOT,
    HttpServerProcess,
    ToolCaller,
    flowsteer_mcp_script,
    free_port,
    http_client,
    ipv6_loopback_available,
    own_non_loopback_ipv4,
    server_env,
)

pytestmark = pytest.mark.slow

TOKEN = "remote-test-token-5d1e9a7c"
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
}


def readme_remote_command() -> list[str]:
    """The README's remote server command line (without its `VAR=...` prefix)."""
    readme = (REPO_ROOT / "README.md").read_text()
    line = next((ln for ln in readme.splitlines() if "flowsteer-mcp --transport http --host 0.0.0.0" in ln), None)
    assert line is not None, "README no longer shows the remote command"
    words = shlex.split(line.split("#")[0])
    assert words[0].startswith("FLOWSTEER_MCP_TOKEN="), words
    assert words[1] == "flowsteer-mcp", words
    return words[1:]


def readme_remote_client() -> dict[str, Any]:
    """The README's remote client configuration (the `mcpServers` JSON block with a bearer header)."""
    readme = (REPO_ROOT / "README.md").read_text()
    blocks = [b for b in re.findall(r"```json\n(.*?)```", readme, flags=re.DOTALL) if "Bearer <token>" in b]
    assert len(blocks) == 1, "README no longer shows exactly one remote client configuration"
    servers: dict[str, dict[str, Any]] = json.loads(blocks[0])["mcpServers"]
    (config,) = servers.values()
    return config


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServerProcess]:
    """The README's remote command, run by its console script, with a free port appended. An empty model cache
    keeps the command line verbatim and the server on "no executor" (no local model is ever loaded)."""
    port = free_port()
    command = [str(flowsteer_mcp_script()), *readme_remote_command()[1:], "--port", str(port)]
    env = {"FLOWSTEER_MCP_TOKEN": TOKEN, "XDG_CACHE_HOME": str(tmp_path_factory.mktemp("empty-cache"))}
    with HttpServerProcess(env=env, port=port, host="0.0.0.0", command=command) as process:
        yield process


def via(address: str) -> str:
    if address == "own address":
        own = own_non_loopback_ipv4()
        if own is None:
            pytest.skip("this machine has no non-loopback IPv4 address")
        return own
    return address


@pytest.mark.parametrize("address", ["127.0.0.1", "localhost", "own address"])
async def test_readme_remote_config_connects(remote: HttpServerProcess, address: str) -> None:
    config = readme_remote_client()
    assert config["url"] == "https://flowsteer.example.com/mcp"  # the public name: reached here by each address
    headers = {name: value.replace("<token>", TOKEN) for name, value in config["headers"].items()}
    async with http_client(remote.url_via(via(address)), headers=headers) as client:
        tools = ToolCaller(client)
        workflow_id = await tools.create("What is 17 * 23?", task_type="math")
        step = await tools.act(
            workflow_id, "<action>add</action><operator>Programmer</operator><prompt>Compute.</prompt>"
        )
        assert step["ok"] is True and step["state"]["dsl"] == "Programmer"
        await tools.ok("delete_workflow", workflow_id=workflow_id)


@pytest.mark.parametrize("scheme", ["bearer", "BEARER", "Bearer"])
async def test_auth_scheme_is_case_insensitive(remote: HttpServerProcess, scheme: str) -> None:
    async with httpx.AsyncClient() as raw:
        response = await raw.post(
            remote.url, json=INITIALIZE, headers=MCP_HEADERS | {"Authorization": f"{scheme} {TOKEN}"}
        )
    assert response.status_code == 200, response.text


async def test_with_a_token_any_host_name_reaches_the_server(remote: HttpServerProcess) -> None:
    """A reverse proxy or port forward may present any name; the token is what keeps strangers out."""
    proxied = {"Host": f"flowsteer.example:{remote.port}"}
    async with httpx.AsyncClient() as raw:
        authorized = await raw.post(
            remote.url, json=INITIALIZE, headers=MCP_HEADERS | proxied | {"Authorization": f"Bearer {TOKEN}"}
        )
        anonymous = await raw.post(remote.url, json=INITIALIZE, headers=MCP_HEADERS | proxied)
    assert authorized.status_code == 200, authorized.text
    assert anonymous.status_code == 401


async def test_with_a_token_browser_origins_are_still_checked(remote: HttpServerProcess) -> None:
    """The token guards against strangers, not against a page of another site that a user's browser runs."""
    authorized = MCP_HEADERS | {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient() as raw:

        async def post(**headers: str) -> httpx.Response:
            return await raw.post(remote.url, json=INITIALIZE, headers=authorized | headers)

        evil = await post(Origin="https://evil.example")
        rebound = await post(Host=f"evil.example:{remote.port}", Origin=f"http://evil.example:{remote.port}")
        assert (await post()).status_code == 200  # non-browser clients send no Origin
        assert (await post(Origin=f"http://127.0.0.1:{remote.port}")).status_code == 200
        assert (await post(Origin="http://localhost:5173")).status_code == 200
    assert evil.status_code == 403 and evil.json()["error"] == "invalid_origin"
    assert rebound.status_code == 403


async def test_allowed_origin_admits_exactly_that_origin() -> None:
    with HttpServerProcess(
        "--no-executor",
        "--allowed-origin",
        "https://app.example:8443",
        host="0.0.0.0",
        env={"FLOWSTEER_MCP_TOKEN": TOKEN},
    ) as server:
        authorized = MCP_HEADERS | {"Authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient() as raw:

            async def post(origin: str) -> int:
                response = await raw.post(server.url, json=INITIALIZE, headers=authorized | {"Origin": origin})
                return response.status_code

            assert await post("https://app.example:8443") == 200
            assert await post("https://app.example") == 403
            assert await post("http://app.example:8443") == 403
            assert await post("https://evil.example:8443") == 403


LOOPBACK_BINDS = ["127.0.0.1", "127.0.0.2", "0:0:0:0:0:0:0:1", "[::1]"]


def loopback_bindable(host: str) -> bool:
    if ":" in host:
        return ipv6_loopback_available()
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
        return True
    except OSError:
        return False


@pytest.mark.parametrize("bind", LOOPBACK_BINDS)
async def test_every_loopback_bind_without_a_token_rejects_rebound_names(bind: str) -> None:
    if not loopback_bindable(bind):
        pytest.skip(f"cannot bind {bind} on this machine")
    with HttpServerProcess("--no-executor", host=bind) as server:
        async with httpx.AsyncClient() as raw:

            async def post(**headers: str) -> int:
                response = await raw.post(server.url, json=INITIALIZE, headers=MCP_HEADERS | headers)
                return response.status_code

            assert await post(Host="evil.example") == 421
            assert await post(Host=f"evil.example:{server.port}") == 421
            assert await post(Origin="http://evil.example") == 403
            assert await post(Origin="null") == 403
            assert await post() == 200
            assert await post(Host=f"localhost:{server.port}") == 200
            assert await post(Host=f"127.0.0.1:{server.port}", Origin="http://localhost:5173") == 200


@pytest.mark.parametrize("token", [TOKEN, None], ids=["with-token", "without-token"])
async def test_allowed_host_matches_the_name_with_any_port(token: str | None) -> None:
    env = {"FLOWSTEER_MCP_TOKEN": token} if token else {}
    bind = "0.0.0.0" if token else "127.0.0.1"
    with HttpServerProcess("--no-executor", "--allowed-host", "myname", host=bind, env=env) as server:
        auth = {"Authorization": f"Bearer {token}"} if token else {}
        async with httpx.AsyncClient() as raw:

            async def post(**headers: str) -> int:
                response = await raw.post(server.url, json=INITIALIZE, headers=MCP_HEADERS | auth | headers)
                return response.status_code

            assert await post(Host=f"myname:{server.port}") == 200
            assert await post(Host="MyName:8443", Origin="https://myname") == 200
            assert await post(Host=f"127.0.0.1:{server.port}") == 200
            assert await post(Host=f"evil.example:{server.port}") == 421
            assert await post(Host=f"myname:{server.port}", Origin="http://evil.example") == 403


@pytest.mark.parametrize(
    "token", ["   ", "", " padded-secret-value-123 ", "inner space-secret-12345", "tab\tsecret-1234567"]
)
def test_a_token_that_can_never_match_is_refused_at_start(token: str) -> None:
    command = [str(flowsteer_mcp_script()), "--transport", "http", "--host", "0.0.0.0"]
    command += ["--port", str(free_port()), "--no-executor"]
    env = server_env({"FLOWSTEER_MCP_TOKEN": token})
    finished = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=30)
    assert finished.returncode == 2, finished.stderr
    assert "FLOWSTEER_MCP_TOKEN" in finished.stderr
    assert "secrets.token_urlsafe" in finished.stderr  # says how to make a usable one
    if token.strip():
        assert token.strip() not in finished.stderr  # never echoes the secret
