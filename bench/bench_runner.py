"""Runner overhead per episode: a trivial env and an instant policy.

Prints episodes/s of the ``RolloutRunner`` next to the floor it cannot beat — the same episodes
played by a bare ``await env.areset(); await env.astep()`` loop with no runner — and the ratio.

    python bench/bench_runner.py [--episodes 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import time

from cascade_envs import Completion, Env, Reward, register
from cascade_envs.rollout import RolloutRunner


class TrivialEnv(Env):
    async def ascore(self, task, answer):
        return Reward(float(answer == task["answer"]))


class InstantPolicy:
    async def agenerate(self, messages, *, sampling, thinking=True):
        return Completion("1", finish_reason="stop")

    async def aclose(self):
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=20000)
    parser.add_argument("--group-size", type=int, default=8)
    args = parser.parse_args()
    register("bench/Trivial-v0", TrivialEnv)
    tasks = [{"id": str(i), "prompt": f"q{i}", "answer": "1"} for i in range(args.episodes // args.group_size)]
    policy = InstantPolicy()

    async def bare() -> None:
        for task in tasks:
            for _ in range(args.group_size):
                env = TrivialEnv()
                messages, _ = await env.areset(options={"task": task})
                completion = await policy.agenerate(messages, sampling=None)
                await env.astep(completion)

    start = time.perf_counter()
    asyncio.run(bare())
    bare_s = time.perf_counter() - start

    runner = RolloutRunner(policy, group_size=args.group_size, concurrency=1024)
    start = time.perf_counter()
    groups = runner.run([("bench/Trivial-v0", t) for t in tasks])
    runner_s = time.perf_counter() - start
    n = sum(len(g.episodes) for g in groups)
    assert all(e.reward.value == 1.0 for g in groups for e in g.episodes)

    print(f"{'':<28}{'episodes/s':>12}{'us/episode':>12}")
    print(f"{'bare env loop (floor)':<28}{n / bare_s:>12.0f}{bare_s / n * 1e6:>12.1f}")
    print(f"{'RolloutRunner':<28}{n / runner_s:>12.0f}{runner_s / n * 1e6:>12.1f}")
    print(f"runner / bare time ratio: {runner_s / bare_s:.2f}x  ({n} episodes, group size {args.group_size})")


if __name__ == "__main__":
    main()
