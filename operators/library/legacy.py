"""Legacy operators kept for old workflows (not advertised to policies): CustomCodeGenerate, MdEnsemble."""

from __future__ import annotations

import random
from collections import Counter

import anyio

from operators.base import Operator, OperatorInput, OperatorOutput, OperatorRuntime
from operators.library._dialogue import Failure, ask_for_program
from operators.library._options import int_option
from operators.library.ensemble import EnsembleOutput, ask_choice
from operators.prompting import context_sections, no_candidates_error
from operators.specs import BUILTIN_SPECS

__all__ = ["CodeOutput", "CustomCodeGenerate", "MdEnsemble"]


class CodeOutput(OperatorOutput):
    """The program is both `text` and `code`; it has not been run."""


_CODE_JOB = (
    "Write a correct, self-contained Python implementation for the task below, with the exact function "
    "name and signature the task asks for."
)


class CustomCodeGenerate(Operator):
    """Writes code without running it (Programmer is the maintained way to write code)."""

    spec = BUILTIN_SPECS["CustomCodeGenerate"]
    output_model = CodeOutput

    async def run(self, inputs: OperatorInput, runtime: OperatorRuntime) -> CodeOutput:
        return await ask_for_program(
            runtime,
            self.spec,
            CodeOutput,
            job=_CODE_JOB,
            sections=context_sections(inputs, solution=True, feedback=True, guidance=True),
            instruction=inputs.instruction,
            task=inputs,
        )


_JUDGE_JOB = (
    "Choose the candidate solution that best solves the problem below. Judge correctness and "
    "completeness, not the order in which the candidates are listed."
)


class MdEnsemble(Operator):
    """Several judging rounds over shuffled candidate orders (to cancel position bias), then a majority.

    The rounds run concurrently; the shuffles are seeded by round number so runs are reproducible.
    Unusable replies lose their vote; when no round yields a vote the result is an error, never a default.
    """

    spec = BUILTIN_SPECS["MdEnsemble"]
    output_model = EnsembleOutput

    async def run(self, inputs: OperatorInput, runtime: OperatorRuntime) -> EnsembleOutput:
        candidates = inputs.candidates
        present = [i for i, c in enumerate(candidates) if c.strip()]
        if not present:
            return EnsembleOutput(ok=False, error=no_candidates_error("MdEnsemble"))
        if len(present) == 1:
            return EnsembleOutput(text=candidates[present[0]], index=present[0], votes=[1], decided_by="single")
        rounds = int_option(runtime, "md_ensemble_rounds", 3, low=1, high=10)
        if isinstance(rounds, Failure):
            return rounds.as_output(EnsembleOutput)
        picks: list[int | Failure] = [Failure("not run")] * rounds

        async def judge(round_no: int) -> None:
            order = list(present)
            random.Random(round_no).shuffle(order)
            pick = await ask_choice(runtime, self.spec, inputs, _JUDGE_JOB, [candidates[i] for i in order])
            picks[round_no] = pick if isinstance(pick, Failure) else order[pick]

        async with anyio.create_task_group() as group:
            for round_no in range(rounds):
                group.start_soon(judge, round_no)
        backend_failures = [p for p in picks if isinstance(p, Failure) and p.from_backend]
        if backend_failures:
            return backend_failures[0].as_output(EnsembleOutput)
        valid = [p for p in picks if isinstance(p, int)]
        if not valid:
            reasons = "; ".join(p.error for p in picks if isinstance(p, Failure))
            return EnsembleOutput(ok=False, error=f"MdEnsemble: no round produced a usable vote ({reasons})")
        tally = Counter(valid)
        best = max(tally.values())
        chosen = next(i for i in valid if tally[i] == best)  # ties: the earliest round's pick
        votes = [tally.get(i, 0) for i in range(len(candidates))]
        return EnsembleOutput(text=candidates[chosen], index=chosen, votes=votes, decided_by="llm")
