"""Cost of a ``cascade/SWE-v0`` episode's workspace vs. bare ``subprocess.run`` in a temp dir, in one run.

Per episode, on a bundled repository: set up (``astart``: a sandbox session, the repository copied
to its workdir, the prompt), one terminal step per command (``aadvance`` with one tool call: parse,
validate with the SDK's schema, run in the workspace, render the SDK observation) and tear down
(``aend``: the session closed, the workspace removed). The bare side copies the same files into a
temp dir, runs the same commands with ``subprocess.run(["bash", "-c", cmd])`` there (with the
workspace's environment, so the same ``python3``) and removes
the dir. Episodes alternate between the two sides so that load drift hits both alike; medians and
ratios are printed. Needs the OpenHands SDK (Python >= 3.12): run it with ``.venv-swe/bin/python``.

    python bench/bench_swe.py [--episodes 10] [--backend local] [--repo durations]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from cascade_envs.envs.swe.env import SweEnv
from cascade_envs.envs.swe.task import read_task
from cascade_envs.sandbox import Workspace, get_sandbox

COMMANDS = (
    "ls -la",
    "cat durations/core.py inilite/reader.py 2>/dev/null | head -40",
    "grep -rn 'def ' --include=*.py . | head -20",
    "find . -name '*.py' | wc -l",
    "python3 -c 'import sys; print(sys.version)'",
    "python3 -m unittest 2>&1 | tail -3",
)


def call(command: str) -> str:
    return "<tool_call>" + json.dumps({"name": "terminal", "arguments": {"command": command}}) + "</tool_call>"


async def ours(env: SweEnv, row: dict) -> tuple[float, list[float], float]:
    start = time.perf_counter()
    episode = await env.astart(env.load(row))
    setup = time.perf_counter() - start
    steps = []
    for command in COMMANDS:
        start = time.perf_counter()
        turn = await env.aadvance(episode, call(command))
        steps.append(time.perf_counter() - start)
        assert "exit code 0" in turn.observation[0]["content"], turn.observation
    start = time.perf_counter()
    await env.aend(episode)
    return setup, steps, time.perf_counter() - start


def bare(files: dict[str, str]) -> tuple[float, list[float], float]:
    start = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="bench-swe-"))
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    setup = time.perf_counter() - start
    env = Workspace().command_env(str(root))  # the same environment (PATH, so the same python3) as ours
    steps = []
    for command in COMMANDS:
        start = time.perf_counter()
        done = subprocess.run(["bash", "-c", command], cwd=root, capture_output=True, timeout=60, env=env)
        steps.append(time.perf_counter() - start)
        assert done.returncode == 0, done
    start = time.perf_counter()
    shutil.rmtree(root)
    return setup, steps, time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--episodes", type=int, default=10)
    ap.add_argument("--backend", default="local", help="sandbox backend of the workspace (local, bwrap, docker)")
    ap.add_argument("--repo", default="durations", choices=("durations", "inilite"))
    args = ap.parse_args()
    env = SweEnv(sandbox=get_sandbox(args.backend, timeout_s=60, memory_mb=2048, nproc=256))
    row = next(r for r in env.tasks or [] if r["repo"].endswith("/" + args.repo))
    files = read_task(row).files or {}
    loop = asyncio.new_event_loop()
    loop.run_until_complete(ours(env, row))  # warm-up: the SDK's first renders, the first bash
    theirs: list[tuple[float, list[float], float]] = []
    mine: list[tuple[float, list[float], float]] = []
    for _ in range(args.episodes):
        theirs.append(bare(files))
        mine.append(loop.run_until_complete(ours(env, row)))
    loop.close()
    env.close()

    def medians(runs: list[tuple[float, list[float], float]]) -> tuple[float, float, float]:
        """Set-up, mean step (the episode's step time over its commands) and tear-down: medians over episodes."""
        return (statistics.median(r[0] for r in runs), statistics.median(sum(r[1]) / len(r[1]) for r in runs),
                statistics.median(r[2] for r in runs))

    (b_setup, b_step, b_down), (o_setup, o_step, o_down) = medians(theirs), medians(mine)
    b_total = statistics.median(sum(r[1]) + r[0] + r[2] for r in theirs)
    o_total = statistics.median(sum(r[1]) + r[0] + r[2] for r in mine)
    print(f"SWE episode on {args.repo} ({len(files)} files), {args.episodes} episodes of {len(COMMANDS)} terminal "
          f"steps, backend {args.backend!r}; medians over episodes, in ms")
    print(f"{'phase':<24}{'bare subprocess':>16}{'cascade SWE-v0':>16}{'ratio':>8}")
    rows = (("set up", b_setup, o_setup), ("step (mean per command)", b_step, o_step), ("tear down", b_down, o_down),
            ("whole episode", b_total, o_total))
    for name, b, o in rows:
        print(f"{name:<24}{b * 1e3:>16.2f}{o * 1e3:>16.2f}{o / b:>7.1f}x")
    print(f"per-step overhead: {(o_step - b_step) * 1e3:.2f} ms (tool-call parsing, schema and SDK validation, the "
          "sandbox round trip, carrying the shell state, the SDK observation)")

if __name__ == "__main__":
    main()
