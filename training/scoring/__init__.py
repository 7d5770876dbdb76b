"""The one scorer used by evaluation and by training rewards (docs/design/evaluation.md, "Scoring").

    result = await score(problem, answer)          # any problem type (code runs in the sandbox)
    result = score_text(problem, answer)           # math / QA only, synchronous

`ScoreResult.score` is the reward-ready value in [0, 1]; `correct` is strict correctness; `method` and
`details` say how the verdict was reached. Modules: `math_check` (math-verify plus exact numbers),
`multiple_choice` (MathQA letters), `qa_check` (SQuAD normalisation, F1/EM), `code_check` (hidden tests in the
sandbox), `judge` (optional LLM-judge hook). Final-answer extraction and exact numbers live in
`operators.answers.extract` and `operators.answers.exact_numbers`, shared with the answer votes in workflows.
"""

from training.scoring.judge import AnswerJudge, JudgeVerdict
from training.scoring.result import ScoreResult, ScoringConfig
from training.scoring.scorer import score, score_text

__all__ = ["AnswerJudge", "JudgeVerdict", "ScoreResult", "ScoringConfig", "score", "score_text"]
