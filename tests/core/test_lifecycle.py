"""Env lifecycles: a run's resources are owned, and closing the run leaves nothing behind."""

from __future__ import annotations

import asyncio
import json
import tempfile
from importlib import resources

import psutil
import pytest

import cascade_envs
from cascade_envs.mix import EnvMix
from cascade_envs.rollout import RolloutRunner
from tests.toy_envs import CharTemplatePolicy

ANSWERS = {
    "cascade/Math-v0": "\\boxed{2}",
    "cascade/Code-v0": "```python\nprint(1)\n```",
    "cascade/InstructionFollowing-v0": "A lantern glowed.",
    "cascade/StructuredOutput-v0": '{"name": "A", "age": 1, "email": "a@b.c"}',
}


def first_row(domain: str) -> dict:
    path = resources.files("cascade_envs.envs").joinpath(domain, "data", "samples.jsonl")
    return json.loads(path.read_text(encoding="utf-8").splitlines()[0])


ITEMS = [
    ("cascade/Math-v0", first_row("math")),
    ("cascade/Code-v0", first_row("code")),
    ("cascade/InstructionFollowing-v0", first_row("instruction_following")),
    ("cascade/StructuredOutput-v0", first_row("structured_outputs")),
]


def reply(messages):
    text = messages[-1]["content"]
    if "boxed" in text:
        return ANSWERS["cascade/Math-v0"]
    if "code block" in text:
        return ANSWERS["cascade/Code-v0"]
    if "JSON" in text:
        return ANSWERS["cascade/StructuredOutput-v0"] + " " * 300_000  # large: goes to the worker pool
    return ANSWERS["cascade/InstructionFollowing-v0"]


def children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    monkeypatch.setenv("TMPDIR", str(folder))
    return folder


def test_a_run_leaves_no_process_client_or_temp_dir_behind(private_tmp):
    before = children()

    async def run():
        async with RolloutRunner(CharTemplatePolicy(reply), group_size=2, concurrency=8) as runner:
            groups = await runner.arun(ITEMS)
            during = children() - before
            return groups, during

    groups, during = asyncio.run(run())
    assert all(e.error is None for g in groups for e in g.episodes), [
        e.error for g in groups for e in g.episodes
    ]
    assert during, "the math env's verifier workers should have been running during the run"
    leftover = children() - before
    assert not {pid for pid in leftover if psutil.pid_exists(pid)}, (
        "closing the run must stop every worker process"
    )
    assert list(private_tmp.iterdir()) == []


def test_the_mix_envs_own_the_instances_and_close_them():
    closed: list[str] = []

    class Tracked(cascade_envs.Env):
        async def ascore(self, task, answer):
            return cascade_envs.Reward(1.0)

        async def aclose(self):
            closed.append("closed")
            await super().aclose()

    cascade_envs.register("life/Tracked-v0", Tracked, tasks=[{"prompt": "q"}])
    mix = EnvMix({"life/Tracked-v0": 1.0})

    async def run():
        async with mix.envs, RolloutRunner(CharTemplatePolicy(lambda m: "a"), envs=mix.envs) as runner:
            await runner.arun(mix.sample(3))
            assert closed == []  # the runner does not close envs it was given
        return closed

    assert asyncio.run(run()) == ["closed"]


def test_the_runner_closes_the_envs_it_made():
    closed: list[str] = []

    class Tracked(cascade_envs.Env):
        async def ascore(self, task, answer):
            return cascade_envs.Reward(1.0)

        async def aclose(self):
            closed.append(type(self).__name__)

    cascade_envs.register("life/Tracked2-v0", Tracked)
    runner = RolloutRunner(CharTemplatePolicy(lambda m: "a"), group_size=3)
    groups = runner.run([("life/Tracked2-v0", {"prompt": "q"})] * 4)
    assert len(groups) == 4 and closed == []
    runner.close()
    assert closed == ["Tracked"]  # one instance served all twelve episodes


def test_envs_handed_in_are_borrowed_and_left_open():
    closed: list[str] = []

    class Tracked(cascade_envs.Env):
        async def ascore(self, task, answer):
            return cascade_envs.Reward(1.0)

        async def aclose(self):
            closed.append(self.name)

    cascade_envs.register("life/Tracked3-v0", Tracked)
    mine = Tracked()
    mine.name = "given"
    runner = RolloutRunner(CharTemplatePolicy(lambda m: "a"), envs={"life/Given-v0": mine})
    runner.run([("life/Given-v0", {"prompt": "q"})])
    runner.envs.env("life/Tracked3-v0").name = "made"
    runner.close()
    assert closed == ["made"]  # the runner's set closes what it made, never what it was handed
