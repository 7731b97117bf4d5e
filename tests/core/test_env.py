import asyncio

import gymnasium
import pytest

import cascade_envs
from cascade_envs import Completion, TaskError
from tests.toy_envs import BrokenVerifierEnv, ExactAnswerEnv, LookupToolEnv

TASK = {"id": "t1", "prompt": "What is 2+2? ANSWER: 4", "answer": "4"}


def test_single_turn_episode():
    env = ExactAnswerEnv()
    obs, info = env.reset(options={"task": TASK})
    assert obs == [{"role": "user", "content": TASK["prompt"]}]
    assert info["task_id"] == "t1" and info["thinking"] is True
    obs, reward, terminated, truncated, info = env.step("<think>2+2=4</think>\n4")
    assert (obs, reward, terminated, truncated) == ([], 1.0, True, False)
    assert info["reward"].value == 1.0 and info["turn"] == 1


def test_wrong_answer_scores_zero_with_reason():
    env = ExactAnswerEnv()
    env.reset(options={"task": TASK})
    _, reward, *_, info = env.step("5")
    assert reward == 0.0 and "expected" in info["reward"].reason and not info["reward"].masked


def test_reasoning_is_not_scored_and_overlong_gets_zero():
    env = ExactAnswerEnv()
    env.reset(options={"task": TASK})
    _, reward, *_ = env.step("<think>the answer is 4 but I keep thinking")
    assert reward == 0.0
    env.reset(options={"task": TASK})
    _, reward, *_, info = env.step(Completion("4", finish_reason="length"))
    assert reward == 0.0 and info["reward"].components["overlong"] == 1.0


def test_verifier_failure_is_masked_never_silently_zero():
    env = BrokenVerifierEnv()
    env.reset(options={"task": TASK})
    _, _, terminated, _, info = env.step("4")
    assert terminated and info["reward"].masked and "judge server unreachable" in info["reward"].error


@pytest.mark.parametrize(
    "response",
    ["", "   \n\t", "4" * 5_000_000, "\x00\x01\ufffd", b"\xff\xfe4", "<think>", "</think>"],
)
def test_malformed_responses_never_crash(response):
    env = ExactAnswerEnv()
    env.reset(options={"task": TASK})
    _, reward, terminated, _, info = env.step(response)
    assert terminated and reward in (0.0, 1.0) and not info["reward"].masked


def test_malformed_task_is_a_clear_error():
    env = ExactAnswerEnv()
    with pytest.raises(TaskError, match="'answer'"):
        env.reset(options={"task": {"prompt": "x"}})
    with pytest.raises(TaskError, match="no prompt"):
        env.reset(options={"task": {"answer": "x"}})


def test_step_outside_an_episode_is_an_error():
    env = ExactAnswerEnv()
    with pytest.raises(RuntimeError, match="before reset"):
        env.step("x")
    env.reset(options={"task": TASK})
    env.step("4")
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.step("4")


def test_seeded_sampling_from_the_task_source_is_reproducible():
    tasks = [{"id": str(i), "prompt": f"q{i}", "answer": str(i)} for i in range(50)]
    first = [ExactAnswerEnv(tasks=tasks).reset(seed=s)[1]["task_id"] for s in range(10)]
    again = [ExactAnswerEnv(tasks=tasks).reset(seed=s)[1]["task_id"] for s in range(10)]
    assert first == again and len(set(first)) > 3


def test_multi_turn_tool_episode_and_turn_limit():
    env = LookupToolEnv()
    obs, _ = env.reset(options={"task": TASK})
    assert "<tools>" in obs[0]["content"] and obs[0]["content"].startswith("Use tools.")
    obs, reward, terminated, truncated, _ = env.step(
        '<tool_call>{"name": "lookup", "arguments": {}}</tool_call>'
    )
    assert obs == [{"role": "tool", "content": "4"}] and not terminated and not truncated and reward == 0.0
    obs, reward, terminated, truncated, _ = env.step('<tool_call>{"name": "lookup", </tool_call>')
    assert "invalid JSON" in obs[0]["content"] and not terminated
    obs, reward, terminated, truncated, info = env.step(
        '<tool_call>{"name": "lookup", "arguments": {}}</tool_call>'
    )
    assert truncated and not terminated and reward == 0.0 and "turn limit of 3" in info["reward"].reason
    assert [m["role"] for m in env.episode.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
        "tool",
    ]


def test_thinking_mode_is_configurable():
    assert ExactAnswerEnv(thinking=False).reset(options={"task": TASK})[1]["thinking"] is False


def test_group_scoring_default_scores_each_response():
    env = ExactAnswerEnv()
    rewards = asyncio.run(env.ascore_responses(TASK, ["4", "5", "<think>4</think>4"]))
    assert [r.value for r in rewards] == [1.0, 0.0, 1.0]


def test_sync_api_works_inside_a_running_loop():
    async def main():
        env = ExactAnswerEnv()
        env.reset(options={"task": TASK})
        return env.step("4")[1]

    assert asyncio.run(main()) == 1.0


def test_gymnasium_make_builds_registered_envs():
    cascade_envs.env_specs()
    env = gymnasium.make("toy/ExactAnswer-v0")
    obs, _ = env.reset(options={"task": TASK})
    assert env.observation_space.contains(obs)
    assert env.step("4")[1] == 1.0
    env.close()
