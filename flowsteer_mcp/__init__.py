"""FlowSteer-MCP: an executable agentic-workflow canvas exposed as MCP tools."""

__version__ = "0.1.0"
