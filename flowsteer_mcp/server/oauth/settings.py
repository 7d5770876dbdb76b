"""OAuth resource-server settings, checked at start so that a mistake stops the server instead of letting
every request fail (or, worse, pass) later."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from flowsteer_mcp.host_policy import is_loopback_name

DEFAULT_READ_SCOPE = "flowsteer:read"
DEFAULT_WRITE_SCOPE = "flowsteer:write"
# RFC 6749 section 3.3: scope-token = 1*( %x21 / %x23-5B / %x5D-7E )
_SCOPE_TOKEN = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")


def http_url(value: str, what: str, *, https_unless_loopback: bool) -> str:
    """`value` when it is an absolute http(s) URL without query, fragment or user info; else ValueError.

    Keys and discovery documents must come over TLS (plain HTTP would let anyone on the path swap the keys), so
    the issuer and JWKS URLs may be `http` only on a loopback host, as in tests and local set-ups."""
    if not value.isascii() or not value.isprintable() or any(char in value for char in ' "\\<>'):
        raise ValueError(f"the {what} must be a URL of visible ASCII characters without quotes: {value[:100]!r}")
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"the {what} must be an absolute http(s) URL, not {value[:100]!r}")
    if parts.query or parts.fragment or "#" in value or parts.username is not None:
        raise ValueError(f"the {what} must not carry a query, a fragment or user info: {value[:100]!r}")
    if https_unless_loopback and parts.scheme != "https" and not is_loopback_name(parts.hostname):
        raise ValueError(f"the {what} must use https (plain http only on a loopback host): {value[:100]!r}")
    return value


class OAuthSettings(BaseModel):
    """Where tokens come from (`issuer`, its keys) and what they must be for (`resource`, the two scopes).

    A `write_scope` token may also use everything `read_scope` allows: the editing tools return the workflow
    state anyway, so withholding the read-only tools from an editor would protect nothing."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    issuer: str  # the `iss` of accepted tokens, exactly; its discovery document names the JWKS unless jwks_url does
    resource: str  # this server's public URL (e.g. https://mcp.example.com/mcp): the `aud` tokens must carry
    jwks_url: str | None = None
    read_scope: str = DEFAULT_READ_SCOPE
    write_scope: str = DEFAULT_WRITE_SCOPE
    leeway_s: float = Field(default=30.0, ge=0, le=300)  # clock skew allowed on nbf/iat (never on exp)
    jwks_cache_s: float = Field(default=600.0, gt=0)  # keys older than this are fetched again before use
    jwks_refetch_s: float = Field(default=10.0, ge=0)  # least time between fetches for an unknown kid or a failure
    http_timeout_s: float = Field(default=5.0, gt=0, le=60)

    @field_validator("issuer")
    @classmethod
    def _issuer_is_secure(cls, value: str) -> str:
        return http_url(value, "OAuth issuer", https_unless_loopback=True)

    @field_validator("jwks_url")
    @classmethod
    def _jwks_url_is_secure(cls, value: str | None) -> str | None:
        return None if value is None else http_url(value, "JWKS URL", https_unless_loopback=True)

    @field_validator("resource")
    @classmethod
    def _resource_is_a_url(cls, value: str) -> str:
        return http_url(value, "OAuth resource URL", https_unless_loopback=False)

    @field_validator("read_scope", "write_scope")
    @classmethod
    def _scope_is_a_token(cls, value: str) -> str:
        if not _SCOPE_TOKEN.fullmatch(value):
            raise ValueError(
                f"a scope is one word of visible ASCII characters without quotes or backslashes: {value!r}"
            )
        return value

    @model_validator(mode="after")
    def _scopes_differ(self) -> OAuthSettings:
        if self.read_scope == self.write_scope:
            raise ValueError("the read and write scopes must differ")
        return self

    @property
    def scopes(self) -> list[str]:
        return [self.read_scope, self.write_scope]
