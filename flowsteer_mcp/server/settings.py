"""Server settings: store, limits, TTL and the HTTP transport's security."""

from __future__ import annotations

from mcp.types import ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from flowsteer_mcp.canvas.options import CanvasLimits
from flowsteer_mcp.director.served import ServeMode
from flowsteer_mcp.host_policy import allowed_host_name, allowed_origin, canonical_name, is_loopback_name
from flowsteer_mcp.server.arguments import MAX_IMPORT_CHARS, MAX_TASK_CHARS, limits_over_caps
from flowsteer_mcp.server.auth import token_problem
from flowsteer_mcp.server.oauth.settings import OAuthSettings
from flowsteer_mcp.server.workbench import DEFAULT_PERSISTENT_TTL_S


class ServerSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    store: str = "memory"  # "memory", "sqlite:PATH" or "postgresql://..." (may hold a password: never log it)
    max_workflows: int = Field(default=1000, ge=1)
    workflow_ttl_s: float = Field(default=3600.0, gt=0)  # idle in-memory workflows expire after this
    # persistent workflows not edited for this long are deleted by the sweep; None keeps them forever
    persistent_ttl_s: float | None = Field(default=DEFAULT_PERSISTENT_TTL_S, gt=0)
    max_rounds_cap: int = Field(default=200, ge=1, le=1000)  # CanvasOptions.max_rounds holds at most 1000
    # Input limits may be lowered, never raised past what the tools' input schemas publish (server/arguments.py).
    max_task_chars: int = Field(default=MAX_TASK_CHARS, ge=1, le=MAX_TASK_CHARS)
    max_import_chars: int = Field(default=MAX_IMPORT_CHARS, ge=1, le=MAX_IMPORT_CHARS)
    limits: CanvasLimits = Field(default_factory=CanvasLimits)
    # long calls: a progress heartbeat at least this often (clients time out on silence), and background jobs
    progress_interval_s: float = Field(default=5.0, gt=0, le=10)
    max_running_jobs: int = Field(default=8, ge=1, le=1000)
    # which tools are offered: for clients that cap the tool count, or a server meant only for reading
    tools: list[str] | None = Field(default=None, max_length=100)  # an allow-list of tool names; None: all
    read_only: bool = False  # offer only the tools whose annotation says readOnlyHint
    # solve(director="policy"): a running OpenAI-compatible endpoint serving a Flow-Director (the operator starts
    # it), or the shipped director served by the server itself from startup to shutdown (server/policy.py)
    policy_url: str | None = Field(default=None, pattern=r"^https?://\S+$")
    policy_model: str | None = Field(default=None, min_length=1)
    serve_director: ServeMode | None = None
    # mode `executor`: the executor's own vLLM server (the one base_url of an openai executor in --config)
    director_executor_url: str | None = Field(default=None, pattern=r"^https?://\S+$")
    # HTTP transport
    host: str = "127.0.0.1"
    port: int = Field(default=8765, ge=0, le=65535)
    path: str = "/mcp"
    token: SecretStr | None = None
    max_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    allowed_hosts: list[str] = Field(default_factory=list)  # extra Host names accepted, any port (see host_policy)
    allowed_origins: list[str] = Field(default_factory=list)  # extra browser origins accepted, exactly (host_policy)
    oauth: OAuthSettings | None = None  # JWT access tokens of an outside authorization server (server/oauth)

    @field_validator("limits")
    @classmethod
    def _limits_within_the_schemas(cls, limits: CanvasLimits) -> CanvasLimits:
        if over := limits_over_caps(limits):
            raise ValueError("; ".join(over) + " (the tools' input schemas publish the caps)")
        return limits

    @field_validator("host")
    @classmethod
    def _host_is_a_name(cls, host: str) -> str:
        canonical_name(host)
        return host

    @field_validator("allowed_hosts")
    @classmethod
    def _allowed_hosts_are_names(cls, names: list[str]) -> list[str]:
        return [allowed_host_name(name) for name in names]

    @field_validator("allowed_origins")
    @classmethod
    def _allowed_origins_are_origins(cls, origins: list[str]) -> list[str]:
        return [allowed_origin(origin) for origin in origins]

    @field_validator("token")
    @classmethod
    def _token_can_match(cls, token: SecretStr | None) -> SecretStr | None:
        if token is not None and (problem := token_problem(token.get_secret_value())):
            raise ValueError(f"the bearer token {problem}")
        return token

    @model_validator(mode="after")
    def _one_credential(self) -> ServerSettings:
        """A static token beside OAuth would be a second way in that skips issuer, audience, expiry and scopes."""
        if self.token is not None and self.oauth is not None:
            raise ValueError(
                "a bearer token (FLOWSTEER_MCP_TOKEN) and OAuth (--oauth-issuer) exclude each other: use one of them"
            )
        return self

    @model_validator(mode="after")
    def _one_policy_source(self) -> ServerSettings:
        if (self.policy_url is None) != (self.policy_model is None):
            raise ValueError("--policy-url and --policy-model go together: the endpoint and the model it serves")
        if self.policy_url is not None and self.serve_director is not None:
            raise ValueError(
                "--serve-director serves the shipped director; it cannot be combined with --policy-url (pick one)"
            )
        if self.serve_director == "executor" and self.director_executor_url is None:
            raise ValueError(
                "--serve-director executor loads the director onto the executor's own vLLM server: --config must "
                "name an `openai` executor with one base_url"
            )
        return self

    @property
    def authenticated(self) -> bool:
        """Whether HTTP requests need a credential (a bearer token or an OAuth access token)."""
        return self.token is not None or self.oauth is not None

    def offers(self, tool: str, annotations: ToolAnnotations) -> bool:
        """Whether the tool filter keeps `tool` (an allow-list, and/or only read-only tools)."""
        if self.tools is not None and tool not in self.tools:
            return False
        return not self.read_only or bool(annotations.read_only_hint)

    def is_loopback(self) -> bool:
        return is_loopback_name(self.host)

    @property
    def bind_host(self) -> str:
        """The address to listen on (an IPv6 address without the brackets a URL needs)."""
        return self.host[1:-1] if self.host.startswith("[") and self.host.endswith("]") else self.host
