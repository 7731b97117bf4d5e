"""NeMo Gym's instruction_following rows and scored rollouts, loaded unchanged: our verdicts are theirs.

Known deliberate differences from NeMo Gym (none occurs in these rollouts): an empty or
whitespace-only answer follows no instruction (IFEval's rule; NeMo Gym passes e.g. ``no_comma`` on
it), an unknown instruction id or bad kwargs fail at load time instead of scoring False, and
``<think>`` reasoning is split off and the answer stripped of surrounding whitespace before
checking (the Env base does both).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from cascade_envs.envs.instruction_following.env import InstructionFollowingEnv

DATA = (
    Path(__file__).resolve().parents[3].parent / "shared" / "data" / "nemo-gym-rows" / "instruction_following"
)
pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason=f"NeMo Gym rows not found at {DATA}")


def _read(name: str) -> list[dict]:
    if not DATA.is_dir():
        return []
    with open(DATA / name, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _final_text(rollout: dict) -> str:
    return rollout["response"]["output"][-1]["content"][0]["text"]


def test_example_rows_load_unchanged():
    env = InstructionFollowingEnv(tasks=str(DATA / "example.jsonl"))
    rows = _read("example.jsonl")
    assert len(env.tasks) == len(rows) == 5
    for task, row in zip(env.tasks, rows, strict=True):
        assert [c["id"] for c in task.task.checks] == row["instruction_id_list"]
        assert env.prompt(task.task)[-1]["content"] == row["responses_create_params"]["input"][-1]["content"]


@pytest.mark.parametrize(
    "rollout", _read("example_rollouts.jsonl"), ids=lambda r: "+".join(r["instruction_id_list"])
)
def test_rollout_verdicts_and_reward_agree(rollout):
    env = InstructionFollowingEnv(tasks=[])
    task = env.load(rollout)
    reward = asyncio.run(env.ascore(task.task, _final_text(rollout)))
    assert not reward.masked
    assert [item["followed"] for item in reward.components["instructions"]] == rollout[
        "follow_instruction_list"
    ]
    assert reward.value == rollout["reward"]


def test_rollouts_score_the_same_through_step():
    env = InstructionFollowingEnv(tasks=[])
    for rollout in _read("example_rollouts.jsonl"):
        env.reset(options={"task": rollout})
        _, reward, terminated, _, _ = env.step(_final_text(rollout))
        assert terminated and reward == rollout["reward"]
