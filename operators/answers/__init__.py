"""Reading and comparing final answers: one implementation for workflow votes and for the scorer.

Modules: `extract` (which part of a response is the answer), `exact_numbers` (plain numbers as exact
fractions), `normalise` (SQuAD short-answer normalisation), `math_equivalence` (are two math answers equal:
exact numbers, then math-verify when installed, then normalised LaTeX) and `voting` (`majority_index`).
`training/scoring` imports these, so a vote counts two answers as one exactly when the grader would.
"""

from operators.answers.math_equivalence import answers_equivalent
from operators.answers.normalise import normalise_answer
from operators.answers.voting import majority_index

__all__ = ["answers_equivalent", "majority_index", "normalise_answer"]
