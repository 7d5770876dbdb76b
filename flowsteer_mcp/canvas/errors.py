"""Canvas errors: every agent mistake becomes one of these, with a message that says how to fix it."""

from __future__ import annotations

from enum import StrEnum

from flowsteer_mcp.errors import FlowSteerError


class ErrorCode(StrEnum):
    PARSE_ERROR = "parse_error"
    UNKNOWN_OPERATOR = "unknown_operator"
    DISABLED_OPERATOR = "disabled_operator"
    INVALID_STRUCTURE = "invalid_structure"
    UNKNOWN_NODE = "unknown_node"
    INVALID_TARGET = "invalid_target"
    INVALID_PROMPT = "invalid_prompt"
    INVALID_POSITION = "invalid_position"
    LIMIT_EXCEEDED = "limit_exceeded"
    WRONG_STATE = "wrong_state"
    EPISODE_OVER = "episode_over"
    INVALID_IMPORT = "invalid_import"
    INVALID_TEXT = "invalid_text"
    INVALID_OPTIONS = "invalid_options"


class CanvasError(FlowSteerError, ValueError):
    """An invalid action. Raised before anything changes, so the canvas is left exactly as it was."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
