"""Throughput of the verification service (``cascade-envs serve-sandbox``) and its scaling with workers.

Each request is one response to verify: a Python solution run on ``--tests`` stdin/stdout tests
in one sandbox session, through real HTTP with the code env's client (which retries 429s). The
reference is the same tests run by bare ``subprocess.run`` on the same number of worker threads
(no sandbox, no HTTP, no judging); ``--ray`` adds the Ray actor transport. Printed: tests/s for both, the ratio, the scaling curve, and an
extrapolation to one Cascade code-RL step (128 prompts x 16 rollouts = 2,048 programs) on 384 cores.

    python bench/bench_code_service.py [--responses 24] [--tests 20] [--workers 1,2] [--ray]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cascade_envs.envs.code.env import CodeEnv
from cascade_envs.envs.code.service import BackgroundService
from cascade_envs.sandbox.base import default_python

SOLUTION = "import sys\nnums = list(map(int, sys.stdin.read().split()))\nprint(sum(nums), max(nums))\n"


def make_task(n_tests: int) -> dict:
    inputs = [" ".join(str((i * 7919 + j) % 1000) for j in range(200)) + "\n" for i in range(n_tests)]
    outputs = [f"{sum(map(int, s.split()))} {max(map(int, s.split()))}\n" for s in inputs]
    return {
        "prompt": "sum and max",
        "verifier_metadata": {"unit_tests": {"inputs": inputs, "outputs": outputs}},
    }


def bare(task: dict, responses: int, workers: int) -> float:
    """Tests per second running the solution with bare subprocess.run on ``workers`` threads."""
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "sol.py").write_text(SOLUTION)
        tests = task["verifier_metadata"]["unit_tests"]

        def one_response(_: int) -> None:
            for given, want in zip(tests["inputs"], tests["outputs"], strict=True):
                out = subprocess.run(
                    [default_python(), "sol.py"], input=given.encode(), capture_output=True, cwd=tmp
                )
                assert out.stdout.decode() == want

        start = time.perf_counter()
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(one_response, range(responses)))
        return responses * len(tests["inputs"]) / (time.perf_counter() - start)


def service(task: dict, responses: int, workers: int) -> float:
    """Tests per second through the HTTP service with ``workers`` workers."""
    svc = BackgroundService(workers=workers)
    url = svc.url
    env = CodeEnv(tasks=[task], verifier_url=url, time_limit_s=10)
    answer = f"```python\n{SOLUTION}```"

    async def run_all() -> list:
        return await asyncio.gather(*(env.areward(task, answer) for _ in range(responses)))

    start = time.perf_counter()
    rewards = asyncio.run(run_all())
    elapsed = time.perf_counter() - start
    assert all(r.value == 1 for r in rewards), [r for r in rewards if r.value != 1][:1]
    svc.close()
    return responses * len(task["verifier_metadata"]["unit_tests"]["inputs"]) / elapsed


def ray_pool(task: dict, responses: int, workers: int) -> float:
    """Tests per second through ``workers`` Ray actors (local Ray instance started on first use)."""
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    env = CodeEnv(tasks=[task], ray_actors=workers, time_limit_s=10)
    answer = f"```python\n{SOLUTION}```"

    async def run_all() -> list:
        await env.areward(task, answer)  # warm the actors
        start = time.perf_counter()
        rewards = await asyncio.gather(*(env.areward(task, answer) for _ in range(responses)))
        box["elapsed"] = time.perf_counter() - start
        return rewards

    box: dict = {}
    rewards = asyncio.run(run_all())
    assert all(r.value == 1 for r in rewards), [r for r in rewards if r.value != 1][:1]
    env.close()
    return responses * len(task["verifier_metadata"]["unit_tests"]["inputs"]) / box["elapsed"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--responses", type=int, default=24)
    ap.add_argument("--tests", type=int, default=20)
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--ray", action="store_true", help="also measure the Ray actor transport")
    ap.add_argument(
        "--tests-per-program", type=int, default=50, help="tests per program assumed for the extrapolation"
    )
    args = ap.parse_args()
    task = make_task(args.tests)
    print(
        f"machine: {os.cpu_count()} cores; {args.responses} responses x {args.tests} tests per point; "
        f"python {sys.version.split()[0]}"
    )
    print(
        f"{'workers':>7} {'bare tests/s':>13} {'service tests/s':>16} {'ratio':>7} {'per worker':>11}"
        + (f" {'ray tests/s':>12} {'ratio':>7}" if args.ray else "")
    )
    ours_curve, bare_curve = {}, {}
    for w in [int(x) for x in args.workers.split(",")]:
        before = bare(task, args.responses, w)
        ours = service(task, args.responses, w)
        ref = (before + bare(task, args.responses, w)) / 2  # bracket ours, so load drift cancels
        ours_curve[w], bare_curve[w] = ours, ref
        line = f"{w:7d} {ref:13.1f} {ours:16.1f} {ours / ref:6.2f}x {ours / w:11.1f}"
        if args.ray:
            rayed = ray_pool(task, args.responses, w)
            line += f" {rayed:12.1f} {rayed / ref:6.2f}x"
        print(line)
    low, top = min(ours_curve), max(ours_curve)
    per_core = ours_curve[low] / low
    ours_gain = ours_curve[top] / ours_curve[low]
    bare_gain = bare_curve[top] / bare_curve[low]
    relative = ours_gain / bare_gain if top > low else 1.0
    print(
        f"scaling {low} -> {top} workers: service x{ours_gain:.2f}, bare x{bare_gain:.2f} "
        f"(relative efficiency {relative:.0%}; bare shows what this machine's cores allow)"
    )
    programs, cores = 2048, 384
    total = programs * args.tests_per_program
    step = total / (per_core * cores * min(1.0, relative))
    print(
        f"extrapolation: {programs} programs x {args.tests_per_program} tests = {total} tests on {cores} cores at "
        f"{per_core:.1f} tests/s per worker -> about {step:.1f}s per step (~{programs / cores:.1f} programs per "
        f"core). These tests are tiny (~{1000 / per_core:.0f} ms each, mostly Python start-up); real suites cost "
        "what their solutions run, so scale by that. Linear scaling across machines is assumed: each "
        "service instance is independent, the client spreads requests over them."
    )


if __name__ == "__main__":
    main()
