"""Whitespace-normalised comparison of program output with an expected output (stdin/stdout cases)."""

from __future__ import annotations


def normalise_output(text: str) -> list[str]:
    """Lines with runs of whitespace collapsed, surrounding blank lines dropped, CRLF treated as LF."""
    lines = [" ".join(line.split()) for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    while lines and not lines[0]:
        lines.pop(0)
    return lines


def outputs_match(actual: str, expected: str) -> bool:
    """True when both texts are equal up to whitespace layout within lines and blank lines at the ends."""
    return normalise_output(actual) == normalise_output(expected)
