"""The NeMo Gym adapter's cost per episode against the same env played directly: one run, one table.

The same episodes are played by the ``RolloutRunner`` with a scripted policy (no model), at each
concurrency, twice: on the env itself, and through ``nemo-gym/Resources-v0`` on the same env served
by ``cascade-envs serve --protocol nemo-gym`` in a process of its own (started by the adapter's
``command=``): ``/seed_session``, one ``POST /<tool>`` per tool call, ``/verify`` with the Responses
transcript of the episode. Every episode must score 1.0 both ways:

- ``cascade/MCQA-v0``: single-turn, each bundled row answered right;
- ``cascade/Workplace-v0``: each bundled row's ``solution`` replayed one call a turn, then a final
  reply with its ``expected_answer``; through the adapter the row's tools are the env's own,
  listed in ``responses_create_params.tools``.

Printed: ms per episode (wall time of the run / episodes, best of ``--rounds``), direct and through
the adapter, and their ratio.

    python bench/bench_nemo_gym_adapter.py [--episodes 200] [--concurrency 1,32] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import cascade_envs
from cascade_envs.env import Env
from cascade_envs.integrations.nemo_gym.env import NemoGymEnv
from cascade_envs.integrations.nemo_gym.export import gym_row
from cascade_envs.rollout import RolloutRunner
from cascade_envs.testing import ScriptedPolicy

Policy = Callable[[list[dict[str, Any]]], str]


def mcqa(env: Env) -> tuple[list[dict[str, Any]], Policy]:
    """Gym rows of the bundled MCQA tasks, and a policy that answers each right."""
    rows = [gym_row(env, "cascade/MCQA-v0", loaded) for loaded in env.tasks or ()]
    answers = {json.dumps(env.prompt(t.task)[-1]): t.row["expected_answer"] for t in env.tasks or ()}

    def policy(messages: list[dict[str, Any]]) -> str:
        letter = answers[json.dumps(messages[-1])]
        return f"<think>easy</think>\\boxed{{{letter}}}\n\nAnswer: {letter}"

    return rows, policy


def workplace(env: Env) -> tuple[list[dict[str, Any]], Policy]:
    """Gym rows of the bundled workplace tasks (their tools listed), and a policy that replays each
    row's solution, one call a turn, then states its expected answer."""
    rows, scripts = [], {}
    for loaded in env.tasks or ():
        row = loaded.row
        params = {"input": row["responses_create_params"]["input"], "tools": loaded.task.toolbox.specs()}
        rows.append({"responses_create_params": params, "cascade_row": row})
        calls = [
            f"<tool_call>{json.dumps({'name': c['name'], 'arguments': json.loads(c['arguments'])})}</tool_call>"
            for c in row["solution"]
        ]
        expected = row.get("expected_answer")
        items = (
            [expected]
            if isinstance(expected, str)
            else [i if isinstance(i, str) else i[0] for i in expected or []]
        )
        scripts[row["responses_create_params"]["input"][-1]["content"]] = [*calls, "Done. " + " ".join(items)]

    def policy(messages: list[dict[str, Any]]) -> str:
        task = next(m["content"] for m in messages if m["role"] == "user")
        return scripts[task][sum(m["role"] == "assistant" for m in messages)]

    return rows, policy


async def ms_per_episode(env: Env, items: list[Any], policy: Policy, concurrency: int) -> float:
    runner = RolloutRunner(ScriptedPolicy(policy), envs={"env": env}, concurrency=concurrency)
    started = time.perf_counter()
    groups = await runner.arun([("env", item) for item in items])
    elapsed = time.perf_counter() - started
    bad = [g.episodes[0].reward for g in groups if g.episodes[0].reward.value != 1.0]
    if bad:
        raise RuntimeError(f"{len(bad)} of {len(groups)} episodes did not score 1.0, e.g. {bad[0]}")
    return 1000 * elapsed / len(items)


async def compare(env_id: str, build: Any, episodes: int, levels: list[int], rounds: int) -> None:
    """Print one row per concurrency level for ``env_id``."""
    direct = cascade_envs.make(env_id)
    rows, policy = build(direct)
    items = [direct.tasks[i % len(rows)] for i in range(episodes)]
    gym_items = [rows[i % len(rows)] for i in range(episodes)]
    serve = [sys.executable, "-m", "cascade_envs", "serve", "--protocol", "nemo-gym", env_id]
    adapter = NemoGymEnv(command=[*serve, "--port", "{port}"], max_turns=direct.max_turns)
    try:
        await ms_per_episode(adapter, gym_items[:8], policy, 8)  # warm: connections, the server's imports
        for level in levels:
            ours = min([await ms_per_episode(direct, items, policy, level) for _ in range(rounds)])
            through = min([await ms_per_episode(adapter, gym_items, policy, level) for _ in range(rounds)])
            print(
                f"{env_id:22} {level:>11} {ours:>13.2f} {through:>14.2f} {through / ours:>6.1f}x", flush=True
            )
    finally:
        await adapter.aclose()
        await direct.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--concurrency", default="1,32")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    print(f"{'env':22} {'concurrency':>11} {'direct ms/ep':>13} {'adapter ms/ep':>14} {'ratio':>7}")
    for env_id, build in (("cascade/MCQA-v0", mcqa), ("cascade/Workplace-v0", workplace)):
        asyncio.run(compare(env_id, build, args.episodes, levels, args.rounds))


if __name__ == "__main__":
    main()
