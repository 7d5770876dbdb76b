"""Built-in operator implementations, one module per category.

Every operator is a subclass of `operators.base.Operator` whose `spec` comes from `BUILTIN_SPECS` and
whose typed output model extends `OperatorOutput`. Options read from `OperatorRuntime.options` are listed
in `operators.library._options`.
"""

from __future__ import annotations

from operators.base import Operator
from operators.library.dual_agreement import CodeT, CodeTOutput
from operators.library.ensemble import Aggregate, AggregateOutput, EnsembleOutput, ScEnsemble
from operators.library.formatting import Format, FormatOutput
from operators.library.planning import Decompose, DecomposeOutput, Plan, PlanOutput
from operators.library.revision import Revise, ReviseOutput
from operators.library.solving import AnswerGenerate, AnswerOutput, Custom, CustomOutput, Programmer, ProgrammerOutput
from operators.library.verification import Review, ReviewOutput, Test, TestOutput, Verify, VerifyOutput

__all__ = [
    "BUILTIN_OPERATORS",
    "Aggregate",
    "AggregateOutput",
    "AnswerGenerate",
    "AnswerOutput",
    "CodeT",
    "CodeTOutput",
    "Custom",
    "CustomOutput",
    "Decompose",
    "DecomposeOutput",
    "EnsembleOutput",
    "Format",
    "FormatOutput",
    "Plan",
    "PlanOutput",
    "Programmer",
    "ProgrammerOutput",
    "Review",
    "ReviewOutput",
    "Revise",
    "ReviseOutput",
    "ScEnsemble",
    "Test",
    "TestOutput",
    "Verify",
    "VerifyOutput",
]

BUILTIN_OPERATORS: list[type[Operator]] = [
    Plan,
    Decompose,
    Custom,
    AnswerGenerate,
    Programmer,
    Test,
    Review,
    Verify,
    Revise,
    ScEnsemble,
    Aggregate,
    Format,
    CodeT,
]
