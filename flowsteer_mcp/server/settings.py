"""Server settings: store, limits, TTL and the HTTP transport's security."""

from __future__ import annotations

import ipaddress

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from flowsteer_mcp.canvas.options import CanvasLimits


class ServerSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    store: str = "memory"  # "memory" or "sqlite:PATH"
    max_workflows: int = Field(default=1000, ge=1)
    workflow_ttl_s: float = Field(default=3600.0, gt=0)  # idle in-memory workflows expire after this
    max_rounds_cap: int = Field(default=200, ge=1)
    max_task_chars: int = Field(default=100_000, ge=1)
    max_import_chars: int = Field(default=500_000, ge=1)
    limits: CanvasLimits = Field(default_factory=CanvasLimits)
    # HTTP transport
    host: str = "127.0.0.1"
    port: int = Field(default=8765, ge=0, le=65535)
    path: str = "/mcp"
    token: SecretStr | None = None
    max_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    allowed_hosts: list[str] = Field(default_factory=list)  # extra Host headers accepted (DNS-rebinding protection)

    def is_loopback(self) -> bool:
        return is_loopback_host(self.host)


def is_loopback_host(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
