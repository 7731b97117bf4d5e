"""Grading by the repository's tests, with SWE-bench's rules.

After the episode the workspace's test files are put back as the base had them, the row's
``test_patch`` is applied, and ``test_cmd`` runs. Each test id's status is read from its output
(``unittest -v`` lines, or pytest's ``-rA`` summary). Reward 1 iff every FAIL_TO_PASS and every
PASS_TO_PASS test passed; a test missing from the output (its module failed to import, the run
was cut) did not pass. An infrastructure failure (the sandbox died, the patch does not apply to
the base's own files) masks the sample instead; a test run that times out is the code's doing: 0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cascade_envs.core import Reward
from cascade_envs.sandbox import ExecResult, SandboxError, Session

from .task import SweTask

PASSED = "PASSED"
FAILED = "FAILED"
TEST_TIMEOUT_S = 300.0
PATCH_FILE = ".cascade_test.patch"
MAX_LISTED = 5

_UNITTEST = re.compile(r"^(\w+) \(([\w.]+)\)(?:\n[^\n]*?)? \.\.\. (ok|FAIL|ERROR|skipped|expected failure|unexpected success)",
                       re.MULTILINE)
_PYTEST = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED) (\S+)", re.MULTILINE)


def parse_unittest(log: str) -> dict[str, str]:
    """``{test id: PASSED|FAILED}`` from ``python -m unittest -v`` output (ids ``pkg.module.Class.test``)."""
    out: dict[str, str] = {}
    for name, where, status in _UNITTEST.findall(log):
        test_id = where if where.endswith("." + name) else f"{where}.{name}"  # 3.11+ prints the full id
        out[test_id] = PASSED if status in ("ok", "expected failure") else FAILED
    return out


def parse_pytest(log: str) -> dict[str, str]:
    """``{test id: PASSED|FAILED}`` from pytest's ``-rA`` short summary (``path::name``)."""
    return {test_id: PASSED if status in ("PASSED", "XFAIL") else FAILED for status, test_id in _PYTEST.findall(log)}


PARSERS = {"unittest": parse_unittest, "pytest": parse_pytest}


@dataclass(frozen=True)
class Verdict:
    """How the grading tests went."""

    fail_to_pass: dict[str, bool]
    pass_to_pass: dict[str, bool]

    @property
    def resolved(self) -> bool:
        return all(self.fail_to_pass.values()) and all(self.pass_to_pass.values())

    def reward(self, prefix: str = "") -> Reward:
        f2p, p2p = self.fail_to_pass, self.pass_to_pass
        components = {"fail_to_pass": _share(f2p), "pass_to_pass": _share(p2p), "resolved": int(self.resolved)}
        if self.resolved:
            return Reward(1.0, components, reason=f"{prefix}resolved: {len(f2p)} FAIL_TO_PASS and "
                                                  f"{len(p2p)} PASS_TO_PASS tests pass")
        failing = [t for t, ok in f2p.items() if not ok]
        broken = [t for t, ok in p2p.items() if not ok]
        parts = [f"{len(failing)}/{len(f2p)} FAIL_TO_PASS still fail ({_names(failing)})"] if failing else []
        parts += [f"{len(broken)}/{len(p2p)} PASS_TO_PASS now fail ({_names(broken)})"] if broken else []
        return Reward.zero(prefix + "not resolved: " + "; ".join(parts), **components)


def verdict(task: SweTask, statuses: dict[str, str]) -> Verdict:
    """SWE-bench's rule over parsed statuses: a test passes only when its status says so."""
    return Verdict({t: statuses.get(t) == PASSED for t in task.fail_to_pass},
                   {t: statuses.get(t) == PASSED for t in task.pass_to_pass})


async def grade(session: Session, task: SweTask, timeout_s: float = TEST_TIMEOUT_S) -> Reward:
    """Put the tests in place, run them in ``session``'s workspace and score the outcome."""
    try:
        failure = await _install_tests(session, task)
    except SandboxError as exc:
        failure = f"the grading tests could not be put in place: {exc}"
    if failure is not None:
        if session.lost:  # the sandbox itself went away: infrastructure
            return Reward.failed(failure)
        # The workspace is alive but the agent left it unable to take the tests (a full disk, files
        # made read-only): its doing, so a 0. A test_patch that does not fit the task's own base was
        # caught at setup (check_test_patch), so the task cannot be at fault here.
        return Reward.zero(f"the agent's workspace could not take the grading tests: {failure}")
    result = await session.arun(["bash", "-c", task.test_cmd], timeout_s=timeout_s)
    if result.killed_by == "agent_killed":  # the tests run the agent's code, which stopped its sandbox agent
        return Reward.zero(f"the test run killed its sandbox agent: {result.describe()}")
    if result.killed_by == "sandbox" or (result.error and result.killed_by is None):
        return Reward.failed(f"the test run did not complete: {result.describe()}")
    log = result.stdout.decode("utf-8", errors="replace") + "\n" + result.stderr.decode("utf-8", errors="replace")
    prefix = f"test run killed ({result.killed_by}); " if result.killed_by else ""
    return verdict(task, PARSERS[task.test_log_format](log)).reward(prefix)


async def check_test_patch(session: Session, task: SweTask) -> str | None:
    """At setup, before the agent acts: whether ``test_patch`` applies to the fresh workspace (a dry run)."""
    if not task.test_patch.strip():
        return None
    await session.awrite({PATCH_FILE: task.test_patch})
    applied = await _run(session, ["patch", "-p1", "--batch", "--forward", "--dry-run", "-i", PATCH_FILE])
    await _run(session, ["rm", "-f", PATCH_FILE])
    if not applied.ok:
        return f"the task's test_patch does not apply to its base: {applied.describe()} {applied.text[-300:]}"
    return None


async def _install_tests(session: Session, task: SweTask) -> str | None:
    """Restore the files ``test_patch`` touches to the base and apply it; the error, or ``None``."""
    if not task.test_patch.strip():
        return None
    paths = task.patched_files
    if task.files is not None:
        restore = {p: task.files[p] for p in paths if p in task.files}
        gone = [p for p in paths if p not in task.files]
        if gone:
            await _run(session, ["rm", "-f", "--", *gone])
        if restore:
            await session.awrite(restore)
    elif task.base_commit:
        await _run(session, ["git", "checkout", "-q", task.base_commit, "--", *paths])
    await session.awrite({PATCH_FILE: task.test_patch})
    applied = await _run(session, ["patch", "-p1", "--batch", "--forward", "-i", PATCH_FILE])
    await _run(session, ["rm", "-f", PATCH_FILE])
    if not applied.ok:
        return f"the task's test_patch does not apply to the base's files: {applied.describe()} {applied.text[-300:]}"
    return None


async def _run(session: Session, argv: list[str]) -> ExecResult:
    return await session.arun(argv, timeout_s=60)


def _share(results: dict[str, bool]) -> float:
    return sum(results.values()) / len(results) if results else 1.0


def _names(tests: list[str]) -> str:
    return ", ".join(tests[:MAX_LISTED]) + (", ..." if len(tests) > MAX_LISTED else "")
