"""``best_of_n``: N samples of a task, one chosen by a selector (``ctx.selector``, see ``select``).

Every candidate is scored by the env (for pass@N and the traces; the selector never sees that
score) and recorded with its public check where the selector ran one. The outcome's reward is the
selected candidate's score; ``pass_at_n`` says whether any candidate scored 1, and
``selector_correct`` whether the selected one did when any did.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..data import Loaded
from .base import Attempt, BudgetSpent, SolveContext, TaskOutcome, register_strategy
from .scoring import correct, require_single_turn, score
from .select import SELECTORS


async def sample(
    ctx: SolveContext, task: Loaded[Any], n: int, round: int = 0
) -> tuple[list[Attempt], str | None]:
    """``n`` scored candidates (fewer when the budget runs out: then its reason comes back too)."""
    messages = ctx.env.prompt(task.task)
    spent: list[str] = []

    async def one(i: int) -> Attempt | None:
        try:
            attempt = await ctx.generate(
                messages, task_id=task.task_id, round=round, role="candidate", candidate=i, seed_offset=i
            )
        except BudgetSpent as exc:
            spent.append(str(exc))
            return None
        attempt.reward = await score(ctx, task, attempt)
        return attempt

    made = await asyncio.gather(*(one(i) for i in range(n)))
    return [a for a in made if a is not None], (spent[0] if spent else None)


@register_strategy("best_of_n")
async def solve(ctx: SolveContext, task: Loaded[Any]) -> TaskOutcome:
    require_single_turn(ctx)
    if ctx.selector not in SELECTORS:
        raise ValueError(f"unknown selector {ctx.selector!r}; choose from {sorted(SELECTORS)}")
    outcome = TaskOutcome(task.task_id, ctx.env_id, ctx.strategy, None, None, rounds=1)
    attempts, spent = await sample(ctx, task, ctx.candidates)
    outcome.candidates = outcome.generations = len(attempts)
    if spent:
        outcome.notes.append(f"{spent}: {len(attempts)} of {ctx.candidates} candidates")
    if not attempts:
        return outcome
    selection = await SELECTORS[ctx.selector](ctx, task, attempts)
    for attempt in attempts:
        ctx.record(attempt)
    outcome.generations += selection.calls
    outcome.notes.extend(selection.notes)
    outcome.pass_at_n = any(correct(a.reward) for a in attempts)
    chosen = attempts[selection.index if selection.index is not None else 0]
    if selection.index is None:
        outcome.notes.append("no candidate has an answer: took the first")
    else:
        outcome.notes.append(f"selected candidate {chosen.candidate} by {selection.selector}")
    outcome.selected, outcome.reward = chosen.completion, chosen.reward
    if outcome.pass_at_n:
        outcome.selector_correct = correct(outcome.reward)
    return outcome
