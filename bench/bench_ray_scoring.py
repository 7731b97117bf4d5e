"""Scoring throughput in-process vs. through Ray env actors on this machine, side by side, in one run.

Three batches, each scored both ways as the rollout runner scores (all groups at once on one event
loop), after an untimed warm-up pass that starts every verifier worker and sandbox:

- math: ``--answers`` final answers (groups of 4 over the bundled tasks, right and wrong mixed),
  in one ``MathEnv`` vs. ``attach_ray`` with ``--actors`` env actors;
- instruction following: the same count of responses over the bundled IF tasks;
- code: ``--code`` responses (a correct and a wrong Python program, alternately) with real test
  execution in the sandbox, a ``CodeEnv`` judging here vs. ``CodeEnv(ray_actors=--actors)``.

It checks that both sides give the same rewards and prints answers/s with the ratio Ray/in-process.
Ray runs locally with ``--actors`` CPUs (default: all of them) in a temp dir.
Run: ``flock /tmp/cpu.lock python bench/bench_ray_scoring.py [--answers 512] [--code 64]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time
from typing import Any

from cascade_envs.distributed import attach_ray
from cascade_envs.envs.code.env import CodeEnv
from cascade_envs.mix import EnvMix

MATH, IF = "cascade/Math-v0", "cascade/InstructionFollowing-v0"
REASONING = "Let me check each step against the question before I answer. " * 8
SUM = (
    "```python\nimport sys\nd = sys.stdin.read().split()\nt = int(d[0])\n"
    "print('\\n'.join(str(int(d[1 + 2 * i]) + int(d[2 + 2 * i])) for i in range(t)))\n```"
)
WRONG = "```python\nimport sys\nprint(0)\n```"
Groups = list[tuple[Any, list[str]]]


def answer_groups(env_id: str, tasks: list[Any], count: int) -> Groups:
    """``count`` answers in groups of 4, cycling over ``tasks``."""
    groups: Groups = []
    for i in range(count // 4):
        task = tasks[i % len(tasks)]
        if env_id == MATH:
            right = task.row["expected_answer"]
            answers = [
                f"{REASONING}\\boxed{{{right}}}",
                "\\boxed{-7}",
                f"<think>{REASONING}</think>\\boxed{{{right}}}",
                "no",
            ]
        else:
            answers = [
                f"{REASONING}\n\n***\n\nlantern logbook\n\n***\n\nDone.",
                "short",
                REASONING.upper(),
                "A, B, C.",
            ]
        groups.append((task, answers))
    return groups


def timed(env: Any, groups: Groups) -> tuple[float, list[tuple[float, bool]]]:
    async def run() -> list[Any]:
        return await asyncio.gather(*(env.ascore_responses(task, answers) for task, answers in groups))

    start = time.perf_counter()
    rewards = [r for group in asyncio.run(run()) for r in group]
    return time.perf_counter() - start, [(r.value, r.masked) for r in rewards]


def compare(name: str, local: Any, remote: Any, groups: Groups, warm: Groups) -> dict[str, Any]:
    timed(local, warm)
    timed(remote, warm)
    local_s, want = timed(local, groups)
    remote_s, got = timed(remote, groups)
    if got != want:
        raise SystemExit(f"{name}: rewards differ in-process and through Ray")
    n = len(want)
    return {"name": name, "n": n, "local": n / local_s, "ray": n / remote_s, "masked": sum(m for _, m in got)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--answers", type=int, default=512, help="math and IF answers per side (default 512)")
    ap.add_argument("--code", type=int, default=64, help="code responses per side (default 64)")
    ap.add_argument(
        "--actors", type=int, default=os.cpu_count() or 1, help="env actors (default: one per CPU)"
    )
    args = ap.parse_args()

    root = tempfile.mkdtemp(prefix="crb-")
    os.environ.update(RAY_TMPDIR=root, RAY_USAGE_STATS_ENABLED="0")
    import ray

    ray.init(
        num_cpus=args.actors, include_dashboard=False, log_to_driver=False, _temp_dir=os.path.join(root, "t")
    )
    rows = []
    try:
        for env_id, name in ((MATH, "math"), (IF, "instruction following")):
            local, remote = EnvMix([env_id]), attach_ray(EnvMix([env_id]), "auto", env_actors=args.actors)
            tasks = list(local.envs[env_id].tasks)
            rows.append(
                compare(
                    name,
                    local.envs[env_id],
                    remote.envs[env_id],
                    answer_groups(env_id, tasks, args.answers),
                    answer_groups(env_id, tasks, 4 * len(tasks)),
                )
            )
            local.envs.close()
            remote.envs.close()
        code_local, code_ray = CodeEnv(time_limit_s=5), CodeEnv(ray_actors=args.actors, time_limit_s=5)
        task = next(t for t in code_local.tasks if t.task_id == "code-sample/sum-big")
        groups = [(task, [SUM, WRONG, SUM, WRONG])] * (args.code // 4)
        rows.append(compare("code (sandboxed tests)", code_local, code_ray, groups, groups[:2]))
        code_local.close()
        code_ray.close()
    finally:
        ray.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    print(
        f"\n{os.cpu_count()} CPUs, {args.actors} Ray env actors per env; answers/s (same rewards both ways)"
    )
    print(f"{'batch':<24}{'answers':>8}{'in-process':>12}{'Ray actors':>12}{'Ray/in-proc':>13}")
    for row in rows:
        print(
            f"{row['name']:<24}{row['n']:>8}{row['local']:>12.1f}{row['ray']:>12.1f}{row['ray'] / row['local']:>12.2f}x"
        )


if __name__ == "__main__":
    main()
