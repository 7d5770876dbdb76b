"""The data-flow state a workflow run threads through its stages.

Why immutable: parallel branches all start from the same state and a cancelled or failed stage must leave
the previous state intact, so every update returns a new `FlowState` instead of mutating one.

Update rules (docs/design/canvas.md, "Data flow"), by the operator's declared role:
- GUIDANCE: its text is appended to `guidance`; the solution is untouched (a plan is not an answer).
- SOLUTION: its text replaces the solution (`code` too when the output carries code). An ensemble that
  returns no code inherits the code of the candidate it chose (`EnsembleOutput.index`, or the candidate it
  repeated verbatim when it names none), so a code task keeps the program of the branch it selected.
- CHECKER: feedback is set (replaced, never kept from an older check, so Revise always sees the feedback of
  the check it follows); a non-empty text becomes the solution (Test may repair code, Verify may adopt a
  corrected answer) and `code` is replaced when given. The verdict is not kept: control flow reads it from
  the checker's output.
A failed output (ok=False) never changes the state: callers do not apply it. So after a failed stage the
state still holds the latest valid solution, the "best so far" that a run whose last stage failed returns
as a `degraded` answer (runner.py).

Evidence (`tested`, `agreed`): a public-test score an output reports (`OperatorOutput.public_tests`) and an
ensemble's candidate agreement (`EnsembleOutput.agreement`) are kept with the answer they were established for
(code tasks: the program). They describe the final answer only while it is still that answer
(`answer_evidence`): a Format that rewrites "... \\boxed{42}" as "42" keeps them, a revision or a repaired
program drops them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Generic, TypeVar

from flowsteer_mcp.canvas.execution import AnswerEvidence
from flowsteer_mcp.canvas.options import TaskSpec
from operators.answers.voting import answer_classes
from operators.base import OperatorInput, OperatorOutput, PublicTestScore, Role, TaskType
from operators.library.ensemble import CandidateAgreement, EnsembleOutput

Fact = TypeVar("Fact")


@dataclass(frozen=True)
class Established(Generic[Fact]):
    """A fact about one answer: the final answer (`FlowState.final_answer`) when the fact was reported."""

    answer: str
    fact: Fact


@dataclass(frozen=True)
class FlowState:
    problem: str
    task_type: TaskType = "general"
    entry_point: str | None = None
    public_tests: str | None = None  # visible tests only; TaskSpec never carries hidden ones
    solution: str | None = None
    code: str | None = None
    feedback: str | None = None
    guidance: tuple[str, ...] = ()
    candidates: tuple[str, ...] = ()
    candidate_codes: tuple[str | None, ...] = field(default=())  # aligned with `candidates`
    tested: Established[PublicTestScore] | None = None  # the last public-test score reported (code tasks)
    agreed: Established[CandidateAgreement] | None = None  # the last candidate agreement an ensemble counted

    @classmethod
    def from_task(cls, task: TaskSpec) -> FlowState:
        return cls(
            problem=task.problem,
            task_type=task.task_type,
            entry_point=task.entry_point,
            public_tests=task.public_tests,
        )

    def to_input(self, instruction: str | None) -> OperatorInput:
        """What an operator node sees: the task, the running state and its own prompt."""
        return OperatorInput(
            problem=self.problem,
            task_type=self.task_type,
            instruction=instruction,
            solution=self.solution,
            code=self.code,
            feedback=self.feedback,
            guidance=list(self.guidance),
            candidates=list(self.candidates),
            entry_point=self.entry_point,
            public_tests=self.public_tests,
        )

    def apply(self, role: Role, output: OperatorOutput, *, uses_candidates: bool = False) -> FlowState:
        """The state after a successful output of an operator with `role`."""
        if not output.ok:
            return self
        text = output.text.strip()
        if role is Role.GUIDANCE:
            return replace(self, guidance=(*self.guidance, output.text)) if text else self
        if role is Role.CHECKER:
            updated = replace(self, feedback=output.feedback)
            if text:
                updated = replace(updated, solution=output.text)
            if output.code:
                updated = replace(updated, code=output.code)
            return updated.noting(output)
        code = output.code or (self._chosen_candidate_code(output) if uses_candidates else None)
        return replace(self, solution=output.text if text else self.solution, code=code or self.code).noting(output)

    def noting(self, output: OperatorOutput) -> FlowState:
        """This state (already updated by `output`) keeping the evidence `output` reports about its answer."""
        answer = self.final_answer()
        if answer is None:
            return self
        updated = self
        if output.public_tests is not None and self.task_type == "code":
            updated = replace(updated, tested=Established(answer, output.public_tests))
        if isinstance(output, EnsembleOutput) and output.agreement is not None:
            updated = replace(updated, agreed=Established(answer, output.agreement))
        return updated

    def established_tests(self, program: str, score: PublicTestScore) -> FlowState:
        """This state knowing `program`'s public-test score (a stopping rule ran the tests on a draw); it tells
        about the final answer when that is this program."""
        return replace(self, tested=Established(program, score)) if self.task_type == "code" else self

    def answer_evidence(self) -> AnswerEvidence | None:
        """What the kept evidence says about the final answer, or None when none of it is about this answer or
        it says nothing (one candidate and no tests run). May compare math answers with sympy: call it off the
        event loop."""
        answer = self.final_answer()
        if answer is None:
            return None
        evidence = AnswerEvidence()
        if self.tested is not None and self._same_answer(self.tested.answer, answer):
            evidence.public_tests_passed = self.tested.fact.passed
            evidence.public_tests_total = self.tested.fact.total
        agreed = self.agreed
        if agreed is not None and agreed.fact.candidates > 1 and self._same_answer(agreed.answer, answer):
            evidence.agreeing, evidence.candidates = agreed.fact.agreeing, agreed.fact.candidates
            evidence.agreement = agreed.fact.basis
        return evidence if evidence.public_tests_total is not None or evidence.candidates is not None else None

    def _same_answer(self, established: str, answer: str) -> bool:
        """Whether `answer` is still the answer the evidence was established for: the same text up to whitespace,
        or (not for code, where every character may matter) the same final answer as the vote compares them."""
        if " ".join(established.split()) == " ".join(answer.split()):
            return True
        return self.task_type != "code" and answer_classes([established, answer], self.task_type) == [[0, 1]]

    def _chosen_candidate_code(self, output: OperatorOutput) -> str | None:
        """The code of the candidate the ensemble chose: by its `index` when it gives one (exact even when two
        candidates read alike), else the candidate it repeated verbatim (Aggregate's unanimous case, plug-ins)."""
        index = output.index if isinstance(output, EnsembleOutput) else None
        if index is not None:
            return self.candidate_codes[index] if 0 <= index < len(self.candidate_codes) else None
        text = output.text.strip()
        return next((c for t, c in zip(self.candidates, self.candidate_codes, strict=False) if t.strip() == text), None)

    def with_candidates(self, texts: list[str], codes: list[str | None]) -> FlowState:
        return replace(self, candidates=tuple(texts), candidate_codes=tuple(codes))

    def without_candidates(self) -> FlowState:
        return replace(self, candidates=(), candidate_codes=())

    def final_answer(self) -> str | None:
        """The answer after the last stage: the solution, or for code tasks the program."""
        if self.task_type == "code":
            program = self.code if self.code and self.code.strip() else self.solution
            return program if program and program.strip() else None
        return self.solution if self.solution and self.solution.strip() else None
