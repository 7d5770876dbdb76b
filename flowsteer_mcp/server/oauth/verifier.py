"""JWT access-token verification for the SDK's bearer authentication (an `mcp.server.auth.provider.TokenVerifier`).

A token passes only when all of these hold: it is a signed JWT whose `alg` is asymmetric (never `none` or
HS*: a shared secret would let anyone holding it mint tokens, and `alg` is chosen by whoever sent the token),
and the key its `kid` names in the issuer's JWKS has that very algorithm and curve; the signature verifies;
`iss` is the configured issuer exactly; `aud` is (or contains) this resource's URL, so a token minted for
another service is useless here; `exp` lies in the future by this server's clock (no leeway: an expired token
stays expired); `nbf` and `iat`, when present, are not later than now plus `leeway_s`. Anything else, including
a JWKS that cannot be fetched, yields None, which the SDK answers with 401 (fail closed). Tokens are never
logged; refusals are, with their reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import jwt
import structlog
from jwt.exceptions import (
    ImmatureSignatureError,
    InvalidAudienceError,
    InvalidIssuedAtError,
    InvalidIssuerError,
    InvalidSignatureError,
    InvalidTokenError,
    MissingRequiredClaimError,
)
from mcp.server.auth.provider import AccessToken

from flowsteer_mcp.errors import FlowSteerError
from flowsteer_mcp.server.oauth.jwks import JwksError, SigningKey, SigningKeys
from flowsteer_mcp.server.oauth.settings import OAuthSettings

log = structlog.get_logger(__name__)

MAX_TOKEN_CHARS = 16 * 1024
# The asymmetric JWS algorithms, with the key type (and curve) each needs.
ALGORITHMS: dict[str, tuple[str, str | None]] = {
    "RS256": ("RSA", None),
    "RS384": ("RSA", None),
    "RS512": ("RSA", None),
    "PS256": ("RSA", None),
    "PS384": ("RSA", None),
    "PS512": ("RSA", None),
    "ES256": ("EC", "P-256"),
    "ES384": ("EC", "P-384"),
    "ES512": ("EC", "P-521"),
    "EdDSA": ("OKP", "Ed25519"),
}


class TokenRejected(FlowSteerError, ValueError):
    """Why a bearer token was refused; `reason` is a short fixed label, safe to log."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


def granted_scopes(claims: dict[str, Any]) -> list[str]:
    """The scopes a token grants: RFC 9068 `scope` (space-separated), else `scp` (a list or a string, as some
    identity providers write it)."""
    value = claims.get("scope", claims.get("scp"))
    if isinstance(value, str):
        return value.split()
    if isinstance(value, list):
        return [item for item in value if isinstance(item, str)]
    return []


def _key_fits(key: SigningKey, algorithm: str) -> bool:
    key_type, curve = ALGORITHMS[algorithm]
    return key.key_type == key_type and key.curve == curve and key.algorithm in (None, algorithm)


class JwtVerifier:
    """Checks JWT access tokens against the issuer's keys and this resource (module docstring)."""

    def __init__(
        self, settings: OAuthSettings, keys: SigningKeys | None = None, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.settings = settings
        self.keys = keys or SigningKeys(settings)
        self._clock = clock

    async def verify_token(self, token: str) -> AccessToken | None:
        """The SDK's hook: the token's grant, or None (the SDK then answers 401)."""
        try:
            claims = await self.claims(token)
        except TokenRejected as rejected:
            log.info("oauth_bearer_refused", reason=rejected.reason, detail=rejected.detail)
            return None
        except Exception as error:  # a bug here must refuse the request (401), not answer 500 or let it through
            log.error("oauth_verifier_failed", error=type(error).__name__)
            return None
        client_id = next((claims[n] for n in ("client_id", "azp", "sub") if isinstance(claims.get(n), str)), "")
        return AccessToken(
            token=token,
            client_id=client_id,
            scopes=granted_scopes(claims),
            expires_at=int(claims["exp"]),
            resource=self._audience(claims["aud"]),  # the SDK compares it with the resource once more
            subject=claims["sub"] if isinstance(claims.get("sub"), str) else None,
            claims={"iss": claims["iss"]},
        )

    def _audience(self, aud: object) -> str | None:
        """The `aud` entry naming this resource (RFC 8707: a token may name several resources)."""
        if isinstance(aud, str):
            return aud
        listed = [item for item in aud if isinstance(item, str)] if isinstance(aud, list) else []
        return self.settings.resource if self.settings.resource in listed else next(iter(listed), None)

    async def claims(self, token: str) -> dict[str, Any]:
        """The verified claims of `token`; raises TokenRejected with the reason otherwise."""
        if len(token) > MAX_TOKEN_CHARS:
            raise TokenRejected("too_long")
        try:
            header = jwt.get_unverified_header(token)
        except InvalidTokenError:
            raise TokenRejected("malformed") from None
        algorithm = header.get("alg")
        if not isinstance(algorithm, str) or algorithm not in ALGORITHMS:
            raise TokenRejected("algorithm_not_allowed", str(algorithm)[:20])
        if "crit" in header or "b64" in header:
            raise TokenRejected("unsupported_header")  # no JWS extension is understood here (RFC 7515 4.1.11)
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise TokenRejected("malformed", "kid")
        try:
            key = await self.keys.key_for(kid)
        except JwksError as error:
            raise TokenRejected("no_key", str(error)) from None
        if not _key_fits(key, algorithm):
            raise TokenRejected("algorithm_not_allowed", f"{algorithm} with a {key.key_type} key")
        claims = self._decode(token, key, algorithm)
        exp = claims["exp"]
        if not isinstance(exp, int | float) or isinstance(exp, bool):
            raise TokenRejected("malformed", "exp")
        if exp <= self._clock():
            raise TokenRejected("expired")
        return claims

    def _decode(self, token: str, key: SigningKey, algorithm: str) -> dict[str, Any]:
        settings = self.settings
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=[algorithm],
                audience=settings.resource,
                issuer=settings.issuer,
                leeway=settings.leeway_s,
                options={"require": ["exp", "iss", "aud"], "verify_exp": False},
            )
        except InvalidSignatureError:
            raise TokenRejected("bad_signature") from None
        except InvalidAudienceError:
            raise TokenRejected("wrong_audience") from None
        except InvalidIssuerError:
            raise TokenRejected("wrong_issuer") from None
        except (ImmatureSignatureError, InvalidIssuedAtError):
            raise TokenRejected("not_yet_valid") from None
        except MissingRequiredClaimError as error:
            raise TokenRejected("missing_claim", error.claim) from None
        except InvalidTokenError as error:
            raise TokenRejected("invalid", type(error).__name__) from None
        return claims
