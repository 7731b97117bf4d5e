"""refine: a verifier that never accepts, accept streaks, revisions that use the critique, a judge that is down."""

from __future__ import annotations

import pytest

from cascade_envs.env import run_sync
from cascade_envs.envs.math.env import MathEnv
from cascade_envs.judges import JudgeError
from cascade_envs.reasoning import NO_ANSWER
from cascade_envs.testing import ScriptedJudge, ScriptedPolicy
from cascade_envs.tts import Budget, get_strategy
from cascade_envs.tts.refine import parse_verdict

from .helpers import context, math_row


@pytest.fixture(scope="module")
def env():
    env = MathEnv([math_row(0, "2")], workers=1)
    yield env
    run_sync(env.aclose())


def solve(ctx):
    return run_sync(get_strategy("refine")(ctx, ctx.env.tasks[0]))


def verifying(messages) -> bool:
    return messages[-1]["content"].startswith("Check the proposed answer")


def script(answers, verdict):
    """Answers in turn for answer prompts; ``verdict(answer_text)`` for verification prompts."""
    made = iter(answers)

    def reply(messages):
        if verifying(messages):
            return verdict(messages[-1]["content"])
        return next(made)

    return reply


def test_a_verifier_that_never_accepts_stops_at_the_round_limit(env):
    policy = ScriptedPolicy(
        script(["\\boxed{3}", "\\boxed{4}", "\\boxed{5}"], lambda _: "Step 2 is wrong. VERDICT: REJECT")
    )
    ctx, records = context(env, policy, "refine", rounds=3)
    outcome = solve(ctx)
    assert outcome.rounds == 3 and outcome.generations == 6 and outcome.candidates == 3
    assert outcome.selected == "\\boxed{5}" and outcome.reward.value == 0.0 and outcome.pass_at_n is False
    assert "round limit 3 reached without 1 acceptance(s)" in outcome.notes
    rows = [r.to_row() for r in records]
    assert [(r["round"], r["role"]) for r in rows] == [
        (1, "candidate"), (1, "verifier"), (2, "refiner"), (2, "verifier"), (3, "refiner"), (3, "verifier"),
    ]  # fmt: skip
    assert [r["verdict"] for r in rows if r["role"] == "verifier"] == ["reject"] * 3
    # each revision is its own prompt: the task, then the previous attempt and its critique (not a chat prefix)
    revise = rows[2]["messages"]
    assert len(revise) == 2 and revise[0]["role"] == "user"
    assert revise[0]["content"].startswith("Problem 0: what is the answer?")
    assert "Your previous attempt at this task:\n\\boxed{3}" in revise[0]["content"]
    assert "A reviewer's critique of it:\nStep 2 is wrong. VERDICT: REJECT" in revise[0]["content"]
    assert "## Proposed answer\n\\boxed{4}" in rows[3]["messages"][0]["content"]


def test_revising_with_the_critique_can_fix_the_answer(env):
    policy = ScriptedPolicy(
        script(
            ["\\boxed{3}", "\\boxed{2}"],
            lambda p: "VERDICT: ACCEPT" if "\\boxed{2}" in p else "VERDICT: REJECT",
        )
    )
    ctx, _ = context(env, policy, "refine", rounds=5)
    outcome = solve(ctx)
    assert outcome.rounds == 2 and outcome.reward.value == 1.0
    assert outcome.pass_at_n is True and outcome.selector_correct is True
    assert "accepted 1 time(s) in a row by round 2" in outcome.notes


def test_an_accept_streak_verifies_the_same_answer_again(env):
    verdicts = iter(["VERDICT: ACCEPT", "**Verdict:** REJECT", "verdict: accepted", "VERDICT: ACCEPT"])
    policy = ScriptedPolicy(script(["\\boxed{2}", "\\boxed{2}"], lambda _: next(verdicts)))
    ctx, records = context(env, policy, "refine", rounds=5, accept_streak=2)
    outcome = solve(ctx)
    # r1 answer+accept, r2 reject, r3 revision+accept, r4 accept again: stop
    assert outcome.rounds == 4 and outcome.generations == 6 and outcome.candidates == 2
    assert [r.role for r in records] == [
        "candidate",
        "verifier",
        "verifier",
        "refiner",
        "verifier",
        "verifier",
    ]


def test_a_judge_verifier_that_is_down_is_replaced_by_the_policy_and_noted(env):
    policy = ScriptedPolicy(script(["\\boxed{2}"], lambda _: "VERDICT: ACCEPT"))
    ctx, records = context(env, policy, "refine", rounds=2, judge=ScriptedJudge(JudgeError("503")))
    outcome = solve(ctx)
    assert outcome.reward.value == 1.0 and outcome.generations == 3  # answer, failed judge call, policy check
    assert (
        outcome.notes[0]
        == "round 1: judge down (judge call failed: JudgeError: 503): the policy verified instead"
    )
    assert [(r.role, r.verdict) for r in records] == [
        ("candidate", None),
        ("verifier", "failed"),
        ("verifier", "accept"),
    ]
    judged = context(
        env, ScriptedPolicy("\\boxed{2}"), "refine", rounds=2, judge=ScriptedJudge("fine. VERDICT: ACCEPT")
    )[0]
    assert solve(judged).generations == 2


def test_a_policy_that_returns_nothing_is_recorded_and_scores_no_answer(env):
    policy = ScriptedPolicy("")
    ctx, records = context(env, policy, "refine", rounds=2)
    outcome = solve(ctx)
    assert outcome.reward.value == 0.0 and outcome.reward.reason == NO_ANSWER and not outcome.reward.masked
    assert [r.role for r in records] == ["candidate", "refiner"]  # nothing to verify: no verifier call
    assert "gave no final answer" in policy.calls[1].messages[-1]["content"]


def test_the_budget_stops_refining_and_says_so(env):
    policy = ScriptedPolicy(script(["\\boxed{3}"] * 5, lambda _: "VERDICT: REJECT"))
    ctx, _ = context(env, policy, "refine", rounds=5, budget=Budget(max_generations=3))
    outcome = solve(ctx)
    assert outcome.generations == 3 and outcome.rounds == 2 and outcome.reward.value == 0.0
    assert outcome.notes == ["generation budget spent (3 of 3): stopped in round 2"] and ctx.cut_short
    none = context(env, policy, "refine", budget=Budget(max_generations=0))[0]
    empty = solve(none)
    assert empty.reward is None and empty.notes == ["generation budget spent (0 of 0): stopped in round 1"]


@pytest.mark.parametrize(
    ("reply", "expected"),
    [("VERDICT: ACCEPT", "accept"), ("verdict - Rejected.", "reject"), ("Verdict: correct", "accept"),
     ("Verdict: incorrect", "reject"), ("\\boxed{accept}", "accept"), ("<think>VERDICT: ACCEPT</think>VERDICT: REJECT", "reject"),
     ("looks fine", None), ("VERDICT: ACCEPT ... on reflection VERDICT: REJECT", "reject")],
)  # fmt: skip
def test_parse_verdict(reply, expected):
    assert parse_verdict(reply) == expected
