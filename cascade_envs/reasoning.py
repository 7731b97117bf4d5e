"""Reasoning split and the overlong rule (DESIGN.md §2).

The reward sees only the final answer. A ``<think>`` block that never closes, or a generation cut
at the length limit, earns 0 (the overlong penalty of the Cascade RL recipe).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .core import Completion

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
EMPTY_THINK = f"{THINK_OPEN}{THINK_CLOSE}"
_OPEN_RE = re.compile(r"^\s*<think>", re.IGNORECASE)
_CLOSE_RE = re.compile(r"</think>", re.IGNORECASE)


@dataclass(frozen=True)
class Split:
    """A response split into its reasoning and its final answer."""

    reasoning: str
    answer: str
    unterminated: bool = False


def split_reasoning(text: str) -> Split:
    """Split ``<think>…</think>`` off the front of ``text``.

    Both tags match in any letter case (``<THINK>…</Think>`` is a think block too). Chat templates
    often put the opening tag in the prompt, so a closing tag without an opening one also ends the
    reasoning. An opening tag with no closing tag is an unterminated block: the whole text is
    reasoning and there is no answer.
    """
    close = _CLOSE_RE.search(text)
    if close:
        reasoning = _OPEN_RE.sub("", text[: close.start()], count=1)
        return Split(reasoning.strip(), text[close.end() :].strip())
    match = _OPEN_RE.match(text)
    if match:
        return Split(text[match.end() :].strip(), "", unterminated=True)
    return Split("", text.strip())


def overlong_reason(completion: Completion, split: Split) -> str | None:
    """Why the response earns the overlong 0, or ``None`` when the rule does not apply."""
    if completion.truncated:
        return "overlong: generation was cut at the maximum length"
    if split.unterminated:
        return "overlong: the <think> block was never closed"
    return None
