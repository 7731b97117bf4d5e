"""Safe, exact evaluation of Countdown answers: integer literals, + - * / and parentheses only.

The expression is parsed with ``ast`` and walked node by node — nothing is ever passed to
``eval``. Arithmetic is done on ``Fraction`` so ``6 / (1 - 3 / 4)`` is exactly 24.
"""

from __future__ import annotations

import ast
import operator
import re
from collections import Counter
from collections.abc import Callable, Sequence
from fractions import Fraction

MAX_EXPRESSION_CHARS = 1000
ALLOWED_CHARS = re.compile(r"^[0-9\s+\-*/()]*$")
OPERATORS: dict[type[ast.operator], Callable[[Fraction, Fraction], Fraction]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}
OPERATOR_SYMBOLS = {ast.Pow: "**", ast.FloorDiv: "//", ast.Mod: "%", ast.MatMult: "@"}


class ExpressionError(ValueError):
    """The answer is not a valid Countdown expression; the message says why."""


def evaluate(expression: str, numbers: Sequence[int]) -> Fraction:
    """The exact value of ``expression``, which may use each of ``numbers`` at most once.

    Raises ``ExpressionError`` for anything else: other characters or operators, unary signs,
    a number that is not given (or used too often), division by zero, malformed syntax.
    """
    tree = _parse(expression)
    value = _eval(tree.body)  # first, so a bad operator or a zero division is named as such
    used = Counter(node.value for node in ast.walk(tree) if isinstance(node, ast.Constant))
    given = Counter(numbers)
    overused = used - given
    if overused:
        bad = ", ".join(f"{n} (used {used[n]}x, given {given[n]}x)" for n in sorted(overused))
        raise ExpressionError(f"uses numbers not available: {bad}")
    return value


def _parse(expression: str) -> ast.Expression:
    if not expression.strip():
        raise ExpressionError("the expression is empty")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ExpressionError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    if not ALLOWED_CHARS.match(expression):
        raise ExpressionError("only digits, + - * /, parentheses and spaces are allowed")
    try:
        return ast.parse(" ".join(expression.split()), mode="eval")  # line breaks are fine too
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise ExpressionError(f"malformed expression: {type(exc).__name__}") from None


def _eval(node: ast.expr) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return Fraction(node.value)
    if isinstance(node, ast.BinOp):
        op = OPERATORS.get(type(node.op))
        if op is None:
            symbol = OPERATOR_SYMBOLS.get(type(node.op), type(node.op).__name__)
            raise ExpressionError(f"operator {symbol} is not allowed (only + - * /)")
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Div) and right == 0:
            raise ExpressionError("division by zero")
        return op(left, right)
    if isinstance(node, ast.UnaryOp):
        raise ExpressionError("unary signs are not allowed: combine the given numbers with + - * /")
    raise ExpressionError(f"unsupported syntax: {type(node).__name__}")
