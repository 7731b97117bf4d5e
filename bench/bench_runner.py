"""Runner overhead per episode: a trivial env and an instant policy.

Prints episodes/s of the ``RolloutRunner`` next to the floor it cannot beat — the same episodes
played by a bare ``await env.areset(); await env.astep()`` loop with no runner, each task loaded
once per group as the runner loads it — and the ratio.
With ``--baseline REV`` it also runs this benchmark as it was at git revision ``REV`` (checked out
into a temporary worktree, run in a subprocess right after this one) and prints the change of the
runner's time per episode against it.

    python bench/bench_runner.py [--episodes 20000] [--baseline ce66a89]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from cascade_envs import Completion, Env, Prompt, Reward, register
from cascade_envs.rollout import RolloutRunner


@dataclass(frozen=True)
class TrivialTask:
    prompt: Prompt
    answer: str


class TrivialEnv(Env[TrivialTask]):
    def load_task(self, row):
        return TrivialTask(Prompt.of(row), row["answer"])

    async def ascore(self, task, answer):
        return Reward(float(answer == task.answer))


class InstantPolicy:
    async def agenerate(self, messages, *, sampling, thinking=True):
        return Completion("1", finish_reason="stop")

    async def aclose(self):
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=20000)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--baseline", metavar="REV", help="also run this benchmark at git revision REV")
    args = parser.parse_args()
    register("bench/Trivial-v0", TrivialEnv)
    tasks = [
        {"id": str(i), "prompt": f"q{i}", "answer": "1"} for i in range(args.episodes // args.group_size)
    ]
    policy = InstantPolicy()

    async def bare() -> None:
        env = TrivialEnv()
        for task in tasks:
            loaded = env.load(task)  # once per group, as the runner loads a raw row
            for _ in range(args.group_size):
                messages, _ = await env.areset(options={"task": loaded})
                completion = await policy.agenerate(messages, sampling=None)
                await env.astep(completion)

    start = time.perf_counter()
    asyncio.run(bare())
    bare_s = time.perf_counter() - start

    runner = RolloutRunner(policy, group_size=args.group_size, concurrency=1024)
    start = time.perf_counter()
    groups = runner.run([("bench/Trivial-v0", t) for t in tasks])
    runner_s = time.perf_counter() - start
    runner.close()
    n = sum(len(g.episodes) for g in groups)
    assert all(e.reward.value == 1.0 for g in groups for e in g.episodes)

    print(f"{'':<28}{'episodes/s':>12}{'us/episode':>12}")
    print(f"{'bare env loop (floor)':<28}{n / bare_s:>12.0f}{bare_s / n * 1e6:>12.1f}")
    print(f"{'RolloutRunner':<28}{n / runner_s:>12.0f}{runner_s / n * 1e6:>12.1f}")
    print(f"runner / bare time ratio: {runner_s / bare_s:.2f}x  ({n} episodes, group size {args.group_size})")
    if args.baseline:
        then = baseline_us_per_episode(args.baseline, args.episodes, args.group_size)
        now = runner_s / n * 1e6
        print(f"{'RolloutRunner at ' + args.baseline:<28}{1e6 / then:>12.0f}{then:>12.1f}")
        print(f"runner time per episode, now / {args.baseline}: {now / then:.2f}x")


def baseline_us_per_episode(rev: str, episodes: int, group_size: int) -> float:
    """Run this benchmark as it was at ``rev`` in a temporary worktree; its runner's µs per episode."""
    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(
            ["git", "-C", str(root), "worktree", "add", "--detach", str(tree), rev],
            check=True,
            capture_output=True,
        )
        try:
            (tree / "cascade_envs" / "envs").symlink_to(tree / "envs")
            (tree / "cascade_envs" / "plugins").symlink_to(tree / "plugins")
            (tree / "cascade_envs" / "trainer").symlink_to(tree / "trainer")
            out = subprocess.run(
                [
                    sys.executable,
                    "bench/bench_runner.py",
                    "--episodes",
                    str(episodes),
                    "--group-size",
                    str(group_size),
                ],
                cwd=tree,
                check=True,
                capture_output=True,
                text=True,
                env={"PYTHONPATH": str(tree), "PATH": ""},
            ).stdout
        finally:
            subprocess.run(
                ["git", "-C", str(root), "worktree", "remove", "--force", str(tree)], capture_output=True
            )
    match = re.search(r"^RolloutRunner\s+\d+\s+([\d.]+)", out, re.M)
    if not match:
        raise SystemExit(f"could not read the baseline's figure from:\n{out}")
    return float(match.group(1))


if __name__ == "__main__":
    main()
