"""``submit``: IOI-style multi-round generate, screen, submit over the code env.

Subtask by subtask (in the row's order, skipping those already solved), up to ``ctx.rounds``
rounds each: ``ctx.candidates`` candidates from a prompt carrying the submission history (the
official verdict per subtask of every submission) and the insights of solved subtasks (their
accepted code); each candidate screened on the public tests (``Env.acheck``); the screened ones
not submitted before (at most ``per_round``) submitted, i.e. judged on the hidden tests, within the
task's submission budget. It stops when every subtask is solved, the budget is used up, or the
rounds or the run's generation/time budget run out. The score is IOI points: per subtask the best
result of any submission, as a fraction of the total.

``ctx.options``: ``submissions`` (the budget per task, default 50 as at IOI), ``per_round``
(submissions per round, default 1), ``history`` (submissions shown in a prompt, default 8).
A row without subtasks counts as one subtask ("all tests") worth its binary reward. Unsubmitted
candidates are never judged on the hidden tests, so ``pass_at_n`` stays ``None``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..core import Reward
from ..data import Loaded
from ..envs.code.extract import last_code_block
from ..envs.code.subtasks import Subtask, SubtaskVerdict, ioi_points, verdict_of
from .base import Attempt, BudgetSpent, SolveContext, TaskOutcome, register_strategy
from .ioi_history import History, Submission
from .scoring import check, score, visible_answer

DEFAULT_SUBMISSIONS = 50
WHOLE = "all tests"
"""The one subtask of a row without subtasks."""


def _option(ctx: SolveContext, name: str, default: int, least: int) -> int:
    value = ctx.options.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"submit: option {name!r} must be an integer >= {least}, got {value!r}")
    return value


def _subtasks(ctx: SolveContext, task: Any) -> list[Subtask]:
    tests = getattr(task, "tests", None)
    if tests is None or not hasattr(tests, "subtasks"):
        raise ValueError(
            f"submit needs the code env's tasks (cascade/Code-v0); {ctx.env_id} gives {type(task).__name__}"
        )
    return list(tests.subtasks) or [Subtask(WHOLE, 1.0, tuple(range(tests.n_tests)))]


def _verdicts(reward: Reward, subtasks: list[Subtask]) -> list[SubtaskVerdict]:
    """The per-subtask verdicts of a (not masked) submission reward."""
    listed = reward.components.get("subtasks")
    if isinstance(listed, list):
        return [SubtaskVerdict.from_dict(v) for v in listed]
    (whole,) = subtasks
    if reward.value >= 1:
        return [SubtaskVerdict(whole.name, whole.points, whole.points, "accepted")]
    reason = reward.reason or "not accepted"
    return [SubtaskVerdict(whole.name, whole.points, 0.0, verdict_of(reason), reason[:300])]


def _code(completion: str) -> tuple[str, str] | None:
    """``(language, code)`` of the candidate's final answer, ``None`` without a usable code block."""
    answer = visible_answer(completion)
    block = last_code_block(answer) if answer is not None else None
    if block is None or not block.code.strip():
        return None
    return block.language or "python", block.code


class _Run:
    """One task's submit loop."""

    def __init__(self, ctx: SolveContext, task: Loaded[Any]):
        self.ctx, self.task = ctx, task
        self.subtasks = _subtasks(ctx, task.task)
        self.budget = _option(ctx, "submissions", DEFAULT_SUBMISSIONS, 0)
        self.per_round = _option(ctx, "per_round", 1, 1)
        self.shown = _option(ctx, "history", 8, 1)
        self.history = History(self.subtasks, self.budget)
        self.outcome = TaskOutcome(task.task_id, ctx.env_id, ctx.strategy, None, None)
        self.rewards: list[tuple[Reward, str]] = []
        self.stop: str | None = None

    async def solve(self) -> TaskOutcome:
        if self.budget == 0:
            self.outcome.notes.append("submission budget is 0: nothing generated, nothing submitted")
            return self.outcome
        base = self.ctx.env.prompt(self.task.task)
        for target in self.subtasks:
            for _ in range(self.ctx.rounds):
                if self.stop or target not in self.history.unsolved():
                    break
                await self.round(base, target)
                if not self.history.unsolved():
                    self.outcome.notes.append("all subtasks solved")
                    self.stop = self.stop or "all subtasks solved"
                elif len(self.history.submissions) >= self.budget:
                    self.stop = f"submission budget spent ({self.budget} of {self.budget})"
        return self.finish()

    async def round(self, base: list[dict[str, Any]], target: Subtask) -> None:
        ctx, outcome = self.ctx, self.outcome
        outcome.rounds += 1
        number = outcome.rounds
        prompt = self.history.prompt(base, target, shown=self.shown)

        async def one(k: int) -> Attempt | None:
            try:
                attempt = await ctx.generate(
                    prompt,
                    task_id=self.task.task_id,
                    round=number,
                    role="candidate",
                    candidate=k,
                    seed_offset=number * ctx.candidates + k,
                )
            except BudgetSpent as exc:
                if not self.stop:
                    self.stop = str(exc)
                    self.outcome.notes.append(self.stop)
                return None
            attempt.check = await check(ctx, self.task, attempt)
            if attempt.error is None and _code(attempt.completion) is None:
                attempt.verdict = "no code block in the answer"
            ctx.record(attempt)
            return attempt

        made = [a for a in await asyncio.gather(*(one(k) for k in range(ctx.candidates))) if a is not None]
        outcome.generations += len(made)
        outcome.candidates += len(made)
        chosen = self.choose(made)
        if not chosen:
            self.history.notes.append(f"round {number}: {self.why_nothing(made)}; nothing submitted")
        for attempt in chosen:
            if len(self.history.submissions) >= self.budget:
                break
            await self.submit(attempt, number)

    def choose(self, made: list[Attempt]) -> list[Attempt]:
        """Candidates to submit: with code, passing the public tests (or none to pass), not seen before."""
        picked: list[Attempt] = []
        seen: set[str] = set()
        for attempt in made:
            found = None if attempt.error is not None else _code(attempt.completion)
            result = attempt.check
            if found is None or (result is not None and (result.masked or result.value < 1)):
                continue
            key = "\n".join(line.rstrip() for line in found[1].strip().splitlines() if line.strip())
            if key in seen or self.history.submitted(found[1]):
                continue
            seen.add(key)
            picked.append(attempt)
        return picked[: self.per_round]

    @staticmethod
    def why_nothing(made: list[Attempt]) -> str:
        if not made:
            return "no candidate"
        answered = [a for a in made if a.error is None]
        if not answered:
            return f"every policy call failed ({made[0].error})"
        if all(_code(a.completion) is None for a in answered):
            return "no candidate had a code block"
        failed = [
            a.check for a in answered if a.check is not None and not a.check.masked and a.check.value < 1
        ]
        if failed:
            reason = failed[0].reason or "failed"
            return f"no new candidate passed the public tests (e.g. {reason[:200]})"
        return "every candidate was a repeat of an earlier submission or could not be screened"

    async def submit(self, candidate: Attempt, number: int) -> None:
        ctx = self.ctx
        language, code = _code(candidate.completion) or ("python", "")
        attempt = Attempt(
            self.task.task_id,
            ctx.env_id,
            ctx.strategy,
            number,
            "submission",
            candidate.candidate,
            candidate.prompt,
            candidate.completion,
            check=candidate.check,
            tokens=candidate.tokens,
        )
        reward = attempt.reward = await score(ctx, self.task, candidate)
        if reward.masked:
            attempt.verdict = f"not judged: {reward.error}"
            self.outcome.notes.append(f"submission in round {number} not judged: {reward.error}")
            verdicts = None
        else:
            verdicts = _verdicts(reward, self.subtasks)
            attempt.verdict = "; ".join(f"{v.name}: {v.verdict}" for v in verdicts)
        ctx.record(attempt)
        # a masked submission is not a verdict: it uses budget but earns and shows nothing
        index = len(self.history.submissions) + 1
        self.history.submissions.append(
            Submission(index, number, candidate.candidate, language, code, verdicts or [])
        )
        if verdicts is not None:
            self.rewards.append((reward, candidate.completion))

    def finish(self) -> TaskOutcome:
        outcome, history = self.outcome, self.history
        if self.stop and self.stop not in outcome.notes:
            outcome.notes.append(self.stop)
        judged = [s.verdicts for s in history.submissions if s.verdicts]
        if not history.submissions:
            outcome.notes.append("nothing submitted")
            outcome.reward = Reward.zero("no submission: no candidate was submitted", points=0.0)
            return outcome
        if not judged:
            outcome.reward = Reward.failed(
                "no submission could be judged", submissions=len(history.submissions)
            )
            return outcome
        points, total = ioi_points(judged)
        best = history.solved_by()
        components = {
            "points": points,
            "max_points": total,
            "submissions": len(history.submissions),
            "submission_budget": self.budget,
            "subtasks": {
                s.name: {"points": s.points, "solved_by": best[s.name].index if s.name in best else None}
                for s in self.subtasks
            },
        }
        reason = f"{points:g}/{total:g} points (IOI: best submission per subtask)"
        outcome.reward = Reward(points / total, components, reason=reason)
        top = max(self.rewards, key=lambda item: item[0].value)
        outcome.selected = top[1]
        return outcome


@register_strategy("submit")
async def solve(ctx: SolveContext, task: Loaded[Any]) -> TaskOutcome:
    return await _Run(ctx, task).solve()
