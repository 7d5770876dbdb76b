"""OAuth test helpers: signing keys made in the test, tokens minted with them, and a tiny issuer over HTTP.

`IssuerServer` is a real HTTP server on a free loopback port (in a thread of the test process, so a test can
rotate its keys or take it down between two requests): it serves the OpenID discovery document, the RFC 8414
metadata and the JWKS, counts the requests for each, and answers 503 while `down` is set.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

RESOURCE = "https://mcp.test.example/mcp"
READ, WRITE = "flowsteer:read", "flowsteer:write"

PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey


@dataclass(frozen=True)
class TestKey:
    """A private key, its kid and algorithm; `jwk` is the public half as a JWKS entry."""

    __test__ = False  # not a pytest test class

    kid: str
    algorithm: str
    private: PrivateKey

    @property
    def jwk(self) -> dict[str, Any]:
        public = self.private.public_key()
        if isinstance(public, rsa.RSAPublicKey):
            entry = RSAAlgorithm.to_jwk(public, as_dict=True)
        elif isinstance(public, ec.EllipticCurvePublicKey):
            entry = ECAlgorithm.to_jwk(public, as_dict=True)
        else:
            entry = OKPAlgorithm.to_jwk(public, as_dict=True)
        return {**entry, "kid": self.kid, "alg": self.algorithm, "use": "sig"}


def make_key(kid: str, algorithm: str = "RS256") -> TestKey:
    private: PrivateKey
    if algorithm.startswith(("RS", "PS")):
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    elif algorithm == "ES256":
        private = ec.generate_private_key(ec.SECP256R1())
    elif algorithm == "ES384":
        private = ec.generate_private_key(ec.SECP384R1())
    elif algorithm == "EdDSA":
        private = ed25519.Ed25519PrivateKey.generate()
    else:
        raise ValueError(algorithm)
    return TestKey(kid, algorithm, private)


def claims_for(issuer: str, *, lifetime_s: float = 300, **changes: Any) -> dict[str, Any]:
    """RFC 9068-style access-token claims for RESOURCE with both scopes; `changes` replace or (with None) remove
    claims."""
    now = int(time.time())
    claims: dict[str, Any] = {
        "iss": issuer,
        "aud": RESOURCE,
        "sub": "client-1",
        "client_id": "client-1",
        "scope": f"{READ} {WRITE}",
        "iat": now,
        "exp": now + int(lifetime_s),
        "jti": f"jti-{time.monotonic_ns()}",
    }
    for name, value in changes.items():
        if value is None:
            claims.pop(name, None)
        else:
            claims[name] = value
    return claims


def mint(claims: dict[str, Any], key: TestKey, *, algorithm: str | None = None, kid: str | None = "same") -> str:
    """A JWT of `claims` signed by `key`; the header names `key.kid` unless `kid` says otherwise (None: no kid)."""
    headers = {"typ": "at+jwt"}
    chosen = key.kid if kid == "same" else kid
    if chosen is not None:
        headers["kid"] = chosen
    return jwt.encode(claims, key.private, algorithm=algorithm or key.algorithm, headers=headers)


@dataclass
class IssuerState:
    keys: list[dict[str, Any]]
    down: bool = False
    openid_configuration: bool = True  # serve /.well-known/openid-configuration
    claimed_issuer: str | None = None  # the `issuer` the metadata names (default: the real one)
    requests: Counter[str] = field(default_factory=Counter)


class IssuerServer:
    """An issuer's metadata and JWKS over HTTP (module docstring); `url` is its issuer URL."""

    def __init__(self, keys: list[TestKey]) -> None:
        self.state = IssuerState(keys=[key.jwk for key in keys])
        state = self.state

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                state.requests[self.path] += 1
                if state.down:
                    self._send(503, {"error": "down"})
                elif self.path == "/jwks":
                    self._send(200, {"keys": state.keys})
                elif self.path == "/.well-known/oauth-authorization-server" or (
                    self.path == "/.well-known/openid-configuration" and state.openid_configuration
                ):
                    issuer = state.claimed_issuer or self.server_url
                    self._send(200, {"issuer": issuer, "jwks_uri": f"{self.server_url}/jwks"})
                else:
                    self._send(404, {"error": "not found"})

            @property
            def server_url(self) -> str:
                host, port = self.server.server_address[:2]
                return f"http://{host!s}:{port}"

            def _send(self, status: int, document: dict[str, Any]) -> None:
                body = json.dumps(document).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)  # port 0: a free port, listening already
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def jwks_url(self) -> str:
        return f"{self.url}/jwks"

    def serve(self, *keys: TestKey) -> None:
        """Publish exactly `keys` from now on (a rotation)."""
        self.state.keys = [key.jwk for key in keys]

    def fetches(self, path: str = "/jwks") -> int:
        return self.state.requests[path]

    def start(self) -> IssuerServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


@contextmanager
def issuer_server(*keys: TestKey) -> Iterator[IssuerServer]:
    server = IssuerServer(list(keys)).start()
    try:
        yield server
    finally:
        server.stop()
