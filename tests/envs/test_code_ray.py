"""The Ray transport of the code verifier, on a local Ray instance (2 CPUs, private temp dirs)."""

from __future__ import annotations

import asyncio

import pytest

from cascade_envs.envs.code.env import CodeEnv
from tests import ray_local
from tests.ray_local import kill_and_wait

local_ray = ray_local.local_ray  # the module-scoped Ray fixture

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'cascade-envs[ray]')")
# Ray's object store lives in /dev/shm: keep it apart from the tests that measure host shared memory.
pytestmark = pytest.mark.xdist_group("host-shared-memory")

TASK = {
    "prompt": "add",
    "verifier_metadata": {"unit_tests": {"inputs": ["1 2\n", "5 5\n"], "outputs": ["3\n", "10\n"]}},
}
GOOD = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
BAD = "```python\nprint(3)\n```"


@pytest.fixture
def envs():
    """Envs made by a test; closing one releases its actor pool, freeing the CPUs for the next test."""
    made: list[CodeEnv] = []
    yield made
    for env in made:
        env.close()


@pytest.mark.slow
def test_scores_through_ray_actors_like_locally(local_ray, envs):
    remote = CodeEnv(tasks=[TASK], ray_actors=2, time_limit_s=2)
    local = CodeEnv(tasks=[TASK], time_limit_s=2)
    envs += [remote, local]
    assert len(remote.client.actors) == 2

    async def go(env, answers):
        return await asyncio.gather(*(env.areward(TASK, a) for a in answers))

    answers = [GOOD, BAD, "no code", GOOD, BAD, GOOD]
    got, want = asyncio.run(go(remote, answers)), asyncio.run(go(local, answers))
    assert [(r.value, r.reason, r.masked) for r in got] == [(r.value, r.reason, r.masked) for r in want]


@pytest.mark.slow
def test_a_killed_actor_is_replaced_and_the_response_judged_again(local_ray, envs):
    env = CodeEnv(tasks=[TASK], ray_actors=1, time_limit_s=2)
    envs.append(env)
    actor = env.client.actors[0]
    assert asyncio.run(env.areward(TASK, GOOD)).value == 1
    kill_and_wait(actor)
    reward = asyncio.run(env.areward(TASK, GOOD))
    assert (reward.value, reward.masked) == (1, False)
    assert env.client.actors[0] != actor and env.client.pool.generation == [1]


@pytest.mark.slow
def test_an_actor_that_keeps_dying_gives_a_masked_reward_naming_why(local_ray, envs):
    env = CodeEnv(tasks=[TASK], ray_actors=1, time_limit_s=2)
    envs.append(env)
    env.client.pool.retries = 0
    kill_and_wait(env.client.actors[0])
    reward = asyncio.run(env.areward(TASK, GOOD))
    assert reward.masked and "Ray verifier" in reward.error and "died" in reward.error
    assert asyncio.run(env.areward(TASK, GOOD)).value == 1  # its replacement serves the next call


def test_choosing_both_transports_is_an_error():
    with pytest.raises(ValueError, match="not both"):
        CodeEnv(tasks=[TASK], verifier_url="http://x", ray_actors=1)


def test_a_sandbox_instance_with_ray_actors_is_refused_not_dropped():
    from cascade_envs.sandbox import get_sandbox

    with pytest.raises(ValueError, match="pass sandbox='docker'"):
        CodeEnv(tasks=[TASK], ray_actors=1, sandbox=get_sandbox("unsafe-subprocess"))


@pytest.mark.slow
def test_closing_the_env_kills_its_actors(local_ray):
    env = CodeEnv(tasks=[TASK], ray_actors=1, time_limit_s=2)
    actor = env.client.actors[0]
    assert asyncio.run(env.areward(TASK, GOOD)).value == 1
    env.close()
    assert env.client is None
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(actor.ready.remote(), timeout=30)
