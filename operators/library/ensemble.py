"""Ensembles: select (ScEnsemble) or combine (Aggregate) the candidates of a parallel stage.

Both decide programmatically when the candidates make the answer obvious (a clear majority for
ScEnsemble, unanimity for Aggregate) and consult the executor only otherwise; the node's instruction
is passed to the executor whenever it is consulted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any, Literal

from pydantic import Field

from operators.base import Operator, OperatorInput, OperatorOutput, OperatorRuntime
from operators.library._answers import normalise_answer
from operators.library._dialogue import Failure, ask_fields
from operators.parsing import ReplyField, ReplyParseError, ReplySchema, extract_code
from operators.prompting import Section, compose_prompt, context_sections, describe_reply_format, numbered
from operators.specs import BUILTIN_SPECS

__all__ = ["Aggregate", "AggregateOutput", "EnsembleOutput", "ScEnsemble", "choose_by_vote"]


class EnsembleOutput(OperatorOutput):
    index: int | None = None  # 0-based position of the chosen candidate in the input list
    votes: list[int] = Field(default_factory=list)  # per candidate: how many candidates share its answer
    decided_by: Literal["single", "vote", "llm"] | None = None


def choose_by_vote(candidates: list[str]) -> tuple[int | None, list[int], list[int]]:
    """Majority vote on normalised answers.

    Returns (winner index or None, votes per candidate, indices of the tied leaders to choose from).
    A winner needs at least two votes and strictly more than any other answer.
    """
    keys = [normalise_answer(c) if c.strip() else "" for c in candidates]
    counts = Counter(k for k in keys if k)
    votes = [counts[k] if k else 0 for k in keys]
    if not counts:
        return None, votes, []
    ranked = counts.most_common()
    top = ranked[0][1]
    leaders = [key for key, count in ranked if count == top]
    if len(leaders) == 1 and top >= 2:
        return keys.index(leaders[0]), votes, []
    first_of_each = [keys.index(key) for key in leaders]
    return None, votes, sorted(first_of_each)


def _choice_schema(count: int) -> ReplySchema:
    return ReplySchema(
        fields=(
            ReplyField("reason", required=False, hint="a short comparison of the candidates"),
            ReplyField("choice", kind="index", hint=f"the number of the best candidate, from 1 to {count}"),
        )
    )


def _check_choice(count: int) -> Callable[[dict[str, Any]], None]:
    def check(fields: dict[str, Any]) -> None:
        if not 1 <= fields["choice"] <= count:
            raise ReplyParseError(f"<choice> must be a candidate number from 1 to {count}; got {fields['choice']}")

    return check


_CHOOSE_JOB = (
    "Several candidate solutions to the problem below disagree. Compare them and choose the one most "
    "likely to be correct; judge the reasoning, not how confident a candidate sounds."
)


class ScEnsemble(Operator):
    """Self-consistency: majority vote on normalised answers; the executor only breaks ties."""

    spec = BUILTIN_SPECS["ScEnsemble"]
    output_model = EnsembleOutput

    async def run(self, inputs: OperatorInput, runtime: OperatorRuntime) -> EnsembleOutput:
        candidates = inputs.candidates
        if not any(c.strip() for c in candidates):
            return EnsembleOutput(ok=False, error="ScEnsemble: no candidates; put a parallel stage before it")
        winner, votes, tied = choose_by_vote(candidates)
        if len([c for c in candidates if c.strip()]) == 1:
            only = next(i for i, c in enumerate(candidates) if c.strip())
            return EnsembleOutput(text=candidates[only], index=only, votes=votes, decided_by="single")
        if winner is not None:
            return EnsembleOutput(text=candidates[winner], index=winner, votes=votes, decided_by="vote")
        schema = _choice_schema(len(tied))
        prompt = compose_prompt(
            job=_CHOOSE_JOB,
            sections=[
                *context_sections(inputs, guidance=True),
                Section("Candidates", numbered([candidates[i] for i in tied], "Candidate")),
            ],
            instruction=inputs.instruction,
            reply_format=describe_reply_format(schema),
        )
        reply = await ask_fields(runtime, self.spec, prompt, schema, check=_check_choice(len(tied)))
        if isinstance(reply, Failure):
            return reply.as_output(EnsembleOutput)
        chosen = tied[reply["choice"] - 1]
        return EnsembleOutput(text=candidates[chosen], index=chosen, votes=votes, decided_by="llm")


class AggregateOutput(OperatorOutput):
    reason: str | None = None
    decided_by: Literal["unanimous", "llm"] | None = None


_AGGREGATE_SCHEMA = ReplySchema(
    fields=(
        ReplyField("reason", required=False, hint="how the candidates were combined or which was preferred"),
        ReplyField("answer", hint="the combined final solution"),
    )
)
_AGGREGATE_CODE_SCHEMA = ReplySchema(
    fields=(
        ReplyField("reason", required=False, hint="how the candidates were combined or which was preferred"),
        ReplyField("answer", hint="the complete final Python program in a ```python code block"),
    ),
    bare_field="answer",
)
_AGGREGATE_JOB = (
    "Combine the candidate solutions below into one final solution to the problem. Where they agree, "
    "keep the shared result; where they disagree, decide which is best supported; where they cover "
    "different parts (for example answers to different sub-problems), merge them. Build on the "
    "candidates rather than starting over."
)


class Aggregate(Operator):
    """Combines candidates with the executor; unanimous candidates (and no guidance) need no call."""

    spec = BUILTIN_SPECS["Aggregate"]
    output_model = AggregateOutput

    async def run(self, inputs: OperatorInput, runtime: OperatorRuntime) -> AggregateOutput:
        candidates = [c for c in inputs.candidates if c.strip()]
        if not candidates:
            return AggregateOutput(ok=False, error="Aggregate: no candidates; put a parallel stage before it")
        is_code = inputs.task_type == "code"
        # Sub-problem answers (guidance present) must be combined even when they happen to be equal.
        if not inputs.guidance and len({normalise_answer(c) for c in candidates}) == 1:
            return AggregateOutput(
                text=candidates[0],
                code=candidates[0] if is_code else None,
                reason="all candidates agree",
                decided_by="unanimous",
            )
        schema = _AGGREGATE_CODE_SCHEMA if is_code else _AGGREGATE_SCHEMA

        def check(fields: dict[str, Any]) -> None:
            if is_code:
                fields["answer"] = extract_code(
                    str(fields["answer"]), entry_point=inputs.entry_point, require_entry_point=True
                )

        prompt = compose_prompt(
            job=_AGGREGATE_JOB,
            sections=context_sections(inputs, guidance=True, candidates=True),
            instruction=inputs.instruction,
            reply_format=describe_reply_format(schema),
        )
        reply = await ask_fields(runtime, self.spec, prompt, schema, check=check)
        if isinstance(reply, Failure):
            return reply.as_output(AggregateOutput)
        answer: str = reply["answer"]
        return AggregateOutput(text=answer, code=answer if is_code else None, reason=reply["reason"], decided_by="llm")
