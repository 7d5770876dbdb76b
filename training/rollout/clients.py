"""MCP client factories for rollouts: one in-process server, or a fleet of remote servers.

Rollouts reach the canvas only through an MCP client; each trajectory opens its own client context. A fleet
(`remote_clients(urls)`) routes each episode to the least busy live server and keeps it there; the rollout
worker runs an episode whose server died again on another (`collect_groups(canvas_servers=...)`).
"""

from __future__ import annotations

from training.evaluate.clients import CANVAS_EPISODE, RemoteClients, in_process_clients, remote_clients
from training.evaluate.runner import MakeClient

__all__ = ["CANVAS_EPISODE", "MakeClient", "RemoteClients", "in_process_clients", "remote_clients"]
