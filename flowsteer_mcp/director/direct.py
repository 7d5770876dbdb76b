"""The `direct` baseline (the paper's "Base"): the executor answers the task with one call, no workflow.

Why it is built to be strong: a workflow's gain only counts over the best single call we can honestly make.
So the call is `operators.direct_call`'s (no system message of ours, the instruction in the user turn, math
answers in `\\boxed{}`), with no reply-length cap of our own (the backend's sampling `max_tokens` applies).
Imports that the task's own code stub declares are kept when the model's program leaves them out. The checks
behind these choices: docs/runs.
"""

from __future__ import annotations

import time

from mcp import Client

from flowsteer_mcp.canvas.options import TaskSpec
from flowsteer_mcp.director.episode import EpisodeResult
from operators import direct_call
from operators.backends.base import BackendError, ChatBackend, ChatMessage, ChatRequest
from operators.direct_call import with_task_imports
from operators.parsing import ReplyParseError, extract_code

__all__ = ["DirectDirector", "direct_prompt", "with_task_imports"]


def direct_prompt(task: TaskSpec) -> str:
    """The only (user) turn of the direct call for `task` (`operators.direct_call.direct_prompt`)."""
    return direct_call.direct_prompt(task.problem, task.task_type, task.public_tests)


class DirectDirector:
    name = "direct"

    def __init__(self, backend: ChatBackend) -> None:
        self.backend = backend

    async def run(self, task: TaskSpec, client: Client | None = None) -> EpisodeResult:
        """`client` is accepted for interface symmetry and unused: this baseline never touches the canvas."""
        started = time.monotonic()
        result = EpisodeResult(director=self.name, task=task, turns=1)
        request = ChatRequest(messages=[ChatMessage(role="user", content=direct_prompt(task))], operator="direct")
        try:
            response = await self.backend.complete(request)
        except BackendError as error:
            update = {"error": str(error), "wall_s": time.monotonic() - started, "executor_unavailable": True}
            return result.model_copy(update=update)
        answer: str | None = response.text
        error_text = None
        if task.task_type == "code":
            try:
                answer = with_task_imports(extract_code(response.text, entry_point=task.entry_point), task.problem)
            except ReplyParseError as error:
                answer, error_text = None, f"no code in the reply: {error}"
        return result.model_copy(
            update={
                "answer": answer,
                "error": error_text,
                "finished": True,  # the one call answered: a reply without code is an outcome, scored 0
                "llm_calls": 1,
                "tokens": response.usage.total_tokens,
                "wall_s": time.monotonic() - started,
            }
        )
