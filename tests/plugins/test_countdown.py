"""The example plugin's environments on their own: Countdown rewards, its task set, GuessNumber."""

from __future__ import annotations

import json
import time
from fractions import Fraction

import pytest
from cascade_envs_example import generate
from cascade_envs_example.arithmetic import MAX_EXPRESSION_CHARS, ExpressionError, evaluate
from cascade_envs_example.countdown import BUNDLED_TASKS, CountdownEnv
from cascade_envs_example.guess import CORRECT, TOO_HIGH, TOO_LOW, GuessNumberEnv
from gymnasium.utils.env_checker import check_env
from hypothesis import given, settings
from hypothesis import strategies as st

from cascade_envs import Reward
from cascade_envs.data import DataError
from cascade_envs.env import run_sync

TASK = {"id": "t", "nums": [20, 14, 3, 3], "target": 40}


@pytest.fixture(scope="module")
def env() -> CountdownEnv:
    return CountdownEnv()


def score(env: CountdownEnv, response: str, task: dict = TASK) -> Reward:
    return run_sync(env.areward(task, response))


def test_bundled_tasks_are_the_generator_output() -> None:
    with open(BUNDLED_TASKS) as fh:
        rows = [json.loads(line) for line in fh]
    assert rows == generate.generate()
    assert len(rows) == 20
    assert len({r["id"] for r in rows}) == 20
    assert generate.generate(seed=1) == generate.generate(seed=1) != generate.generate(seed=2)


def test_every_bundled_task_is_solved_by_its_solution(env: CountdownEnv) -> None:
    assert len(env.tasks) == 20
    for loaded in env.tasks:
        assert loaded.task.target not in loaded.task.nums
        assert score(env, f"<answer>{loaded.row['solution']}</answer>", loaded.row).value == 1.0, loaded


def test_full_episode_through_gymnasium_api(env: CountdownEnv) -> None:
    obs, info = env.reset(seed=3)
    task, row = env.episode.task, next(t.row for t in env.tasks if t.task_id == env.episode.task_id)
    assert obs[0]["role"] == "user" and str(task.target) in obs[0]["content"]
    assert "solution" not in obs[0]["content"] and row["solution"] not in obs[0]["content"]
    assert info["task_id"] == row["id"]
    _, reward, terminated, truncated, info = env.step(f"<think>try</think><answer>{row['solution']}</answer>")
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["reward"].components["result"] == str(task.target)
    env.reset(seed=3)
    assert env.episode.task == task  # seeded sampling is reproducible


@pytest.mark.parametrize(
    "response",
    [
        "<answer>3 + 3 + 20 + 14</answer>",
        "<answer>(20 + 14 + 3 + 3)</answer>",
        "<answer>\n 20 + 14\n + 3+3 \n</answer>",  # spaces and line breaks
        "<answer>20 + 20</answer> no wait <answer>(3 + 3 + 14) + 20</answer>",  # the last answer counts
        "<ANSWER>20 + 14 + 3 + 3</ANSWER>",
        "<answer>20 + 14 + 3 + 3 = 40</answer>",
        "<think>20+14=34, +6</think><answer>20 + 14 + 3 + 3</answer>",
    ],
)
def test_correct_answers_score_one(env: CountdownEnv, response: str) -> None:
    reward = score(env, response)
    assert reward.value == 1.0 and not reward.masked, reward


def test_exact_rational_arithmetic(env: CountdownEnv) -> None:
    task = {"nums": [1, 3, 4, 6], "target": 24}
    assert score(env, "<answer>6 / (1 - 3 / 4)</answer>", task).value == 1.0
    assert evaluate("1 / 3 + 1 / 3", [1, 1, 3, 3]) == Fraction(2, 3)
    reward = score(env, "<answer>20 / 3</answer>")
    assert reward.value == 0.0 and "20/3" in reward.reason


@pytest.mark.parametrize(
    ("response", "reason"),
    [
        ("20 + 14 + 3 + 3", "no <answer></answer> block"),
        ("<answer>20 + 14 + 3</answer>", "equals 37, not 40"),
        ("<answer>20 + 20</answer>", "20 (used 2x, given 1x)"),
        ("<answer>3 + 3 + 3 + 31</answer>", "3 (used 3x, given 2x)"),
        ("<answer>40</answer>", "40 (used 1x, given 0x)"),
        ("<answer>20 * 2</answer>", "2 (used 1x, given 0x)"),
        ("<answer>20 + 14 + 3 + 3 = 41</answer>", "claims 41"),
        ("<answer>2 ** 100</answer>", "operator ** is not allowed"),
        ("<answer>9 ** 9 ** 9 ** 9</answer>", "operator ** is not allowed"),
        ("<answer>20 // 3</answer>", "operator // is not allowed"),
        ("<answer>20 % 3</answer>", "only digits"),
        ("<answer>-3 + 43</answer>", "unary signs are not allowed"),
        ("<answer>20 / (3 - 3)</answer>", "division by zero"),
        ("<answer>2.5 * 16</answer>", "only digits"),
        ("<answer>__import__('os').system('true')</answer>", "only digits"),
        ("<answer>(20 + 14</answer>", "malformed expression"),
        ("<answer>20 3 14 3</answer>", "malformed expression"),
        ("<answer>020 + 14 + 3 + 3</answer>", "malformed expression"),
        ("<answer>()</answer>", "unsupported syntax: Tuple"),
        ("<answer>   </answer>", "the expression is empty"),
        ("<answer>٣ + 37</answer>", "only digits"),
        ("<answer>1_0 + 30</answer>", "only digits"),
        ("<answer>20\x00+20</answer>", "only digits"),
        (f"<answer>{'(' * 300}20{')' * 300}</answer>", "malformed expression"),
        (f"<answer>{'+'.join(['3'] * 600)}</answer>", f"longer than {MAX_EXPRESSION_CHARS}"),
    ],
)
def test_wrong_answers_score_zero_with_a_reason(env: CountdownEnv, response: str, reason: str) -> None:
    reward = score(env, response)
    assert reward.value == 0.0 and not reward.masked and reward.error is None
    assert reason in reward.reason


@pytest.mark.parametrize(
    ("response", "reason"),
    [
        ("<answer>" * 200_000, "no <answer></answer> block"),
        ("<answer>" * 100_000 + "</answer>", "the expression is empty"),
        (f"<answer>{'1 + ' * 250_000}1</answer>", "longer than"),
        ("=" * 100_000 + "1" * 100_000, "no <answer></answer> block"),
        (f"<answer>{'=' * 100_000}{'1' * 100_000}x</answer>", "longer than"),
    ],
)
def test_huge_adversarial_output_is_scored_quickly(env: CountdownEnv, response: str, reason: str) -> None:
    start = time.perf_counter()
    reward = score(env, response)
    assert reward.value == 0.0 and reason in reward.reason
    assert time.perf_counter() - start < 1.0


def test_unterminated_reasoning_scores_zero(env: CountdownEnv) -> None:
    reward = score(env, "<think>20 + 14 + 3 + 3 <answer>20 + 14 + 3 + 3</answer>")
    assert reward.value == 0.0 and reward.reason and not reward.masked


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_arbitrary_output_never_crashes(text: str) -> None:
    env = CountdownEnv(tasks=[TASK])
    for response in (text, f"<answer>{text}</answer>"):
        reward = score(env, response)
        assert reward.value in (0.0, 1.0) and not reward.masked, reward


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=0, max_value=2**32))
def test_generated_tasks_are_solvable_for_any_seed(seed: int) -> None:
    env = CountdownEnv(tasks=[])
    for task in generate.generate(seed=seed, count=2):
        assert evaluate(task["solution"], task["nums"]) == task["target"]
        assert score(env, f"<answer>{task['solution']}</answer>", task).value == 1.0


def test_evaluate_rejects_with_expression_error() -> None:
    with pytest.raises(ExpressionError, match="division by zero"):
        evaluate("1 / (2 - 2)", [1, 2, 2])


def test_rows_in_public_countdown_layout_get_a_prompt(env: CountdownEnv) -> None:
    (message,) = env.load_task({"nums": [2, 5], "target": 10}).prompt.messages
    assert "[2, 5]" in message["content"] and "10" in message["content"]
    custom = env.load_task({"nums": [2, 5], "target": 10, "prompt": "Make 10 from 2 and 5."})
    assert custom.prompt.messages == ({"role": "user", "content": "Make 10 from 2 and 5."},)
    obs, _ = env.reset(options={"task": {"nums": [2, 5], "target": 10}})
    assert obs == [message]


def test_bad_task_file_is_reported_with_line(tmp_path) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"nums": [1, 2], "target": 3}\n{"nums": [1], "target": 3}\nnot json\n')
    with pytest.raises(DataError, match=r"tasks.jsonl:2: field 'nums'"):
        CountdownEnv(tasks=str(path))
    assert len(CountdownEnv(tasks=str(path), on_bad_rows="skip").tasks) == 1


def test_guess_number_passes_gymnasium_checker_and_is_solvable() -> None:
    env = GuessNumberEnv()
    check_env(env, skip_render_check=True)
    obs, _ = env.reset(seed=0)
    low, high, steps = 1, 100, 0
    while True:  # binary search finds any secret within 7 guesses
        guess = (low + high) // 2
        obs, reward, terminated, truncated, _ = env.step(guess)
        steps += 1
        if obs == TOO_LOW:
            low = guess + 1
        elif obs == TOO_HIGH:
            high = guess - 1
        if terminated or truncated:
            break
    assert (obs, reward, terminated, truncated) == (CORRECT, 1.0, True, False) and steps <= 7


def test_guess_number_truncates_and_rejects_bad_input() -> None:
    env = GuessNumberEnv(low=1, high=10, max_steps=2)
    env.reset(options={"secret": 7})
    assert env.step(3)[:4] == (TOO_LOW, 0.0, False, False)
    assert env.step(9)[:4] == (TOO_HIGH, 0.0, False, True)
    with pytest.raises(ValueError, match="integer in"):
        env.step(11)
    with pytest.raises(ValueError, match="outside"):
        env.reset(options={"secret": 0})
    with pytest.raises(ValueError):
        GuessNumberEnv(low=5, high=1)
    with pytest.raises(ValueError):
        GuessNumberEnv(max_steps=0)
