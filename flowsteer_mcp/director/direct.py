"""The `direct` baseline (the paper's "Base"): the executor answers the task with one call, no workflow."""

from __future__ import annotations

import time

from mcp import Client

from flowsteer_mcp.canvas.options import TaskSpec
from flowsteer_mcp.director.episode import EpisodeResult
from operators.backends.base import BackendError, ChatBackend, ChatMessage, ChatRequest
from operators.parsing import ReplyParseError, extract_code

INSTRUCTIONS = {
    "math": "Solve the problem. Think step by step, then end with a line 'Final answer: <answer>'.",
    "code": "Write the complete Python solution. Reply with one ```python code block containing the full function "
    "(with its exact signature) and any imports it needs.",
    "qa": "Answer the question with a short span of a few words; no explanation.",
    "general": "Answer the task directly and concisely.",
}


class DirectDirector:
    name = "direct"

    def __init__(self, backend: ChatBackend) -> None:
        self.backend = backend

    async def run(self, task: TaskSpec, client: Client | None = None) -> EpisodeResult:
        """`client` is accepted for interface symmetry and unused: this baseline never touches the canvas."""
        started = time.monotonic()
        result = EpisodeResult(director=self.name, task=task, turns=1)
        prompt = task.problem
        if task.task_type == "code" and task.public_tests:
            prompt += f"\n\nExample tests:\n{task.public_tests}"
        request = ChatRequest(
            messages=[
                ChatMessage(role="system", content=INSTRUCTIONS[task.task_type]),
                ChatMessage(role="user", content=prompt),
            ],
            operator="direct",
        )
        try:
            response = await self.backend.complete(request)
        except BackendError as error:
            return result.model_copy(update={"error": str(error), "wall_s": time.monotonic() - started})
        answer: str | None = response.text
        error_text = None
        if task.task_type == "code":
            try:
                answer = extract_code(response.text, entry_point=task.entry_point)
            except ReplyParseError as error:
                answer, error_text = None, f"no code in the reply: {error}"
        return result.model_copy(
            update={
                "answer": answer,
                "error": error_text,
                "finished": answer is not None,
                "llm_calls": 1,
                "tokens": response.usage.total_tokens,
                "wall_s": time.monotonic() - started,
            }
        )
