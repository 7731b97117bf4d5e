"""The ``submit`` strategy (IOI-style) with scripted candidates: points, history, insights, budgets, bad input."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import pytest

from cascade_envs.core import Reward
from cascade_envs.data import resolve_path
from cascade_envs.envs.code import ioi_samples
from cascade_envs.envs.code.env import CodeEnv
from cascade_envs.testing import ScriptedPolicy
from cascade_envs.tts import Attempt, Budget, SolveContext, get_strategy
from cascade_envs.tts.ioi_history import History
from tests.envs.code_rows import DOUBLE

ROW = DOUBLE


def py(code: str) -> str:
    return f"<think>let me see</think>Here:\n```python\n{code}\n```"


REFERENCE = py("print(2 * int(input()))")
BRUTE = py("n = int(input())\nprint(sum(2 for _ in range(n)) if n < 100 else n)")  # small subtask only
LARGE_ONLY = py("n = int(input())\nprint(2 * n if n != 50 else 0)")  # fails test 1: the small subtask only
WRONG = py("print(0)")
FORK_BOMB = py("import os\nwhile True:\n    os.fork()")
FLOOD = py("import sys\nwhile True:\n    sys.stdout.write('4' * 65536)")
SLEEPER = py("import time\ntime.sleep(60)")


@pytest.fixture(scope="module")
def env():
    made = CodeEnv(tasks=[ROW], time_limit_s=1, total_time_s=30)
    yield made
    made.close()


def by_round(*rounds: list[str]) -> Callable[[list], str]:
    """A policy script: round r's k-th call gets ``rounds[r][k]`` (the last round repeats)."""
    calls: dict[str, int] = {}

    def reply(messages: list) -> str:
        prompt = messages[-1]["content"]
        r = min(prompt.count("### Submission") + prompt.count("nothing submitted"), len(rounds) - 1)
        key = f"{r}"
        k = calls.get(key, 0)
        calls[key] = k + 1
        return rounds[r][k % len(rounds[r])]

    return reply


def run(env, script, *, candidates=2, rounds=3, budget=None, row=ROW, **options):
    records: list[Attempt] = []
    policy = ScriptedPolicy(script)
    ctx = SolveContext(
        env=env,
        policy=policy,
        env_id="cascade/Code-v0",
        strategy="submit",
        candidates=candidates,
        rounds=rounds,
        budget=budget or Budget(),
        record=records.append,
        options=options,
    )
    outcome = asyncio.run(get_strategy("submit")(ctx, env.load(row)))
    return outcome, records, policy


def test_history_and_insights_lead_from_brute_force_to_full_points(env):
    outcome, records, policy = run(env, by_round([WRONG, BRUTE], [REFERENCE, WRONG]), submissions=5)
    assert outcome.reward.value == 1 and outcome.reward.components["points"] == 100
    assert outcome.reward.components["submissions"] == 2 and outcome.rounds == 2
    assert outcome.generations == outcome.candidates == 4 and outcome.selected == REFERENCE
    assert "all subtasks solved" in outcome.notes and outcome.pass_at_n is None
    submissions = [r for r in records if r.role == "submission"]
    assert [s.completion for s in submissions] == [BRUTE, REFERENCE]
    assert submissions[0].reward.value == pytest.approx(0.4)
    assert submissions[0].verdict == "n < 100: accepted; n <= 10^4: wrong answer"
    candidates = sorted((r for r in records if r.role == "candidate"), key=lambda r: (r.round, r.candidate))
    assert len(candidates) == 4 and all(c.check is not None for c in candidates)
    assert [c.check.value for c in candidates[:2]] == [0, 1], "screened on the public test"
    assert all(c.reward is None for c in candidates), "candidates are never judged on the hidden tests"

    first, second = policy.calls[0].messages[-1]["content"], policy.calls[2].messages[-1]["content"]
    assert "Read n and print 2n." in first and "Submission history" not in first
    assert "accepted on the subtask n < 100 (40 points)" in first
    # round 2: the official verdicts of submission 1, the insight of the solved subtask, the new goal
    assert "### Submission 1 (round 1): 40 points" in second
    assert "- n <= 10^4: wrong answer (test 3: wrong answer on line 1: got '1000', expected '2000')" in second
    assert "Submission 1 was accepted on: n < 100" in second and "sum(2 for _ in range(n))" in second
    assert (
        "accepted on the subtask n <= 10^4 (60 points) while keeping the solved subtasks (n < 100)" in second
    )
    assert "- Subtask 1 (n < 100, 40 points): solved" in second


def test_ioi_points_take_the_best_submission_per_subtask(env):
    outcome, records, _ = run(env, by_round([LARGE_ONLY], [BRUTE]), candidates=1, submissions=5)
    rewards = [r.reward.value for r in records if r.role == "submission"]
    assert rewards == [pytest.approx(0.6), pytest.approx(0.4)]
    assert outcome.reward.value == 1, "no single submission has every subtask, together they do"
    assert outcome.reward.components["subtasks"] == {
        "n < 100": {"points": 40.0, "solved_by": 2},
        "n <= 10^4": {"points": 60.0, "solved_by": 1},
    }
    assert outcome.selected == LARGE_ONLY, "the selected answer is the best single submission"


def test_submission_budget_is_spent_and_never_exceeded(env):
    outcome, records, _ = run(env, by_round([BRUTE], [LARGE_ONLY], [REFERENCE]), candidates=1, submissions=1)
    assert [r.completion for r in records if r.role == "submission"] == [BRUTE]
    assert outcome.reward.value == pytest.approx(0.4)
    assert "submission budget spent (1 of 1)" in outcome.notes and outcome.rounds == 1


def test_repeats_and_unscreened_candidates_are_not_submitted(env):
    outcome, records, policy = run(env, by_round([BRUTE, BRUTE], [BRUTE, WRONG]), rounds=2, submissions=5)
    assert [r.completion for r in records if r.role == "submission"] == [BRUTE]
    assert outcome.rounds == 3, "two rounds for the second subtask after the first was solved in one"
    last = policy.calls[-1].messages[-1]["content"]
    assert "nothing submitted" in last and "no new candidate passed the public tests" in last


def test_a_submission_budget_of_zero_submits_nothing(env):
    outcome, records, policy = run(env, REFERENCE, submissions=0)
    assert outcome.reward is None and outcome.selected is None and not records and not policy.calls
    assert outcome.notes == ["submission budget is 0: nothing generated, nothing submitted"]


def test_the_generation_budget_stops_the_loop(env):
    outcome, records, _ = run(env, by_round([WRONG, BRUTE], [REFERENCE]), budget=Budget(max_generations=3))
    assert outcome.generations == 3 and len([r for r in records if r.role == "candidate"]) == 3
    assert any(n.startswith("generation budget spent") for n in outcome.notes)
    assert outcome.reward.value == 1, "the third generation was the reference"


@pytest.mark.parametrize("script", ["", "I cannot solve this.", "<think>never closed", RuntimeError("down")])
def test_a_policy_that_returns_nothing_usable(env, script):
    outcome, records, _ = run(env, script, rounds=2, submissions=3)
    assert not [r for r in records if r.role == "submission"]
    assert outcome.reward is not None and outcome.reward.value == 0 and not outcome.reward.masked
    assert "nothing submitted" in outcome.notes and outcome.rounds == 4
    if isinstance(script, Exception):
        assert all(r.error and "down" in r.error for r in records)


def test_candidates_that_attack_the_sandbox_get_verdicts(env):
    passing = {  # each passes the public sample, then misbehaves on the hidden tests
        "fork": py("import os\nn = int(input())\nif n == 2: print(4)\nelse:\n    while True: os.fork()"),
        "flood": py(
            "import sys\nn = int(input())\nprint(2 * n)\nwhile n != 2: sys.stdout.write('x' * 65536)"
        ),
        "sleep": py("import time\nn = int(input())\nif n != 2: time.sleep(60)\nprint(2 * n)"),
    }
    script = by_round(
        [FORK_BOMB, passing["fork"]], [FLOOD, passing["flood"]], [SLEEPER, passing["sleep"]], [REFERENCE]
    )
    outcome, records, _ = run(env, script, rounds=4, submissions=10)
    verdicts = [r.verdict for r in records if r.role == "submission"]
    assert len(verdicts) == 4 and outcome.reward.value == 1, verdicts
    assert "runtime error" in verdicts[0] or "time limit exceeded" in verdicts[0]
    assert "output limit exceeded" in verdicts[1] and "time limit exceeded" in verdicts[2]


class UnjudgedEnv(CodeEnv):
    """Screening works, judging on the hidden tests does not."""

    async def ascore(self, task, answer):
        if task.tests.subtasks:
            return Reward.failed("sandbox lost")
        return await super().ascore(task, answer)


def test_a_submission_that_cannot_be_judged_is_masked_never_zero():
    env = UnjudgedEnv(tasks=[ROW], time_limit_s=1)
    try:
        outcome, records, policy = run(env, REFERENCE, candidates=1, rounds=2, submissions=5)
    finally:
        env.close()
    assert outcome.reward.masked and outcome.reward.error == "no submission could be judged"
    assert [r.verdict for r in records if r.role == "submission"] == ["not judged: sandbox lost"]
    assert "not judged (judging failed)" in policy.calls[-1].messages[-1]["content"]


def test_rows_without_subtasks_are_one_subtask(env):
    row = {"prompt": "Print 2n.", "verifier_metadata": {"unit_tests": ROW["verifier_metadata"]["unit_tests"]}}
    outcome, records, _ = run(env, by_round([BRUTE], [REFERENCE]), candidates=1, row=row, submissions=3)
    verdicts = [r.verdict for r in records if r.role == "submission"]
    assert verdicts == ["all tests: wrong answer", "all tests: accepted"] and outcome.reward.value == 1


def test_bad_options_are_refused(env):
    for options in ({"submissions": -1}, {"per_round": 0}, {"submissions": "5"}):
        with pytest.raises(ValueError, match="submit: option"):
            run(env, REFERENCE, **options)


def test_history_prompt_keeps_the_task_prompt():
    from cascade_envs.envs.code.subtasks import Subtask

    history = History([Subtask("all", 1.0, (0,))], budget=3)
    base = [{"role": "system", "content": "s"}, {"role": "user", "content": "task"}]
    messages = history.prompt(base, history.subtasks[0])
    assert messages[0] == base[0] and messages[1]["content"].startswith(
        "task\n\n## Subtasks (submissions used: 0 of 3)"
    )
    assert base[1]["content"] == "task", "the base prompt is not modified"


@pytest.mark.slow
def test_a_bundled_problem_from_brute_force_to_reference():
    row = next(
        json.loads(line)
        for line in resolve_path("bundled:code/ioi_subtasks.jsonl").read_text().splitlines()
        if json.loads(line)["id"] == "ioi-sample/stairs"
    )
    env = CodeEnv(tasks=[row], time_limit_s=1, total_time_s=60)
    try:
        brute, reference = (py(ioi_samples.BRUTE["stairs"]), py(ioi_samples.REFERENCE["stairs"]))
        outcome, records, _ = run(env, by_round([brute], [reference]), candidates=1, row=row, submissions=4)
    finally:
        env.close()
    assert [r.reward.value for r in records if r.role == "submission"] == [pytest.approx(0.2), 1]
    assert outcome.reward.value == 1 and outcome.reward.components["points"] == 100


def test_cli_submit_against_a_chat_server(tmp_path, capsys):
    from cascade_envs.cli import main
    from tests.chat_server import ScriptedChatServer, Step

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(ROW) + "\n")
    out = tmp_path / "out.jsonl"

    def step(request):
        return Step(REFERENCE if "### Submission" in request["messages"][-1]["content"] else BRUTE)

    argv = ["solve", "--env", "cascade/Code-v0", "--tasks", str(tasks), "--strategy", "submit"]
    argv += ["--candidates", "2", "--submissions", "3", "--no-progress", "-o", str(out)]
    argv += ["--env-kwargs", '{"time_limit_s": 1}']
    with ScriptedChatServer(step, models=("m",)) as server:
        assert main([*argv, "--policy", server.url]) == 0
        assert len(server.requests) == 4
        first = capsys.readouterr().out
        math = ["solve", "--env", "cascade/Math-v0", "--strategy", "submit", "--limit", "1"]
        assert main([*math, "-o", str(tmp_path / "m.jsonl"), "--policy", server.url]) == 2
        assert (
            "submit needs the code env's tasks (cascade/Code-v0); cascade/Math-v0 gives"
            in capsys.readouterr().err
        )
    assert "tasks 1: selected score 1.000 over 1 scored" in first
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows[0]["settings"]["submissions"] == 3
    submissions = [(r["round"], r["reward"]) for r in rows if r.get("role") == "submission"]
    assert submissions == [(1, pytest.approx(0.4)), (2, 1.0)], "two equal brute forces are submitted once"
    (outcome,) = [r for r in rows if r["kind"] == "outcome"]
    assert outcome["reward"]["components"]["points"] == 100 and "all subtasks solved" in outcome["notes"]
    assert main([*argv[:-2], "-o", str(tmp_path / "x.jsonl"), "--submissions", "-1"]) == 2
    assert "--submissions must be at least 0, got -1" in capsys.readouterr().err
