"""The report's SWE curation through the generic filter: 16 rollouts per instance, drop 16/16, keep a
seeded 10% of 0/16, on the bundled repositories with a scripted policy (needs the OpenHands SDK)."""

from __future__ import annotations

import importlib.util
import json
from typing import Any

import pytest

from cascade_envs.core import Completion
from cascade_envs.data import task_id
from cascade_envs.filtering import FilterSettings, filter_tasks, keeps_unsolved
from cascade_envs.registry import envs as env_registry
from cascade_envs.registry import register

from .conftest import call, fix_calls, row

if importlib.util.find_spec("openhands") is None or importlib.util.find_spec("openhands.tools") is None:
    pytest.skip(
        "the OpenHands SDK is not installed (it needs Python >= 3.12): run .ci/swe.sh",
        allow_module_level=True,
    )

ENV_ID = "tests/SWE-v0"


class SolvesDurationsOnly:
    """Fixes the ``durations`` bug every time; on any other issue looks around and gives up."""

    async def agenerate(self, messages: list[Any], *, sampling: Any, thinking: bool = True) -> Completion:
        turn = sum(m.get("role") == "assistant" for m in messages)
        if "parse_duration" in messages[1]["content"]:
            script = [*fix_calls("durations"), call("finish", message="Fixed.")]
        else:
            script = [call("terminal", command="ls"), call("finish", message="I could not fix it.")]
        return Completion(script[min(turn, len(script) - 1)], finish_reason="stop")

    async def aclose(self) -> None:
        pass


@pytest.fixture
def swe_env_id():
    register(ENV_ID, "cascade_envs.envs.swe.env:SweEnv")
    yield ENV_ID
    env_registry.unregister(ENV_ID)


def test_swe_curation_drops_solved_and_keeps_a_seeded_tenth_of_unsolved(swe_env_id, tmp_path):
    unsolved_id = task_id(row("inilite"))
    # a seed under which the unsolved instance falls in the kept 10%, and one under which it does not
    keep_seed = next(s for s in range(1000) if keeps_unsolved(unsolved_id, FilterSettings(16, 0.1, seed=s)))
    drop_seed = next(
        s for s in range(1000) if not keeps_unsolved(unsolved_id, FilterSettings(16, 0.1, seed=s))
    )
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(row(name)) + "\n" for name in ("durations", "inilite")))
    for seed, kept in ((keep_seed, True), (drop_seed, False)):
        out = tmp_path / f"seed{seed}"
        summary = filter_tasks(
            SolvesDurationsOnly(),
            swe_env_id,
            tasks,
            out,
            FilterSettings(k=16, keep_unsolved=0.1, seed=seed),
            env_kwargs={"sandbox": "bwrap", "command_timeout_s": 10},
            policy_id="scripted",
            concurrency=16,
        )
        assert summary.complete, summary.counts
        assert summary.counts["dropped_solved"] == 1
        assert summary.counts["kept" if kept else "dropped_unsolved"] == 1
        assert summary.histogram[16] == 1 and summary.histogram[0] == 1
        kept_rows = [json.loads(line) for line in (out / "kept.jsonl").read_text().splitlines()]
        assert [r["instance_id"] for r in kept_rows] == (["cascade-envs__inilite-1"] if kept else [])
        rollouts = (out / "rollouts.jsonl").read_text().splitlines()
        assert len(rollouts) == 32
