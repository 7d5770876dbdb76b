"""What code outside the package (training, scripts, other clients in the same process) may use of the canvas
and the server; everything else under `flowsteer_mcp.canvas` and `flowsteer_mcp.server` is the package's own.

Why one surface: training used to import a dozen canvas and server internals, so renaming any of them broke it
and nobody could tell which names were promises. `tests/test_layering.py` keeps `training/` on this module.

- Tasks and options: `TaskSpec`, `CanvasOptions`, `WorkflowOptionsInput` (create_workflow's options).
- Observations: `ObservationBuilder` (the directors' system prompt and turns), `StateView` (what a turn shows).
- The dialect: `parse_action_turn`, `parse_prompt_turn`, `ActionTurn`, checked against `CanvasRules` (the
  operators and options a canvas allows); a rejected turn raises `CanvasError`.
- Workflows planned off-line (transcript variations): the stage blueprints and their slot helpers, and
  `graph_of` (the graph adding them builds, each add checked as `act` checks it), `STRUCTURES` (the structure
  kinds, a live view).
- Stage kinds: `kind_of` (a stage's or blueprint's kind: its dialect tags, drawing, ...), `structure_kinds()`
  and `kinds()` (the registered kinds, read when called), `register_kind` / `unregister_kind` /
  `registered_kind` (add a kind at run time; its stage runner: `flowsteer_mcp.engine.kinds.register_stage_runner`).
- A server in this process: `in_process_server` (`FlowSteerServer`); serving checks: `check_bind`,
  `UnsafeBindError`, `token_problem`.
"""

from flowsteer_mcp.canvas.actions import graph_of
from flowsteer_mcp.canvas.blueprint import (
    ConditionalBlueprint,
    OperatorBlueprint,
    StageBlueprint,
    slot_prompts,
    slot_samples,
    slots,
    with_operators,
    with_prompts,
    with_samples,
)
from flowsteer_mcp.canvas.dialect import ActionTurn, parse_action_turn, parse_prompt_turn
from flowsteer_mcp.canvas.errors import CanvasError
from flowsteer_mcp.canvas.kinds import (
    STRUCTURES,
    StageKind,
    kind_of,
    kinds,
    register_kind,
    registered_kind,
    structure_kinds,
    unregister_kind,
)
from flowsteer_mcp.canvas.observation import ObservationBuilder
from flowsteer_mcp.canvas.options import CanvasOptions, TaskSpec
from flowsteer_mcp.canvas.step import StateView
from flowsteer_mcp.canvas.validate import CanvasRules
from flowsteer_mcp.host_policy import UnsafeBindError, check_bind
from flowsteer_mcp.server.app import FlowSteerServer
from flowsteer_mcp.server.auth import token_problem
from flowsteer_mcp.server.in_process import in_process_server
from flowsteer_mcp.server.results import WorkflowOptionsInput

__all__ = [
    "STRUCTURES",
    "ActionTurn",
    "CanvasError",
    "CanvasOptions",
    "CanvasRules",
    "ConditionalBlueprint",
    "FlowSteerServer",
    "ObservationBuilder",
    "OperatorBlueprint",
    "StageBlueprint",
    "StageKind",
    "StateView",
    "TaskSpec",
    "UnsafeBindError",
    "WorkflowOptionsInput",
    "check_bind",
    "graph_of",
    "in_process_server",
    "kind_of",
    "kinds",
    "parse_action_turn",
    "parse_prompt_turn",
    "register_kind",
    "registered_kind",
    "slot_prompts",
    "slot_samples",
    "slots",
    "structure_kinds",
    "token_problem",
    "unregister_kind",
    "with_operators",
    "with_prompts",
    "with_samples",
]
