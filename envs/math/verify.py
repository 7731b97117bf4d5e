"""The math-verify check that runs inside a worker process (``cascade_envs.workers``).

It is the symbolic half of NeMo Gym's ``math_with_judge``: the gold answer, stripped of outer
``\\(...\\)``/``$...$`` delimiters and wrapped in ``\\boxed{}``, is parsed as LaTeX; the response
is parsed as a plain expression or LaTeX (math-verify prefers the last ``\\boxed{}``); the two
are compared by ``math_verify.verify`` with the gold first. math-verify's own signal-based
timeouts are switched off: the pool's hard timeout bounds each check instead, so a check that
takes too long is reported (masked) rather than silently scored 0.
"""

from __future__ import annotations

import logging
from typing import Any

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

logging.getLogger("math_verify").setLevel(logging.CRITICAL)

GOLD_TARGETS = (LatexExtractionConfig(),)
ANSWER_TARGETS = (ExprExtractionConfig(), LatexExtractionConfig())


def strip_delimiters(text: str) -> str:
    """Remove one pair of outer ``\\( \\)`` and then of ``$ $`` math delimiters."""
    text = text.strip()
    if text.startswith("\\(") and text.endswith("\\)"):
        text = text[2:-2].strip()
    if len(text) > 1 and text.startswith("$") and text.endswith("$"):
        text = text[1:-1].strip()
    return text


def extract(response: str) -> str | None:
    """The answer math-verify reads in ``response`` (its first parse, as text), or ``None``."""
    answers = parse(response, ANSWER_TARGETS, parsing_timeout=None)
    return str(answers[0]) if answers else None


def check(expected_answer: str, response: str) -> dict[str, Any]:
    """Compare ``response`` with ``expected_answer``.

    Returns ``{"gold_parsed": bool, "correct": bool, "extracted": str | None}``; ``extracted`` is
    the first extracted answer that matches the gold, else the first one extracted.
    """
    gold = parse("\\boxed{" + strip_delimiters(expected_answer) + "}", GOLD_TARGETS, parsing_timeout=None)
    if not gold:
        return {"gold_parsed": False, "correct": False, "extracted": None}
    answers = parse(response, ANSWER_TARGETS, parsing_timeout=None)
    matching = next((a for a in answers if verify(gold, a, timeout_seconds=None)), None)
    shown = matching if matching is not None else (answers[0] if answers else None)
    return {
        "gold_parsed": True,
        "correct": matching is not None,
        "extracted": None if shown is None else str(shown),
    }
