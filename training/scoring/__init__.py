"""The one scorer used by evaluation and by training rewards (docs/design/evaluation.md, "Scoring").

    result = await score(problem, answer)          # any problem type (code runs in the sandbox)
    result = score_text(problem, answer)           # math / QA only, synchronous

`ScoreResult.score` is the reward-ready value in [0, 1]; `correct` is strict correctness; `method` and
`details` say how the verdict was reached. Each problem type is graded by the scorer registered for it
(`registry`: `register_scorer(ScorerSpec(...))` or the `flowsteer.scorers` entry point group); the built-in ones
(`builtin`: math, qa, code) use `multiple_choice` (MathQA letters), `qa_check` (SQuAD normalisation, F1/EM),
`code_check` (hidden tests in the sandbox) and `operators.answers.math_equivalence` (exact numbers, math-verify,
normalised LaTeX). `judge` is the optional LLM-judge hook. Final-answer extraction and exact numbers live in
`operators.answers.extract` and `operators.answers.exact_numbers`, shared with the answer votes in workflows.
"""

from training.scoring.judge import AnswerJudge, JudgeVerdict
from training.scoring.registry import ScorerSpec, register_scorer
from training.scoring.result import ScoreResult, ScoringConfig
from training.scoring.scorer import score, score_text

__all__ = [
    "AnswerJudge",
    "JudgeVerdict",
    "ScoreResult",
    "ScorerSpec",
    "ScoringConfig",
    "register_scorer",
    "score",
    "score_text",
]
