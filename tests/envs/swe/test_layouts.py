"""Rows of SWE-bench, SWE-Gym, SWE-smith and R2E-Gym in their own formats, graded on docker in images of their
datasets' layouts (``layouts.py``, ``layout_rows.py``: the tests' interpreter in a venv of its own, never the system ``python3``):
the gold patch scores 1, no change and a regression 0, none masked; Django's rows through its own
``tests/runtests.py`` (Django 4.2.16's source and tests), SymPy's by its ``bin/test`` conventions (SymPy 1.13.3);
an image without an interpreter for the tests masks, and the agent cannot supply one. Run by ``.ci/swe.sh``, which
downloads the wheels the images are built from (it needs the OpenHands SDK too, for the episodes through the env)."""

from __future__ import annotations

import asyncio
import importlib.util
import time

import pytest

from cascade_envs.envs.swe.changes import manifest
from cascade_envs.envs.swe.grading import open_workspace
from cascade_envs.envs.swe.interpreter import Interpreters
from cascade_envs.envs.swe.task import read_task
from tests.sandbox.conftest import backend_or_skip

from . import layout_rows
from .conftest import LIMITS
from .layouts import require
from .repos import unified
from .test_grading import gold, graded

if importlib.util.find_spec("openhands") is None or importlib.util.find_spec("openhands.tools") is None:
    pytest.skip(
        "the OpenHands SDK is not installed (it needs Python >= 3.12): run .ci/swe.sh",
        allow_module_level=True,
    )

from cascade_envs.envs.swe.env import SweEnv
from tests.envs.swe.test_swe_env import FINISH, play

from .conftest import call

CALC_IMAGE, GYM_IMAGE, SMITH_IMAGE = layout_rows.CALC_IMAGE, layout_rows.GYM_IMAGE, layout_rows.SMITH_IMAGE


@pytest.fixture(scope="module")
def docker():
    require()
    return backend_or_skip("docker", **LIMITS)


def check(task, fix: str, regression: str, sandbox, timeout_s: float = 120) -> None:
    """The gold fix scores 1, no change and a regression 0: none masked."""
    start = time.monotonic()
    fixed = asyncio.run(graded(task, gold(fix), timeout_s, sandbox))
    assert fixed.value == 1.0 and not fixed.masked, fixed
    unfixed = asyncio.run(
        graded(task, "echo '# looked' >> README.md || echo x > NOTES.md", timeout_s, sandbox)
    )
    assert unfixed.value == 0.0 and not unfixed.masked and "FAIL_TO_PASS still fail" in unfixed.reason, (
        unfixed
    )
    broken = asyncio.run(graded(task, gold(regression), timeout_s, sandbox))
    assert broken.value == 0.0 and not broken.masked and "PASS_TO_PASS now fail" in broken.reason, broken
    print(f"{task.instance_id}: three gradings in {time.monotonic() - start:.1f} s")


def test_a_swe_bench_row_in_a_swe_bench_image(docker):
    layout_rows.calc_image(True)
    task = read_task(layout_rows.calc_row("acme__calc-7"))
    assert task.image == CALC_IMAGE and task.python is None  # found in the image: the conda env testbed
    check(task, layout_rows.calc_fix(), layout_rows.calc_regression(), docker)


def test_a_swe_gym_row_in_its_published_image_name(docker):
    layout_rows.calc_image(True)
    task = read_task(layout_rows.calc_row("acme__calc-8"), image_template="swe-gym")
    assert task.image == GYM_IMAGE
    check(task, layout_rows.calc_fix(), layout_rows.calc_regression(), docker)


def test_a_swe_smith_row_on_its_repository_snapshot(docker):
    layout_rows.calc_image(False)
    task = read_task(layout_rows.smith_row())
    assert task.image == SMITH_IMAGE and task.hidden_tests == ("tests/test_ops.py",)

    async def agent_view():
        session = await open_workspace(docker, task)
        async with session:
            return await session.arun(["bash", "-c", "ls tests; grep -c 'max(len' calc/ops.py"])

    seen = asyncio.run(agent_view())  # the bug is in, the failing tests are not (as on the instance's branch)
    assert seen.text.split() == ["1"], seen
    check(task, task.patch, layout_rows.calc_regression(), docker)


def test_an_r2e_gym_row_with_its_hidden_tests_and_venv(docker):
    image = layout_rows.shapes_image()
    task = read_task(layout_rows.r2e_row(image))
    assert task.python == "/testbed/.venv/bin/python" and task.fail_to_pass == (
        "TestArea.test_area",
        "TestArea.test_square",
    )
    regression = unified(
        "shapes/geo.py",
        *(
            layout_rows.SHAPES_GEO.replace(*layout_rows.SHAPES_BUG),
            layout_rows.SHAPES_GEO.replace("2 * (w + h)", "2 * w + h"),
        ),
    )
    check(task, task.patch, regression, docker)


def test_a_django_row_runs_django_s_own_runtests(docker):
    image = layout_rows.django_image()
    task = read_task(layout_rows.django_row(image))
    assert task.framework == "django" and task.targets == ("utils_tests.test_text",)
    check(task, task.patch, layout_rows.django_regression(), docker, timeout_s=240)


def test_a_sympy_row_by_bin_test_s_conventions(docker):
    image = layout_rows.sympy_image()
    task = read_task(layout_rows.sympy_row(image))
    assert task.framework == "sympy" and task.test_env == {"SYMPY_USE_CACHE": "no"}
    check(task, task.patch, layout_rows.sympy_regression(), docker, timeout_s=240)


def test_an_image_without_the_test_framework_masks_and_the_agent_cannot_supply_one(docker):
    image = layout_rows.django_image()
    task = read_task(
        {**layout_rows.calc_row("acme__calc-9"), "image": image, "test_patch": ""}
    )  # a pytest row
    fake = ".venv/bin/python"  # a python that says yes to any probe, made by the agent in its workspace
    agent = f"mkdir -p .venv/bin && printf '#!/bin/sh\\nexit 0\\n' > {fake} && chmod +x {fake}; echo x >> README.md"
    reward = asyncio.run(graded(task, agent, 60, docker))
    assert reward.masked and "no interpreter" in reward.error and "not the model's" in reward.error, reward
    assert "/testbed/.venv/bin/python" in reward.error and "No module named 'pytest'" in reward.error

    async def at_setup():  # the env probes at setup, before the agent acts: the episode is masked there
        session = await open_workspace(docker, task)
        async with session:
            await manifest(session, task)
            await Interpreters().find(session, task)

    with pytest.raises(Exception, match="no interpreter"):
        asyncio.run(at_setup())


def test_episodes_through_the_env_find_the_image_s_interpreter_once(docker):
    layout_rows.calc_image(True)
    row = layout_rows.calc_row("acme__calc-7")
    fix = call("terminal", command=f"patch -p1 <<'EOF'\n{row['patch']}EOF")
    env = SweEnv(
        sandbox="docker",
        sandbox_options={"workdir_mb": 300},
        memory_mb=512,
        command_timeout_s=20,
        test_timeout_s=120,
    )
    assert env.sandbox.name == "docker" and env.sandbox.workdir_mb == 300
    try:
        fixed, unfixed = play(env, [row], [fix, FINISH]) + play(env, [row], [FINISH])
        found = list(env.interpreters._found.values())
    finally:
        env.close()
    assert fixed.reward.value == 1.0 and not fixed.reward.masked, fixed.reward
    assert unfixed.reward.value == 0.0 and not unfixed.reward.masked, unfixed.reward
    assert [i.path for i in found] == ["/opt/miniconda3/envs/testbed/bin/python"]  # probed once for the image


RUN_SUITE_FAKED = (
    "from django.test import runner as _runner\nimport unittest as _unittest\n"
    "_runner.DiscoverRunner.run_suite = lambda self, suite, **kw: _unittest.TestResult()\n"
)


@pytest.mark.parametrize("which", ["django", "sympy"])
def test_routes_into_the_runner_score_0_under_the_django_and_sympy_drivers(docker, which):
    """The drivers of repositories with runners of their own keep the defences (``test_runner_defences.py``):
    each payload, appended to the file the gold patch fixes, leaves the unfixed tests failing: 0, unmasked."""
    from cascade_envs.envs.swe.task import diff_paths

    from .test_runner_defences import ATTACKS

    make = layout_rows.django_row if which == "django" else layout_rows.sympy_row
    image = layout_rows.django_image() if which == "django" else layout_rows.sympy_image()
    task = read_task(make(image))
    target = diff_paths(task.patch)[0]
    payloads = [
        ATTACKS[name][1] for name in ("frames: sys._getframe to the runner's state", "the garbage collector")
    ]
    payloads += [RUN_SUITE_FAKED] if which == "django" else []
    for payload in payloads:
        agent = f"cat >> {target} <<'CASCADE_EOF'\n{payload}CASCADE_EOF\n"
        reward = asyncio.run(graded(task, agent, 240, docker))
        assert reward.value == 0.0 and not reward.masked, (payload[:60], reward)
