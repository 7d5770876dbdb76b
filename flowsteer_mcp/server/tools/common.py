"""What the canvas tool modules share: the id arguments, a step's result, and re-annotating a tool whose schema is
decided when the server is built."""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from typing import Annotated, Any, TypeVar, cast

from pydantic import Field

from flowsteer_mcp.canvas.step import StepResult
from flowsteer_mcp.server.results import WorkflowStep

WorkflowId = Annotated[str, Field(min_length=1, max_length=64, description="handle returned by create_workflow")]
NodeId = Annotated[str, Field(min_length=1, max_length=64, description="a node id such as node_3 or node_2_p0")]
OperatorName = Annotated[str, Field(min_length=1, max_length=64, description="an operator name from list_operators")]
ToolFn = TypeVar("ToolFn", bound=Callable[..., Any])


def step_of(workflow_id: str, result: StepResult) -> WorkflowStep:
    return WorkflowStep(workflow_id=workflow_id, **result.model_dump())


def with_annotations(fn: ToolFn, **annotations: object) -> ToolFn:
    """A copy of `fn` whose named parameters carry other annotations: for a schema decided when the server is
    built rather than at import. The copy has fn's name and docstring, so it is the same tool otherwise."""
    unknown = set(annotations) - set(inspect.signature(fn).parameters)
    if unknown:
        raise TypeError(f"{fn.__name__} has no parameters {sorted(unknown)}")
    copy = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    copy.__doc__ = fn.__doc__
    copy.__module__ = fn.__module__
    copy.__qualname__ = fn.__qualname__
    copy.__annotations__ = {**fn.__annotations__, **annotations}
    return cast(ToolFn, copy)
