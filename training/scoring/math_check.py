"""Math answer equivalence for the scorer. The comparison itself lives in `operators.answers.math_equivalence`
(exact numbers, then math-verify, then normalised LaTeX; see its docstring), shared with the equivalence
votes inside workflows, so a vote groups answers exactly as the grade does.

The scorer requires math-verify (a base dependency): importing it here fails loudly in an environment that
lacks it, where the operators' votes would quietly skip the symbolic step.
"""

import math_verify  # noqa: F401  # required here; optional for the operators

from operators.answers.math_equivalence import (
    MAX_SYMBOLIC_CHARS,
    MathVerdict,
    check_math,
    gold_answer_text,
    normalise_latex_string,
)

__all__ = ["MAX_SYMBOLIC_CHARS", "MathVerdict", "check_math", "gold_answer_text", "normalise_latex_string"]
