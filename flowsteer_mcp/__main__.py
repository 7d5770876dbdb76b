"""`python -m flowsteer_mcp` runs the MCP server (same as `flowsteer-mcp`)."""

from flowsteer_mcp.cli import mcp_main

raise SystemExit(mcp_main())
