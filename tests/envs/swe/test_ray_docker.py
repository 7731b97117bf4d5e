"""Docker on Ray: an env actor plays ``cascade/SWE-v0`` episodes in containers of its own node's daemon.

The sandbox travels to the actor as settings (its client is made there, from that node's
``DOCKER_HOST`` or local socket); each container is labelled with the host and pid of the process
that started it, so the test sees the actor's own containers during the episode. Needs the OpenHands
SDK and Ray (``.ci/swe.sh`` installs both in ``.venv-swe``).
"""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from cascade_envs.core import Completion
from cascade_envs.mix import EnvMix
from cascade_envs.rollout.runner import RolloutRunner
from cascade_envs.sandbox.docker import LABEL, DockerSandbox
from tests import docker_support, ray_local
from tests.sandbox.conftest import unique_marker

from .conftest import LIMITS, bundled_rows, call, fix_calls, row, swe_sandbox

if importlib.util.find_spec("openhands") is None or importlib.util.find_spec("openhands.tools") is None:
    pytest.skip(
        "the OpenHands SDK is not installed (it needs Python >= 3.12): run .ci/swe.sh",
        allow_module_level=True,
    )
ray = pytest.importorskip("ray", reason="Ray is not installed (.ci/swe.sh installs it in .venv-swe)")
from cascade_envs.distributed import attach_ray  # noqa: E402 - needs ray

local_ray = ray_local.local_ray
pytestmark = pytest.mark.xdist_group("host-shared-memory")
SWE = "cascade/SWE-v0"


class Watching:
    """Replays ``turns``; at each turn notes who owns the containers labelled ``marker`` (``host:pid``)."""

    def __init__(self, turns: list[str], marker: str):
        self.turns, self.marker, self.owners = turns, marker, set()

    async def agenerate(self, messages: list[Any], *, sampling: Any, thinking: bool = True) -> Completion:
        self.owners |= {c["Labels"][LABEL] for c in docker_support.containers(f"cascade-test={self.marker}")}
        k = sum(m.get("role") == "assistant" for m in messages)
        return Completion(self.turns[min(k, len(self.turns) - 1)], finish_reason="stop")

    async def aclose(self) -> None:
        pass


def test_a_ray_actor_plays_swe_episodes_in_its_nodes_docker(local_ray):
    swe_sandbox("docker", bundled_rows())
    marker = unique_marker()
    kwargs = {
        "sandbox": DockerSandbox(labels={"cascade-test": marker}, **LIMITS),
        "command_timeout_s": 10,
        "test_timeout_s": 60,
    }
    remote = attach_ray(EnvMix([SWE], env_kwargs={SWE: kwargs}), "auto", env_actors=1)
    try:
        pool = remote.envs[SWE].pool
        (info,) = ray.get([actor.ready.remote() for actor in pool.actors])
        policy = Watching(
            [call("terminal", command="ls"), *fix_calls("inilite"), call("finish", message="Done.")], marker
        )
        (group,) = RolloutRunner(policy, group_size=2, envs=remote.envs).run([(SWE, row("inilite"))])
        assert [e.reward.value for e in group.episodes] == [1.0, 1.0], [e.reward for e in group.episodes]
        assert policy.owners == {f"{info['host']}:{info['pid']}"}  # the actor's own, on its node's daemon
        assert pool.held == [0]
    finally:
        remote.envs.close()
    assert docker_support.containers(f"cascade-test={marker}") == []
