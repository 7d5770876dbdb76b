"""The MCP layer: tools, resources and prompts over the canvas core (thin translation, no canvas logic)."""

from flowsteer_mcp.server.app import build_server
from flowsteer_mcp.server.in_process import in_process_server
from flowsteer_mcp.server.settings import ServerSettings

__all__ = ["ServerSettings", "build_server", "in_process_server"]
