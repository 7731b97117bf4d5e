"""Clean-room grading in real bwrap workspaces: base 0, gold fix 1 (unittest and pytest rows), the
change screened, the runner's report trusted only when whole, failures masked only when not the agent's."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from cascade_envs.envs.swe.changes import manifest
from cascade_envs.envs.swe.grading import grade, open_workspace, read_report
from cascade_envs.envs.swe.task import read_task
from cascade_envs.sandbox import SandboxError
from tests.sandbox.conftest import backend_or_skip

from .conftest import LIMITS, row
from .repos import make_row, unified


def needs_pytest() -> None:
    """The pytest rows need pytest in the sandbox's Python (``.ci/swe.sh`` installs python3-pytest)."""
    sandbox = backend_or_skip("bwrap", **LIMITS)
    if not sandbox.run(["python3", "-c", "import pytest"]).ok:
        pytest.fail("pytest is not importable by the sandbox's python3: apt-get install python3-pytest")


async def graded(task, agent: str | None = None, timeout_s: float = 60, sandbox=None):
    """Set the task's workspace up, let ``agent`` (a shell script) act in it, grade it in a clean room."""
    sandbox = sandbox or backend_or_skip("bwrap", **LIMITS)
    session = await open_workspace(sandbox, task)
    try:
        base = await manifest(session, task)
        if agent:
            done = await session.arun(["bash", "-c", agent], timeout_s=20)
            assert done.ok, done
        return await grade(sandbox, task, session, base, test_timeout_s=timeout_s)
    finally:
        await session.aclose()


def gold(patch: str) -> str:
    return f"patch -p1 <<'EOF'\n{patch}EOF\n"


@pytest.fixture
def tally(tmp_path):
    return make_row("tally", tmp_path / "tally")


@pytest.fixture
def semver(tmp_path):
    needs_pytest()
    return make_row("semverlite", tmp_path / "semverlite")


def test_the_bundled_tasks_score_0_at_base_and_1_fixed(durations, inilite):
    for task, name in ((durations, "durations"), (inilite, "inilite")):
        base = asyncio.run(graded(task))
        assert base.value == 0.0 and not base.masked and "no change to grade" in base.reason, base
        fixed = asyncio.run(graded(task, gold(row(name)["patch"])))
        assert fixed.value == 1.0, fixed
        assert fixed.components["files_changed"] == 1 and fixed.components["paths_ignored"] == 0


@pytest.mark.parametrize("name", ["tally", "semverlite"])
def test_unittest_and_pytest_rows_score_0_unfixed_and_1_fixed(name, tmp_path):
    if name == "semverlite":
        needs_pytest()
    r = make_row(name, tmp_path / name)
    task = read_task(r)
    assert task.framework == ("pytest" if name == "semverlite" else "unittest")
    wrong = asyncio.run(graded(task, "echo '# looked at it' >> README.md; echo x > notes.txt"))
    assert wrong.value == 0.0 and not wrong.masked and "FAIL_TO_PASS still fail" in wrong.reason, wrong
    assert wrong.components["fail_to_pass"] == 0.0 and wrong.components["pass_to_pass"] == 1.0
    fixed = asyncio.run(graded(task, gold(r["patch"])))
    assert fixed.value == 1.0 and fixed.components["resolved"] == 1, fixed


def test_a_fix_plus_test_edits_is_graded_on_the_fix_alone(tally):
    # the agent fixes the bug and also rewrites tests: the edits are ignored, the fix still counts
    edits = "sed -i 's/assertEqual/assertTrue/' tests/helpers.py; echo 'import os' > tests/test_new.py"
    reward = asyncio.run(graded(read_task(tally), gold(tally["patch"]) + edits))
    assert reward.value == 1.0, reward
    assert "2 path(s) ignored" in reward.reason and "tests/helpers.py: a test file" in reward.reason


def test_a_change_only_to_ignored_paths_is_a_plain_zero(tally):
    reward = asyncio.run(
        graded(read_task(tally), "echo 'pass' > conftest.py; mkdir -p .local; touch .local/x.pth")
    )
    assert reward.value == 0.0 and not reward.masked
    assert (
        "no change to grade" in reward.reason
        and "conftest.py: a test-runner or interpreter hook file" in reward.reason
    )


def test_deleting_the_package_scores_zero(tally):
    reward = asyncio.run(graded(read_task(tally), "rm -r tally"))
    assert reward.value == 0.0 and not reward.masked and "FAIL_TO_PASS still fail" in reward.reason


def test_a_hanging_test_run_is_zero_with_the_reason(durations):
    hang = "echo 'import time; time.sleep(60)' >> durations/__init__.py"
    reward = asyncio.run(graded(durations, hang, timeout_s=2))
    assert reward.value == 0.0 and not reward.masked and "killed (timeout)" in reward.reason, reward


def test_a_test_patch_that_does_not_apply_fails_the_setup(durations):
    task = read_task(
        {**row("durations"), "test_patch": row("inilite")["test_patch"].replace("test_reader", "test_parse")}
    )
    with pytest.raises(SandboxError, match="test_patch does not apply"):
        asyncio.run(graded(task))


def test_a_lost_sandbox_masks(durations):
    async def go():
        sandbox = backend_or_skip("bwrap", **LIMITS)
        session = await open_workspace(sandbox, durations)
        base = await manifest(session, durations)
        await session.aclose()
        return await grade(sandbox, durations, session, base)

    reward = asyncio.run(go())
    assert reward.masked and "could not be read" in reward.error, reward


def test_a_task_without_an_interpreter_for_its_tests_masks(durations):
    """No interpreter that runs the task's tests (here: the row names one that is not there) is not the agent's."""
    task = read_task({**row("durations"), "python": "/opt/missing/bin/python3"})
    reward = asyncio.run(graded(task, gold(row("durations")["patch"])))
    assert reward.masked and "/opt/missing/bin/python3" in reward.error, reward
    assert "not the model's" in reward.error and reward.components["files_changed"] == 1


NONCE = "n0nce"


@pytest.mark.parametrize(
    ("lines", "why"),
    [
        ([], "did not start"),
        (['n0nce {"test": "a", "status": "PASSED"}'], "did not start"),
        (['n0nce {"begin": "x"}', "PASSED a", 'n0nce {"end": 1}'], "not the runner's"),
        (
            ['n0nce {"begin": "x"}', 'other {"test": "a", "status": "PASSED"}', 'n0nce {"end": 1}'],
            "not the runner's",
        ),
        (
            [
                'n0nce {"begin": "x"}',
                'n0nce {"test": "a", "status": "FAILED"}',
                'n0nce {"test": "a", "status": "PASSED"}',
                'n0nce {"end": 1}',
            ],
            "reported twice",
        ),
        (
            ['n0nce {"begin": "x"}', 'n0nce {"end": 0}', 'n0nce {"test": "a", "status": "PASSED"}'],
            "not the runner's",
        ),
        (['n0nce {"begin": "x"}', 'n0nce {"test": "a", "status": "PASSED"}'], "ended before"),
        (['n0nce {"begin": "x"}', 'n0nce {"tampered": ["changed: x"]}', 'n0nce {"end": 0}'], "tampered"),
    ],
)
def test_the_report_is_trusted_only_when_whole(lines, why):
    from cascade_envs.envs.swe.grading import judge_run
    from cascade_envs.sandbox import ExecResult

    task = read_task({**row("durations"), "FAIL_TO_PASS": ["a"], "PASS_TO_PASS": []})
    reward = judge_run(task, ExecResult(0, ("\n".join(lines) + "\n").encode()), NONCE)
    assert reward.value == 0.0 and why in (reward.error or reward.reason), reward
    assert reward.masked == (why == "did not start")


def test_a_whole_report_gives_the_verdict():
    report = read_report(
        b'n0nce {"begin": "x"}\nn0nce {"test": "a", "status": "XFAIL"}\nn0nce {"end": 1}\n', NONCE
    )
    assert report.began and report.ended and report.statuses == {"a": "XFAIL"} and not report.foreign


def test_the_host_repo_of_a_host_directory_row_is_copied_not_mounted(tally):
    # an agent that writes through to the host copy of its repository would change the base for everyone
    asyncio.run(graded(read_task(tally), "echo hacked > tally/core.py"))
    assert "hacked" not in (Path(tally["repo_snapshot"]) / "tally" / "core.py").read_text()


def test_a_fix_that_turns_a_module_into_a_package_scores_1(tally):
    refactor = (
        gold(tally["patch"])
        + "mkdir tally/core && git mv 2>/dev/null; mv tally/core.py tally/core/__init__.py && "
        "printf 'VERSION = 2\\n' > tally/core/extra.py"
    )
    reward = asyncio.run(graded(read_task(tally), refactor))
    assert reward.value == 1.0 and reward.components["files_changed"] == 3, reward


DISTANCE = {
    "_vendor/unitconv.py": 'FACTORS = {"km": 1000, "m": 1, "cm": 0.01}\n',
    "distance/__init__.py": "from unitconv import FACTORS\n\n\ndef to_meters(value, unit):\n    return value / FACTORS[unit]\n",
    "tests/test_distance.py": "from distance import to_meters\n\n\ndef test_meters():\n    assert to_meters(3, 'm') == 3\n",
}
DISTANCE_TEST = "\n\ndef test_kilometers():\n    assert to_meters(2, 'km') == 2000\n"


def test_a_row_whose_test_command_sets_pythonpath_is_graded_with_it(tmp_path):
    """``PYTHONPATH=_vendor python3 -m pytest ...``: the runner (``python -I``) puts ``_vendor`` on sys.path itself."""
    needs_pytest()
    for path, text in DISTANCE.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    code = DISTANCE["distance/__init__.py"]
    task = read_task(
        {
            "instance_id": "acme__distance-1",
            "problem_statement": "to_meters(2, 'km') gives 0.002.",
            "repo_snapshot": str(tmp_path),
            "test_cmd": "PYTHONPATH=_vendor python3 -m pytest -rA tests/test_distance.py",
            "test_patch": unified(
                "tests/test_distance.py",
                DISTANCE["tests/test_distance.py"],
                DISTANCE["tests/test_distance.py"] + DISTANCE_TEST,
            ),
            "patch": unified(
                "distance/__init__.py", code, code.replace("value / FACTORS", "value * FACTORS")
            ),
            "FAIL_TO_PASS": ["tests/test_distance.py::test_kilometers"],
            "PASS_TO_PASS": ["tests/test_distance.py::test_meters"],
        }
    )
    assert task.test_paths == ("_vendor",) and task.targets == ("tests/test_distance.py",)
    fixed = asyncio.run(graded(task, gold(task.patch)))
    assert fixed.value == 1.0, fixed
    unfixed = asyncio.run(graded(task, "echo x > NOTES.md"))
    assert unfixed.value == 0.0 and not unfixed.masked and "1/1 FAIL_TO_PASS still fail" in unfixed.reason, (
        unfixed
    )
