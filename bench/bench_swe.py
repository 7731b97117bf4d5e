"""Cost of a ``cascade/SWE-v0`` episode on each backend (bwrap, docker): its workspace vs. bare
``subprocess.run``, and its clean-room grading vs. grading in place, in one run.

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

On docker each episode is a container of the row's per-instance image (built first if missing,
offline, from ``cascade-swe-base:bookworm``: ``cascade-envs build-image swe-base``), and its
grading a second one. A backend that cannot run here is listed as skipped, saying why.

``--images``: instead, the grading overhead in the public datasets' image layouts (the tests'
offline images, ``tests/envs/swe/layouts.py`` and ``layout_rows.py``: a SWE-bench pytest row, a Django row on its own
``runtests.py``, a SymPy row, an R2E-Gym row), each against SWE-bench's own harness command for
the same row (its eval script's test line, with the image's environment activated), timed the
same way: from a fresh container of the image to the command's end, the gold patch and the test
patch applied first. Ours is ``grade`` on the gold fix in an agent's workspace: its change read,
a fresh clean room, the change and the test patch written, the trusted runner (its interpreter
found once per image, in a first, untimed run). Needs the layout wheels (``.ci/swe.sh`` downloads
them into ``build/swe-wheels``) and a Docker daemon.

    python bench/bench_swe.py [--episodes 10] [--backends bwrap,docker] [--repo durations]
    python bench/bench_swe.py --images [--episodes 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cascade_envs.envs.swe.changes import manifest
from cascade_envs.envs.swe.env import SweEnv
from cascade_envs.envs.swe.grading import grade, open_workspace
from cascade_envs.envs.swe.interpreter import Interpreters
from cascade_envs.envs.swe.task import SweTask, read_task
from cascade_envs.sandbox import Sandbox, Session, Workspace, get_sandbox

ROOT = Path(__file__).resolve().parents[1]
CONDA_PATH = "/opt/miniconda3/envs/testbed/bin:/usr/local/bin:/usr/bin:/bin"
SYMPY_TEST = (
    "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' SYMPY_USE_CACHE=no python -c "
    '"import sys; from sympy.testing.runtests import test; '
    "sys.exit(not test('sympy/utilities/tests/test_iterables.py', verbose=True))\""
)
"""SymPy's own runner, as ``bin/test -C --verbose <file>`` runs it (``sympy.test`` needs pytest from 1.13 on)."""

COMMANDS = (
    "ls -la",
    "cat durations/core.py inilite/reader.py 2>/dev/null | head -40",
    "grep -rn 'def ' --include=*.py . | head -20",
    "find . -name '*.py' | wc -l",
    "python3 -c 'import sys; print(sys.version)'",
    "python3 -m unittest 2>&1 | tail -3",
)
UNITTEST_LINE = re.compile(
    r"^(\w+) \(([\w.]+)\)(?:\n[^\n]*?)? \.\.\. (ok|FAIL|ERROR|skipped|expected failure)", re.M
)


def call(command: str) -> str:
    return (
        "<tool_call>" + json.dumps({"name": "terminal", "arguments": {"command": command}}) + "</tool_call>"
    )


async def in_place(session: Session, task: SweTask) -> float:
    """The reference: grade in the agent's workspace from the test run's text output; the reward."""
    paths = task.patched_files
    await session.awrite({p: task.files[p] for p in paths if task.files and p in task.files})
    await session.arun(["patch", "-p1", "--batch", "--forward"], task.test_patch, timeout_s=60)
    done = await session.arun(["bash", "-c", "python3 -m unittest -v"], timeout_s=300)
    log = done.stdout.decode() + done.stderr.decode()
    passed = {
        (where if where.endswith("." + name) else f"{where}.{name}")
        for name, where, status in UNITTEST_LINE.findall(log)
        if status in ("ok", "expected failure")
    }
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
    ap.add_argument(
        "--backends",
        default="bwrap,docker",
        help="sandbox backends of the workspace, comma-separated (bwrap, docker, local; default %(default)s)",
    )
    ap.add_argument("--repo", default="durations", choices=("durations", "inilite"))
    ap.add_argument(
        "--images", action="store_true", help="grading in the datasets' image layouts (see above)"
    )
    args = ap.parse_args()
    if args.images:
        image_layouts(args.episodes)
        return
    envs = {}
    for backend in args.backends.split(","):
        try:
            envs[backend] = make_env(backend, args.repo)
        except Exception as exc:
            print(f"{backend}: skipped ({' '.join(str(exc).split())})")
    if not envs:
        raise SystemExit("no backend can run here")
    some = next(iter(envs.values()))
    row = next(t.row for t in some.tasks or [] if t.row["repo"].endswith("/" + args.repo))
    files = read_task(row).files or {}
    loop = asyncio.new_event_loop()
    for env in envs.values():
        loop.run_until_complete(ours(env, row, True))  # warm-up: the SDK's first renders, the first bash
    theirs: list = []
    in_place_runs: dict[str, list] = {b: [] for b in envs}
    clean_runs: dict[str, list] = {b: [] for b in envs}
    for _ in range(args.episodes):
        theirs.append(bare(files))
        for backend, env in envs.items():
            in_place_runs[backend].append(loop.run_until_complete(ours(env, row, False)))
            clean_runs[backend].append(loop.run_until_complete(ours(env, row, True)))
    loop.close()
    for env in envs.values():
        env.close()
    assert all(run[4] == 1.0 for runs in (*in_place_runs.values(), *clean_runs.values()) for run in runs), (
        "the gold fix must score 1 both ways"
    )

    def median(runs: list, pick) -> float:
        return statistics.median(pick(r) for r in runs)

    def mean_step(r) -> float:
        return sum(r[1][: len(COMMANDS)]) / len(COMMANDS)

    def episode(r) -> float:  # set-up, steps (the fix included), grading, tear-down
        return r[0] + sum(r[1]) + r[2] + r[3]

    print(
        f"SWE episode on {args.repo} ({len(files)} files), {args.episodes} episodes of {len(COMMANDS)} terminal "
        f"steps (+ the fix and grading on our side); medians over episodes, in ms"
    )
    print(f"{'workspace':<26}{'bare subprocess':>16}" + "".join(f"{b:>12}{'ratio':>8}" for b in envs))
    for name, pick_bare, pick_ours in (
        ("set up", lambda r: r[0], lambda r: r[0]),
        ("step (mean per command)", mean_step, mean_step),
        ("tear down", lambda r: r[2], lambda r: r[3]),
    ):
        b = median(theirs, pick_bare)
        cells = "".join(
            f"{median(clean_runs[k], pick_ours) * 1e3:>12.2f}{median(clean_runs[k], pick_ours) / b:>7.1f}x"
            for k in envs
        )
        print(f"{name:<26}{b * 1e3:>16.2f}{cells}")
    print(
        f"\n{'grading':<26}"
        + "".join(f"{k + ' in place':>18}{k + ' clean room':>20}{'ratio':>8}" for k in envs)
    )
    for name, pick in (("grading", lambda r: r[2]), ("whole episode", episode)):
        cells = ""
        for k in envs:
            b, o = median(in_place_runs[k], pick), median(clean_runs[k], pick)
            cells += f"{b * 1e3:>18.2f}{o * 1e3:>20.2f}{o / b:>7.2f}x"
        print(f"{name:<26}{cells}")


def image_rows() -> list[tuple[str, dict[str, Any], str, str]]:
    """``(label, row, SWE-bench's command for it, its PATH)`` of each image layout, the images built when missing."""
    sys.path.insert(0, str(ROOT))
    from tests.envs.swe import layout_rows

    layout_rows.calc_image(True)
    shapes, django, sympy = layout_rows.shapes_image(), layout_rows.django_image(), layout_rows.sympy_image()
    venv = "/testbed/.venv/bin:/usr/local/bin:/usr/bin:/bin"
    return [
        (
            "SWE-bench pytest row",
            layout_rows.calc_row("acme__calc-7"),
            "pytest -rA tests/test_ops.py",
            CONDA_PATH,
        ),
        (
            "Django row (runtests.py)",
            layout_rows.django_row(django),
            "python tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 utils_tests.test_text",
            CONDA_PATH,
        ),
        ("SymPy row (bin/test's runner)", layout_rows.sympy_row(sympy), SYMPY_TEST, CONDA_PATH),
        (
            "R2E-Gym row (hidden tests)",
            layout_rows.r2e_row(shapes),
            "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' python -W ignore -m pytest -rA r2e_tests",
            venv,
        ),
    ]


async def harness(sandbox: Sandbox, task: SweTask, command: str, path: str) -> tuple[float, int]:
    """SWE-bench's way: a fresh container, the gold and test patches applied, its test command; seconds, exit code."""
    start = time.perf_counter()
    session = await open_workspace(sandbox, task, check_patch=False, for_agent=False)
    async with session:
        for diff in (task.patch, task.test_patch):
            if diff.strip():
                await session.arun(["patch", "-p1", "--batch"], diff, timeout_s=60)
        if task.test_setup_cmd:
            await session.arun(["bash", "-c", task.test_setup_cmd], timeout_s=60)
        env = {"PATH": path, "HOME": "/tmp", "LANG": "C.UTF-8"}
        done = await session.arun(["bash", "-c", command], timeout_s=600, env=env)
    return time.perf_counter() - start, done.exit_code


async def graded_gold(sandbox: Sandbox, task: SweTask, interpreters: Interpreters) -> tuple[float, float]:
    """Ours: the gold fix in an agent's workspace, graded in a clean room; seconds (grading only), reward."""
    session = await open_workspace(sandbox, task)
    async with session:
        base = await manifest(session, task)
        await session.arun(["patch", "-p1", "--batch"], task.patch, timeout_s=60)
        start = time.perf_counter()
        reward = await grade(sandbox, task, session, base, interpreters=interpreters, test_timeout_s=600)
        return time.perf_counter() - start, reward.value


def image_layouts(repeats: int) -> None:
    """Ours vs SWE-bench's harness command per layout row, alternating, medians (see the module docstring)."""
    sandbox = get_sandbox("docker", timeout_s=120, memory_mb=2048, nproc=256)
    loop, rows = asyncio.new_event_loop(), image_rows()
    print(f"grading the gold fix in the datasets' image layouts (docker), medians of {repeats}, in s")
    print(f"{'row':<32}{'SWE-bench harness':>18}{'ours':>10}{'ratio':>8}  exit / reward")
    for label, row, command, path in rows:
        task, interpreters = read_task(row), Interpreters()
        loop.run_until_complete(
            graded_gold(sandbox, task, interpreters)
        )  # warm: the interpreter probe, caches
        theirs, ours_ = [], []
        for _ in range(repeats):
            theirs.append(loop.run_until_complete(harness(sandbox, task, command, path)))
            ours_.append(loop.run_until_complete(graded_gold(sandbox, task, interpreters)))
        t = statistics.median(r[0] for r in theirs)
        o = statistics.median(r[0] for r in ours_)
        print(f"{label:<32}{t:>18.2f}{o:>10.2f}{o / t:>7.2f}x  {theirs[-1][1]} / {ours_[-1][1]:g}")
    loop.close()


def make_env(backend: str, repo: str) -> SweEnv:
    """The env on ``backend``; on docker the bundled rows' per-instance images are built first (offline)."""
    sandbox = get_sandbox(backend, timeout_s=60, memory_mb=2048, nproc=256)
    env = SweEnv(sandbox=sandbox, allow_unsafe_local=backend == "local")
    if backend == "docker":
        from cascade_envs.envs.swe.images import build_images
        from cascade_envs.sandbox import images

        build_images([t.task for t in env.tasks or []], images.client(), log=lambda message: None)
    return env


if __name__ == "__main__":
    main()
