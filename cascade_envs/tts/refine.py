"""``refine``: generate → verify → revise, over any single-turn env.

Round 1 answers the task's prompt. Each round a verifier checks the current answer (``ctx.verifier``,
another policy; else ``ctx.judge``, a judge endpoint; else the policy itself) and ends its reply
with ``VERDICT: ACCEPT`` or ``VERDICT: REJECT``. A rejected answer is revised: the next prompt is the
task's prompt with the previous answer and the critique appended to its last user message (a new
prompt, not the conversation so far). An accepted one is verified again next round, until
``ctx.accept_streak`` verifications in a row accept it or ``ctx.rounds`` rounds are done. The
reward is the env's own score of the last answer.

A judge that fails is replaced by the policy for that verification (said in the notes); a
verification that fails or does not parse is not an acceptance. Every answer and verification is
recorded (roles ``candidate``, ``refiner``, ``verifier``).
"""

from __future__ import annotations

import re
from typing import Any

from ..core import Message
from ..data import Loaded
from .base import Attempt, BudgetSpent, SolveContext, TaskOutcome, register_strategy
from .scoring import correct, require_single_turn, score, visible_answer

MAX_CRITIQUE_CHARS = 4000
MAX_ANSWER_CHARS = 8000
_VERDICT = re.compile(
    r"verdict\W{0,6}(accept(?:ed)?|reject(?:ed)?|correct|incorrect)\b|\\boxed\{\s*(accept|reject)\s*\}",
    re.I,
)


def verify_prompt(problem: str, answer: str) -> list[Message]:
    text = (
        "Check the proposed answer to the problem below. Verify each step and the final result; "
        "name every error or gap you find and say how to fix it.\n\n"
        f"## Problem\n{problem}\n\n## Proposed answer\n{answer}\n\n"
        "End your reply with one line: `VERDICT: ACCEPT` if the answer is fully correct, "
        "`VERDICT: REJECT` otherwise."
    )
    return [{"role": "user", "content": text}]


def revise_prompt(prompt: list[Message], previous: str, critique: str) -> list[Message]:
    """The task's prompt with the previous answer and the critique appended to its last user message."""
    note = (
        "\n\n---\nYour previous attempt at this task:\n"
        f"{previous or '(empty: no answer was given)'}\n\n"
        f"A reviewer's critique of it:\n{critique}\n\n"
        "Write an improved, complete answer to the task above, in the format it asks for."
    )
    messages = [dict(m) for m in prompt]
    last = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=None)
    if last is None:
        return [*messages, {"role": "user", "content": note.lstrip()}]
    messages[last]["content"] = f"{messages[last].get('content') or ''}{note}"
    return messages


def parse_verdict(reply: str) -> str | None:
    """``"accept"`` or ``"reject"`` from the last verdict in ``reply`` (after its reasoning); ``None``."""
    found = _VERDICT.findall(reply.split("</think>")[-1])
    if not found:
        return None
    word = next(w for w in found[-1] if w).lower()
    return "accept" if word.startswith("accept") or word == "correct" else "reject"


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else "[...]" + text[-limit:]


def _problem(ctx: SolveContext, task: Loaded[Any]) -> str:
    return "\n\n".join(
        str(m.get("content") or "") for m in ctx.env.prompt(task.task) if m.get("role") != "system"
    )


async def verify(
    ctx: SolveContext, task: Loaded[Any], answer: str, round: int, outcome: TaskOutcome
) -> Attempt:
    """One verification of ``answer`` (recorded), by the verifier policy, the judge, or the policy.

    Every model call is counted in ``outcome.generations``; a judge that fails is noted there.
    """
    messages = verify_prompt(_problem(ctx, task), _cut(answer, MAX_ANSWER_CHARS))
    if ctx.verifier is None and ctx.judge is not None:
        call = await ctx.ajudge(messages, task_id=task.task_id, round=round, role="verifier")
        outcome.generations += 1
        if call.error is None:
            return _verdict(ctx, call)
        call.verdict = "failed"
        ctx.record(call)
        outcome.notes.append(f"round {round}: judge down ({call.error}): the policy verified instead")
    call = await ctx.generate(
        messages,
        task_id=task.task_id,
        round=round,
        role="verifier",
        policy=ctx.verifier,
        seed_offset=2 * round + 1,
    )
    outcome.generations += 1
    return _verdict(ctx, call)


def _verdict(ctx: SolveContext, call: Attempt) -> Attempt:
    if call.error is None:
        reply = visible_answer(call.completion) or ""
        call.verdict = parse_verdict(call.completion) or "unparsed"
        call.critique = _cut(reply, MAX_CRITIQUE_CHARS)
    else:
        call.verdict = "failed"
    ctx.record(call)
    return call


@register_strategy("refine")
async def solve(ctx: SolveContext, task: Loaded[Any]) -> TaskOutcome:
    require_single_turn(ctx)
    outcome = TaskOutcome(task.task_id, ctx.env_id, ctx.strategy, None, None)
    prompt = ctx.env.prompt(task.task)
    answers: list[Attempt] = []
    streak, critique = 0, ""
    for round in range(1, ctx.rounds + 1):
        try:
            if not answers or streak == 0:
                messages = prompt if not answers else revise_prompt(prompt, _shown(answers[-1]), critique)
                attempt = await ctx.generate(
                    messages,
                    task_id=task.task_id,
                    round=round,
                    role="refiner" if answers else "candidate",
                    seed_offset=2 * round,
                )
                outcome.generations += 1
                attempt.reward = await score(ctx, task, attempt)
                ctx.record(attempt)
                answers.append(attempt)
            outcome.rounds = round
            answer = visible_answer(answers[-1].completion) if answers[-1].error is None else None
            if answer is None:
                streak, critique = 0, _no_answer(answers[-1])
                continue
            check = await verify(ctx, task, answer, round, outcome)
        except BudgetSpent as exc:
            outcome.notes.append(f"{exc}: stopped in round {round}")
            break
        if check.verdict == "accept":
            streak += 1
            if streak >= ctx.accept_streak:
                outcome.notes.append(f"accepted {streak} time(s) in a row by round {round}")
                break
        else:
            streak = 0
            critique = check.critique or f"The verification gave no usable critique ({check.verdict})."
    else:
        if answers:
            outcome.notes.append(
                f"round limit {ctx.rounds} reached without {ctx.accept_streak} acceptance(s)"
            )
    outcome.candidates = len(answers)
    if answers:
        last = answers[-1]
        outcome.selected, outcome.reward = last.completion, last.reward
        outcome.pass_at_n = any(correct(a.reward) for a in answers)
        if outcome.pass_at_n:
            outcome.selector_correct = correct(last.reward)
    return outcome


def _shown(attempt: Attempt) -> str:
    return _cut(visible_answer(attempt.completion) or "", MAX_ANSWER_CHARS) if attempt.error is None else ""


def _no_answer(attempt: Attempt) -> str:
    if attempt.error is not None:
        return f"The previous attempt failed ({attempt.error}); answer again."
    return (
        "The previous attempt gave no final answer (nothing visible after the reasoning, or it was cut off)."
    )
