"""NeMo Gym 0.7's own client code (the ``nemo-gym`` package: its rollout collection, environment
servers, simple agent, gymnasium agent and vllm_model server) drives ``cascade-envs serve --protocol
nemo-gym`` against a local chat-completions model; the rewards equal the env's own for the same model
turns, masked rewards arrive masked, and exported rows route without 0.7's deprecated path.

Needs nemo-gym >= 0.7 (Python 3.13; ``bash .ci/nemo_gym.sh`` builds that venv and runs this);
skipped without it unless ``CASCADE_REQUIRE_NEMO_GYM=1``.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
import warnings
from pathlib import Path
from typing import Any

import httpx
import pytest

import cascade_envs
from cascade_envs.integrations.nemo_gym.export import gym_row, write_rows
from cascade_envs.integrations.nemo_gym.responses import tool_call_text
from tests.chat_server import Step
from tests.toy_envs import BrokenVerifierEnv, LookupToolEnv

if os.environ.get("CASCADE_REQUIRE_NEMO_GYM") != "1":
    pytest.importorskip("nemo_gym")

from tests.integrations.nemo_gym_stack import GYM_AGENT, RELAY_AGENT, SIMPLE_AGENT, gym_stack

SIMPLE_AGENTS = [SIMPLE_AGENT, RELAY_AGENT]  # behind single_agent_turn_legacy / the legacy_agent relay


def last_user(request: dict[str, Any]) -> str:
    return next(m["content"] for m in reversed(request["messages"]) if m["role"] == "user")


def mcqa_policy(answers: dict[str, str]):
    """Answers each question right when its expected letter is in ``answers``' value, else 'Z'."""

    def step(request: dict[str, Any]) -> Step:
        text = last_user(request)
        letter = next((a for q, a in answers.items() if q in text), "Z")
        return Step(f"<think>easy</think>\\boxed{{{letter}}}")

    return step


@pytest.mark.parametrize("agent", SIMPLE_AGENTS)
def test_rollout_collection_with_the_simple_agent_scores_like_the_env(agent: str, tmp_path: Path):
    env = cascade_envs.make("cascade/MCQA-v0")
    loaded = list(env.tasks)[:6]
    # right on even rows, wrong on odd ones
    answers = {}
    for i, item in enumerate(loaded):
        question = item.row["responses_create_params"]["input"][0]["content"][-60:]
        answers[question] = item.row["expected_answer"] if i % 2 == 0 else "Z"
    exported = tmp_path / "rows.jsonl"  # the rows as `cascade-envs export --format nemo-gym` writes them
    write_rows(env, "cascade/MCQA-v0", loaded, exported, agent_name=agent)
    rows = [json.loads(line) for line in exported.read_text().splitlines()]
    with (
        gym_stack(mcqa_policy(answers), cascade_envs.make("cascade/MCQA-v0")) as (stack, served),
        warnings.catch_warnings(record=True) as caught,
    ):
        warnings.simplefilter("always")
        results = stack.collect(rows)
        assert len(served.store) == 0  # every episode's session closed
    legacy = [w for w in caught if "agent_ref" in str(w.message)]
    assert not legacy, legacy[0].message  # routed by task_source, not 0.7's deprecated agent_ref path
    assert len(results) == 6
    for row, result in results:
        assert row["agent_ref"]["name"] == agent  # resolved from task_source by the collection
        output = result["response"]["output"]
        text = "".join(
            c["text"] for item in output if item["type"] == "message" for c in item["content"] if "text" in c
        )
        want = asyncio.run(env.areward(row["cascade_row"], text))
        assert result["reward"] == want.value and result["mask_sample"] is want.masked
    assert sorted(r["reward"] for _, r in results) == [0.0, 0.0, 0.0, 1.0, 1.0, 1.0]


MASK_ROW = {"id": "m1", "prompt": "2+2?", "answer": "4"}


@pytest.mark.parametrize("agent", [*SIMPLE_AGENTS, GYM_AGENT])
def test_a_masked_reward_arrives_as_a_mask_through_every_agent(agent: str):
    """The verifier fails: the rollout is flagged ``mask_sample`` (for the gymnasium agent in the
    ``info`` it passes on), never a plain 0, and the aggregate metrics leave it out."""
    env = BrokenVerifierEnv(tasks=[MASK_ROW])
    rows = [gym_row(env, "toy/broken", env.load(MASK_ROW), agent)]
    with gym_stack(lambda request: Step("4"), BrokenVerifierEnv(tasks=[MASK_ROW])) as (stack, served):
        results = [result for _, result in stack.collect(rows, num_repeats=2)]
        metrics = stack.aggregate(agent, results)
        assert len(served.store) == 0
    for result in results:
        flags = result["info"] if agent == GYM_AGENT else result
        assert result["reward"] == 0.0 and flags["mask_sample"] is True
        assert flags["failure_kind"] == "verifier_error"
        assert "judge server unreachable" in flags["failure_reason"]
    assert metrics["agent_metrics"]["num_masked"] == 2 and metrics["agent_metrics"]["mean/reward"] is None


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

    rewards = []
    for row, result in results:
        turns = [
            "".join(c["text"] for c in item["content"])
            for item in result["response"]["output"]
            if item["type"] == "message" and item["role"] == "assistant"
        ]
        assert turns[-1] == "Done." and len(turns) == len(solutions_for(row, solutions)) + 1
        assert result["terminated"] is True and result["info"]["mask_sample"] is False
        assert result["reward"] == asyncio.run(replay(env, row["cascade_row"], turns))
        rewards.append(result["reward"])
    assert sorted(rewards) == [0.0, 0.0, 1.0, 1.0]


def solutions_for(row: dict[str, Any], solutions: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    task = next(m["content"] for m in row["responses_create_params"]["input"] if m["role"] == "user")
    return solutions[task]


@pytest.mark.parametrize("agent", [SIMPLE_AGENT, GYM_AGENT])
def test_a_rollout_whose_model_fails_midway_leaves_no_session(agent: str):
    """0.7 closes what a failed rollout opened: ``single_agent_turn`` with ``/close_session``, the
    gymnasium agent with ``/close`` (offered in ``/reset``'s info); nothing waits for the session TTL."""
    row = {"id": "t1", "prompt": "What is the code?", "answer": "XYZ"}
    env = LookupToolEnv(tasks=[row])

    def policy(request: dict[str, Any]) -> Step:
        if len(request["messages"]) > 2:  # past the system prompt and the question: after a tool call
            return Step(status=400, raw=b'{"error": "the model broke"}')
        if agent == GYM_AGENT:
            return Step('<tool_call>{"name": "lookup", "arguments": {}}</tool_call>')
        return Step(body=completion_with_call("lookup", {}))

    with gym_stack(policy, LookupToolEnv(tasks=[row])) as (stack, served):
        results = stack.collect(
            [gym_row(env, "toy/lookup", env.load(row), agent)], route_failures_to_sidecar=True
        )
        assert len(served.store) == 0
    assert [r["_ng_failure_class"] for _, r in results] == [
        "environment_server_failed" if agent == SIMPLE_AGENT else "agent_run_error"
    ]


def completion_with_call(name: str, arguments: dict[str, Any], call_id: str = "call_0") -> dict[str, Any]:
    from tests.chat_server import completion

    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
    return completion(None, tool_calls=[call])


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
    row = gym_row(env, "cascade/GenRM-v0", env.load(ROW), SIMPLE_AGENT)
    options = {"num_rollouts_per_prompt": 3, "group_deadline_s": 3.0}
    served_env = GenRMEnv([ROW], judge_url=ScriptedJudge(rubric_reply))
    with gym_stack(policy, served_env, options=options) as (stack, _served):
        results = stack.collect([row], num_repeats=3)  # one prompt, its group of 3
        partial = stack.collect([{**row, "_ng_task_index": 1}], num_repeats=2)  # the third one lost

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


@pytest.mark.parametrize("agent", SIMPLE_AGENTS)
def test_simple_agent_calls_a_route_per_tool_for_native_function_calls(agent: str):
    """The model answers with chat-completions ``tool_calls``: NeMo Gym's vllm_model makes them
    ``function_call`` items, its simple_agent POSTs each to ``/<tool>`` on our server (behind
    ``single_agent_turn_legacy``: through the direct HTTP access it was granted), then ``/verify``."""
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
            call = calls[turn]
            return Step(
                body=completion_with_call(call["name"], json.loads(call["arguments"]), f"call_{turn}")
            )
        return Step("Done.")

    rows = [gym_row(env, "cascade/Workplace-v0", item, agent) for item in loaded]
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


def test_the_typed_session_contract_in_nemo_gyms_own_models():
    """The bodies 0.7's environment servers send, built and read back with NeMo Gym's own pydantic
    models (which forbid extra fields): seed, repeated seed, close, repeated close, close of an id
    never seeded, and no seed after a close."""
    from nemo_gym.base_resources_server import (
        ResourcesCloseSessionRequest,
        ResourcesCloseSessionResponse,
        ResourcesSeedSessionRequest,
        ResourcesSeedSessionResponse,
    )
    from nemo_gym.episode_types import EpisodeId, TaskId

    from cascade_envs.serving.server import BackgroundServer

    env = cascade_envs.make("cascade/MCQA-v0")
    item = env.tasks[0]
    episode = EpisodeId(rollout_id="0-0")
    seed = ResourcesSeedSessionRequest(
        resources_session_id=f"resources-session-{uuid.uuid4().hex}",
        episode_id=episode,
        task_id=TaskId(taskset="cascade_simple_agent", task_id="0"),
        task_data={"cascade_row": item.row},
    )
    never = seed.model_copy(update={"resources_session_id": seed.resources_session_id + "-never"})

    def close_body(request: ResourcesSeedSessionRequest) -> dict[str, Any]:
        rsid = request.resources_session_id
        return ResourcesCloseSessionRequest(resources_session_id=rsid, episode_id=episode).model_dump(
            mode="json"
        )

    with BackgroundServer("nemo-gym", env) as served, httpx.Client(base_url=served.url) as client:
        cookies = []
        for _ in range(2):
            answer = client.post("/seed_session", json=seed.model_dump(mode="json"))
            assert answer.status_code == 200, answer.text
            got = ResourcesSeedSessionResponse.model_validate(answer.json())
            assert got.resources_session_id == seed.resources_session_id
            cookies.append(answer.cookies["cascade_session"])
        assert cookies[0] == cookies[1] and len(served.store) == 1  # the repeat found its session
        for request in (seed, seed, never):
            answer = client.post("/close_session", json=close_body(request))
            assert answer.status_code == 200, answer.text
            closed = ResourcesCloseSessionResponse.model_validate(answer.json())
            assert closed.resources_session_id == request.resources_session_id
        assert len(served.store) == 0
        for late in (seed, never):
            assert client.post("/seed_session", json=late.model_dump(mode="json")).status_code == 409


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
