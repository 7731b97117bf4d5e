"""The shapes of test-time scaling: a strategy registry, the context a strategy solves in, its records.

A strategy is ``async def solve(ctx: SolveContext, task: Loaded) -> TaskOutcome`` registered under a
name with ``@register_strategy(name)`` (as verl's ``core_algos`` registers advantage estimators).
It spends generations through ``ctx.generate`` (which charges ``ctx.budget`` first), records every
model call as an ``Attempt`` through ``ctx.record``, and returns one ``TaskOutcome`` per task.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from ..core import CascadeError, Completion, Message, Reward
from ..data import Loaded
from ..env import Env
from ..judges.base import Judge
from ..policy import Policy, SamplingParams

Role = Literal["candidate", "verifier", "refiner", "selector", "submission"]
ROLES: tuple[str, ...] = ("candidate", "verifier", "refiner", "selector", "submission")

Strategy = Callable[["SolveContext", Loaded[Any]], Awaitable["TaskOutcome"]]
STRATEGIES: dict[str, Strategy] = {}
"""Every registered strategy by name (``best_of_n``, ``refine``, ``submit``, ...)."""


def register_strategy(name: str) -> Callable[[Strategy], Strategy]:
    """Decorator: register ``solve`` under ``name`` (a second registration of a name replaces it)."""

    def decorate(fn: Strategy) -> Strategy:
        STRATEGIES[name] = fn
        return fn

    return decorate


def get_strategy(name: str) -> Strategy:
    """The strategy registered as ``name``; a ``CascadeError`` lists the known ones otherwise."""
    try:
        return STRATEGIES[name]
    except KeyError:
        raise CascadeError(f"unknown strategy {name!r}; known: {', '.join(sorted(STRATEGIES))}") from None


class BudgetSpent(CascadeError):
    """The run's generation or wall-clock budget is spent; the message says which."""


@dataclass
class Budget:
    """Generations and wall-clock seconds a whole run may spend (``None``: no limit)."""

    max_generations: int | None = None
    max_seconds: float | None = None
    generations: int = 0
    started: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        if self.max_generations is not None and self.max_generations < 0:
            raise ValueError("max_generations must be >= 0")
        if self.max_seconds is not None and not self.max_seconds > 0:
            raise ValueError("max_seconds must be positive")

    @property
    def spent_reason(self) -> str | None:
        """Why no more generations may start, or ``None`` while budget is left."""
        if self.max_generations is not None and self.generations >= self.max_generations:
            return f"generation budget spent ({self.generations} of {self.max_generations})"
        if self.max_seconds is not None and self.elapsed() >= self.max_seconds:
            return f"time budget spent ({self.elapsed():.1f} s of {self.max_seconds:g} s)"
        return None

    @property
    def spent(self) -> bool:
        return self.spent_reason is not None

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def seconds_left(self) -> float | None:
        return None if self.max_seconds is None else max(0.0, self.max_seconds - self.elapsed())

    def spend(self, n: int = 1) -> None:
        """Charge ``n`` generations, or raise ``BudgetSpent`` (nothing charged) when they do not fit."""
        reason = self.spent_reason
        if (
            reason is None
            and self.max_generations is not None
            and self.generations + n > self.max_generations
        ):
            reason = f"generation budget spent ({self.generations} of {self.max_generations}, {n} more asked)"
        if reason is not None:
            raise BudgetSpent(reason)
        self.generations += n


@dataclass
class Attempt:
    """One model call of a strategy: who (``role``), when (``round``, ``candidate``), what came back.

    ``reward`` is the env's score of an answer (candidates, refiners, submissions); ``verdict``
    and ``critique`` are what a verifier or selector said; ``error`` is a failed call.
    """

    task_id: str
    env_id: str
    strategy: str
    round: int
    role: Role
    candidate: int
    prompt: list[Message]
    completion: str = ""
    verdict: str | None = None
    critique: str | None = None
    reward: Reward | None = None
    check: Reward | None = None
    """The env's public check of this answer (``Env.acheck``), where it has one; never the score."""
    tokens: int | None = None
    seconds: float = 0.0
    error: str | None = None

    def to_row(self) -> dict[str, Any]:
        """The results JSONL row: an episode whose prompt is this call's own messages."""
        reward = self.reward
        return {
            "kind": "attempt",
            "task_id": self.task_id,
            "env_id": self.env_id,
            "strategy": self.strategy,
            "round": self.round,
            "role": self.role,
            "candidate": self.candidate,
            "messages": [*self.prompt, {"role": "assistant", "content": self.completion}],
            "completion": self.completion,
            "verdict": self.verdict,
            "critique": self.critique,
            "reward": None if reward is None else reward.value,
            "masked": None if reward is None else reward.masked,
            "reason": None if reward is None else (reward.error or reward.reason),
            "check": None if self.check is None else self.check.to_dict(),
            "tokens": self.tokens,
            "seconds": round(self.seconds, 4),
            "error": self.error,
        }


@dataclass
class TaskOutcome:
    """What a strategy made of one task.

    ``reward``: the env's score of ``selected`` (``None`` when nothing was submitted). ``pass_at_n``:
    whether any candidate scored 1 (the oracle). ``selector_correct``: whether the selected one
    is correct, asked only where one was (``None`` otherwise). ``notes``: what went differently
    from the plan ("judge down: fell back to majority", "generation budget spent").
    """

    task_id: str
    env_id: str
    strategy: str
    selected: str | None
    reward: Reward | None
    pass_at_n: bool | None = None
    selector_correct: bool | None = None
    rounds: int = 0
    generations: int = 0
    candidates: int = 0
    notes: list[str] = field(default_factory=list)

    def to_row(self) -> dict[str, Any]:
        reward = self.reward
        return {
            "kind": "outcome",
            "task_id": self.task_id,
            "env_id": self.env_id,
            "strategy": self.strategy,
            "selected": self.selected,
            "reward": None if reward is None else reward.to_dict(),
            "pass_at_n": self.pass_at_n,
            "selector_correct": self.selector_correct,
            "rounds": self.rounds,
            "generations": self.generations,
            "candidates": self.candidates,
            "notes": self.notes,
        }


@dataclass
class SolveContext:
    """Everything a strategy solves with: the env, the policy, an optional judge, settings, budget.

    ``verifier`` is the policy that critiques in ``refine`` (``None``: ``policy`` itself, unless a
    ``judge`` is given). ``options`` holds strategy-specific settings (``submit`` reads its own).
    """

    env: Env[Any]
    policy: Policy
    env_id: str
    strategy: str
    sampling: SamplingParams = field(default_factory=SamplingParams)
    judge: Judge | None = None
    verifier: Policy | None = None
    budget: Budget = field(default_factory=Budget)
    record: Callable[[Attempt], None] = lambda attempt: None
    candidates: int = 4
    rounds: int = 1
    selector: str = "reward"
    accept_streak: int = 1
    request_timeout_s: float = 600.0
    options: dict[str, Any] = field(default_factory=dict)
    cut_short: str | None = None
    """Set when a call of this context met the spent budget (its reason): the task's outcome is
    then partial, and a resumed run solves that task again."""

    def _charge(self) -> float:
        """Spend one generation (or raise ``BudgetSpent``, remembered in ``cut_short``); the call's time limit."""
        try:
            self.budget.spend(1)
        except BudgetSpent as exc:
            self.cut_short = self.cut_short or str(exc)
            raise
        left = self.budget.seconds_left()
        return self.request_timeout_s if left is None else min(self.request_timeout_s, max(left, 1.0))

    async def generate(
        self,
        messages: list[Message],
        *,
        task_id: str,
        round: int,
        role: Role,
        candidate: int = 0,
        policy: Policy | None = None,
        seed_offset: int = 0,
    ) -> Attempt:
        """One budgeted, time-bounded policy call as an (unrecorded) ``Attempt``.

        Raises ``BudgetSpent`` before calling when the budget is spent; a failed or timed-out call
        comes back as an ``Attempt`` with ``error`` set and no completion (the strategy records it).
        """
        timeout = self._charge()
        sampling = self.sampling
        if sampling.seed is not None:
            sampling = SamplingParams(
                sampling.max_tokens, sampling.temperature, sampling.top_p,
                sampling.seed + seed_offset, sampling.stop,
            )  # fmt: skip
        attempt = Attempt(task_id, self.env_id, self.strategy, round, role, candidate, list(messages))
        started = time.monotonic()
        try:
            completion = await asyncio.wait_for(
                (policy or self.policy).agenerate(messages, sampling=sampling, thinking=self.env.thinking),
                timeout,
            )
        except TimeoutError:
            attempt.error = f"policy call timed out after {timeout:g} s"
        except Exception as exc:
            attempt.error = f"policy call failed: {type(exc).__name__}: {exc}"
        else:
            attempt.completion = completion
            attempt.tokens = _tokens(completion)
        attempt.seconds = time.monotonic() - started
        return attempt

    async def ajudge(
        self, messages: list[Message], *, task_id: str, round: int, role: Role, candidate: int = 0
    ) -> Attempt:
        """One budgeted, time-bounded call of ``judge`` (which must be set) as an unrecorded ``Attempt``.

        Raises ``BudgetSpent`` like ``generate``; a judge that fails or times out gives an
        ``Attempt`` with ``error`` set.
        """
        if self.judge is None:
            raise ValueError("this context has no judge")
        timeout = self._charge()
        attempt = Attempt(task_id, self.env_id, self.strategy, round, role, candidate, list(messages))
        started = time.monotonic()
        try:
            attempt.completion = await asyncio.wait_for(
                self.judge.acomplete(messages, max_tokens=self.sampling.max_tokens), timeout
            )
        except TimeoutError:
            attempt.error = f"judge call timed out after {timeout:g} s"
        except Exception as exc:
            attempt.error = f"judge call failed: {type(exc).__name__}: {exc}"
        attempt.seconds = time.monotonic() - started
        return attempt


def _tokens(completion: str) -> int | None:
    ids = getattr(completion, "token_ids", None) if isinstance(completion, Completion) else None
    return len(ids) if ids is not None else None
