"""The single direct call: how a task is put to an executor that answers it alone, with no workflow.

Why it lives with the operators: it is both the `direct` baseline and the first step of a workflow. A solver
node that starts a workflow (`fresh_start`) asks exactly this, with no system message of ours, so a one-solver
workflow's greedy draw *is* the direct answer and sampling adds candidates around it instead of replacing it
with a weaker framing (measured: greedy workflow steps under the workflow framing scored 10-13 points below this
call on HumanEval and GSM8K). The node's own prompt, if it has one, is added to this call rather than replacing
it (measured: the library's "Reason step by step and state the final number." as the whole job solved 5 of 30
GSM8K problems where the bare call solved 9, and trained directors write such prompts into most of their solvers).
Code is the exception: a prompted code solver keeps the workflow framing, because its draws feed selection by
execution, and a trained director's sampled code candidates passed the public tests less often under the direct
form (MBPP and HumanEval items 1-50: 37 of 59 selections against 46 of 58; `docs/runs/cpu-warmstart`, section 18).

The call looks the way the model was trained and evaluated: the instruction in the user turn, no system
message (the chat template supplies its default, e.g. Qwen's "You are Qwen..."), math answers in `\\boxed{}`
(the format Qwen models were trained on and the scorer reads first), code as one fenced block.
"""

from __future__ import annotations

import ast
import re

from operators.base import OperatorInput, TaskType

__all__ = ["INSTRUCTIONS", "asks_directly", "direct_prompt", "fresh_start", "with_task_imports"]

INSTRUCTIONS: dict[TaskType, str] = {
    "math": "Please reason step by step, and put your final answer within \\boxed{}.",
    "code": "Write the complete Python solution. Reply with one ```python code block containing the full function "
    "(with its exact signature) and any imports it needs.",
    "qa": "Answer the question with a short span of a few words; no explanation.",
    "general": "Answer the task directly and concisely.",
}


def direct_prompt(
    problem: str, task_type: TaskType, public_tests: str | None = None, extra_instruction: str | None = None
) -> str:
    """The only (user) turn. Code: instruction, then the stub and its example tests, as code evaluations ask;
    otherwise the task, then the instruction (for math, the suffix Qwen's math training used).

    `extra_instruction` (a workflow node's prompt) goes right after the standard instruction for code and right
    before it otherwise, so the answer format the scorer reads (`\\boxed{}`, one code block) is never overruled.
    """
    extra = f"{extra_instruction.strip()}\n" if extra_instruction and extra_instruction.strip() else ""
    if task_type == "code":
        tests = f"\n\nExample tests:\n{public_tests}" if public_tests and public_tests.strip() else ""
        stub = problem.strip("\n")  # keeps the stub's indentation, drops the blank lines around it
        return f"{INSTRUCTIONS['code']}\n{extra}\n{stub}{tests}"
    return f"{problem.strip()}\n{extra}{INSTRUCTIONS[task_type]}"


def fresh_start(inputs: OperatorInput) -> bool:
    """True when a solver has nothing from earlier steps: no plan, candidates, solution or feedback. Such a call
    is the direct call, with the node's own prompt added (see the module docstring)."""
    return not (
        inputs.guidance
        or any(c.strip() for c in inputs.candidates)
        or (inputs.solution or "").strip()
        or (inputs.code or "").strip()
        or (inputs.feedback or "").strip()
    )


def asks_directly(inputs: OperatorInput) -> bool:
    """True when a solver sends the direct call: nothing from earlier steps, and for code no prompt either."""
    prompted = bool((inputs.instruction or "").strip())
    return fresh_start(inputs) and not (prompted and inputs.task_type == "code")


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
