"""NeMo Gym's own client code (the ``nemo-gym`` package: its rollout collection, simple agent,
gymnasium agent and vllm_model server) drives ``cascade-envs serve --protocol nemo-gym`` against a
local chat-completions model; the rewards equal the env's own for the same model turns.

Needs Python >= 3.12 and ``nemo-gym`` (``bash .ci/nemo_gym.sh`` builds that venv and runs this);
skipped without it unless ``CASCADE_REQUIRE_NEMO_GYM=1``.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import pytest

import cascade_envs
from cascade_envs.integrations.nemo_gym.export import gym_row
from cascade_envs.integrations.nemo_gym.responses import tool_call_text
from tests.chat_server import Step

if os.environ.get("CASCADE_REQUIRE_NEMO_GYM") != "1":
    pytest.importorskip("nemo_gym")

from tests.integrations.nemo_gym_stack import GYM_AGENT, SIMPLE_AGENT, gym_stack


def last_user(request: dict[str, Any]) -> str:
    return next(m["content"] for m in reversed(request["messages"]) if m["role"] == "user")


def mcqa_policy(answers: dict[str, str]):
    """Answers each question right when its expected letter is in ``answers``' value, else 'Z'."""

    def step(request: dict[str, Any]) -> Step:
        text = last_user(request)
        letter = next((a for q, a in answers.items() if q in text), "Z")
        return Step(f"<think>easy</think>\\boxed{{{letter}}}")

    return step


def test_rollout_collection_with_the_simple_agent_scores_like_the_env():
    env = cascade_envs.make("cascade/MCQA-v0")
    loaded = list(env.tasks)[:6]
    # right on even rows, wrong on odd ones
    answers = {}
    for i, item in enumerate(loaded):
        question = item.row["responses_create_params"]["input"][0]["content"][-60:]
        answers[question] = item.row["expected_answer"] if i % 2 == 0 else "Z"
    rows = [gym_row(env, "cascade/MCQA-v0", item, SIMPLE_AGENT) for item in loaded]
    with gym_stack(mcqa_policy(answers), cascade_envs.make("cascade/MCQA-v0")) as (stack, _served):
        results = stack.collect(rows)
    assert len(results) == 6
    for row, result in results:
        output = result["response"]["output"]
        text = "".join(
            c["text"] for item in output if item["type"] == "message" for c in item["content"] if "text" in c
        )
        want = asyncio.run(env.areward(row["cascade_row"], text))
        assert result["reward"] == want.value and result["mask_sample"] is want.masked
    assert sorted(r["reward"] for _, r in results) == [0.0, 0.0, 0.0, 1.0, 1.0, 1.0]


def workplace_policy(solutions: dict[str, list[dict[str, Any]]]):
    """Plays the row's ``solution`` calls one per turn in cascade's text mode, then a final answer."""

    def step(request: dict[str, Any]) -> Step:
        messages = request["messages"]
        task = next(m["content"] for m in messages if m["role"] == "user")
        calls = next(s for q, s in solutions.items() if q == task)
        turn = sum(m["role"] == "assistant" for m in messages)
        if turn < len(calls):
            call = {"name": calls[turn]["name"], "arguments": json.loads(calls[turn]["arguments"])}
            return Step(f"<tool_call>\n{json.dumps(call)}\n</tool_call>")
        return Step("Done.")

    return step


def test_gymnasium_agent_plays_workplace_episodes_like_the_env():
    env = cascade_envs.make("cascade/Workplace-v0")
    loaded = list(env.tasks)[:4]
    solutions = {}
    for i, item in enumerate(loaded):
        task = next(m["content"] for m in item.row["responses_create_params"]["input"] if m["role"] == "user")
        solution = item.row["solution"]
        solutions[task] = solution if i % 2 == 0 else solution[:-1]  # odd rows skip the decisive call
    rows = [gym_row(env, "cascade/Workplace-v0", item, GYM_AGENT) for item in loaded]
    with gym_stack(workplace_policy(solutions), cascade_envs.make("cascade/Workplace-v0")) as (stack, served):
        results = stack.collect(rows)
        assert len(served.store) == 0  # every episode's session closed at its last step

    async def direct(row: dict[str, Any], turns: list[str]) -> float:
        episode = await env.astart(env.load(row))
        for text in turns:
            await env.aadvance(episode, text)
            if episode.done:
                break
        reward = (await env.ascore_episodes([episode]))[0]
        await env.aend(episode)
        return reward.value

    rewards = []
    for row, result in results:
        turns = [
            "".join(c["text"] for c in item["content"])
            for item in result["response"]["output"]
            if item["type"] == "message" and item["role"] == "assistant"
        ]
        assert turns[-1] == "Done." and len(turns) == len(solutions_for(row, solutions)) + 1
        assert result["terminated"] is True and result["info"]["mask_sample"] is False
        assert result["reward"] == asyncio.run(direct(row["cascade_row"], turns))
        rewards.append(result["reward"])
    assert sorted(rewards) == [0.0, 0.0, 1.0, 1.0]


def solutions_for(row: dict[str, Any], solutions: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    task = next(m["content"] for m in row["responses_create_params"]["input"] if m["role"] == "user")
    return solutions[task]


def test_genrm_groups_through_rollout_collection_and_a_lost_rollout_does_not_stall():
    from cascade_envs.envs.genrm.env import GenRMEnv
    from cascade_envs.testing import ScriptedJudge
    from tests.envs.genrm.scripted import RIGHT, RIGHT_LONG, ROW, WRONG, rubric_reply

    answers = [RIGHT, RIGHT_LONG, WRONG]
    served_count = {"n": 0}

    def policy(request: dict[str, Any]) -> Step:
        served_count["n"] += 1
        return Step(answers[(served_count["n"] - 1) % 3])

    env = GenRMEnv([ROW], judge_url=ScriptedJudge(rubric_reply))
    loaded = env.load(ROW)
    row = gym_row(env, "cascade/GenRM-v0", loaded, SIMPLE_AGENT)
    full = [{**row, "_ng_task_index": 0} for _ in range(3)]
    lost = [{**row, "_ng_task_index": 1} for _ in range(2)]  # the group's third rollout never comes
    options = {"num_rollouts_per_prompt": 3, "group_deadline_s": 3.0}
    served_env = GenRMEnv([ROW], judge_url=ScriptedJudge(rubric_reply))
    with gym_stack(policy, served_env, options=options) as (stack, _served):
        results = stack.collect(full)
        partial = stack.collect(lost)

    def text_of(result: dict[str, Any]) -> str:
        reasoning = "".join(
            s["text"] for i in result["response"]["output"] if i["type"] == "reasoning" for s in i["summary"]
        )
        message = "".join(
            c["text"] for i in result["response"]["output"] if i["type"] == "message" for c in i["content"]
        )
        return f"<think>{reasoning}</think>{message}" if reasoning else message

    texts = [text_of(r) for _, r in results]
    assert sorted(texts) == sorted(answers)
    want = asyncio.run(env.ascore_responses(ROW, texts))
    assert [r["reward"] for _, r in results] == [w.value for w in want]
    assert len({r["reward"] for _, r in results}) > 1  # the group was scored as a group
    texts = [text_of(r) for _, r in partial]
    want = asyncio.run(env.ascore_responses(ROW, texts))  # the two that arrived, scored together
    assert [r["reward"] for _, r in partial] == [w.value for w in want]
    assert not any(r["mask_sample"] for _, r in partial)


def test_simple_agent_calls_a_route_per_tool_for_native_function_calls():
    """The model answers with chat-completions ``tool_calls``: NeMo Gym's vllm_model makes them
    ``function_call`` items, its simple_agent POSTs each to ``/<tool>`` on our server, then ``/verify``."""
    from tests.chat_server import completion

    env = cascade_envs.make("cascade/Workplace-v0")
    loaded = list(env.tasks)[:2]
    solutions = {}
    for item in loaded:
        task = next(m["content"] for m in item.row["responses_create_params"]["input"] if m["role"] == "user")
        solutions[task] = item.row["solution"]

    def policy(request: dict[str, Any]) -> Step:
        messages = request["messages"]
        task = next(m["content"] for m in messages if m["role"] == "user")
        calls = solutions[task]
        turn = sum(m["role"] == "assistant" for m in messages)
        if turn < len(calls):
            call = {"id": f"call_{turn}", "type": "function", "function": dict(calls[turn])}
            return Step(body=completion(None, tool_calls=[call]))
        return Step("Done.")

    rows = [gym_row(env, "cascade/Workplace-v0", item, SIMPLE_AGENT) for item in loaded]
    with gym_stack(policy, cascade_envs.make("cascade/Workplace-v0")) as (stack, _served):
        results = stack.collect(rows)
    for row, result in results:
        output = result["response"]["output"]
        calls = [i for i in output if i["type"] == "function_call"]
        outputs = [i for i in output if i["type"] == "function_call_output"]
        assert len(calls) == len(outputs) == len(row["cascade_row"]["solution"])
        assert all(o["output"].startswith('{"output":') for o in outputs)  # our tool routes answered
        assert result["reward"] == 1.0 and result["mask_sample"] is False
        # the env called directly with the same calls (in cascade's text mode) and final answer
        turns = [tool_call_text(c["name"], json.loads(c["arguments"])) for c in calls] + ["Done."]
        assert result["reward"] == asyncio.run(replay(env, row["cascade_row"], turns))


async def replay(env: Any, row: dict[str, Any], turns: list[str]) -> float:
    """The reward of ``turns`` played through ``env`` directly."""
    episode = await env.astart(env.load(row))
    for text in turns:
        await env.aadvance(episode, text)
        if episode.done:
            break
    reward = (await env.ascore_episodes([episode]))[0]
    await env.aend(episode)
    return reward.value
