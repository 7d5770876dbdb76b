"""Final-answer extraction for the scorer: the rules live in `operators.answers.extract`, shared with the
answer votes inside workflows, so a vote and the grade read the same answer out of a response."""

from operators.answers.extract import (
    Extraction,
    ExtractionRule,
    boxed_contents,
    clean_answer,
    extract_final_answer,
    extract_short_answer,
    last_number,
    looks_like_bare_expression,
)

__all__ = [
    "Extraction",
    "ExtractionRule",
    "boxed_contents",
    "clean_answer",
    "extract_final_answer",
    "extract_short_answer",
    "last_number",
    "looks_like_bare_expression",
]
