"""The HTTP access rules in-process (fast): Host/Origin parsing and policy, bearer-header parsing, settings that
can never work, the app refusing rebound names on every loopback bind form, and browser origins checked with a
token too."""

from __future__ import annotations

import httpx
import pytest
from pydantic import SecretStr, ValidationError
from starlette.types import Receive, Scope, Send

from flowsteer_mcp.cli import mcp_main
from flowsteer_mcp.host_policy import (
    HostPolicy,
    UnsafeBindError,
    allowed_origin,
    is_loopback_name,
    split_authority,
    split_origin,
)
from flowsteer_mcp.server import ServerSettings, build_server
from flowsteer_mcp.server.auth import BearerTokenMiddleware, token_problem
from flowsteer_mcp.store.memory import MemoryStore
from operators.registry import OperatorRegistry

SECRET = "unit-test-secret-4f1b2c"


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("localhost:8765", ("localhost", 8765)),
        ("LocalHost.", ("localhost", None)),
        ("127.0.0.2:1", ("127.0.0.2", 1)),
        ("[0:0:0:0:0:0:0:1]:8765", ("::1", 8765)),
        ("MyName:443", ("myname", 443)),
    ],
)
def test_host_headers_are_split_and_canonicalised(header: str, expected: tuple[str, int | None]) -> None:
    assert split_authority(header) == expected


@pytest.mark.parametrize(
    "header", ["", "::1", "[::1", "[127.0.0.1]:80", "a:b", "a:99999", "a:80:80", "user@host", "evil.example:8o", "x y"]
)
def test_malformed_host_headers_are_refused(header: str) -> None:
    with pytest.raises(ValueError):
        split_authority(header)


@pytest.mark.parametrize(
    "name", ["localhost", "LOCALHOST", "127.0.0.1", "127.0.0.2", "127.255.0.9", "::1", "[::1]", "0:0:0:0:0:0:0:1"]
)
def test_every_loopback_spelling_is_loopback(name: str) -> None:
    assert is_loopback_name(name)


@pytest.mark.parametrize("name", ["0.0.0.0", "::", "127.1", "localhost.evil.example", "evil.example", "192.0.2.1"])
def test_other_names_are_not_loopback(name: str) -> None:
    assert not is_loopback_name(name)


def test_a_token_without_named_hosts_needs_no_host_check_but_origin_is_checked() -> None:
    with_token = HostPolicy.for_server("0.0.0.0", [], authenticated=True)
    assert not with_token.check_host
    assert with_token.accepts_origin("http://localhost:5173") and with_token.accepts_origin("https://127.0.0.1")
    assert not with_token.accepts_origin("https://evil.example") and not with_token.accepts_origin("null")
    assert HostPolicy.for_server("127.0.0.1", [], authenticated=False).check_host
    assert HostPolicy.for_server("0.0.0.0", ["myname"], authenticated=True).check_host


@pytest.mark.parametrize(
    ("value", "canonical"),
    [
        ("https://App.Example", "https://app.example"),
        ("HTTPS://app.example:443", "https://app.example"),
        ("http://app.example:80", "http://app.example"),
        ("https://app.example:8443", "https://app.example:8443"),
        ("http://[0:0:0:0:0:0:0:2]:3000", "http://[::2]:3000"),
        (" http://10.0.0.7:8080 ", "http://10.0.0.7:8080"),
    ],
)
def test_allowed_origins_are_canonicalised(value: str, canonical: str) -> None:
    assert allowed_origin(value) == canonical
    assert ServerSettings(allowed_origins=[value]).allowed_origins == [canonical]


@pytest.mark.parametrize(
    "value",
    ["app.example", "null", "*", "ftp://app.example", "https://app.example/", "https://app.example/x", "https://"],
)
def test_allowed_origins_must_be_origins(value: str) -> None:
    with pytest.raises(ValidationError, match="must be scheme://host"):
        ServerSettings(allowed_origins=[value])


def test_an_allowed_origin_matches_scheme_name_and_port_exactly() -> None:
    policy = HostPolicy.for_server(
        "0.0.0.0", [], authenticated=True, allowed_origins=["https://app.example:8443", "http://tools.example"]
    )
    for origin in ["https://app.example:8443", "HTTPS://APP.EXAMPLE:8443", "http://tools.example:80"]:
        assert policy.accepts_origin(origin), origin
    for origin in [
        "https://app.example",
        "http://app.example:8443",
        "https://app.example:8444",
        "https://tools.example",
    ]:
        assert not policy.accepts_origin(origin), origin
    assert split_origin("http://tools.example") == ("http", "tools.example", 80)


def test_policy_accepts_loopback_names_the_bind_address_and_named_hosts_with_any_port() -> None:
    policy = HostPolicy.for_server("10.1.2.3", ["MyName."], authenticated=True)
    assert policy is not None
    for host in ["myname", "myname:1", "MYNAME:8765", "10.1.2.3:8765", "127.0.0.1:9", "localhost", "[::1]:80"]:
        assert policy.accepts_host(host), host
    for host in ["evil.example", "myname.evil.example:80", "evil.example:8765", "0.0.0.0:8765", "myname:x"]:
        assert not policy.accepts_host(host), host
    for origin in ["http://myname:3000", "https://localhost", "HTTP://127.0.0.1:5173"]:
        assert policy.accepts_origin(origin), origin
    for origin in ["null", "http://evil.example", "file://myname", "http://myname/path", "myname"]:
        assert not policy.accepts_origin(origin), origin


async def echo_ok(scope: Scope, receive: Receive, send: Send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


async def status_with(authorization: list[str]) -> int:
    transport = httpx.ASGITransport(app=BearerTokenMiddleware(echo_ok, SECRET))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        response = await client.get("/mcp", headers=[("Authorization", value) for value in authorization])
    return response.status_code


@pytest.mark.parametrize("header", [f"Bearer {SECRET}", f"bearer {SECRET}", f"BEARER {SECRET}", f"Bearer   {SECRET}"])
async def test_the_scheme_is_case_insensitive(header: str) -> None:
    assert await status_with([header]) == 200


@pytest.mark.parametrize(
    "headers",
    [
        [],
        [SECRET],
        ["Bearer"],
        [f"Basic {SECRET}"],
        [f"Bearer{SECRET}"],
        [f"Bearer {SECRET[:-1]}"],
        [f"Bearer {SECRET}x"],
        [f"Bearer {SECRET.upper()}"],
        [f"Bearer {SECRET}", f"Bearer {SECRET}"],
    ],
)
async def test_anything_but_one_exact_bearer_header_is_refused(headers: list[str]) -> None:
    assert await status_with(headers) == 401


@pytest.mark.parametrize(
    "token", ["", "   ", "\t", f" {SECRET}", f"{SECRET}\n", "two words-12345678", "caf\u00e9-secret-123"]
)
def test_tokens_that_can_never_match_are_refused(token: str) -> None:
    problem = token_problem(token)
    assert problem is not None
    with pytest.raises(ValueError, match="bearer token"):
        BearerTokenMiddleware(echo_ok, token)
    with pytest.raises(ValidationError, match="bearer token") as raised:
        ServerSettings(token=SecretStr(token))
    assert not token.strip() or token.strip() not in str(raised.value)


@pytest.mark.parametrize("name", ["myname:8080", "http://myname", "*", "my name", "[::1]:80"])
def test_allowed_hosts_are_bare_names(name: str) -> None:
    with pytest.raises(ValidationError, match="without scheme or port"):
        ServerSettings(allowed_hosts=[name])


def test_settings_canonicalise_names_and_strip_brackets_for_binding() -> None:
    settings = ServerSettings(host="[::1]", allowed_hosts=["MyName.", "0:0:0:0:0:0:0:2"])
    assert settings.allowed_hosts == ["myname", "::2"]
    assert settings.bind_host == "::1" and settings.is_loopback()


def served(registry: OperatorRegistry, **settings: object) -> httpx.AsyncClient:
    server = build_server(ServerSettings.model_validate(settings), registry=registry, store=MemoryStore())
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=server.http_app()), base_url="http://127.0.0.1")


@pytest.mark.parametrize("bind", ["127.0.0.1", "127.0.0.2", "localhost", "::1", "[::1]", "0:0:0:0:0:0:0:1"])
async def test_every_loopback_bind_without_a_token_refuses_rebound_names(registry: OperatorRegistry, bind: str) -> None:
    async with served(registry, host=bind) as client:
        assert (await client.post("/mcp", json={}, headers={"Host": "evil.example:8765"})).status_code == 421
        assert (await client.post("/mcp", json={}, headers={"Origin": "http://evil.example"})).status_code == 403


@pytest.mark.parametrize("bind", ["0.0.0.0", "192.0.2.1", "127.1", "::"])
def test_beyond_loopback_a_token_is_required(registry: OperatorRegistry, bind: str) -> None:
    server = build_server(ServerSettings(host=bind), registry=registry, store=MemoryStore())
    with pytest.raises(UnsafeBindError, match=f"Refusing to listen on {bind} without a bearer token"):
        server.http_app()


@pytest.mark.parametrize(
    ("env", "args", "message"),
    [
        ({"FLOWSTEER_MCP_TOKEN": "  "}, [], "FLOWSTEER_MCP_TOKEN is empty or only whitespace"),
        ({"MY_SECRET": ""}, ["--token-env", "MY_SECRET"], "MY_SECRET is empty or only whitespace"),
        ({}, ["--allowed-host", "myname:8080"], "allowed_hosts: allowed host 'myname:8080' must be"),
        ({}, ["--allowed-origin", "app.example"], "allowed_origins: allowed origin 'app.example' must be"),
    ],
)
def test_the_command_explains_unusable_settings(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    env: dict[str, str],
    args: list[str],
    message: str,
) -> None:
    monkeypatch.delenv("FLOWSTEER_MCP_TOKEN", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert mcp_main(["--transport", "http", "--no-executor", "--log-level", "WARNING", *args]) == 2
    error = capsys.readouterr().err
    assert message in error and "errors.pydantic.dev" not in error


@pytest.mark.parametrize("bind", ["0.0.0.0", "127.0.0.1"])
async def test_with_a_token_browser_origins_are_still_checked(registry: OperatorRegistry, bind: str) -> None:
    """The MCP specification makes servers validate Origin; a token does not turn that off (it did before)."""
    auth = {"Authorization": f"Bearer {SECRET}"}
    async with served(registry, host=bind, token=SECRET, allowed_origins=["https://app.example"]) as client:
        evil = await client.post("/mcp", json={}, headers=auth | {"Origin": "https://evil.example"})
        evil_viewer = await client.get("/view/", headers=auth | {"Origin": "http://evil.example:8765"})
        no_origin = await client.get("/view/", headers=auth)
        loopback = await client.get("/view/", headers=auth | {"Origin": "http://localhost:8765"})
        allowed = await client.get("/view/", headers=auth | {"Origin": "https://app.example"})
        other_name = await client.get("/view/", headers=auth | {"Host": "proxy.example:443"})
    assert evil.status_code == 403 and evil.json()["error"] == "invalid_origin"
    assert "--allowed-origin" in evil.json()["message"]
    assert evil_viewer.status_code == 403
    assert no_origin.status_code == 200 and loopback.status_code == 200 and allowed.status_code == 200
    assert other_name.status_code == 200  # the Host check stays off with a token
