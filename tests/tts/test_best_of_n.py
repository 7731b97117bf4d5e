"""best_of_n: selection by majority, public check and judge; pass@N; judge down; empty and failing policies; budget."""

from __future__ import annotations

import pytest

from cascade_envs.env import run_sync
from cascade_envs.envs.code.env import CodeEnv
from cascade_envs.envs.math.env import MathEnv
from cascade_envs.judges import JudgeError
from cascade_envs.policy import PolicyError
from cascade_envs.reasoning import NO_ANSWER
from cascade_envs.testing import ScriptedJudge, ScriptedPolicy
from cascade_envs.tts import Budget, get_strategy
from cascade_envs.tts.select import parse_choice

from .helpers import context, math_row, replies

ROWS = [math_row(0, "2"), math_row(1, "7")]


@pytest.fixture(scope="module")
def env():
    env = MathEnv(ROWS, workers=1)
    yield env
    run_sync(env.aclose())


def solve(ctx, task):
    return run_sync(get_strategy("best_of_n")(ctx, task))


def test_majority_picks_the_most_frequent_answer_and_reports_pass_at_n(env):
    policy = ScriptedPolicy(replies(["\\boxed{3}", "so \\boxed{2}", "\\boxed{2}", "\\boxed{5}"]))
    ctx, records = context(env, policy, "best_of_n", candidates=4, selector="majority")
    outcome = solve(ctx, env.tasks[0])
    assert outcome.selected == "so \\boxed{2}" and outcome.reward.value == 1.0
    assert outcome.pass_at_n is True and outcome.selector_correct is True
    assert outcome.generations == outcome.candidates == 4
    rows = [r.to_row() for r in records]
    assert [r["role"] for r in rows] == ["candidate"] * 4 and [r["candidate"] for r in rows] == [0, 1, 2, 3]
    assert [r["reward"] for r in rows] == [0.0, 1.0, 1.0, 0.0]
    assert rows[0]["messages"][-1] == {"role": "assistant", "content": "\\boxed{3}"}
    assert len({c.sampling.seed for c in policy.calls}) == 4  # seeded, but never the same seed twice


def test_a_wrong_majority_counts_against_the_selector_not_pass_at_n(env):
    policy = ScriptedPolicy(replies(["\\boxed{3}", "\\boxed{3}", "\\boxed{2}"]))
    ctx, _ = context(env, policy, "best_of_n", candidates=3, selector="majority")
    outcome = solve(ctx, env.tasks[0])
    assert outcome.reward.value == 0.0 and outcome.pass_at_n is True and outcome.selector_correct is False
    all_wrong = solve(
        context(env, ScriptedPolicy("\\boxed{9}"), "best_of_n", candidates=2, selector="majority")[0],
        env.tasks[0],
    )
    assert all_wrong.pass_at_n is False and all_wrong.selector_correct is None


def test_reward_selector_without_a_public_check_falls_back_to_majority_and_says_so(env):
    policy = ScriptedPolicy(replies(["\\boxed{1}", "\\boxed{7}", "\\boxed{7}"]))
    ctx, _ = context(env, policy, "best_of_n", candidates=3, selector="reward")
    outcome = solve(ctx, env.tasks[1])
    assert outcome.reward.value == 1.0
    assert "cascade/Math-v0 has no public check: fell back to majority" in outcome.notes


CORRECT = "```python\nimport sys\nd=sys.stdin.read().split()\nprint('\\n'.join(str(int(d[1+2*i])+int(d[2+2*i])) for i in range(int(d[0]))))\n```"
ONLY_THE_EXAMPLE = "```python\nprint(3)\n```"  # passes the public example, fails the hidden tests
WRONG = "```python\nprint(0)\n```"


@pytest.fixture(scope="module")
def code_env():
    env = CodeEnv(time_limit_s=2, total_time_s=60)
    yield env
    run_sync(env.aclose())


def test_reward_selector_uses_the_public_tests_never_the_hidden_score(code_env):
    task = next(t for t in code_env.tasks if t.task_id == "code-sample/sum-big")
    ctx, records = context(code_env, ScriptedPolicy(replies([WRONG, CORRECT])), "best_of_n", candidates=2)
    outcome = solve(ctx, task)
    assert outcome.reward.value == 1.0 and outcome.selector_correct is True
    assert [r.check.value for r in records] == [0.0, 1.0]  # the public check is recorded with each candidate
    assert records[0].to_row()["check"]["components"]["tests_total"] == 1
    # both pass the public example: the first is taken, though only the second passes the hidden tests
    ctx, _ = context(
        code_env, ScriptedPolicy(replies([ONLY_THE_EXAMPLE, CORRECT])), "best_of_n", candidates=2
    )
    outcome = solve(ctx, task)
    assert outcome.selected == ONLY_THE_EXAMPLE and outcome.reward.value == 0.0
    assert outcome.pass_at_n is True and outcome.selector_correct is False


def test_judge_selector_picks_the_named_candidate(env):
    policy = ScriptedPolicy(replies(["\\boxed{1}", "\\boxed{1}", "\\boxed{7}"]))
    judge = ScriptedJudge("Candidate 3 checks out. \\boxed{3}")
    ctx, records = context(env, policy, "best_of_n", candidates=3, selector="judge", judge=judge)
    outcome = solve(ctx, env.tasks[1])
    assert outcome.reward.value == 1.0 and outcome.generations == 4
    prompt = judge.calls[0].messages[0]["content"]
    assert "Problem 1: what is the answer?" in prompt and "### Candidate 3\n\\boxed{7}" in prompt
    (selector,) = [r for r in records if r.role == "selector"]
    assert selector.verdict == "candidate 2" and selector.completion.endswith("\\boxed{3}")


def test_a_judge_that_is_down_falls_back_to_majority_and_says_so(env):
    policy = ScriptedPolicy(replies(["\\boxed{7}", "\\boxed{1}", "\\boxed{7}"]))
    judge = ScriptedJudge(JudgeError("connection refused"))
    ctx, records = context(env, policy, "best_of_n", candidates=3, selector="judge", judge=judge)
    outcome = solve(ctx, env.tasks[1])
    assert outcome.reward is not None and not outcome.reward.masked and outcome.reward.value == 1.0
    assert any(
        n.startswith("judge down (judge call failed: JudgeError: connection refused)") for n in outcome.notes
    )
    assert [r.error for r in records if r.role == "selector"] == [
        "judge call failed: JudgeError: connection refused"
    ]
    unparsed = solve(
        context(env, policy, "best_of_n", candidates=2, selector="judge", judge=ScriptedJudge("all fine"))[0],
        env.tasks[1],
    )
    assert "the judge's reply named no candidate: fell back to majority" in unparsed.notes
    no_judge = solve(context(env, policy, "best_of_n", candidates=2, selector="judge")[0], env.tasks[1])
    assert "no judge given: fell back to majority" in no_judge.notes


@pytest.mark.parametrize(
    ("reply", "n", "expected"),
    [("\\boxed{2}", 3, 1), ("I pick Candidate #3.", 3, 2), ("2", 2, 1), ("\\boxed{9}", 3, None),
     ("<think>\\boxed{1}</think> \\boxed{ 2 }", 2, 1), ("candidate 1 or candidate 2? \\boxed{1}", 2, 0), ("", 2, None)],
)  # fmt: skip
def test_parse_choice(reply, n, expected):
    assert parse_choice(reply, n) == expected


def test_a_policy_that_returns_nothing_scores_no_answer_and_one_that_fails_is_masked(env):
    ctx, records = context(env, ScriptedPolicy(""), "best_of_n", candidates=2, selector="majority")
    outcome = solve(ctx, env.tasks[0])
    assert outcome.reward.value == 0.0 and outcome.reward.reason == NO_ANSWER and not outcome.reward.masked
    assert "majority: no answer could be extracted: took the first answer" in outcome.notes
    assert len(records) == 2
    ctx, records = context(
        env,
        ScriptedPolicy(PolicyError("server gone")),
        "best_of_n",
        candidates=2,
        selector="judge",
        judge=ScriptedJudge("\\boxed{1}"),
    )
    outcome = solve(ctx, env.tasks[0])
    assert outcome.reward.masked and "server gone" in outcome.reward.error  # never a silent 0
    assert outcome.pass_at_n is False and [r.to_row()["masked"] for r in records] == [True, True]


def test_a_generation_budget_of_zero_generates_nothing_and_says_why(env):
    policy = ScriptedPolicy("\\boxed{2}")
    ctx, records = context(env, policy, "best_of_n", candidates=3, budget=Budget(max_generations=0))
    outcome = solve(ctx, env.tasks[0])
    assert outcome.reward is None and outcome.selected is None and not policy.calls and not records
    assert outcome.notes == ["generation budget spent (0 of 0): 0 of 3 candidates"]
    assert ctx.cut_short == "generation budget spent (0 of 0)"
    ctx, _ = context(
        env, policy, "best_of_n", candidates=3, budget=Budget(max_generations=2), selector="majority"
    )
    partial = solve(ctx, env.tasks[0])
    assert partial.candidates == 2 and partial.reward.value == 1.0 and ctx.cut_short
