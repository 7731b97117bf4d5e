"""NeMo Gym's own resources servers, played through ``nemo-gym/Resources-v0`` and trained on.

The test starts servers that ship with the ``nemo-gym`` package (mcqa: single-turn multiple choice;
example_tool_call_multireward: a tool and reward components; workplace_assistant: 27 tools over
per-session state) as processes of the NeMo Gym venv's python, ``$NEMO_GYM_PYTHON``, and plays their
example rows from this venv: right answers earn the server's reward, wrong ones its 0, and a server
that dies masks. Then a run of our GRPO trainer on the tiny model trains on a mix that names a NeMo
Gym server beside one of our envs.

Runs under our venv's python (the trainer needs torch); under a python without torch and our
trainer (NeMo Gym's own venv) it skips. Without ``$NEMO_GYM_PYTHON`` it skips, and fails when
``CASCADE_REQUIRE_NEMO_GYM=1`` (``.ci/nemo_gym.sh``).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

try:
    import torch  # noqa: F401

    from cascade_envs.trainer.checks import load_config
    from cascade_envs.trainer.loop import Trainer
except ImportError as exc:  # NeMo Gym's venv: no torch, no trainer
    pytest.skip(f"needs torch and the cascade-envs trainer ({exc})", allow_module_level=True)

from cascade_envs.integrations.nemo_gym.env import NemoGymEnv
from cascade_envs.rollout import RolloutRunner
from cascade_envs.testing import ScriptedPolicy
from tests.trainer.toys import WORDS, register_toys, save_tiny

SERVERS = ("mcqa", "example_tool_call_multireward", "workplace_assistant")
FIND_SERVERS = "import importlib.util; print(importlib.util.find_spec('resources_servers.mcqa').submodule_search_locations[0])"


def nemo_gym_python() -> tuple[str, Path]:
    """``$NEMO_GYM_PYTHON`` and the folder of its ``resources_servers``; skip, or fail when required."""
    python = os.environ.get("NEMO_GYM_PYTHON", "")
    problem = "NEMO_GYM_PYTHON is not set (a python with nemo-gym, e.g. the venv .ci/nemo_gym.sh builds)"
    if python:
        found = subprocess.run([python, "-c", FIND_SERVERS], capture_output=True, text=True, timeout=120)
        if found.returncode == 0:
            return python, Path(found.stdout.strip()).parent
        problem = f"{python} cannot import NeMo Gym's resources_servers: {found.stderr.strip()[-300:]}"
    if os.environ.get("CASCADE_REQUIRE_NEMO_GYM") == "1":
        pytest.fail(problem, pytrace=False)
    pytest.skip(problem)


@pytest.fixture(scope="module")
def nemo_gym() -> tuple[str, Path]:
    return nemo_gym_python()


@pytest.fixture(scope="module")
def servers(nemo_gym) -> Iterator[dict[str, NemoGymEnv]]:
    """Each of ``SERVERS`` started on its example rows, plus a spare mcqa ("doomed") to stop."""
    python, folder = nemo_gym

    def start(name: str) -> NemoGymEnv:
        server = "mcqa" if name == "doomed" else name
        return NemoGymEnv(folder / server / "data" / "example.jsonl", server=server, python=python)

    with ThreadPoolExecutor(len(SERVERS) + 1) as pool:
        started = dict(zip([*SERVERS, "doomed"], pool.map(start, [*SERVERS, "doomed"]), strict=True))
    yield started
    for env in started.values():
        env.close()


def play(env: NemoGymEnv, policy: Any) -> list[Any]:
    """Every example row of ``env`` played once with ``policy`` (a function of the messages)."""
    runner = RolloutRunner(ScriptedPolicy(policy), envs={"env": env})
    groups = runner.run([("env", loaded) for loaded in env.tasks or ()])
    return [group.episodes[0] for group in groups]


def row_of(env: NemoGymEnv, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The row whose prompt opens ``messages``."""
    question = next(m for m in messages if m["role"] == "user")
    return next(t.row for t in env.tasks or () if question in t.task.prompt.messages)


def test_mcqa_scores_right_answers_1_and_wrong_ones_0(servers):
    env = servers["mcqa"]

    def answer(right: bool):
        def policy(messages):
            expected = row_of(env, messages)["expected_answer"]
            letter = expected if right else ("A" if expected != "A" else "B")
            return f"<think>the options, one by one</think>\\boxed{{{letter}}}"

        return policy

    right, wrong = play(env, answer(True)), play(env, answer(False))
    assert len(right) == len(wrong) == 5
    assert [(e.reward.value, e.reward.masked) for e in right] == [(1.0, False)] * 5
    assert [(e.reward.value, e.reward.masked) for e in wrong] == [(0.0, False)] * 5


def test_a_tool_and_the_reward_components_come_through(servers):
    env = servers["example_tool_call_multireward"]

    def calls(right: bool):
        def policy(messages):
            if messages[-1]["role"] == "tool":
                return "There you go."
            city = row_of(env, messages)["expected_call"]["arguments"]["city"] if right else "Atlantis"
            return f'<tool_call>{{"name": "get_weather", "arguments": {{"city": "{city}"}}}}</tool_call>'

        return policy

    for right, correctness in ((True, 1.0), (False, 0.0)):
        for episode in play(env, calls(right)):
            reward, tool = episode.reward, episode.messages[-2]
            assert tool["role"] == "tool" and "sunny" in tool["content"] and not reward.masked
            # the server's own components: a final message costs "format" (exactly one call, no prose)
            assert {k: reward.components[k] for k in ("correctness", "schema_valid", "format")} == {
                "correctness": correctness,
                "schema_valid": 1.0,
                "format": 0.0,
            }
            assert reward.value == correctness + 1.0


def test_session_state_tools_play_in_their_own_session(servers):
    env = servers["workplace_assistant"]

    def actions(right: bool):
        def policy(messages):
            if messages[-1]["role"] == "tool" or not right:
                return "Done."
            truth = row_of(env, messages)["ground_truth"]
            return "".join(
                f'<tool_call>{{"name": "{c["name"]}", "arguments": {c["arguments"]}}}</tool_call>'
                for c in truth
            )

        return policy

    right, wrong = play(env, actions(True)), play(env, actions(False))
    assert [(e.reward.value, e.reward.masked) for e in right] == [(1.0, False)] * 5
    assert [(e.reward.value, e.reward.masked) for e in wrong] == [(0.0, False)] * 5
    outputs = [m["content"] for e in right for m in e.messages if m["role"] == "tool"]
    assert len(outputs) >= 5 and not [o for o in outputs if "rror" in o]  # each call found its session


def test_a_server_that_dies_masks_with_its_reason(servers):
    env = servers["doomed"]
    assert env.process is not None
    env.process.stop()
    episodes = play(env, lambda messages: "\\boxed{A}")
    assert all(e.reward.masked and "/seed_session failed" in e.reward.error for e in episodes)


BOXES = ["\\boxed{A}", "\\boxed{B}"]


def test_a_mix_with_a_nemo_gym_server_trains_in_our_trainer(nemo_gym, tmp_path):
    """Two GRPO steps of the tiny model on our SayYes env beside two of NeMo Gym's mcqa servers."""
    python, _ = nemo_gym
    register_toys()
    rows = tmp_path / "mcqa.jsonl"
    with rows.open("w") as f:
        for i, letter in enumerate("ABBA"):
            prompt = [{"role": "user", "content": f"say the word {BOXES['AB'.index(letter)]}"}]
            row = {
                "responses_create_params": {"input": prompt},
                "options": [{"A": "yes"}, {"B": "no"}],
                "expected_answer": letter,
                "grading_mode": "strict_single_letter_boxed",
                "uuid": f"tiny-{i}",
            }
            f.write(json.dumps(row) + "\n")
    model = save_tiny(tmp_path / "model", words=[*WORDS, *BOXES])
    mcqa = {"server": "mcqa", "python": python, "tasks": str(rows), "thinking": False}
    config = {
        "model": {"path": str(model)},
        "mix": {
            "envs": {
                "test/SayYes-v0": 0.5,
                "nemo-gym/Resources-v0": {"weight": 0.25, "kwargs": mcqa},
                # a second server in the same mix: the registered env under an id of its own
                "nemo-gym/MCQA-v0": {"env": "nemo-gym/Resources-v0", "weight": 0.25, "kwargs": mcqa},
            }
        },
        "rollout": {"group_size": 4, "prompts_per_step": 8, "max_tokens": 6, "dynamic_filtering": False},
        "optim": {"lr": 3e-3, "micro_batch_size": 8},
        "train": {
            "steps": 2,
            "seed": 3,
            "output_dir": str(tmp_path / "run"),
            "save_every": 100,
            "tensorboard": False,
            "progress": False,
            "plot": False,
        },
    }
    path = tmp_path / "run.yaml"
    path.write_text(json.dumps(config))  # JSON is YAML
    history = Trainer(load_config(path)).train()
    assert len(history) == 2 and all(h["train/tokens"] > 0 for h in history)
    assert all(h["batch/samples_masked"] == 0 for h in history)
    nemo = [h["reward/nemo-gym/Resources-v0"] for h in history if "reward/nemo-gym/Resources-v0" in h]
    other = [h["reward/nemo-gym/MCQA-v0"] for h in history if "reward/nemo-gym/MCQA-v0" in h]
    ours = [h["reward/test/SayYes-v0"] for h in history if "reward/test/SayYes-v0" in h]
    assert nemo and other and ours  # every env played and scored, each NeMo Gym id by its own server
    nemo += other
    assert max(nemo) > 0  # the server's verifier paid some \boxed answers of the tiny model
