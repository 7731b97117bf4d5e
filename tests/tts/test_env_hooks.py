"""The env hooks test-time scaling selects with: ``acheck`` (public checks) and ``aextract_answer`` (votes)."""

from __future__ import annotations

import asyncio
import json

import pytest

import cascade_envs
from cascade_envs.core import TaskError
from cascade_envs.envs.code.env import CodeEnv

from .helpers import math_row


def run(env, coro):
    try:
        return asyncio.run(coro)
    finally:
        env.close()


def test_math_and_mcqa_extract_the_answer_their_grader_reads():
    env = cascade_envs.make("cascade/Math-v0", tasks=[math_row(0, "1/2")], workers=1)
    task = env.tasks[0].task

    async def keys():
        return [
            await env.aextract_answer(task, a)
            for a in ("so \\boxed{\\frac{1}{2}}", "\\boxed{1/2}", "no idea")
        ]

    first, second, none = run(env, keys())
    assert first == second and first is not None and none is None
    env = cascade_envs.make("cascade/MCQA-v0")
    task = env.tasks[0].task
    assert run(env, env.aextract_answer(task, "Thinking... \\boxed{B}")) == "B"
    env = cascade_envs.make("cascade/StructuredOutput-v0")  # no extractor: no vote key
    assert run(env, env.aextract_answer(env.tasks[0].task, '{"a": 1}')) is None


def test_instruction_following_and_structured_outputs_check_what_the_prompt_states():
    env = cascade_envs.make("cascade/InstructionFollowing-v0")
    task = env.tasks[0].task
    good = "The lantern burns.\n\n***\n\nThe logbook fills.\n\n***\n\nDawn comes."

    async def both():
        return [await env.acheck(task, good), await env.ascore(task, good), await env.acheck(task, "no")]

    check, score, bad = run(env, both())
    assert check.value == score.value == 1.0 and bad.value < 1.0
    env = cascade_envs.make("cascade/StructuredOutput-v0")
    task = env.tasks[0].task
    assert run(env, env.acheck(task, "not json")).value == 0.0


def test_code_public_tests_are_checked_apart_from_the_hidden_ones_and_validated():
    env = CodeEnv(time_limit_s=2, total_time_s=30)
    row = {
        "id": "p",
        "responses_create_params": {"input": [{"role": "user", "content": "echo"}]},
        "verifier_metadata": {"unit_tests": {"inputs": ["1\n", "2\n"], "outputs": ["1\n", "2\n"]}},
    }
    assert env.load(row).task.public is None and run(env, env.acheck(env.load(row).task, "x")) is None
    env = CodeEnv(time_limit_s=2, total_time_s=30)
    public = {
        **row,
        "verifier_metadata": {
            **row["verifier_metadata"],
            "public_tests": {"inputs": ["1\n"], "outputs": ["1\n"]},
        },
    }
    task = env.load(public).task
    only_one = "```python\nprint(1)\n```"

    async def both():
        return await env.acheck(task, only_one), await env.ascore(task, only_one)

    check, score = run(env, both())
    assert check.value == 1.0 and check.components["tests_total"] == 1 and score.value == 0.0
    bad = {
        **row,
        "verifier_metadata": {**row["verifier_metadata"], "public_tests": json.dumps({"inputs": ["1\n"]})},
    }
    with pytest.raises(TaskError, match="public_tests"):
        env.load(bad)
