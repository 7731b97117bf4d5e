"""Comparing a program's output with the expected output.

Lines are compared after whitespace normalisation (leading/trailing blank space of the whole
output and of each line dropped, runs of spaces inside a line treated as one separator; blank lines
*inside* the output still count). A line that differs as text still matches when every token is a
number equal to the expected one — exactly (``1.50`` == ``1.5``, ``1e3`` == ``1000``), or within
``float_tolerance`` (absolute or relative) when the task sets one. This is the stdin/stdout rule
of the public code RL data, minus its silent 1e-6 float tolerance.

Nothing a program prints can make a comparison raise: numbers of any size (``1e999999999``) are
compared in a context without traps, and a value that cannot be compared is simply not equal.
"""

from __future__ import annotations

import json
from decimal import MAX_EMAX, MIN_EMIN, Context, Decimal
from typing import Any

EXACT = Context(Emax=MAX_EMAX, Emin=MIN_EMIN, traps=[])
"""Arithmetic for tolerances: any finite exponent, no trap (an overflow is Infinity, never an exception)."""


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().split("\n")]


def _numbers(tokens: list[str]) -> list[Decimal] | None:
    try:
        values = [Decimal(t) for t in tokens]
    except (ArithmeticError, ValueError):
        return None
    return values if all(v.is_finite() for v in values) else None


def _close(a: Decimal, b: Decimal, tol: float | None) -> bool:
    if a == b:
        return True
    if not tol:
        return False
    diff, t = EXACT.abs(EXACT.subtract(a, b)), Decimal(str(tol))
    return diff <= t or diff <= EXACT.multiply(t, max(EXACT.abs(a), EXACT.abs(b)))


def compare_output(got: str, expected: str, float_tolerance: float | None = None) -> str | None:
    """``None`` when ``got`` matches ``expected``, else a short reason."""
    got_lines, want_lines = _lines(got), _lines(expected)
    if len(got_lines) != len(want_lines):
        return f"wrong answer: {len(got_lines)} output line(s), expected {len(want_lines)}"
    for index, (g, w) in enumerate(zip(got_lines, want_lines, strict=True)):
        if g == w:
            continue
        g_tokens, w_tokens = g.split(), w.split()
        if g_tokens == w_tokens:
            continue
        if len(g_tokens) == len(w_tokens):
            g_num, w_num = _numbers(g_tokens), _numbers(w_tokens)
            if (
                g_num is not None
                and w_num is not None
                and all(_close(a, b, float_tolerance) for a, b in zip(g_num, w_num, strict=True))
            ):
                continue
        return f"wrong answer on line {index + 1}: got {_clip(g)!r}, expected {_clip(w)!r}"
    return None


def compare_value(got: Any, expected: Any, float_tolerance: float | None = None) -> bool:
    """Structural equality of JSON values (tuples are lists); floats within the task's tolerance."""
    if isinstance(expected, bool) or isinstance(got, bool):
        return got is expected or (isinstance(got, bool) and isinstance(expected, bool) and got == expected)
    if isinstance(expected, (int, float)) and isinstance(got, (int, float)):
        if got == expected:
            return True
        if not float_tolerance:
            return False
        g, e = Decimal(got), Decimal(expected)  # exact for ints of any size and for floats
        if not (g.is_finite() and e.is_finite()):
            return False
        diff = EXACT.abs(EXACT.subtract(g, e))
        return diff <= EXACT.multiply(Decimal(str(float_tolerance)), max(Decimal(1), EXACT.abs(e)))
    if isinstance(expected, (list, tuple)) and isinstance(got, (list, tuple)):
        return len(got) == len(expected) and all(
            compare_value(g, e, float_tolerance) for g, e in zip(got, expected, strict=True)
        )
    if isinstance(expected, dict) and isinstance(got, dict):
        return got.keys() == expected.keys() and all(
            compare_value(got[k], expected[k], float_tolerance) for k in got
        )
    return type(got) is type(expected) and got == expected


def describe_value(value: Any) -> str:
    try:
        return _clip(json.dumps(value, default=repr))
    except (ValueError, RecursionError):  # an int too long to print, a structure too deep
        return f"<{type(value).__name__} that cannot be shown>"


def _clip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit // 2] + "…" + text[-limit // 2 :]
