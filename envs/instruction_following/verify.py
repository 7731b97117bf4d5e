"""The instruction checks as one top-level function, run in a verifier worker process or inline.

Importing this module registers every checker family, so a worker that preloads it starts ready.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from cascade_envs.reasoning import has_visible_text

from .registry import get_instruction, load_families

load_families()


def response_variants(response: str, strict: bool) -> list[str]:
    """The texts an instruction is checked against: the response, or IFEval's eight loose variants."""
    if strict:
        return [response]
    lines = response.split("\n")
    trimmed = [
        response,
        "\n".join(lines[1:]).strip(),
        "\n".join(lines[:-1]).strip(),
        "\n".join(lines[1:-1]).strip(),
    ]
    return trimmed + [text.replace("*", "") for text in trimmed]


def follow_checks(checks: Sequence[dict[str, Any]], answer: str, strict: bool) -> list[bool]:
    """Whether ``answer`` follows each ``{"id", "kwargs"}`` check (any variant passing, when loose).

    A loose variant with no visible character (``has_visible_text``; the answer itself never lacks
    one, the no-answer rule stops those first) follows nothing: it would otherwise satisfy "no
    commas", "fewer than N words" and the like without saying anything.
    """
    variants = [v for v in response_variants(answer, strict) if has_visible_text(v)]
    results = []
    for check in checks:
        checker = get_instruction(check["id"]).check
        results.append(any(checker(text, **check["kwargs"]) for text in variants))
    return results


def warm_up() -> None:
    """Load the tokenizer and language models once (a worker's start-up, not a check's time)."""
    from . import text

    for load in (text._punkt, text._treebank, text._language_factory):
        with contextlib.suppress(text.ResourceUnavailable):  # the checks that need it report it
            load()
