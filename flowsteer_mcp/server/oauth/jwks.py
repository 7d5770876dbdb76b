"""The issuer's signing keys: found through discovery (or configured), fetched with httpx2, cached.

Why these rules: keys rotate, so a token with an unknown `kid` triggers one fetch, but no more often than
`jwks_refetch_s` (a stream of made-up kids must not turn into a stream of requests to the issuer); a failed
fetch waits as long before the next try. Keys older than `jwks_cache_s` are fetched again before use, and when
that fails they are not used: a key the issuer has withdrawn must not keep working because its JWKS is
unreachable (fail closed). Symmetric (`oct`) keys and keys not meant for signatures are never loaded.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import httpx2
import structlog
from jwt import PyJWK
from jwt.exceptions import PyJWKError

from flowsteer_mcp.errors import FlowSteerError
from flowsteer_mcp.server.oauth.settings import OAuthSettings, http_url

log = structlog.get_logger(__name__)

MAX_DOCUMENT_BYTES = 1024 * 1024  # discovery documents and key sets are a few KiB
FetchJson = Callable[[str], Awaitable[Any]]


class JwksError(FlowSteerError, RuntimeError):
    """No usable key: the JWKS or the discovery document could not be fetched or read, or lacks the kid."""


def discovery_urls(issuer: str) -> list[str]:
    """Where an issuer publishes its metadata: OpenID Connect Discovery (the path appended), then RFC 8414
    (the well-known segment inserted before the issuer's path)."""
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")
    return [
        f"{issuer.rstrip('/')}/.well-known/openid-configuration",
        urlunsplit((parts.scheme, parts.netloc, f"/.well-known/oauth-authorization-server{path}", "", "")),
    ]


async def fetch_json(url: str, *, timeout_s: float) -> Any:
    """GET `url` and parse its JSON, at most MAX_DOCUMENT_BYTES and without following redirects."""
    try:
        async with (
            httpx2.AsyncClient(timeout=timeout_s, follow_redirects=False) as client,
            client.stream("GET", url, headers={"accept": "application/json"}) as response,
        ):
            if response.status_code != 200:
                raise JwksError(f"{url} answered HTTP {response.status_code}")
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_DOCUMENT_BYTES:
                    raise JwksError(f"{url} sent more than {MAX_DOCUMENT_BYTES} bytes")
    except httpx2.HTTPError as error:
        raise JwksError(f"{url} could not be fetched: {type(error).__name__}") from None
    try:
        return json.loads(bytes(body))
    except (ValueError, RecursionError):
        raise JwksError(f"{url} did not send JSON") from None


@dataclass(frozen=True)
class SigningKey:
    kid: str | None
    algorithm: str | None  # the JWK's `alg`, when it names one
    key_type: str  # kty
    curve: str | None  # crv, for EC and OKP keys
    key: Any  # the cryptography public key


def parse_jwks(document: Any) -> list[SigningKey]:
    """The signature keys of a JWKS document; keys PyJWT cannot load are skipped. JwksError when none is left."""
    entries = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise JwksError("the JWKS has no `keys` list")
    keys: list[SigningKey] = []
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("kty") == "oct" or entry.get("use", "sig") != "sig":
            continue
        try:
            loaded = PyJWK(entry)
        except PyJWKError:
            continue
        kid, alg = entry.get("kid"), entry.get("alg")
        keys.append(
            SigningKey(
                kid=kid if isinstance(kid, str) else None,
                algorithm=alg if isinstance(alg, str) else None,
                key_type=str(entry["kty"]),
                curve=entry.get("crv") if isinstance(entry.get("crv"), str) else None,
                key=loaded.key,
            )
        )
    if not keys:
        raise JwksError("the JWKS holds no usable signature key")
    return keys


class SigningKeys:
    """The issuer's public keys, looked up by `kid` (see the module docstring for when they are fetched)."""

    def __init__(
        self,
        settings: OAuthSettings,
        *,
        fetch: FetchJson | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self._fetch = fetch or (lambda url: fetch_json(url, timeout_s=settings.http_timeout_s))
        self._clock = clock
        self._lock = anyio.Lock()
        self._jwks_url = settings.jwks_url
        self._keys: list[SigningKey] = []
        self._fetched_at: float | None = None  # last successful fetch
        self._tried_at: float | None = None  # last attempt, successful or not
        self.fetches = 0  # attempts so far (tests and logs read it)

    async def key_for(self, kid: str | None) -> SigningKey:
        """The key a token header's `kid` names; without a kid, the only key. Raises JwksError."""
        async with self._lock:
            if self._stale():
                await self._refresh_if_allowed()
            if self._fetched_at is None or self._stale():
                raise JwksError("the issuer's keys are unavailable")
            found = self._pick(kid)
            if found is None and self._may_try():
                await self._refresh_if_allowed()
                found = self._pick(kid)
        if found is None:
            raise JwksError("no key of the issuer has this kid" if kid else "the token names no kid")
        return found

    def _stale(self) -> bool:
        return self._fetched_at is None or self._clock() - self._fetched_at >= self.settings.jwks_cache_s

    def _may_try(self) -> bool:
        return self._tried_at is None or self._clock() - self._tried_at >= self.settings.jwks_refetch_s

    def _pick(self, kid: str | None) -> SigningKey | None:
        if kid is None:
            return self._keys[0] if len(self._keys) == 1 else None
        return next((key for key in self._keys if key.kid == kid), None)

    async def _refresh_if_allowed(self) -> None:
        if not self._may_try():
            return
        self._tried_at = self._clock()
        self.fetches += 1
        try:
            url = self._jwks_url or await self._discover()
            self._keys = parse_jwks(await self._fetch(url))
        except JwksError as error:
            log.warning("oauth_jwks_unavailable", issuer=self.settings.issuer, reason=str(error))
            return
        self._jwks_url = url
        self._fetched_at = self._clock()
        log.info("oauth_jwks_loaded", jwks_url=url, kids=[key.kid for key in self._keys])

    async def _discover(self) -> str:
        """The `jwks_uri` of the issuer's metadata, which must name this very issuer (RFC 8414 section 3.3)."""
        problems = []
        for url in discovery_urls(self.settings.issuer):
            try:
                document = await self._fetch(url)
            except JwksError as error:
                problems.append(str(error))
                continue
            if not isinstance(document, dict) or document.get("issuer") != self.settings.issuer:
                problems.append(f"{url} is not the metadata of issuer {self.settings.issuer}")
                continue
            jwks_uri = document.get("jwks_uri")
            try:
                return http_url(str(jwks_uri), "discovered jwks_uri", https_unless_loopback=True)
            except ValueError as error:
                problems.append(str(error))
        raise JwksError("; ".join(problems))
