"""`FlowSteerError`: the root of every exception the `flowsteer_mcp` package defines.

Why: the server and the commands can tell their own, explained failures from bugs in one clause. Each class
keeps its standard base as well (`class CanvasError(FlowSteerError, ValueError)`), so an existing
`except ValueError` keeps its meaning. This module imports nothing, so every layer (canvas, engine, server,
director, store) may use it.
"""

from __future__ import annotations

__all__ = ["FlowSteerError"]


class FlowSteerError(Exception):
    """Base of the exceptions defined in `flowsteer_mcp`."""
