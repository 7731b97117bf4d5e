"""Selectors of best-of-N: pick one of N candidates without looking at the score that grades them.

- ``reward``: the env's PUBLIC check (``Env.acheck``: a code task's sample tests, a prompt's stated
  instructions); the best check wins, the first on ties. No public check: majority instead.
- ``majority``: the most frequent extracted answer (``Env.aextract_answer``: a math value, an MCQA
  letter); the first candidate holding it. No extractor or no answer: the first answer.
- ``judge``: GenSelect: the judge reads the problem and the numbered candidates and names the best
  (``\\boxed{k}``). No judge, a judge that fails or a reply that names none: majority, said so.

A fallback is always written in the outcome's notes; a selector never invents a score.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ..data import Loaded
from .base import Attempt, BudgetSpent, SolveContext
from .scoring import check, extract, visible_answer

MAX_CANDIDATE_CHARS = 6000
"""Each candidate's answer is cut to this many characters in the judge's prompt (the tail kept)."""


@dataclass
class Selection:
    """The chosen candidate's index in the list (``None``: none usable) and what happened on the way."""

    index: int | None
    selector: str
    notes: list[str] = field(default_factory=list)
    calls: int = 0
    """Model calls the selector made (the judge's)."""


Selector = Callable[[SolveContext, Loaded[Any], list[Attempt]], Awaitable[Selection]]
SELECTORS: dict[str, Selector] = {}


def _selector(name: str) -> Callable[[Selector], Selector]:
    def decorate(fn: Selector) -> Selector:
        SELECTORS[name] = fn
        return fn

    return decorate


def usable(attempts: list[Attempt]) -> list[int]:
    """Indexes of candidates with a visible answer (no failed call, not cut, not empty)."""
    return [i for i, a in enumerate(attempts) if a.error is None and visible_answer(a.completion) is not None]


def first(attempts: list[Attempt], selector: str, notes: list[str] | None = None) -> Selection:
    ok = usable(attempts)
    return Selection(ok[0] if ok else None, selector, notes or [])


@_selector("majority")
async def select_majority(ctx: SolveContext, task: Loaded[Any], attempts: list[Attempt]) -> Selection:
    keys = [await extract(ctx, task, a) for a in attempts]
    counts = Counter(k for k in keys if k is not None)
    if not counts:
        return first(attempts, "first", ["majority: no answer could be extracted: took the first answer"])
    top = max(counts.values())
    winner = next(k for k in keys if k is not None and counts[k] == top)  # the earliest of the tied
    return Selection(keys.index(winner), "majority", [])


@_selector("reward")
async def select_reward(ctx: SolveContext, task: Loaded[Any], attempts: list[Attempt]) -> Selection:
    checks = [await check(ctx, task, a) for a in attempts]
    for attempt, result in zip(attempts, checks, strict=True):
        attempt.check = result
    if all(c is None for c in checks):
        fallback = await select_majority(ctx, task, attempts)
        fallback.notes.insert(0, f"{ctx.env_id} has no public check: fell back to {fallback.selector}")
        return fallback
    scored = [(c.value, -i) for i, c in enumerate(checks) if c is not None and not c.masked]
    if not scored:
        fallback = await select_majority(ctx, task, attempts)
        fallback.notes.insert(0, f"every public check failed: fell back to {fallback.selector}")
        return fallback
    return Selection(-max(scored)[1], "reward", [])


def genselect_prompt(ctx: SolveContext, task: Loaded[Any], answers: list[str]) -> list[dict[str, str]]:
    """The judge's prompt: the problem (the task's prompt messages) and the numbered candidates."""
    problem = "\n\n".join(
        str(m.get("content") or "") for m in ctx.env.prompt(task.task) if m.get("role") != "system"
    )
    shown = [a if len(a) <= MAX_CANDIDATE_CHARS else "[...]" + a[-MAX_CANDIDATE_CHARS:] for a in answers]
    blocks = "\n\n".join(f"### Candidate {i + 1}\n{a}" for i, a in enumerate(shown))
    text = (
        f"Below are a problem and {len(answers)} candidate answers to it. Judge which candidate is most "
        "likely correct and complete; check the key steps yourself.\n\n"
        f"## Problem\n{problem}\n\n## Candidates\n{blocks}\n\n"
        f"End your reply with the number of the best candidate (1 to {len(answers)}) as \\boxed{{k}}."
    )
    return [{"role": "user", "content": text}]


_BOXED = re.compile(r"\\boxed\s*\{\s*(?:candidate\s*)?#?\s*(\d+)\s*\}", re.I)
_NAMED = re.compile(r"candidate\s*#?\s*(\d+)", re.I)
_NUMBER = re.compile(r"(?<![\d.])(\d+)(?![\d.])")


def parse_choice(reply: str, n: int) -> int | None:
    """The 0-based candidate a judge's reply names: its last ``\\boxed{k}``, else its last
    "candidate k", else a reply that is only a number; ``None`` when none is in 1..n."""
    text = reply.split("</think>")[-1]
    for pattern in (_BOXED, _NAMED):
        found = [int(m) for m in pattern.findall(text) if 1 <= int(m) <= n]
        if found:
            return found[-1] - 1
    bare = text.strip().strip(".*` ")
    return int(bare) - 1 if _NUMBER.fullmatch(bare) and 1 <= int(bare) <= n else None


@_selector("judge")
async def select_judge(ctx: SolveContext, task: Loaded[Any], attempts: list[Attempt]) -> Selection:
    ok = usable(attempts)
    if len(ok) <= 1:
        return first(attempts, "judge", [] if ok else ["no candidate has an answer"])
    if ctx.judge is None:
        fallback = await select_majority(ctx, task, attempts)
        fallback.notes.insert(0, f"no judge given: fell back to {fallback.selector}")
        return fallback
    answers = [visible_answer(attempts[i].completion) or "" for i in ok]
    try:
        call = await ctx.ajudge(
            genselect_prompt(ctx, task, answers), task_id=task.task_id, round=0, role="selector"
        )
    except BudgetSpent as exc:
        fallback = await select_majority(ctx, task, attempts)
        fallback.notes.insert(0, f"{exc}: no judge call: fell back to {fallback.selector}")
        return fallback
    choice = None if call.error else parse_choice(call.completion, len(ok))
    call.verdict = None if choice is None else f"candidate {ok[choice]}"
    ctx.record(call)
    if choice is not None:
        return Selection(ok[choice], "judge", [], calls=1)
    why = f"judge down ({call.error})" if call.error else "the judge's reply named no candidate"
    fallback = await select_majority(ctx, task, attempts)
    fallback.notes.insert(0, f"{why}: fell back to {fallback.selector}")
    fallback.calls = 1
    return fallback
