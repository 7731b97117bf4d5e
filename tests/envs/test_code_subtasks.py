"""IOI-style subtasks in the code env: the row format, verdicts per subtask, points, public tests, bundled problems."""

from __future__ import annotations

import asyncio
import json

import pytest

from cascade_envs.core import TaskError
from cascade_envs.data import Prompt, resolve_path
from cascade_envs.envs.code import ioi_samples
from cascade_envs.envs.code.env import CodeEnv
from cascade_envs.envs.code.subtasks import SubtaskVerdict, ioi_points, verdict_of
from cascade_envs.envs.code.task import parse_code_task, public_problem
from tests.envs.code_rows import DOUBLE, INPUTS

ROW = {  # the NeMo Gym prompt format
    "id": "double",
    "responses_create_params": {"input": [{"role": "user", "content": "Print 2n."}]},
    "verifier_metadata": DOUBLE["verifier_metadata"],
}


def py(code: str) -> str:
    return f"```python\n{code}\n```"


GOOD = py("print(2 * int(input()))")
SMALL_ONLY = py("n = int(input())\nprint(2 * n if n < 100 else n)")
SLOW_ON_LARGE = py("n = int(input())\nwhile n >= 100:\n    pass\nprint(2 * n)")
CRASH_ON_LARGE = py("n = int(input())\nassert n < 100, 'too big'\nprint(2 * n)")
WRONG = py("print(0)")


@pytest.fixture(scope="module")
def env():
    made = CodeEnv(tasks=[ROW], time_limit_s=1, total_time_s=60)
    yield made
    made.close()


def score(env, row, answer):
    return asyncio.run(env.areward(row, answer))


def subtasks(reward) -> list[SubtaskVerdict]:
    return [SubtaskVerdict.from_dict(d) for d in reward.components["subtasks"]]


def test_parses_subtasks_and_public_tests():
    task = parse_code_task(ROW)
    assert [(s.name, s.points, s.tests) for s in task.subtasks] == [
        ("n < 100", 40.0, (0, 1)),
        ("n <= 10^4", 60.0, (0, 2, 3)),
    ]
    public = public_problem(Prompt.of(ROW), ROW)
    assert public is not None and public.tests.inputs == ("2\n",) and public.tests.outputs == ("4\n",)
    assert public.tests.subtasks == () and "subtasks" not in public.metadata
    plain = parse_code_task({"verifier_metadata": {"unit_tests": {"inputs": ["1"], "outputs": ["1"]}}})
    assert plain.subtasks == ()


def meta_with(**changes):
    return {"prompt": "Print 2n.", "verifier_metadata": {**ROW["verifier_metadata"], **changes}}


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"subtasks": []}, "verifier_metadata.subtasks", "non-empty"),
        (
            {"subtasks": [{"points": -1, "tests": [0, 1, 2, 3]}]},
            "verifier_metadata.subtasks[0].points",
            ">= 0",
        ),
        (
            {"subtasks": [{"points": float("nan"), "tests": [0]}]},
            "verifier_metadata.subtasks[0].points",
            "finite",
        ),
        (
            {"subtasks": [{"points": 1, "tests": [0, 9]}]},
            "verifier_metadata.subtasks[0].tests",
            "out of range",
        ),
        ({"subtasks": [{"points": 1, "tests": [0, 0]}]}, "verifier_metadata.subtasks[0].tests", "twice"),
        ({"subtasks": [{"points": 1, "tests": [True]}]}, "verifier_metadata.subtasks[0].tests", "indices"),
        (
            {"subtasks": [{"points": 1, "tests": [0, 1]}]},
            "verifier_metadata.subtasks",
            "test 2 belongs to no",
        ),
        ({"subtasks": [{"points": 0, "tests": [0, 1, 2, 3]}]}, "verifier_metadata.subtasks", "more than 0"),
        (
            {
                "subtasks": [
                    {"name": "a", "points": 1, "tests": [0, 1]},
                    {"name": "a", "points": 1, "tests": [2, 3]},
                ]
            },
            "verifier_metadata.subtasks[1].name",
            "two subtasks",
        ),
        ({"public_tests": ["2"]}, "verifier_metadata.public_tests", "object"),
        ({"public_tests": {"inputs": ["2"], "outputs": []}}, "verifier_metadata.public_tests", "1 inputs"),
    ],
)
def test_malformed_subtasks_are_refused_naming_the_field(changes, field, words):
    row = meta_with(**changes)
    with pytest.raises(TaskError) as caught:
        parse_code_task(row)
        public_problem(Prompt.of(row), row)
    assert caught.value.field == field and words in str(caught.value), caught.value


def test_points_per_subtask_and_verdicts(env):
    full = score(env, ROW, GOOD)
    assert full.value == 1 and full.components["points"] == 100
    assert [v.verdict for v in subtasks(full)] == ["accepted", "accepted"]
    assert full.components["tests_run"] == 4, "the shared test runs once"

    small = score(env, ROW, SMALL_ONLY)
    assert small.value == pytest.approx(0.4) and not small.masked
    first, second = subtasks(small)
    assert first.accepted and first.earned == 40
    assert (second.verdict, second.earned, second.failed_test) == ("wrong answer", 0, 2)
    assert second.message.startswith("test 3: wrong answer on line 1: got '1000', expected '2000'")
    assert "40/100 points" in small.reason

    slow = subtasks(score(env, ROW, SLOW_ON_LARGE))
    assert slow[0].accepted and slow[1].verdict == "time limit exceeded", slow
    crash = subtasks(score(env, ROW, CRASH_ON_LARGE))
    assert crash[1].verdict == "runtime error" and "too big" in crash[1].message

    wrong = score(env, ROW, WRONG)
    assert wrong.value == 0 and not wrong.masked
    assert [v.verdict for v in subtasks(wrong)] == ["wrong answer", "wrong answer"]


def test_a_compile_error_fails_every_subtask():
    row = meta_with(languages=["cpp"])
    cpp = CodeEnv(tasks=[row], time_limit_s=1)
    try:
        reward = score(cpp, row, "```cpp\nint main( {\n```")
    finally:
        cpp.close()
    assert reward.value == 0 and not reward.masked
    assert {v.verdict for v in subtasks(reward)} == {"compile error"}


def test_hostile_candidates_get_verdicts(env):
    fork_bomb = py("import os\nwhile True:\n    os.fork()")
    flood = py("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)")
    for answer in (fork_bomb, flood):
        reward = score(env, ROW, answer)
        assert reward.value == 0 and not reward.masked, reward
        assert all(v.verdict != "accepted" for v in subtasks(reward))


def test_public_tests_are_the_check_and_never_score(env):
    task = env.load(ROW).task
    assert asyncio.run(env.acheck(task, GOOD)).value == 1
    assert asyncio.run(env.acheck(task, SMALL_ONLY)).value == 1, "passes the sample, not the hidden tests"
    assert asyncio.run(env.acheck(task, WRONG)).value == 0
    assert task.public.tests.subtasks == () and task.public.tests.inputs == ("2\n",)
    plain = env.load(
        {"prompt": "x", "verifier_metadata": {"unit_tests": {"inputs": ["1\n"], "outputs": ["2\n"]}}}
    ).task
    assert asyncio.run(env.acheck(plain, GOOD)) is None


def test_rows_without_subtasks_keep_their_binary_reward(env):
    row = {
        "prompt": "x",
        "verifier_metadata": {
            "unit_tests": {"inputs": INPUTS, "outputs": [f"{2 * int(i)}\n" for i in INPUTS]}
        },
    }
    for answer, value in ((GOOD, 1), (SMALL_ONLY, 0)):
        reward = score(env, row, answer)
        assert reward.value == value and "subtasks" not in reward.components


def test_the_service_judges_subtasks_like_the_local_judge(env):
    from cascade_envs.envs.code.service import BackgroundService

    with BackgroundService(workers=1) as service:
        remote = CodeEnv(tasks=[ROW], verifier_url=service.url, time_limit_s=1, total_time_s=60)
        try:
            got = score(remote, ROW, SMALL_ONLY)
        finally:
            remote.close()
    want = score(env, ROW, SMALL_ONLY)
    assert (got.value, got.reason, got.components["subtasks"]) == (
        want.value,
        want.reason,
        want.components["subtasks"],
    )


def test_verdict_words_and_ioi_points():
    assert verdict_of("test 3/9: time limit exceeded (cpu time)") == "time limit exceeded"
    assert verdict_of("time budget of 5s per response exhausted") == "time limit exceeded"
    assert verdict_of("runtime error (exit code 1): boom") == "runtime error"
    assert verdict_of("wrong answer (checker): no") == "wrong answer"
    a = [SubtaskVerdict("s1", 30, 30, "accepted"), SubtaskVerdict("s2", 70, 0, "wrong answer")]
    b = [SubtaskVerdict("s1", 30, 0, "runtime error"), SubtaskVerdict("s2", 70, 70, "accepted")]
    assert ioi_points([a]) == (30, 100) and ioi_points([a, b]) == (100, 100) and ioi_points([]) == (0, 0)


# ----- the bundled problems --------------------------------------------------------------------

BUNDLED = {
    r["id"].split("/")[1]: r
    for r in map(json.loads, resolve_path("bundled:code/ioi_subtasks.jsonl").read_text().splitlines())
}
INTERMEDIATE_TOWER = """n = int(input())
h = list(map(int, input().split()))
best = [1] * n
for i in range(n):
    for j in range(i):
        if h[j] < h[i] and best[j] + 1 > best[i]:
            best[i] = best[j] + 1
print(n - max(best))
"""


def test_the_bundled_file_is_current():
    assert list(BUNDLED) == [p.id for p in ioi_samples.PROBLEMS] and 4 <= len(BUNDLED) <= 6
    stairs = next(p for p in ioi_samples.PROBLEMS if p.id == "stairs")
    assert ioi_samples.row(stairs) == BUNDLED["stairs"]
    for row in BUNDLED.values():
        task = parse_code_task(row)
        assert len(task.subtasks) >= 2 and public_problem(Prompt.of(row), row) is not None
        statement = row["responses_create_params"]["input"][0]["content"]
        assert all(s.name in statement for s in task.subtasks)


@pytest.fixture(scope="module")
def bundled_env():
    made = CodeEnv("bundled:code/ioi_subtasks.jsonl", time_limit_s=1, total_time_s=120)
    yield made
    made.close()


@pytest.mark.slow
@pytest.mark.parametrize("problem", list(ioi_samples.REFERENCE))
def test_reference_earns_full_points_and_brute_force_only_the_small_subtask(bundled_env, problem):
    row = BUNDLED[problem]
    reference = score(bundled_env, row, py(ioi_samples.REFERENCE[problem]))
    assert reference.value == 1, reference
    assert (
        asyncio.run(bundled_env.acheck(bundled_env.load(row).task, py(ioi_samples.REFERENCE[problem]))).value
        == 1
    )
    brute = score(bundled_env, row, py(ioi_samples.BRUTE[problem]))
    verdicts = subtasks(brute)
    assert verdicts[0].accepted and not any(v.accepted for v in verdicts[1:]), brute
    assert brute.value == pytest.approx(verdicts[0].points / sum(v.points for v in verdicts))
    assert (
        asyncio.run(bundled_env.acheck(bundled_env.load(row).task, py(ioi_samples.BRUTE[problem]))).value == 1
    )


@pytest.mark.slow
def test_a_quadratic_tower_earns_the_first_two_subtasks(bundled_env):
    verdicts = subtasks(score(bundled_env, BUNDLED["tower"], py(INTERMEDIATE_TOWER)))
    assert [v.accepted for v in verdicts] == [True, True, False]
    assert verdicts[2].verdict == "time limit exceeded"
