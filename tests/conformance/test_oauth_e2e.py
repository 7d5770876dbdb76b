"""OAuth end to end against a real authorization server: oidc-provider (tests/conformance/oauth/provider.mjs), a
certified OpenID Provider, issues JWT access tokens (client_credentials with RFC 8707 resource indicators) for a
real `flowsteer-mcp --transport http --oauth-issuer ... --oauth-resource ...` process, which finds the issuer's
keys through its discovery document. The official TypeScript SDK client (tests/conformance/ts/oauth_client.mjs)
runs the MCP sessions, once with a bearer header and once doing the whole OAuth discovery itself.

Node is required: a missing `node` fails here; set FLOWSTEER_SKIP_NODE=1 to skip on purpose.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from tests.conformance.ts_scripts import node as ts_node
from tests.conformance.ts_scripts import run_script
from tests.support.servers import READY_TIMEOUT_S, REPO_ROOT, HttpServerProcess, free_port, mcp_url, server_env

pytestmark = pytest.mark.slow

OAUTH_DIR = REPO_ROOT / "tests" / "conformance" / "oauth"
READ, WRITE = "flowsteer:read", "flowsteer:write"
SHORT_TTL_S = 4
CLIENT_TIMEOUT_S = 120
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
}


def node() -> str:
    """The TypeScript runner (ts_scripts.node checks the SDK), plus the provider's own package."""
    found = ts_node()
    assert (OAUTH_DIR / "node_modules" / "oidc-provider").is_dir(), (
        "oidc-provider is not installed: run `make conformance-deps`"
    )
    return found


@dataclass
class Provider:
    issuer: str
    secret: str
    process: subprocess.Popen[bytes]
    output: Any

    def token(self, scope: str, resource: str, client: str = "flowsteer-e2e") -> str:
        """An access token from the token endpoint (client_credentials, RFC 8707 `resource`)."""
        response = httpx.post(
            f"{self.issuer}/token",
            data={"grant_type": "client_credentials", "scope": scope, "resource": resource},
            auth=(client, self.secret),
            timeout=30,
        )
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["token_type"] == "Bearer" and body["scope"] == scope, body
        token: str = body["access_token"]
        return token

    def logs(self) -> str:
        self.output.seek(0)
        return str(self.output.read().decode(errors="replace"))


def stop(process: subprocess.Popen[bytes]) -> None:
    """Terminate by PID, then SIGKILL if it does not exit promptly."""
    if process.poll() is not None:
        return
    os.kill(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


@pytest.fixture(scope="module")
def provider() -> Iterator[Provider]:
    port = free_port()
    secret = secrets.token_urlsafe(24)
    env = server_env({"OAUTH_CLIENT_SECRET": secret, "OAUTH_SHORT_TTL": str(SHORT_TTL_S)})
    output = tempfile.TemporaryFile()  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        [node(), str(OAUTH_DIR / "provider.mjs"), str(port)], cwd=OAUTH_DIR, env=env, stdout=output, stderr=output
    )
    started = Provider(f"http://127.0.0.1:{port}", secret, process, output)
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            assert process.poll() is None, f"the provider exited with {process.returncode}:\n{started.logs()}"
            assert time.monotonic() < deadline, f"the provider did not listen in time:\n{started.logs()}"
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                time.sleep(0.05)
        yield started
    finally:
        stop(process)
        output.close()


@pytest.fixture(scope="module")
def server(provider: Provider) -> Iterator[HttpServerProcess]:
    port = free_port()
    resource = mcp_url("127.0.0.1", port)
    args = ("--no-executor", "--oauth-issuer", provider.issuer, "--oauth-resource", resource, "--log-level", "INFO")
    with HttpServerProcess(*args, port=port) as process:
        yield process


def metadata_url(server: HttpServerProcess) -> str:
    return f"http://127.0.0.1:{server.port}/.well-known/oauth-protected-resource/mcp"


def challenge(header: str) -> dict[str, str]:
    """The parameters of a `Bearer k="v", k="v"` challenge."""
    scheme, _, rest = header.partition(" ")
    assert scheme == "Bearer", header
    return {name: value.strip('"') for name, _, value in (item.partition("=") for item in rest.split(", "))}


def post(server: HttpServerProcess, token: str | None, body: dict[str, Any] = INITIALIZE) -> httpx.Response:
    headers = MCP_HEADERS | ({"Authorization": f"Bearer {token}"} if token else {})
    return httpx.post(server.url, json=body, headers=headers, timeout=30)


def claims_of(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    decoded: dict[str, Any] = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return decoded


def run_client(mode: str, url: str, env: dict[str, str]) -> dict[str, Any]:
    node()
    run = run_script("oauth_client.mjs", mode, url, env=server_env(env), timeout_s=CLIENT_TIMEOUT_S)
    assert run.returncode == 0, run.stderr
    return run.summary


def test_the_protected_resource_metadata_names_the_issuer_and_scopes(
    server: HttpServerProcess, provider: Provider
) -> None:
    document = httpx.get(metadata_url(server), timeout=30).json()
    assert document["resource"] == server.url
    assert document["authorization_servers"] == [provider.issuer]
    assert document["scopes_supported"] == [READ, WRITE]
    issuer_metadata = httpx.get(f"{provider.issuer}/.well-known/openid-configuration", timeout=30).json()
    assert issuer_metadata["issuer"] == provider.issuer  # the same string tokens carry in `iss`


def test_without_a_token_the_answer_is_401_naming_the_metadata(server: HttpServerProcess) -> None:
    for response in (post(server, None), post(server, "not-a-jwt"), httpx.get(server.url, timeout=30)):
        assert response.status_code == 401
        params = challenge(response.headers["www-authenticate"])
        assert params["resource_metadata"] == metadata_url(server)
        assert params["error"] == "invalid_token"


def test_a_token_with_both_scopes_runs_a_full_typescript_session(server: HttpServerProcess, provider: Provider) -> None:
    token = provider.token(f"{READ} {WRITE}", server.url)
    summary = run_client("bearer", server.url, {"FLOWSTEER_OAUTH_TOKEN": token})
    assert summary["connected"] is True and summary["server"] == "flowsteer"
    calls = summary["calls"]
    assert calls["list_workflows"]["ok"] and calls["list_workflows"]["isError"] is False
    assert calls["create_workflow"]["ok"] and calls["create_workflow"]["isError"] is False
    assert calls["create_workflow"]["workflowId"].startswith("wf_")
    assert all(exchange["status"] < 300 for exchange in summary["exchanges"]), summary["exchanges"]


def test_the_typescript_sdk_finds_the_authorization_server_from_the_401(
    server: HttpServerProcess, provider: Provider
) -> None:
    env = {
        "OAUTH_CLIENT_ID": "flowsteer-e2e",
        "OAUTH_CLIENT_SECRET": provider.secret,
        "OAUTH_ISSUER": provider.issuer,
        "OAUTH_SCOPE": f"{READ} {WRITE}",
    }
    summary = run_client("discover", server.url, env)
    assert summary["connected"] is True, summary
    assert summary["calls"]["create_workflow"]["ok"] and summary["calls"]["create_workflow"]["isError"] is False
    first, *rest = summary["exchanges"]
    assert (first["path"], first["status"]) == ("/mcp", 401)
    assert challenge(first["wwwAuthenticate"])["resource_metadata"] == metadata_url(server)
    assert any(e["path"] == "/.well-known/oauth-protected-resource/mcp" and e["status"] == 200 for e in rest)
    (token_request,) = [e for e in rest if e["path"] == "/token"]
    assert token_request["status"] == 200
    assert (token_request["grantType"], token_request["resource"]) == ("client_credentials", server.url)


def test_a_read_only_token_reads_but_gets_the_scope_challenge_for_edits(
    server: HttpServerProcess, provider: Provider
) -> None:
    token = provider.token(READ, server.url)
    summary = run_client("bearer", server.url, {"FLOWSTEER_OAUTH_TOKEN": token})
    assert summary["connected"] is True
    calls = summary["calls"]
    assert calls["list_workflows"]["ok"] and calls["list_workflows"]["isError"] is False
    assert calls["create_workflow"]["ok"] is False and calls["create_workflow"]["error"]["code"] == 403
    (refused,) = [e for e in summary["exchanges"] if e["status"] == 403]
    assert challenge(refused["wwwAuthenticate"]) == {
        "error": "insufficient_scope",
        "error_description": f"this request needs the {WRITE} scope",
        "scope": WRITE,
        "resource_metadata": metadata_url(server),
    }


def test_a_token_for_another_audience_is_refused(server: HttpServerProcess, provider: Provider) -> None:
    token = provider.token(f"{READ} {WRITE}", "http://other.example/mcp")
    assert claims_of(token)["aud"] == "http://other.example/mcp"
    response = post(server, token)
    assert response.status_code == 401
    assert challenge(response.headers["www-authenticate"])["error"] == "invalid_token"
    assert '"reason": "wrong_audience"' in server.logs()


def test_an_expired_token_is_refused(server: HttpServerProcess, provider: Provider) -> None:
    token = provider.token(f"{READ} {WRITE}", server.url, client="flowsteer-e2e-short")
    claims = claims_of(token)
    assert claims["exp"] - claims["iat"] == SHORT_TTL_S
    assert post(server, token).status_code == 200  # good while it lasts
    time.sleep(max(0.0, claims["exp"] - time.time()) + 1.0)
    response = post(server, token)
    assert response.status_code == 401
    assert challenge(response.headers["www-authenticate"])["error"] == "invalid_token"
    assert '"reason": "expired"' in server.logs()


def test_a_token_signed_by_another_key_is_refused(server: HttpServerProcess, provider: Provider) -> None:
    genuine = provider.token(f"{READ} {WRITE}", server.url)
    assert post(server, genuine).status_code == 200
    header = jwt.get_unverified_header(genuine)
    impostor = ec.generate_private_key(ec.SECP256R1())
    same_kid = jwt.encode(claims_of(genuine), impostor, algorithm=header["alg"], headers={"kid": header["kid"]})
    unknown_kid = jwt.encode(claims_of(genuine), impostor, algorithm=header["alg"], headers={"kid": "impostor"})
    for forged in (same_kid, unknown_kid):
        response = post(server, forged)
        assert response.status_code == 401
        assert challenge(response.headers["www-authenticate"])["resource_metadata"] == metadata_url(server)
    logs = server.logs()
    assert '"reason": "bad_signature"' in logs and '"reason": "no_key"' in logs


def test_tokens_never_reach_the_logs(server: HttpServerProcess, provider: Provider) -> None:
    tokens = [provider.token(READ, server.url), provider.token(READ, "http://other.example/mcp")]
    for token in tokens:
        post(server, token)
    logs = server.logs()
    assert '"event": "http_oauth_policy"' in logs  # the access policy was logged at start
    assert not [token for token in tokens if token in logs or token.split(".")[2] in logs]
