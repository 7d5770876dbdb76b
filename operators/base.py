"""The operator contract: what every operator declares and how the engine calls it."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from operators.backends.base import DrawSettings

if TYPE_CHECKING:
    from operators.backends.base import ChatBackend

TaskType = Literal["math", "code", "qa", "general"]


class Category(StrEnum):
    PLANNING = "planning"
    SOLVING = "solving"
    VERIFICATION = "verification"
    REVISION = "revision"
    ENSEMBLE = "ensemble"
    FORMATTING = "formatting"


class Role(StrEnum):
    """How an operator's output enters the workflow's data flow."""

    GUIDANCE = "guidance"  # adds a plan / sub-problems for later stages; the solution is unchanged
    SOLUTION = "solution"  # replaces the current solution
    CHECKER = "checker"  # passes the solution through and sets verdict + feedback


class CostClass(StrEnum):
    NONE = "none"  # no LLM call (pure computation)
    LIGHT = "light"  # usually one LLM call
    HEAVY = "heavy"  # several LLM calls and/or sandbox runs


class OperatorSpec(BaseModel):
    """Static description of an operator: the one source for validation, prompts, engine and rewards."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(pattern=r"^[A-Z][A-Za-z0-9]*$")
    category: Category
    role: Role
    summary: str
    when_to_use: str
    signature: str
    accepts_prompt: bool = True
    needs_candidates: bool = False  # ensembles: select/combine the candidates of a parallel stage
    legacy: bool = False  # available but not advertised to policies by default
    cost: CostClass = CostClass.LIGHT
    reply_tokens: int | None = None  # reply-length budget per executor call (None: the backend default)
    # Capabilities that rules need beyond the role (finish gate, hints). A plug-in sets them to take part.
    solver: bool = False  # produces a solution of its own, not only a plan, a check, a choice or a format
    runs_programs: bool = False  # writes a program and runs it in the sandbox (what a code task builds on)
    runs_tests: bool = False  # runs the task's public tests in the sandbox (the check a code task needs)
    hinted_for: tuple[TaskType, ...] = ()  # task types whose hints suggest this operator for its job


class OperatorInput(BaseModel):
    """Everything a stage can see: the task plus the workflow's running state."""

    problem: str
    task_type: TaskType = "general"
    instruction: str | None = None  # the node's custom prompt
    solution: str | None = None  # current solution text (answer or program output)
    code: str | None = None  # current program (code tasks, Programmer/Test)
    feedback: str | None = None  # last checker feedback
    guidance: list[str] = Field(default_factory=list)  # Plan / Decompose outputs, oldest first
    candidates: list[str] = Field(default_factory=list)  # outputs of the preceding parallel stage
    entry_point: str | None = None
    public_tests: str | None = None  # visible tests only; hidden grading tests never reach operators


class PublicTestScore(BaseModel):
    """How the program an output carries fared on the task's public tests, when the call ran them.

    Why on the output: whoever ran the tests (Test, Revise, an ensemble judging by execution) knows the score,
    and the engine carries it to the director's feedback instead of running the tests again."""

    model_config = ConfigDict(frozen=True)

    passed: int | None  # None: not every test passed, how many did is unknown (one run of all of them failed)
    total: int  # the public tests, one per top-level assert (a `check` harness counts as one)

    @property
    def all_passed(self) -> bool:
        return self.passed == self.total


class OperatorOutput(BaseModel):
    """Canonical result of one operator call. Errors are values: ok=False with an error, never an answer."""

    ok: bool = True
    text: str = ""
    error: str | None = None
    verdict: bool | None = None  # checkers: True = check passed
    feedback: str | None = None  # checkers: why
    code: str | None = None  # code-producing operators
    note: str | None = None  # why the operator decided as it did (e.g. a rejected revision); shown on the trace row
    public_tests: PublicTestScore | None = None  # the output's program on the public tests, when this call ran them
    # The executor could not answer (a backend error after its own retries, or the per-call time limit): the
    # failure says nothing about the workflow, so an evaluation runs such an episode again instead of scoring it.
    unavailable: bool = False


DEFAULT_SANDBOX_TIMEOUT_S = 10.0  # wall-clock limit of one sandbox run of an operator (configurable per engine)


@dataclass
class OperatorRuntime:
    """Services an operator may use during one call."""

    llm: ChatBackend
    max_reasks: int = 2
    sandbox_timeout_s: float = DEFAULT_SANDBOX_TIMEOUT_S
    options: dict[str, Any] = field(default_factory=dict)
    draw: DrawSettings | None = None  # temperature/top-p/seed of every request of this call (None: greedy)


class Operator(ABC):
    """Base class of every operator. Subclasses set `spec` and implement `run`."""

    spec: ClassVar[OperatorSpec]
    output_model: ClassVar[type[OperatorOutput]] = OperatorOutput

    @abstractmethod
    async def run(self, inputs: OperatorInput, runtime: OperatorRuntime) -> OperatorOutput:
        """Run once. Must not raise for model or code failures: return ok=False with an error."""
