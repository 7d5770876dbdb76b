"""The OAuth resource server in-process: settings, the JWT verifier against keys made here and served by a small
issuer over real HTTP (each rejection reason, kid rotation, refetch limits, a JWKS that is down), the scope each
JSON-RPC message needs, and the gate (metadata, 401 and 403 challenges, body replay) around a real server."""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import jwt
import pytest
from mcp.server.auth.provider import AccessToken
from pydantic import SecretStr, ValidationError
from starlette.types import Receive, Scope, Send

from flowsteer_mcp.cli import mcp_main
from flowsteer_mcp.host_policy import UnsafeBindError
from flowsteer_mcp.server import ServerSettings, build_server
from flowsteer_mcp.server.oauth import OAuthSettings
from flowsteer_mcp.server.oauth.gate import oauth_gate
from flowsteer_mcp.server.oauth.jwks import SigningKeys, discovery_urls
from flowsteer_mcp.server.oauth.scopes import Access, ScopePolicy
from flowsteer_mcp.server.oauth.verifier import JwtVerifier, TokenRejected
from flowsteer_mcp.store.memory import MemoryStore
from operators.registry import OperatorRegistry
from tests.support.oauth import READ, RESOURCE, WRITE, IssuerServer, TestKey, claims_for, issuer_server, make_key, mint
from tests.support.servers import free_port

METADATA_URL = "https://mcp.test.example/.well-known/oauth-protected-resource/mcp"
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def rsa_key() -> TestKey:
    return make_key("rsa-1", "RS256")


@pytest.fixture
def issuer(rsa_key: TestKey) -> Iterator[IssuerServer]:
    with issuer_server(rsa_key) as server:
        yield server


def settings_for(issuer: IssuerServer, *, discover: bool = False, **changes: Any) -> OAuthSettings:
    return OAuthSettings(
        issuer=issuer.url, resource=RESOURCE, jwks_url=None if discover else issuer.jwks_url, **changes
    )


def verifier_for(settings: OAuthSettings, clock: Clock | None = None) -> JwtVerifier:
    return JwtVerifier(settings, SigningKeys(settings, clock=clock or Clock()))


async def reason(verifier: JwtVerifier, token: str) -> str:
    """Why `verifier` refuses `token` (and check that the SDK hook refuses it too)."""
    with pytest.raises(TokenRejected) as rejected:
        await verifier.claims(token)
    assert await verifier.verify_token(token) is None
    return rejected.value.reason


# --- settings -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"issuer": "http://idp.example"}, "must use https"),
        ({"issuer": "https://idp.example/?tenant=1"}, "must not carry a query"),
        ({"issuer": "idp.example"}, "absolute http(s) URL"),
        ({"resource": "ftp://mcp.example/mcp"}, "absolute http(s) URL"),
        ({"resource": "https://mcp.example/mcp#frag"}, "must not carry a query, a fragment"),
        ({"resource": 'https://mcp.example/"mcp'}, "without quotes"),
        ({"jwks_url": "http://idp.example/jwks"}, "must use https"),
        ({"read_scope": "same", "write_scope": "same"}, "must differ"),
        ({"write_scope": "two words"}, "one word"),
        ({"audience": "x"}, "Extra inputs are not permitted"),
    ],
)
def test_oauth_settings_refuse_mistakes(changes: dict[str, str], message: str) -> None:
    fields = {"issuer": "https://idp.example", "resource": "https://mcp.example/mcp", **changes}
    with pytest.raises(ValidationError, match=re.escape(message)):
        OAuthSettings.model_validate(fields)


def test_loopback_issuers_may_use_plain_http_and_the_resource_any_http() -> None:
    settings = OAuthSettings(issuer="http://127.0.0.1:9000", resource="http://10.0.0.5:8765/mcp")
    assert (settings.read_scope, settings.write_scope) == (READ, WRITE)
    assert settings.scopes == [READ, WRITE]


def test_a_static_token_and_oauth_exclude_each_other() -> None:
    oauth = OAuthSettings(issuer="https://idp.example", resource="https://mcp.example/mcp")
    with pytest.raises(ValidationError, match="exclude each other"):
        ServerSettings(token=SecretStr("static-token-123456789"), oauth=oauth)
    assert ServerSettings(oauth=oauth).authenticated and not ServerSettings().authenticated


def test_oauth_is_a_credential_for_binding_beyond_loopback(registry: OperatorRegistry) -> None:
    bare = build_server(ServerSettings(host="0.0.0.0"), registry=registry, store=MemoryStore())
    with pytest.raises(UnsafeBindError, match=re.escape("configure OAuth (--oauth-issuer URL --oauth-resource URL)")):
        bare.http_app()
    oauth = OAuthSettings(issuer="https://idp.example", resource="https://mcp.example/mcp")
    build_server(ServerSettings(host="0.0.0.0", oauth=oauth), registry=registry, store=MemoryStore()).http_app()


@pytest.mark.parametrize(
    ("env", "args", "message"),
    [
        ({}, ["--oauth-resource", "https://mcp.example/mcp"], "OAuth needs --oauth-issuer"),
        ({}, ["--oauth-issuer", "https://idp.example"], "OAuth needs --oauth-resource"),
        ({}, ["--oauth-issuer", "http://idp.example", "--oauth-resource", RESOURCE], "oauth.issuer: the OAuth issuer"),
        ({}, ["--oauth-issuer", "https://idp.example", "--oauth-resource", "mcp"], "oauth.resource: the OAuth"),
        (
            {"FLOWSTEER_MCP_TOKEN": "static-token-123456789"},
            ["--oauth-issuer", "https://idp.example", "--oauth-resource", RESOURCE],
            "exclude each other",
        ),
        ({}, ["--transport", "stdio", "--oauth-issuer", "https://idp.example"], "apply to --transport http only"),
    ],
)
def test_the_command_stops_on_oauth_mistakes(
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
    error = capsys.readouterr().err.strip()
    assert message in error and len(error.splitlines()) == 1, error
    assert "static-token-123456789" not in error


# --- the verifier -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ["RS256", "PS256", "ES256", "ES384", "EdDSA"])
async def test_a_valid_token_is_accepted_with_its_grant(algorithm: str) -> None:
    key = make_key(f"key-{algorithm}", algorithm)
    with issuer_server(make_key("other", "ES256"), key) as issuer:
        verifier = verifier_for(settings_for(issuer))
        claims = claims_for(issuer.url, scope=READ)
        token = mint(claims, key)
        granted = await verifier.verify_token(token)
    assert isinstance(granted, AccessToken)
    assert (granted.client_id, granted.scopes, granted.resource, granted.subject) == (
        "client-1",
        [READ],
        RESOURCE,
        "client-1",
    )
    assert granted.expires_at == claims["exp"] and granted.claims == {"iss": issuer.url}


async def test_an_audience_list_and_scp_claims_are_understood(issuer: IssuerServer, rsa_key: TestKey) -> None:
    claims = claims_for(issuer.url, aud=["https://other.example", RESOURCE], scp=[READ, WRITE], scope=None)
    granted = await verifier_for(settings_for(issuer)).verify_token(mint(claims, rsa_key))
    assert granted is not None and granted.scopes == [READ, WRITE]


TIME_CLAIMS = ("exp", "nbf", "iat")  # given below as seconds from now


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"aud": "https://other.example/mcp"}, "wrong_audience"),
        ({"aud": "https://mcp.test.example/mcp/other"}, "wrong_audience"),
        ({"iss": "https://evil.example"}, "wrong_issuer"),
        ({"exp": -1}, "expired"),
        ({"exp": 0}, "expired"),
        ({"nbf": 120}, "not_yet_valid"),
        ({"iat": 120}, "not_yet_valid"),
        ({"exp": None}, "missing_claim"),
        ({"aud": None}, "missing_claim"),
        ({"iss": None}, "missing_claim"),
    ],
)
async def test_each_claim_problem_is_refused(
    issuer: IssuerServer, rsa_key: TestKey, changes: dict[str, Any], expected: str
) -> None:
    now = int(time.time())
    resolved = {
        name: now + value if name in TIME_CLAIMS and value is not None else value for name, value in changes.items()
    }
    token = mint(claims_for(issuer.url, **resolved), rsa_key)
    assert await reason(verifier_for(settings_for(issuer)), token) == expected


async def test_nbf_and_iat_get_the_leeway_but_exp_does_not(issuer: IssuerServer, rsa_key: TestKey) -> None:
    now = int(time.time())
    verifier = verifier_for(settings_for(issuer, leeway_s=30))
    assert await verifier.verify_token(mint(claims_for(issuer.url, nbf=now + 20, iat=now + 20), rsa_key))
    assert await reason(verifier, mint(claims_for(issuer.url, nbf=now + 40), rsa_key)) == "not_yet_valid"
    assert await reason(verifier, mint(claims_for(issuer.url, exp=now - 1), rsa_key)) == "expired"


async def test_a_token_signed_by_another_key_is_refused(issuer: IssuerServer, rsa_key: TestKey) -> None:
    impostor = make_key(rsa_key.kid, "RS256")  # same kid, different key
    token = mint(claims_for(issuer.url), impostor)
    assert await reason(verifier_for(settings_for(issuer)), token) == "bad_signature"


async def test_a_tampered_token_is_refused(issuer: IssuerServer, rsa_key: TestKey) -> None:
    header, _, signature = mint(claims_for(issuer.url, scope=READ), rsa_key).split(".")
    widened = segment(claims_for(issuer.url, scope=f"{READ} {WRITE}"))
    assert await reason(verifier_for(settings_for(issuer)), f"{header}.{widened}.{signature}") == "bad_signature"


def segment(value: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


async def test_alg_none_and_hmac_are_refused_before_any_key_is_fetched(issuer: IssuerServer, rsa_key: TestKey) -> None:
    verifier = verifier_for(settings_for(issuer))
    claims = claims_for(issuer.url)
    unsigned = f"{segment({'alg': 'none', 'typ': 'JWT', 'kid': rsa_key.kid})}.{segment(claims)}."
    public_bytes = rsa_key.jwk["n"].encode()  # key confusion: the public key's bytes as an HMAC secret
    hmac = jwt.encode(claims, public_bytes, algorithm="HS256", headers={"kid": rsa_key.kid})
    assert await reason(verifier, unsigned) == "algorithm_not_allowed"
    assert await reason(verifier, hmac) == "algorithm_not_allowed"
    assert issuer.fetches() == 0


async def test_an_algorithm_the_key_was_not_made_for_is_refused(issuer: IssuerServer, rsa_key: TestKey) -> None:
    token = mint(claims_for(issuer.url), rsa_key, algorithm="PS256")  # the JWK says RS256
    assert await reason(verifier_for(settings_for(issuer)), token) == "algorithm_not_allowed"
    ec_key = make_key("ec-1", "ES256")
    issuer.serve(rsa_key, ec_key)
    es384 = mint(claims_for(issuer.url), make_key("ec-1", "ES384"))  # ES384 with the kid of a P-256 key
    assert await reason(verifier_for(settings_for(issuer)), es384) == "algorithm_not_allowed"


@pytest.mark.parametrize("token", ["", "abc", "a.b.c", "x" * 20_000, "e30.e30.e30.e30.e30"])
async def test_garbage_is_refused(issuer: IssuerServer, token: str) -> None:
    assert await reason(verifier_for(settings_for(issuer)), token) in {"malformed", "too_long", "algorithm_not_allowed"}


async def test_crit_headers_are_refused(issuer: IssuerServer, rsa_key: TestKey) -> None:
    headers = {"kid": rsa_key.kid, "crit": ["exp"]}
    token = jwt.encode(claims_for(issuer.url), rsa_key.private, algorithm="RS256", headers=headers)
    assert await reason(verifier_for(settings_for(issuer)), token) in {"malformed", "unsupported_header"}


async def test_without_a_kid_only_a_single_key_is_used(issuer: IssuerServer, rsa_key: TestKey) -> None:
    token = mint(claims_for(issuer.url), rsa_key, kid=None)
    assert await verifier_for(settings_for(issuer)).verify_token(token) is not None
    issuer.serve(rsa_key, make_key("rsa-2"))
    assert await reason(verifier_for(settings_for(issuer)), token) == "no_key"


# --- keys: rotation, refetch limits, outages, discovery -----------------------------------------------------


async def test_a_rotated_key_is_fetched_once_and_then_cached(issuer: IssuerServer, rsa_key: TestKey) -> None:
    clock = Clock()
    verifier = verifier_for(settings_for(issuer, jwks_refetch_s=10), clock)
    assert await verifier.verify_token(mint(claims_for(issuer.url), rsa_key))
    assert issuer.fetches() == 1
    rotated = make_key("rsa-2")
    issuer.serve(rsa_key, rotated)
    clock.now += 11
    for _ in range(3):
        assert await verifier.verify_token(mint(claims_for(issuer.url), rotated))
    assert await verifier.verify_token(mint(claims_for(issuer.url), rsa_key))
    assert issuer.fetches() == 2


async def test_unknown_kids_refetch_at_most_once_per_interval(issuer: IssuerServer, rsa_key: TestKey) -> None:
    clock = Clock()
    verifier = verifier_for(settings_for(issuer, jwks_refetch_s=10), clock)
    assert await verifier.verify_token(mint(claims_for(issuer.url), rsa_key))
    clock.now += 11
    for n in range(5):
        stranger = make_key(f"made-up-{n}")
        assert await reason(verifier, mint(claims_for(issuer.url), stranger)) == "no_key"
    assert issuer.fetches() == 2  # the first load, then one refetch for the five made-up kids
    clock.now += 11
    assert await reason(verifier, mint(claims_for(issuer.url), make_key("made-up-again"))) == "no_key"
    assert issuer.fetches() == 3


async def test_a_jwks_that_is_down_refuses_every_token(issuer: IssuerServer, rsa_key: TestKey) -> None:
    clock = Clock()
    verifier = verifier_for(settings_for(issuer, jwks_refetch_s=10), clock)
    issuer.state.down = True
    token = mint(claims_for(issuer.url), rsa_key)
    assert await reason(verifier, token) == "no_key"
    assert await reason(verifier, token) == "no_key"
    assert issuer.fetches() == 1  # a failure waits jwks_refetch_s before the next try
    issuer.state.down = False
    clock.now += 11
    assert await verifier.verify_token(token) is not None


async def test_keys_past_their_cache_time_are_not_used_when_the_jwks_is_down(
    issuer: IssuerServer, rsa_key: TestKey
) -> None:
    clock = Clock()
    verifier = verifier_for(settings_for(issuer, jwks_cache_s=60, jwks_refetch_s=10), clock)
    token = mint(claims_for(issuer.url), rsa_key)
    assert await verifier.verify_token(token) is not None
    issuer.state.down = True
    clock.now += 30
    assert await verifier.verify_token(token) is not None  # fresh enough: no fetch needed
    clock.now += 31
    assert await reason(verifier, token) == "no_key"  # stale, and the refetch failed: fail closed
    assert issuer.fetches() == 2


async def test_an_unreachable_jwks_refuses(rsa_key: TestKey) -> None:
    settings = OAuthSettings(
        issuer="http://127.0.0.1:9", resource=RESOURCE, jwks_url=f"http://127.0.0.1:{free_port()}/jwks"
    )
    token = mint(claims_for(settings.issuer), rsa_key)
    assert await reason(verifier_for(settings), token) == "no_key"


async def test_symmetric_keys_in_the_jwks_are_never_loaded(issuer: IssuerServer, rsa_key: TestKey) -> None:
    issuer.state.keys = [{"kty": "oct", "kid": "shared", "k": "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0", "alg": "HS256"}]
    secret = b"secret-secret-secret-secret-secret-32"
    token = jwt.encode(claims_for(issuer.url), secret, algorithm="HS256", headers={"kid": "shared"})
    assert await reason(verifier_for(settings_for(issuer)), token) == "algorithm_not_allowed"
    assert await reason(verifier_for(settings_for(issuer)), mint(claims_for(issuer.url), rsa_key)) == "no_key"


async def test_the_jwks_url_is_discovered(issuer: IssuerServer, rsa_key: TestKey) -> None:
    verifier = verifier_for(settings_for(issuer, discover=True))
    assert await verifier.verify_token(mint(claims_for(issuer.url), rsa_key)) is not None
    assert issuer.fetches("/.well-known/openid-configuration") == 1 and issuer.fetches() == 1


async def test_discovery_falls_back_to_rfc8414_metadata(issuer: IssuerServer, rsa_key: TestKey) -> None:
    issuer.state.openid_configuration = False
    verifier = verifier_for(settings_for(issuer, discover=True))
    assert await verifier.verify_token(mint(claims_for(issuer.url), rsa_key)) is not None
    assert issuer.fetches("/.well-known/oauth-authorization-server") == 1


async def test_metadata_naming_another_issuer_is_not_trusted(issuer: IssuerServer, rsa_key: TestKey) -> None:
    issuer.state.claimed_issuer = "https://evil.example"
    token = mint(claims_for(issuer.url), rsa_key)
    assert await reason(verifier_for(settings_for(issuer, discover=True)), token) == "no_key"
    assert issuer.fetches() == 0


def test_discovery_urls_follow_oidc_and_rfc8414() -> None:
    assert discovery_urls("https://idp.example/tenant/") == [
        "https://idp.example/tenant/.well-known/openid-configuration",
        "https://idp.example/.well-known/oauth-authorization-server/tenant",
    ]
    assert discovery_urls("https://idp.example") == [
        "https://idp.example/.well-known/openid-configuration",
        "https://idp.example/.well-known/oauth-authorization-server",
    ]


# --- which scope a message needs ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def policy(registry: OperatorRegistry) -> ScopePolicy:
    server = build_server(ServerSettings(), registry=registry, store=MemoryStore())
    return ScopePolicy(server.mcp.list_tools)


def call(name: object, **extra: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, **extra}}).encode()


def request(method: str) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": {}}).encode()


async def test_read_only_tools_come_from_the_annotations(registry: OperatorRegistry, policy: ScopePolicy) -> None:
    tools = await build_server(ServerSettings(), registry=registry, store=MemoryStore()).mcp.list_tools()
    annotated = {tool.name for tool in tools if tool.annotations and tool.annotations.read_only_hint}
    assert await policy.read_only_tools() == annotated
    assert {"get_workflow", "list_workflows", "list_operators", "export_workflow"} <= annotated
    assert not {"create_workflow", "act", "delete_workflow", "run_workflow"} & annotated


@pytest.mark.parametrize(
    ("body", "needed"),
    [
        (request("initialize"), Access.READ),
        (request("tools/list"), Access.READ),
        (request("resources/read"), Access.READ),
        (request("prompts/get"), Access.READ),
        (request("ping"), Access.READ),
        (b'{"jsonrpc":"2.0","method":"notifications/initialized"}', Access.READ),
        (b'{"jsonrpc":"2.0","id":7,"result":{}}', Access.READ),
        (call("list_workflows"), Access.READ),
        (call("get_workflow", arguments={"workflow_id": "wf_1"}), Access.READ),
        (call("create_workflow", arguments={"task": "x"}), Access.WRITE),
        (call("delete_workflow"), Access.WRITE),
        (call("no_such_tool"), Access.WRITE),
        (call(["list_workflows"]), Access.WRITE),
        (call(None), Access.WRITE),
        (request("tools/call"), Access.WRITE),
        (request("tasks/cancel"), Access.WRITE),
        (request("made/up"), Access.WRITE),
        (b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":"list_workflows"}', Access.WRITE),
        (b"not json", Access.WRITE),
        (b"[]", Access.WRITE),
        (b"42", Access.WRITE),
        (b"[" * 100_000, Access.WRITE),
        (
            b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_workflows","name":"act"}}',
            Access.WRITE,
        ),
        (b"[" + request("ping") + b"," + call("act") + b"]", Access.WRITE),
        (b"[" + request("ping") + b"," + call("list_workflows") + b"]", Access.READ),
        (None, Access.WRITE),
    ],
)
async def test_each_message_needs_the_scope_of_what_it_does(
    policy: ScopePolicy, body: bytes | None, needed: Access
) -> None:
    assert await policy.needed(body) is needed


# --- the gate: metadata, challenges, body replay ------------------------------------------------------------


class StaticVerifier:
    """A TokenVerifier for the gate tests: token text -> scopes."""

    def __init__(self, grants: dict[str, list[str]]) -> None:
        self.grants = grants

    async def verify_token(self, token: str) -> AccessToken | None:
        if token == "foreign":  # a verifier that let a token for another resource through
            return AccessToken(token=token, client_id="c", scopes=[READ, WRITE], resource="https://other.example/mcp")
        if token not in self.grants:
            return None
        return AccessToken(token=token, client_id="c", scopes=self.grants[token], resource=RESOURCE)


async def echo(scope: Scope, receive: Receive, send: Send) -> None:
    """Answers 200 with the request body it received."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture
def gate(policy: ScopePolicy) -> httpx.AsyncClient:
    settings = OAuthSettings(issuer="https://idp.example", resource=RESOURCE)
    app = oauth_gate(
        echo,
        settings,
        list_tools=policy._list_tools,
        mcp_path="/mcp",
        max_body_bytes=4096,
        verifier=StaticVerifier({"r": [READ], "w": [WRITE], "none": ["openid"]}),
    )
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="https://mcp.test.example")


def bearer(token: str) -> dict[str, str]:
    return MCP_HEADERS | {"Authorization": f"Bearer {token}"}


def params(response: httpx.Response) -> dict[str, str]:
    """The parameters of a `WWW-Authenticate: Bearer k="v", ...` challenge (our values hold no `", `)."""
    scheme, _, rest = response.headers["www-authenticate"].partition(" ")
    assert scheme == "Bearer"
    found = {}
    for item in rest.split(", "):
        name, _, value = item.partition("=")
        found[name] = value.strip('"')
    return found


async def test_the_metadata_document_is_public(gate: httpx.AsyncClient) -> None:
    async with gate:
        response = await gate.get("/.well-known/oauth-protected-resource/mcp")
    assert response.status_code == 200
    document = response.json()
    assert document["resource"] == RESOURCE
    assert document["authorization_servers"] == ["https://idp.example"]
    assert document["scopes_supported"] == [READ, WRITE]
    assert document["bearer_methods_supported"] == ["header"]


@pytest.mark.parametrize(
    "headers", [MCP_HEADERS, bearer("unknown"), bearer("foreign"), MCP_HEADERS | {"Authorization": "Basic r"}]
)
async def test_no_usable_token_is_401_naming_the_metadata(gate: httpx.AsyncClient, headers: dict[str, str]) -> None:
    async with gate:
        for path in ("/mcp", "/view/", "/anything"):
            response = await gate.post(path, content=request("initialize"), headers=headers)
            assert response.status_code == 401
            assert params(response)["resource_metadata"] == METADATA_URL
            assert params(response)["error"] == "invalid_token"


async def test_a_read_token_reads_and_is_challenged_to_edit(gate: httpx.AsyncClient) -> None:
    async with gate:
        listed = await gate.post("/mcp", content=call("list_workflows"), headers=bearer("r"))
        created = await gate.post("/mcp", content=call("create_workflow"), headers=bearer("r"))
        viewer = await gate.get("/view/", headers=bearer("r"))
    assert listed.status_code == 200 and listed.content == call("list_workflows")  # the body reached the app intact
    assert viewer.status_code == 200
    assert created.status_code == 403
    assert params(created) == {
        "error": "insufficient_scope",
        "error_description": f"this request needs the {WRITE} scope",
        "scope": WRITE,
        "resource_metadata": METADATA_URL,
    }
    assert created.json()["error"] == "insufficient_scope"


async def test_the_write_scope_implies_read_and_a_token_without_ours_gets_nothing(gate: httpx.AsyncClient) -> None:
    async with gate:
        for body in (call("create_workflow"), call("list_workflows"), request("initialize")):
            assert (await gate.post("/mcp", content=body, headers=bearer("w"))).status_code == 200
        refused = await gate.post("/mcp", content=request("initialize"), headers=bearer("none"))
        stream = await gate.get("/mcp", headers=bearer("none"))
    assert refused.status_code == 403 and params(refused)["scope"] == READ
    assert stream.status_code == 403 and params(stream)["scope"] == READ


async def test_a_body_over_the_limit_is_not_parsed_and_needs_write(gate: httpx.AsyncClient) -> None:
    huge = call("list_workflows", arguments={"pad": "x" * 5000})

    async def chunks() -> AsyncIterator[bytes]:
        yield huge[:3000]
        yield huge[3000:]

    async with gate:
        read = await gate.post("/mcp", content=huge, headers=bearer("r"))
        chunked = await gate.post("/mcp", content=chunks(), headers=bearer("r"))
        write = await gate.post("/mcp", content=chunks(), headers=bearer("w"))
    assert read.status_code == 403 and chunked.status_code == 403
    assert write.status_code == 200 and write.content == huge  # passed on whole; the real app answers 413


async def test_the_real_server_behind_oauth(registry: OperatorRegistry, rsa_key: TestKey) -> None:
    """The whole HTTP app (Host/Origin policy, gate, MCP session manager) with tokens the verifier checks."""
    with issuer_server(rsa_key) as issuer:
        oauth = OAuthSettings(issuer=issuer.url, resource=RESOURCE, jwks_url=issuer.jwks_url)
        server = build_server(ServerSettings(oauth=oauth), registry=registry, store=MemoryStore())
        app = server.http_app()
        read_token = mint(claims_for(issuer.url, scope=READ), rsa_key)
        transport = httpx.ASGITransport(app=app)
        async with (
            server.mcp.session_manager.run(),
            httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8765") as client,
        ):
            initialize = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "0"},
                },
            }
            opened = await client.post("/mcp", json=initialize, headers=bearer(read_token))
            assert opened.status_code == 200, opened.text
            session = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
            listed = await client.post(
                "/mcp", content=call("list_workflows", arguments={}), headers=bearer(read_token) | session
            )
            created = await client.post(
                "/mcp", content=call("create_workflow", arguments={"task": "x"}), headers=bearer(read_token) | session
            )
            anonymous = await client.post("/mcp", json=initialize, headers=MCP_HEADERS)
            evil = await client.post(
                "/mcp", json=initialize, headers=bearer(read_token) | {"Origin": "https://evil.example"}
            )
            metadata = await client.get("/.well-known/oauth-protected-resource/mcp")
            viewer = await client.get("/view/", headers={"Authorization": f"Bearer {read_token}"})
            viewer_anonymous = await client.get("/view/")
    assert listed.status_code == 200 and '"workflows"' in listed.text
    assert created.status_code == 403 and params(created)["scope"] == WRITE
    assert anonymous.status_code == 401 and params(anonymous)["resource_metadata"] == METADATA_URL
    assert evil.status_code == 403 and evil.json()["error"] == "invalid_origin"
    assert metadata.json()["resource"] == RESOURCE
    assert viewer.status_code == 200 and "FlowSteer" in viewer.text
    assert viewer_anonymous.status_code == 401 and params(viewer_anonymous)["resource_metadata"] == METADATA_URL
    assert await server.bench.list() == []  # the refused create changed nothing
