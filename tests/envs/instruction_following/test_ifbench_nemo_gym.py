"""NeMo Gym's IFBench rows and scored rollouts: our checkers and env give NeMo Gym's verdicts."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from cascade_envs.envs.instruction_following.env import InstructionFollowingEnv
from cascade_envs.envs.instruction_following.ifbench import IFBENCH_IDS
from cascade_envs.envs.instruction_following.registry import get_instruction, validate_kwargs

DATA = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "nemo-gym-rows" / "ifbench"
pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason=f"NeMo Gym rows not found at {DATA}")


def _read(name: str) -> list[dict]:
    with open(DATA / name, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _final_text(rollout: dict) -> str:
    """The answer NeMo Gym scores: the first content part of the last output item."""
    return rollout["response"]["output"][-1]["content"][0]["text"]


def _rollouts() -> list[dict]:
    return _read("example_rollouts.jsonl") if DATA.is_dir() else []


@pytest.mark.parametrize("rollout", _rollouts(), ids=lambda r: "+".join(r["instruction_id_list"]))
def test_checkers_give_nemo_gym_verdicts(rollout):
    text = _final_text(rollout)
    ours = [
        bool(text.strip()) and get_instruction(i).check(text, **validate_kwargs(i, kwargs))
        for i, kwargs in zip(rollout["instruction_id_list"], rollout["kwargs"], strict=True)
    ]
    assert ours == rollout["follow_instruction_list"]


@pytest.mark.parametrize("rollout", _rollouts(), ids=lambda r: "+".join(r["instruction_id_list"]))
def test_env_reward_equals_nemo_gym_reward(rollout):
    env = InstructionFollowingEnv(tasks=[])
    task = env.load(rollout)
    reward = asyncio.run(env.ascore(task.task, _final_text(rollout)))
    assert not reward.masked
    assert reward.value == pytest.approx(rollout["reward"])


def test_every_row_loads_with_ifbench_checks():
    env = InstructionFollowingEnv(tasks=[])
    rows = _read("example.jsonl")
    assert rows
    for row in rows:
        task = env.load(row)
        assert [check["id"] for check in task.task.checks] == row["instruction_id_list"]
        assert all(check["id"] in IFBENCH_IDS for check in task.task.checks)
