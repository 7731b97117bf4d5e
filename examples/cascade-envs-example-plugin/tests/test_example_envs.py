"""The plugin's own tests: each ``cascade_envs.Env`` it ships passes ``check_env``, and the multi-turn
env's rules hold (errors go on, no answer or no target scores 0, the turn limit truncates)."""

from __future__ import annotations

import json

from cascade_envs_example.countdown import CountdownEnv
from cascade_envs_example.countdown_tools import CountdownToolsEnv

from cascade_envs import Reward
from cascade_envs.env import run_sync
from cascade_envs.testing import check_env

ROW = {"id": "t", "nums": [20, 14, 3, 3], "target": 40}
BAD_ROWS = [
    ({"target": 10}, "nums"),
    ({"nums": "2 5", "target": 10}, "nums"),
    ({"nums": [2], "target": 10}, "nums"),
    ({"nums": list(range(1, 20)), "target": 10}, "nums"),
    ({"nums": [2, 5.0], "target": 10}, "nums"),
    ({"nums": [2, True], "target": 10}, "nums"),
    ({"nums": [2, -5], "target": 10}, "nums"),
    ({"nums": [2, 5]}, "target"),
    ({"nums": [2, 5], "target": "10"}, "target"),
    ({"nums": [2, 5], "target": 10.0}, "target"),
]


def combine(a: int, op: str, b: int) -> str:
    return (
        f"<tool_call>{json.dumps({'name': 'combine', 'arguments': {'a': a, 'op': op, 'b': b}})}</tool_call>"
    )


SOLVE = combine(20, "+", 14) + combine(3, "+", 3) + combine(34, "+", 6)


def test_countdown_conforms() -> None:
    check_env(
        CountdownEnv(),
        good_row=ROW,
        good_answer="<think>20 + 14 + 3 + 3</think><answer>20 + 14 + 3 + 3</answer>",
        bad_answer="<answer>20 + 14</answer>",
        bad_rows=BAD_ROWS,
        other_kwargs={},
    )


def test_countdown_tools_conforms() -> None:
    check_env(
        CountdownToolsEnv(),
        good_row=ROW,
        good_answer="<answer>40</answer>",
        bad_answer="<answer>41</answer>",
        setup_turns=[SOLVE],
        bad_rows=BAD_ROWS,
        other_kwargs={"max_calls_per_turn": 2},
    )


def play(env: CountdownToolsEnv, replies: list[str]) -> tuple[Reward, list[dict]]:
    async def run() -> tuple[Reward, list[dict]]:
        episode = await env.astart(env.load(ROW))
        for reply in replies:
            if not episode.done:
                await env.aadvance(episode, reply)
        if not episode.done:
            await env.atruncate(episode, "the test ran out of replies")
        (reward,) = await env.ascore_episodes([episode])
        await env.aend(episode)
        return reward, episode.messages

    return run_sync(run())


def test_mistakes_are_tool_errors_and_the_episode_goes_on() -> None:
    env = CountdownToolsEnv()
    reward, messages = play(
        env, [combine(7, "+", 3) + "<tool_call>{broken", combine(20, "/", 3), SOLVE, "<answer>40</answer>"]
    )
    tool = [m["content"] for m in messages if m["role"] == "tool"]
    assert tool[0].startswith("Error: 7 is not one of your numbers") and "invalid JSON" in tool[1]
    assert "not a whole, positive number" in tool[2] and tool[-1].endswith("your numbers: [40]")
    assert reward.value == 1.0


def test_the_target_and_the_answer_are_both_needed() -> None:
    env = CountdownToolsEnv()
    assert play(env, [SOLVE, "Done, I reached it."])[0].value == 0.0
    unreached = play(env, [combine(20, "+", 14), "<answer>40</answer>"])[0]
    assert unreached.value == 0.0 and not unreached.masked and "not one of the numbers" in unreached.reason


def test_calls_past_the_bound_do_not_run_and_the_turn_limit_truncates() -> None:
    env = CountdownToolsEnv(max_calls_per_turn=2, max_turns=2)
    reward, messages = play(env, [SOLVE, combine(34, "+", 6)])
    assert (
        messages[5]["content"]
        == "Error: only the first 2 tool calls of a reply run; 1 more were not run (combine)"
    )
    assert reward.value == 0.0 and reward.reason.startswith("truncated: turn limit of 2")
