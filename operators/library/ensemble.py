"""Ensembles: select (ScEnsemble) or combine (Aggregate) the candidates of a parallel stage.

Both decide programmatically when the candidates make the answer obvious and consult the executor only
otherwise; the node's instruction is passed to the executor whenever it is consulted. For code tasks
ScEnsemble lets execution judge (`code_selection`: the most public tests passed, then the largest
behaviour group); for other tasks it votes on answers, and a tie goes to the earliest leading answer: a
sampled node's first draw is its greedy one (for a fresh-start solver, the direct answer), so without a
majority the workflow keeps what answering alone would give rather than a 0.5B executor's opinion. Asking the
executor for a `<choice>` is the last resort: candidates with no answer to compare, or code that execution
cannot judge (no entry point, no tests and no usable inputs, or a sandbox that runs nothing here).
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

import anyio
import structlog
from pydantic import BaseModel, ConfigDict, Field

from operators.answers.voting import answer_vote
from operators.base import Operator, OperatorInput, OperatorOutput, OperatorRuntime, OperatorSpec
from operators.library._answers import normalise_answer
from operators.library._dialogue import Failure, FieldCheck, ask, ask_fields, ask_for_fields, program_field
from operators.library.code_selection import (
    PROPOSAL_FORMAT,
    CodeJudgement,
    entry_arity,
    judge_code_candidates,
    parse_proposed_inputs,
    proposal_job,
)
from operators.parsing import ReplyField, ReplyParseError, ReplySchema, extract_code
from operators.prompting import (
    Section,
    compose_prompt,
    context_sections,
    describe_reply_format,
    no_candidates_error,
    numbered,
)
from operators.sandbox import SandboxRefusedError
from operators.specs import BUILTIN_SPECS

log = structlog.get_logger(__name__)

__all__ = [
    "Aggregate",
    "AggregateOutput",
    "AgreementBasis",
    "CandidateAgreement",
    "EnsembleOutput",
    "ScEnsemble",
    "ask_choice",
    "vote_by_answer",
    "with_agreement",
]


AgreementBasis = Literal["answer", "behaviour", "program"]
"""What agreeing candidates share: the same final answer (the vote), the same behaviour when run (execution
judged code), or the same program text (code that execution could not judge)."""


class CandidateAgreement(BaseModel):
    """How many of the candidates agree with the chosen one, itself included."""

    model_config = ConfigDict(frozen=True)

    agreeing: int
    candidates: int
    basis: AgreementBasis


class EnsembleOutput(OperatorOutput):
    index: int | None = None  # 0-based position of the chosen candidate in the input list
    # Per candidate: how many candidates share its answer; when execution decided, the size of its behaviour
    # group (0 for candidates outside the best public-test score).
    votes: list[int] = Field(default_factory=list)
    decided_by: Literal["single", "execution", "vote", "llm"] | None = None
    # How many candidates agree with the chosen one, when the ensemble counted them (ScEnsemble, CodeT); the
    # engine carries it to the director's feedback while the answer stays the chosen one.
    agreement: CandidateAgreement | None = None


EnsembleT = TypeVar("EnsembleT", bound=EnsembleOutput)


def with_agreement(output: EnsembleT, task_type: str) -> EnsembleT:
    """`output` with its `agreement` read off `votes`, for an ensemble whose votes count candidates (answer
    classes or behaviour groups, as ScEnsemble's do); unchanged when nothing was chosen by a count. A chosen
    candidate with no answer to count still agrees with itself."""
    index, votes = output.index, output.votes
    if not output.ok or index is None or not 0 <= index < len(votes) or output.decided_by is None:
        return output
    basis: AgreementBasis = "behaviour" if output.decided_by == "execution" else "answer"
    if basis == "answer" and task_type == "code":
        basis = "program"
    output.agreement = CandidateAgreement(agreeing=max(votes[index], 1), candidates=len(votes), basis=basis)
    return output


def _choice_schema(count: int) -> ReplySchema:
    return ReplySchema(
        fields=(
            ReplyField("reason", required=False, hint="a short comparison of the candidates"),
            ReplyField("choice", kind="index", hint=f"the number of the best candidate, from 1 to {count}"),
        )
    )


def _check_choice(count: int) -> FieldCheck:
    def check(fields: dict[str, Any]) -> None:
        if not 1 <= fields["choice"] <= count:
            raise ReplyParseError(f"<choice> must be a candidate number from 1 to {count}; got {fields['choice']}")

    return check


async def ask_choice(
    runtime: OperatorRuntime, spec: OperatorSpec, inputs: OperatorInput, job: str, shown: list[str]
) -> int | Failure:
    """Ask the executor to choose among `shown` (numbered from 1 in the prompt); the 0-based position chosen."""
    schema = _choice_schema(len(shown))
    prompt = compose_prompt(
        job=job,
        sections=[*context_sections(inputs, guidance=True), Section("Candidates", numbered(shown, "Candidate"))],
        instruction=inputs.instruction,
        reply_format=describe_reply_format(schema),
    )
    reply = await ask_fields(runtime, spec, prompt, schema, check=_check_choice(len(shown)))
    return reply if isinstance(reply, Failure) else int(reply["choice"]) - 1


async def vote_by_answer(candidates: list[str], task_type: str) -> tuple[int | None, list[int], list[int]]:
    """The answer vote (`operators.answers.voting`: the grader's notion of "the same answer") of non-code tasks
    and of code that execution could not judge: (winner or None, class size per candidate, the candidates an LLM
    tie-break chooses among). Math equivalence may call sympy, so the vote runs in a worker thread."""
    vote = await anyio.to_thread.run_sync(answer_vote, candidates, task_type)
    tied = vote.leaders if len(vote.leaders) > 1 else [i for i, c in enumerate(candidates) if c.strip()]
    return vote.winner, vote.sizes, tied


_CHOOSE_JOB = (
    "Several candidate solutions to the problem below disagree. Compare them and choose the one most "
    "likely to be correct; judge the reasoning, not how confident a candidate sounds."
)


class ScEnsemble(Operator):
    """Self-consistency: execution judges code, a vote judges answers; the executor only breaks ties."""

    spec = BUILTIN_SPECS["ScEnsemble"]
    output_model = EnsembleOutput

    async def run(self, inputs: OperatorInput, runtime: OperatorRuntime) -> EnsembleOutput:
        return with_agreement(await self._select(inputs, runtime), inputs.task_type)

    async def _select(self, inputs: OperatorInput, runtime: OperatorRuntime) -> EnsembleOutput:
        candidates = inputs.candidates
        if not any(c.strip() for c in candidates):
            return EnsembleOutput(ok=False, error=no_candidates_error("ScEnsemble"))
        if len([c for c in candidates if c.strip()]) == 1:
            only = next(i for i, c in enumerate(candidates) if c.strip())
            votes = [1 if i == only else 0 for i in range(len(candidates))]
            return EnsembleOutput(text=candidates[only], index=only, votes=votes, decided_by="single")
        fallback_note: str | None = None
        if inputs.task_type == "code":
            judged = await _judge_by_execution(inputs, runtime, self.spec)
            if isinstance(judged, CodeJudgement):
                chosen = candidates[judged.index]
                return EnsembleOutput(
                    text=chosen,
                    code=_program(chosen, inputs.entry_point),
                    index=judged.index,
                    votes=judged.group_sizes,
                    decided_by="execution",
                    note=judged.note,
                    public_tests=judged.public_tests,
                )
            fallback_note = judged
        winner, votes, tied = await vote_by_answer(candidates, inputs.task_type)
        if winner is not None:
            return EnsembleOutput(
                text=candidates[winner], index=winner, votes=votes, decided_by="vote", note=fallback_note
            )
        if inputs.task_type != "code" and any(votes):
            earliest = next(i for i, size in enumerate(votes) if size == max(votes))
            note = f"no majority ({max(votes)} vote(s) at most): the earliest of the leading answers is kept"
            return EnsembleOutput(text=candidates[earliest], index=earliest, votes=votes, decided_by="vote", note=note)
        choice = await ask_choice(runtime, self.spec, inputs, _CHOOSE_JOB, [candidates[i] for i in tied])
        if isinstance(choice, Failure):
            return choice.as_output(EnsembleOutput)
        index = tied[choice]
        return EnsembleOutput(text=candidates[index], index=index, votes=votes, decided_by="llm", note=fallback_note)


def _program(candidate: str, entry_point: str | None) -> str | None:
    """The program in a code candidate, or None when it holds none defining the entry point."""
    if not candidate.strip():
        return None
    try:
        return extract_code(candidate, entry_point=entry_point, require_entry_point=True)
    except ReplyParseError:
        return None


async def _judge_by_execution(
    inputs: OperatorInput, runtime: OperatorRuntime, spec: OperatorSpec
) -> CodeJudgement | str:
    """The execution verdict, or why there is none (the note of the fallback decision)."""
    entry_point = inputs.entry_point
    if not entry_point:
        return "execution could not judge: the task names no entry point"
    programs = [_program(c, entry_point) for c in inputs.candidates]
    if not any(programs):
        return f"execution could not judge: no candidate defines `{entry_point}`"
    first = next(p for p in programs if p)
    arity = entry_arity(first, entry_point)

    async def propose() -> list[str]:
        prompt = compose_prompt(
            job=proposal_job(entry_point),
            sections=context_sections(inputs),  # the example tests are among them
            instruction=None,
            reply_format=PROPOSAL_FORMAT,
        )

        async def accept(reply: str) -> list[str]:
            return parse_proposed_inputs(reply, arity=arity)  # junk yields no inputs, never a re-ask

        proposal_spec = spec.model_copy(update={"reply_tokens": _PROPOSAL_TOKENS})
        proposed = await ask(runtime, proposal_spec, prompt, accept, reply_format=PROPOSAL_FORMAT)
        return [] if isinstance(proposed, Failure) else proposed

    try:
        judged = await judge_code_candidates(
            programs,
            entry_point=entry_point,
            public_tests=inputs.public_tests,
            timeout_s=runtime.sandbox_timeout_s,
            propose=propose,
        )
    except SandboxRefusedError as refused:
        log.warning("ensemble_sandbox_refused", reason=str(refused))
        return f"execution could not judge: the sandbox refused to run ({refused})"
    if judged is None:
        return "execution could not judge: no public tests and no usable inputs to tell the candidates apart"
    return judged


_PROPOSAL_TOKENS = 256  # a few short argument tuples


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
            return AggregateOutput(ok=False, error=no_candidates_error("Aggregate"))
        is_code = inputs.task_type == "code"
        # Sub-problem answers (guidance present) must be combined even when they happen to be equal.
        if not inputs.guidance and len({normalise_answer(c) for c in candidates}) == 1:
            return AggregateOutput(
                text=candidates[0],
                code=candidates[0] if is_code else None,
                reason="all candidates agree",
                decided_by="unanimous",
            )

        def build(reply: dict[str, Any]) -> AggregateOutput:
            answer: str = reply["answer"]
            return AggregateOutput(
                text=answer, code=answer if is_code else None, reason=reply["reason"], decided_by="llm"
            )

        return await ask_for_fields(
            runtime,
            self.spec,
            AggregateOutput,
            job=_AGGREGATE_JOB,
            sections=context_sections(inputs, guidance=True, candidates=True),
            instruction=inputs.instruction,
            schema=_AGGREGATE_CODE_SCHEMA if is_code else _AGGREGATE_SCHEMA,
            build=build,
            check=program_field("answer", inputs.entry_point) if is_code else None,
        )
