"""Grading in a real workspace (bwrap): base 0, gold fix 1, tampered tests restored, failures masked."""

from __future__ import annotations

import asyncio

from cascade_envs.envs.swe.grading import check_test_patch, grade
from cascade_envs.envs.swe.task import read_task

from .conftest import open_session, row


async def _graded(task, before: str | None = None, timeout_s: float = 60):
    session = await open_session(task)
    try:
        if before:
            done = await session.arun(["bash", "-c", before], timeout_s=20)
            assert done.ok, done
        return await grade(session, task, timeout_s)
    finally:
        await session.aclose()


def gold(name: str) -> str:
    return f"patch -p1 <<'EOF'\n{row(name)['patch']}EOF\n"


def test_the_base_fails_and_the_gold_fix_passes(durations, inilite):
    for task, name in ((durations, "durations"), (inilite, "inilite")):
        base = asyncio.run(_graded(task))
        assert base.value == 0.0 and not base.masked, base
        assert base.components["fail_to_pass"] == 0.0 and base.components["pass_to_pass"] == 1.0
        fixed = asyncio.run(_graded(task, gold(name)))
        assert fixed.value == 1.0, fixed


def test_tests_the_agent_edits_or_deletes_are_put_back(inilite):
    # the agent "passes" by gutting the failing tests, or by deleting the whole test folder
    gutted = "sed -i 's/self.assertEqual/print/' tests/test_reader.py"
    assert asyncio.run(_graded(inilite, gutted)).value == 0.0
    assert asyncio.run(_graded(inilite, gold("inilite") + "rm tests/test_reader.py")).value == 1.0
    # as in SWE-bench, only the files test_patch touches are put back: a deleted package breaks the run
    assert asyncio.run(_graded(inilite, gold("inilite") + "rm -r tests")).value == 0.0


def test_a_wiped_workspace_scores_zero_not_masked(durations):
    reward = asyncio.run(_graded(durations, "rm -rf /testbed/* /testbed/.[!.]* 2>/dev/null; true"))
    assert reward.value == 0.0 and not reward.masked


def test_a_hanging_test_run_is_zero_with_the_reason(durations):
    hang = "echo 'import time; time.sleep(60)' >> durations/__init__.py"
    reward = asyncio.run(_graded(durations, hang, timeout_s=2))
    assert reward.value == 0.0 and not reward.masked and "killed (timeout)" in reward.reason


def test_a_test_patch_that_does_not_apply_is_caught_at_setup(durations):
    """Checked on the fresh workspace (the env masks the episode then); at grading it is the agent's doing."""
    task = read_task({**row("durations"), "test_patch": row("inilite")["test_patch"].replace("test_reader", "test_parse")})

    async def go():
        session = await open_session(task)
        try:
            return await check_test_patch(session, task), await check_test_patch(session, durations)
        finally:
            await session.aclose()

    bad, good = asyncio.run(go())
    assert bad is not None and "test_patch does not apply" in bad and good is None


def test_a_workspace_the_agent_left_unable_to_take_the_tests_scores_zero(durations):
    # the agent fills its disk and locks the test folder, hoping the grading fails and the sample is masked
    fill = "chmod -R a-w tests; cat /dev/zero > /testbed/filler 2>/dev/null; true"
    reward = asyncio.run(_graded(durations, fill))
    assert reward.value == 0.0 and not reward.masked, reward


def test_a_lost_sandbox_masks(durations):
    async def go():
        session = await open_session(durations)
        await session.aclose()
        return await grade(session, durations)

    reward = asyncio.run(go())
    assert reward.masked, reward
