"""Cost of a ``cascade/SWE-v0`` episode: its workspace vs. bare ``subprocess.run``, and its clean-room
grading vs. grading in place, in one run.

Per episode, on a bundled repository: set up (``astart``: a sandbox session, the repository copied
to its workdir, the base listed, the prompt), one terminal step per command (``aadvance`` with one
tool call: parse, validate with the SDK's schema, run in the workspace, render the SDK
observation; the last command applies the gold fix), grading, and tear down (``aend``).

- Workspace: the bare side copies the same files into a temp dir, runs the same commands with
  ``subprocess.run(["bash", "-c", cmd])`` there (with the workspace's environment, so the same
  ``python3``) and removes the dir.
- Grading: ours (``ascore_episode``) reads the agent's change, screens it, sets up a fresh copy of
  the base, applies the change and the test patch, and runs the tests through the project's
  runner. The reference is how the env graded before (in place): restore the files the test patch
  touches in the agent's own workspace, apply the patch there, run ``python3 -m unittest -v`` and
  read the statuses from its output.

Episodes alternate between the sides so that load drift hits both alike; medians and ratios are
printed. Needs the OpenHands SDK (Python >= 3.12): run it with ``.venv-swe/bin/python``.

    python bench/bench_swe.py [--episodes 10] [--backend bwrap] [--repo durations]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from cascade_envs.envs.swe.env import SweEnv
from cascade_envs.envs.swe.task import SweTask, read_task
from cascade_envs.sandbox import Session, Workspace, get_sandbox

COMMANDS = (
    "ls -la",
    "cat durations/core.py inilite/reader.py 2>/dev/null | head -40",
    "grep -rn 'def ' --include=*.py . | head -20",
    "find . -name '*.py' | wc -l",
    "python3 -c 'import sys; print(sys.version)'",
    "python3 -m unittest 2>&1 | tail -3",
)
UNITTEST_LINE = re.compile(r"^(\w+) \(([\w.]+)\)(?:\n[^\n]*?)? \.\.\. (ok|FAIL|ERROR|skipped|expected failure)", re.M)


def call(command: str) -> str:
    return "<tool_call>" + json.dumps({"name": "terminal", "arguments": {"command": command}}) + "</tool_call>"


async def in_place(session: Session, task: SweTask) -> float:
    """The reference: grade in the agent's workspace from the test run's text output; the reward."""
    paths = task.patched_files
    await session.awrite({p: task.files[p] for p in paths if task.files and p in task.files})
    await session.arun(["patch", "-p1", "--batch", "--forward"], task.test_patch, timeout_s=60)
    done = await session.arun(["bash", "-c", "python3 -m unittest -v"], timeout_s=300)
    log = done.stdout.decode() + done.stderr.decode()
    passed = {(where if where.endswith("." + name) else f"{where}.{name}") for name, where, status
              in UNITTEST_LINE.findall(log) if status in ("ok", "expected failure")}
    return float(all(t in passed for t in task.tests))


async def ours(env: SweEnv, row: dict, clean_room: bool) -> tuple[float, list[float], float, float, float]:
    """Set-up, step times, grading time, tear-down time and the reward of one episode."""
    start = time.perf_counter()
    episode = await env.astart(env.load(row))
    setup = time.perf_counter() - start
    steps = []
    for command in (*COMMANDS, f"patch -p1 <<'EOF'\n{row['patch']}EOF"):
        start = time.perf_counter()
        turn = await env.aadvance(episode, call(command))
        steps.append(time.perf_counter() - start)
        assert "exit code 0" in turn.observation[0]["content"], turn.observation
    start = time.perf_counter()
    if clean_room:
        reward = (await env.ascore_episode(episode, "Fixed.")).value
    else:
        reward = await in_place(episode.state.session, episode.state.task)
    grading = time.perf_counter() - start
    start = time.perf_counter()
    await env.aend(episode)
    return setup, steps, grading, time.perf_counter() - start, reward


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
    ap.add_argument("--backend", default="bwrap", help="sandbox backend of the workspace (bwrap, local, docker)")
    ap.add_argument("--repo", default="durations", choices=("durations", "inilite"))
    args = ap.parse_args()
    sandbox = get_sandbox(args.backend, timeout_s=60, memory_mb=2048, nproc=256)
    env = SweEnv(sandbox=sandbox, allow_unsafe_local=args.backend == "local")
    row = next(r for r in env.tasks or [] if r["repo"].endswith("/" + args.repo))
    files = read_task(row).files or {}
    loop = asyncio.new_event_loop()
    loop.run_until_complete(ours(env, row, True))  # warm-up: the SDK's first renders, the first bash
    theirs, in_place_runs, clean_runs = [], [], []
    for _ in range(args.episodes):
        theirs.append(bare(files))
        in_place_runs.append(loop.run_until_complete(ours(env, row, False)))
        clean_runs.append(loop.run_until_complete(ours(env, row, True)))
    loop.close()
    env.close()
    assert all(run[4] == 1.0 for run in in_place_runs + clean_runs), "the gold fix must score 1 both ways"

    def median(runs: list, pick) -> float:
        return statistics.median(pick(r) for r in runs)

    def mean_step(r) -> float:
        return sum(r[1][: len(COMMANDS)]) / len(COMMANDS)

    def episode(r) -> float:  # set-up, steps (the fix included), grading, tear-down
        return r[0] + sum(r[1]) + r[2] + r[3]

    print(f"SWE episode on {args.repo} ({len(files)} files), {args.episodes} episodes of {len(COMMANDS)} terminal "
          f"steps (+ the fix and grading on our side), backend {args.backend!r}; medians over episodes, in ms")
    print(f"{'workspace':<26}{'bare subprocess':>18}{'cascade SWE-v0':>18}{'ratio':>8}")
    for name, pick_bare, pick_ours in (("set up", lambda r: r[0], lambda r: r[0]), ("step (mean per command)", mean_step,
                                       mean_step), ("tear down", lambda r: r[2], lambda r: r[3])):
        b, o = median(theirs, pick_bare), median(clean_runs, pick_ours)
        print(f"{name:<26}{b * 1e3:>18.2f}{o * 1e3:>18.2f}{o / b:>7.1f}x")
    print(f"\n{'grading':<26}{'in place (before)':>18}{'clean room':>18}{'ratio':>8}")
    for name, pick in (("grading", lambda r: r[2]), ("whole episode", episode)):
        b, o = median(in_place_runs, pick), median(clean_runs, pick)
        print(f"{name:<26}{b * 1e3:>18.2f}{o * 1e3:>18.2f}{o / b:>7.2f}x")


if __name__ == "__main__":
    main()
