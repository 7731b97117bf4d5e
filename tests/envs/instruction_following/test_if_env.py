"""InstructionFollowingEnv: row layouts, strict/loose scoring, reward modes, bad rows and bad answers."""

from __future__ import annotations

import asyncio

import gymnasium
import pytest

import cascade_envs
from cascade_envs.core import Completion, TaskError
from cascade_envs.data import DataError
from cascade_envs.envs.instruction_following import text
from cascade_envs.envs.instruction_following.env import InstructionFollowingEnv, response_variants
from cascade_envs.reasoning import NO_ANSWER

ROW = {
    "id": 7,
    "instruction_id_list": ["punctuation:no_comma", "detectable_format:title"],
    "prompt": "Write a poem with a title and no commas.",
    "kwargs": [{"num_words": None, "relation": None}, None],
    "responses_create_params": {
        "input": [{"role": "user", "content": "Write a poem with a title and no commas."}]
    },
}


def score(env: InstructionFollowingEnv, row: dict, answer: str | Completion):
    task = env.load(row)
    return asyncio.run(env.areward(task, answer))


@pytest.fixture
def env() -> InstructionFollowingEnv:
    return InstructionFollowingEnv(tasks=[])


def test_bundled_samples_load_and_cover_both_families():
    env = InstructionFollowingEnv()
    assert len(env.tasks) >= 20
    ids = {check["id"] for task in env.tasks for check in task.task.checks}
    assert len(ids) >= 50


def test_registered_and_playable_through_gymnasium():
    env = cascade_envs.make("cascade/InstructionFollowing-v0")
    observation, info = env.reset(seed=3)
    assert observation[-1]["role"] == "user"
    _, reward, terminated, truncated, info = env.step("<think>plan</think>\n")
    assert terminated and not truncated and reward == 0.0 and info["reward"].reason == NO_ANSWER
    assert isinstance(gymnasium.make("cascade/InstructionFollowing-v0").unwrapped, InstructionFollowingEnv)


def test_binary_reward_and_components(env):
    good = score(env, ROW, "<<Night>>\nStars over water")
    assert good.value == 1.0 and good.reason is None
    assert good.components["instructions"] == [
        {"id": "punctuation:no_comma", "followed": True},
        {"id": "detectable_format:title", "followed": True},
    ]
    half = score(env, ROW, "Stars, over water")
    assert half.value == 0.0 and not half.masked
    assert half.reason == "not followed: punctuation:no_comma, detectable_format:title"
    one = score(env, ROW, "<<Night>> stars, water")
    assert one.value == 0.0 and one.components["followed_fraction"] == 0.5


def test_fraction_mode_from_env_and_from_row():
    answer = "<<Night>> stars, water"
    assert score(InstructionFollowingEnv(tasks=[], reward_mode="fraction"), ROW, answer).value == 0.5
    row = {**ROW, "grading_mode": "fraction"}
    assert score(InstructionFollowingEnv(tasks=[]), row, answer).value == 0.5
    assert score(InstructionFollowingEnv(tasks=[], reward_mode="binary"), row, answer).value == 0.0
    with pytest.raises(ValueError, match="reward_mode"):
        InstructionFollowingEnv(tasks=[], reward_mode="mean")


def test_reasoning_is_split_off_before_checking(env):
    assert score(env, ROW, "<think>a, b, c</think><<T>> no commas").value == 1.0


def test_loose_accepts_the_standard_variants():
    row = {**ROW, "instruction_id_list": ["startend:quotation"], "kwargs": [{}]}
    answer = 'Sure, here it is:\n"Quoted answer"\nHope this helps!'
    assert score(InstructionFollowingEnv(tasks=[]), row, answer).value == 0.0
    assert score(InstructionFollowingEnv(tasks=[], strict=False), row, answer).value == 1.0
    stars = {**ROW, "instruction_id_list": ["detectable_format:title"], "kwargs": [None]}
    assert score(InstructionFollowingEnv(tasks=[], strict=False), stars, "no title").value == 0.0


def test_response_variants_are_ifevals_eight():
    variants = response_variants("first\n*mid*\nlast", strict=False)
    assert len(variants) == 8
    assert (
        "*mid*\nlast" in variants and "first\n*mid*" in variants and "*mid*" in variants and "mid" in variants
    )
    assert response_variants("x", strict=True) == ["x"]


def test_ifeval_layout_row_loads_as_is(env):
    row = {
        "key": 1000,
        "prompt": "Write a 300+ word summary. Do not use any commas and highlight at least 3 sections.",
        "instruction_id_list": ["punctuation:no_comma", "detectable_format:number_highlighted_sections"],
        "kwargs": [{}, {"num_highlights": 3}],
    }
    task = env.load(row)
    assert [c["kwargs"] for c in task.task.checks] == [{}, {"num_highlights": 3}]
    assert score(env, row, "*a* *b* *c*").value == 1.0


def test_verifier_metadata_layout_wins_over_top_level(env):
    row = {
        "id": 1,
        "responses_create_params": {"input": [{"role": "user", "content": "hi"}]},
        "instruction_id_list": ["punctuation:no_comma"],
        "kwargs": [{}],
        "verifier_metadata": {
            "instruction_id_list": ["punctuation:punctuation_dot"],
            "kwargs": [None],
            "grading_mode": "fraction",
        },
    }
    task = env.load(row)
    assert [c["id"] for c in task.task.checks] == ["punctuation:punctuation_dot"]
    assert task.task.grading_mode == "fraction"


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        (
            {"instruction_id_list": ["punctuation:no_coma", "detectable_format:title"]},
            "instruction_id_list",
            "no_coma",
        ),
        ({"instruction_id_list": []}, "instruction_id_list", "non-empty list"),
        ({"instruction_id_list": "punctuation:no_comma"}, "instruction_id_list", "non-empty list"),
        ({"kwargs": [{}]}, "kwargs", "one per instruction"),
        ({"kwargs": {"num_words": 3}}, "kwargs", "one per instruction"),
        ({"kwargs": [{}, {"bogus": 1}]}, "kwargs", "unknown kwarg"),
        ({"grading_mode": "average"}, "grading_mode", "must be one of"),
        ({"verifier_metadata": "x"}, "verifier_metadata", "object"),
    ],
)
def test_bad_rows_are_task_errors(env, change, field, message):
    with pytest.raises(TaskError, match=message) as info:
        env.load_task({**ROW, **change})
    assert info.value.field == field


def test_a_file_with_a_bad_row_names_file_line_and_id(tmp_path):
    path = tmp_path / "rows.jsonl"
    bad = '{"prompt": "x", "instruction_id_list": ["nope:nope"], "kwargs": [{}]}'
    good = '{"prompt": "x", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}'
    path.write_text(good + "\n" + bad + "\n")
    with pytest.raises(DataError, match=r"rows.jsonl:2: .*nope:nope"):
        InstructionFollowingEnv(tasks=str(path))
    assert len(InstructionFollowingEnv(tasks=str(path), on_bad_rows="skip").tasks) == 1


# Empty, whitespace, invalid UTF-8, megabyte, unterminated-think and length-cut answers are checked
# for every env by cascade_envs.testing.check_env (tests/test_conformance.py).


def test_huge_answer_is_refused_quickly(env):
    reward = score(env, ROW, "word " * 250_000)
    assert reward.value == 0.0 and "over the 200000" in reward.reason
    small = InstructionFollowingEnv(tasks=[], max_answer_chars=10)
    assert "over the 10" in score(small, ROW, "<<T>> long enough").reason


def test_missing_resource_masks_the_reward(monkeypatch):
    env = InstructionFollowingEnv(tasks=[], inline_chars=1000)  # in-process, where the patch applies

    def unavailable(_: str):
        raise text.ResourceUnavailable("punkt model not installed")

    monkeypatch.setattr("cascade_envs.envs.instruction_following.ifeval.punkt_sentences", unavailable)
    row = {**ROW, "instruction_id_list": ["length_constraints:number_sentences"]}
    row["kwargs"] = [{"num_sentences": 1, "relation": "at least"}]
    reward = score(env, row, "One sentence.")
    assert reward.masked and "resource unavailable: punkt model not installed" in reward.error


def test_group_scoring(env):
    rewards = asyncio.run(env.ascore_responses(ROW, ["<<T>> ok", "bad, answer", ""]))
    assert [r.value for r in rewards] == [1.0, 0.0, 0.0]
