"""The `direct` baseline (the paper's "Base"): the executor answers the task with one call, no workflow.

Why it is built to be strong: a workflow's gain only counts over the best single call we can honestly make.
So the call looks the way the model was trained and evaluated: no system message (the model's chat template
supplies its own default, e.g. Qwen's "You are Qwen..."), the instruction in the user turn, math answers in
`\\boxed{}` (the format Qwen models are trained on and the scorer reads first), and no reply-length cap of
our own (the backend's sampling `max_tokens` applies). Imports that the task's own code stub declares are
kept when the model's program leaves them out. The checks behind these choices: docs/runs (issue #10).
"""

from __future__ import annotations

import ast
import re
import time

from mcp import Client

from flowsteer_mcp.canvas.options import TaskSpec, TaskType
from flowsteer_mcp.director.episode import EpisodeResult
from operators.backends.base import BackendError, ChatBackend, ChatMessage, ChatRequest
from operators.parsing import ReplyParseError, extract_code

INSTRUCTIONS: dict[TaskType, str] = {
    "math": "Please reason step by step, and put your final answer within \\boxed{}.",
    "code": "Write the complete Python solution. Reply with one ```python code block containing the full function "
    "(with its exact signature) and any imports it needs.",
    "qa": "Answer the question with a short span of a few words; no explanation.",
    "general": "Answer the task directly and concisely.",
}


def direct_prompt(task: TaskSpec) -> str:
    """The only (user) turn. Code: instruction, then the stub and its example tests, as code evaluations ask;
    otherwise the task, then the instruction (for math, the suffix Qwen's math training used)."""
    if task.task_type == "code":
        tests = f"\n\nExample tests:\n{task.public_tests}" if task.public_tests else ""
        stub = task.problem.strip("\n")  # keeps the stub's indentation, drops the blank lines around it
        return f"{INSTRUCTIONS['code']}\n\n{stub}{tests}"
    return f"{task.problem.strip()}\n{INSTRUCTIONS[task.task_type]}"


_IMPORT_LINE = re.compile(r"^(?:from\s+\S+\s+import\s+.+|import\s+.+)$")


def _bound_names(tree: ast.Module) -> set[str]:
    """Names a module binds at top level (imports, definitions, assignments)."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def with_task_imports(code: str, problem: str) -> str:
    """`code` with the task stub's top-level imports it lacks put first (HumanEval's `from typing import List`).

    Why: the grader runs the program alone, so an annotation such as `List[int]` whose import stayed in the
    prompt fails with NameError although the function is right. Only import lines the task itself wrote are
    added; a program that does not parse is returned unchanged.
    """
    try:
        bound = _bound_names(ast.parse(code))
    except SyntaxError:
        return code
    missing: list[str] = []
    for line in problem.splitlines():
        if not _IMPORT_LINE.match(line):
            continue
        try:
            statement = ast.parse(line)
        except SyntaxError:
            continue
        if _bound_names(statement) - bound:
            missing.append(line.strip())
            bound |= _bound_names(statement)
    return "\n".join([*missing, "", code]) if missing else code


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
            return result.model_copy(update={"error": str(error), "wall_s": time.monotonic() - started})
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
                "finished": answer is not None,
                "llm_calls": 1,
                "tokens": response.usage.total_tokens,
                "wall_s": time.monotonic() - started,
            }
        )
