"""Exact reading of plain numbers: the one implementation lives in `operators.answers.exact_numbers` (shared by
the scorer and the answer votes inside workflows); this module keeps the scorer's import path."""

from operators.answers.exact_numbers import ExactNumber, numbers_match, parse_exact_number

__all__ = ["ExactNumber", "numbers_match", "parse_exact_number"]
