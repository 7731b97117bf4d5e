"""Ray scale-out of envs (``cascade_envs.distributed``) on a local Ray instance (2 CPUs, temp dirs).

One module-scoped Ray instance; each test closes the pools it made, so their actors free the CPUs.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap

import pytest

from cascade_envs.core import CascadeError
from cascade_envs.data import Loaded
from cascade_envs.mix import EnvMix
from cascade_envs.rollout.runner import RolloutRunner
from cascade_envs.testing import ScriptedPolicy
from tests import ray_local
from tests.ray_local import kill_and_wait

local_ray = ray_local.local_ray  # the module-scoped Ray fixture

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'cascade-envs[ray]')")
from cascade_envs.distributed import ActorPool, RayEnv, attach_ray  # noqa: E402 - needs ray

# Ray's object store lives in /dev/shm: keep it apart from the tests that measure host shared memory.
pytestmark = pytest.mark.xdist_group("host-shared-memory")

MATH, MCQA, IF, WORK = (
    "cascade/Math-v0",
    "cascade/MCQA-v0",
    "cascade/InstructionFollowing-v0",
    "cascade/Workplace-v0",
)


def answers_for(env_id: str, task: Loaded) -> list[str]:
    """Four answers to one task, right and wrong ones mixed (for IF: texts that meet some constraints)."""
    if env_id == IF:
        return [
            "lantern logbook\n\n***\n\nlantern\n\n***\n\nlogbook",
            "short",
            "<think>x</think>Words, words, words.",
            "A B C\n\n***\n\nD",
        ]
    right = task.row["expected_answer"]
    return [
        f"\\boxed{{{right}}}",
        "\\boxed{Z}",
        f"<think>hm</think>The answer is \\boxed{{{right}}}",
        "no idea",
    ]


def score_batch(mix: EnvMix, per_env: int = 4) -> list[list[dict]]:
    async def go() -> list[list[dict]]:
        jobs = []
        for env_id, env in mix.envs.items():
            jobs += [
                env.ascore_responses(task, answers_for(env_id, task)) for task in list(env.tasks)[:per_env]
            ]
        return [[r.to_dict() for r in group] for group in await asyncio.gather(*jobs)]

    return asyncio.run(go())


def workplace_turns(task: Loaded) -> list[str]:
    calls = [{"name": c["name"], "arguments": json.loads(c["arguments"])} for c in task.row["solution"]]
    return [f"<tool_call>{json.dumps(call)}</tool_call>" for call in calls] + ["Done."]


def solution_policy(tasks: list[Loaded]) -> ScriptedPolicy:
    """Plays a workplace task's reference solution turn by turn, then answers; on every other task it
    answers at once (and scores 0)."""
    turns = {
        t.row["responses_create_params"]["input"][-1]["content"]: workplace_turns(t)
        if i % 2 == 0
        else ["Done."]
        for i, t in enumerate(tasks)
    }

    def turn(messages: list[dict]) -> str:
        script = turns[next(m["content"] for m in messages if m["role"] == "user")]
        return script[min(sum(m["role"] == "assistant" for m in messages), len(script) - 1)]

    return ScriptedPolicy(turn)


def close(mix: EnvMix) -> None:
    mix.envs.close()


@pytest.mark.slow
def test_a_batch_scores_the_same_in_process_and_through_actors(local_ray):
    ids = [MCQA, MATH, IF]
    local, remote = (
        EnvMix(ids),
        attach_ray(EnvMix(ids), "auto", env_actors=1),
    )  # each actor starts its own checkers
    try:
        assert all(isinstance(env, RayEnv) and len(env.pool) == 1 for env in remote.envs.values())
        want, got = score_batch(local), score_batch(remote)
        assert got == want
        values = [r["value"] for group in want for r in group]
        assert 0 < sum(values) < len(values) and not any(r["masked"] for g in want for r in g)
    finally:
        close(local)
        close(remote)


@pytest.mark.slow
def test_workplace_episodes_play_on_their_actor_through_the_runner(local_ray):
    local, remote = EnvMix([WORK]), attach_ray(EnvMix([WORK]), "auto", env_actors=2)
    try:
        tasks = list(local.envs[WORK].tasks)[:4]
        items = [(WORK, t) for t in tasks]

        def play(mix: EnvMix) -> list[list[dict]]:
            runner = RolloutRunner(solution_policy(tasks), group_size=2, envs=mix.envs)
            groups = runner.run(items)
            return [[(e.reward.to_dict(), e.turns, e.messages) for e in g.episodes] for g in groups]

        want, got = play(local), play(remote)
        assert got == want
        assert {r["value"] for g in want for r, _, _ in g} == {0.0, 1.0}
        pool = remote.envs[WORK].pool
        assert pool.held == [0, 0]  # every episode was released on its actor
        assert ray.get([actor.held.remote() for actor in pool.actors]) == [0, 0]
    finally:
        close(local)
        close(remote)


@pytest.mark.slow
def test_a_killed_actor_is_replaced_and_its_scoring_retried_with_nothing_lost(local_ray):
    local = EnvMix([MCQA])
    remote = attach_ray(EnvMix([MCQA]), "auto", env_actors=2, actor_options={"max_concurrency": 2})
    env, pool = remote.envs[MCQA], remote.envs[MCQA].pool
    tasks = list(local.envs[MCQA].tasks) * 3
    first = pool.actors[0]

    async def batch(target) -> list[list[dict]]:
        done = 0

        async def one(task):
            nonlocal done
            rewards = await target.ascore_responses(task, answers_for(MCQA, task))
            done += 1
            return [r.to_dict() for r in rewards]

        async def killer():
            while done < 10:
                await asyncio.sleep(0.005)
            await asyncio.to_thread(kill_and_wait, first)

        jobs = [one(t) for t in tasks]
        if target is env:
            jobs.append(killer())
        return (await asyncio.gather(*jobs))[: len(tasks)]

    try:
        want = asyncio.run(batch(local.envs[MCQA]))
        got = asyncio.run(batch(env))
        assert got == want
        assert pool.generation[0] == 1 and pool.actors[0] != first
    finally:
        close(local)
        close(remote)


@pytest.mark.slow
def test_a_stateful_episode_whose_actor_died_is_masked_with_the_reason(local_ray):
    remote = attach_ray(EnvMix([WORK]), "auto", env_actors=1)
    env = remote.envs[WORK]
    task = env.tasks[0]
    turns = workplace_turns(task)

    async def go():
        episode = await env.astart(env.load(task))
        await env.aadvance(episode, turns[0])
        kill_and_wait(env.pool.actors[0])
        turn = await env.aadvance(episode, turns[1])
        rewards = await env.ascore_episodes([episode])
        await env.aend(episode)
        fresh = await env.astart(env.load(task))  # the replacement actor plays new episodes
        for text in turns:
            await env.aadvance(fresh, text)
        again = await env.ascore_episodes([fresh])
        await env.aend(fresh)
        return episode, turn, rewards[0], again[0]

    try:
        episode, turn, reward, again = asyncio.run(go())
        assert turn.done and episode.terminated and episode.turns == 2
        assert reward.masked and "died" in reward.error and "cannot go on" in reward.error
        assert (again.value, again.masked) == (1.0, False)
        assert env.pool.held == [0]
    finally:
        close(remote)


@pytest.mark.slow
def test_closing_kills_every_actor_and_returns_the_placement_group(local_ray):
    from ray.util import placement_group_table

    pool = ActorPool(MATH, {"tasks": []}, num_actors=2, actor_options={"placement_strategy": "spread"})
    actors, group = pool.actors, pool.group
    assert placement_group_table(group)["state"] == "CREATED"
    remote = attach_ray(EnvMix([MATH]), "auto", env_actors=1)
    remote.envs[MATH] = RayEnv(remote.envs[MATH].local, pool)  # the placed pool serves the mix too
    assert asyncio.run(remote.envs[MATH].areward(remote.envs[MATH].tasks[0], "\\boxed{Z}")).value == 0
    actors += remote.envs[MATH].pool.actors
    close(remote)
    asyncio.run(pool.aclose())
    for actor in actors:
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(actor.ready.remote(), timeout=30)
    assert placement_group_table(group)["state"] == "REMOVED"


@pytest.mark.slow
def test_bad_settings_fail_at_once_naming_the_key(local_ray):
    with pytest.raises(CascadeError, match="placement_strategy: expected one of"):
        ActorPool(MATH, num_actors=1, actor_options={"placement_strategy": "NEAR"})
    with pytest.raises(CascadeError, match=r"an env actor failed to start.*no_such_kwarg"):
        ActorPool(MATH, {"no_such_kwarg": 1}, num_actors=1)
    with pytest.raises(CascadeError, match="env_actors: expected a whole number"):
        ActorPool(MATH, num_actors=-1)


@pytest.mark.slow
def test_a_call_past_its_time_bound_is_masked_with_the_reason(local_ray):
    remote = attach_ray(EnvMix([MATH]), "auto", env_actors=1, actor_options={"call_timeout_s": 1e-3})
    try:
        env = remote.envs[MATH]
        reward = asyncio.run(env.areward(env.tasks[0], "\\boxed{2}"))
        assert reward.masked and "took over 0.001 s" in reward.error
    finally:
        close(remote)


def test_without_ray_config_ray_is_never_imported(tmp_path):
    script = textwrap.dedent(f"""
        import sys
        from cascade_envs.distributed import attach_ray
        from cascade_envs.mix import EnvMix
        from cascade_envs.rollout.runner import run_rollouts
        from cascade_envs.testing import ScriptedPolicy
        mix = attach_ray(EnvMix([{MATH!r}]), None)
        groups = run_rollouts(ScriptedPolicy(["\\\\boxed{{2}}"]), mix.sample(2), envs=mix.envs)
        assert len(groups) == 2, groups
        mix.envs.close()
        print(sorted(m for m in sys.modules if m == "ray" or m.startswith("ray.")))
    """)
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"
