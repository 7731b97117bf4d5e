"""What strategies ask the env about an answer: its score, its public check, its extracted answer.

Each goes through the env's own path (``areward``: reasoning split, overlong and no-answer rules;
``acheck`` and ``aextract_answer`` on the visible answer) and never raises: a failure is a masked
reward, or no answer key.
"""

from __future__ import annotations

from typing import Any

from ..core import Reward, as_completion
from ..data import Loaded
from ..reasoning import NO_ANSWER, has_visible_text, overlong_reason, split_reasoning
from .base import Attempt, SolveContext

SOLVED = 1.0
"""A reward at or above this is a correct answer (pass@N, selector accuracy)."""


def require_single_turn(ctx: SolveContext) -> None:
    """Refuse an env these strategies cannot play: multi-turn, or scored only as a group."""
    env = ctx.env
    if env.max_turns > 1 or env.scores_groups:
        what = f"plays {env.max_turns} turns" if env.max_turns > 1 else "scores answers only as a group"
        raise ValueError(f"{ctx.strategy} needs a single-turn env scored per answer; {ctx.env_id} {what}")


def correct(reward: Reward | None) -> bool:
    return reward is not None and not reward.masked and reward.value >= SOLVED


async def score(ctx: SolveContext, task: Loaded[Any], attempt: Attempt) -> Reward:
    """The env's score of ``attempt``'s answer (masked when the call failed: never a silent 0)."""
    if attempt.error is not None:
        return Reward.failed(attempt.error)
    try:
        return await ctx.env.areward(task, attempt.completion)
    except Exception as exc:
        return Reward.failed(f"scoring raised {type(exc).__name__}: {exc}")


def visible_answer(completion: str) -> str | None:
    """The answer with the reasoning split off; ``None`` when cut (overlong) or empty."""
    split = split_reasoning(completion)
    if overlong_reason(as_completion(completion), split) or not has_visible_text(split.answer):
        return None
    return split.answer


async def check(ctx: SolveContext, task: Loaded[Any], attempt: Attempt) -> Reward | None:
    """The env's public check of ``attempt`` (``None``: the env has none); a failure is masked."""
    if attempt.error is not None:
        return Reward.failed(attempt.error)
    answer = visible_answer(attempt.completion)
    if answer is None:
        return Reward.zero(NO_ANSWER)
    try:
        return await ctx.env.acheck(task.task, answer)
    except Exception as exc:
        return Reward.failed(f"public check raised {type(exc).__name__}: {exc}")


async def extract(ctx: SolveContext, task: Loaded[Any], attempt: Attempt) -> str | None:
    """The env's extracted answer of ``attempt`` (a majority-vote key), or ``None``."""
    answer = None if attempt.error is not None else visible_answer(attempt.completion)
    if answer is None:
        return None
    try:
        return await ctx.env.aextract_answer(task.task, answer)
    except Exception:
        return None
