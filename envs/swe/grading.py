"""Grading in a clean room, with SWE-bench's rules and a runner the agent never touched.

After a finished episode:

1. the agent's change is read from its workspace and screened (``changes.py``): test files,
   hook files, compiled files, links, special files and new top-level modules are left out; a
   change with nothing left is a 0 without a test run;
2. a fresh workspace is set up from the task (the row's snapshot, or on docker its image or
   per-instance image, ``images.py``; then ``setup_cmd``),
   the change is written into it (refusing symlinks and special files), and ``test_patch`` is
   applied with ``patch -p1`` reading it from stdin;
3. the task's hidden tests are put in place (``test_setup_cmd``), and the project's runner
   (``scripts/``, its parts built into one program, passed as source text, never a file the agent
   could reach) runs the task's tests with unittest, pytest, Django's ``tests/runtests.py`` or
   SymPy's conventions under the task's interpreter (``interpreter.py``: the row's or the image's,
   probed before the change is written) in a hardened mode (``-I -B``: no user site, no
   ``PYTHON*`` variables, no bytecode written, none read from the tree's ``__pycache__``, an empty
   ``HOME`` outside the repository, the standard library ahead of the repository on ``sys.path``;
   what the task declares, its ``sys.path`` entries, variables and warning filters, travels in the
   runner's request and is applied by the runner). A supervisor process that runs no repository
   code alone writes the report, tagged with a per-run nonce the test process never sees; the test
   process runs under an audit hook that keeps code from the agent's files away from frames, the
   garbage collector, ``ctypes`` and the runner's state, and every test's outcome is kept inside
   that hook (``scripts/kernel.py`` says what is refused).

Reward 1 iff every FAIL_TO_PASS and every PASS_TO_PASS test PASSED (or XFAIL), as SWE-bench's
``test_passed``; stricter than SWE-bench, a skipped PASS_TO_PASS test does not count (code under
test can raise ``SkipTest``). A test that was not reported did not pass. Zero, never a mask, for
whatever the agent's code can cause: a run that times out, exceeds a limit, exits before the
runner's final report, writes on the channel or tampers with the verdict machinery. Masked
(``Reward.failed``) only for what it cannot: the sandbox lost, the base not setting up again, the
test patch not applying to the base, an image without an interpreter for the task's tests, the
runner failing before it imported any repository code, an interpreter older than 3.8 (no audit
hooks) unless ``legacy_python`` accepts weaker checks.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from cascade_envs.core import Reward
from cascade_envs.sandbox import ExecResult, Sandbox, SandboxError, Session, Workspace
from cascade_envs.sandbox.docker import DockerSandbox

from .changes import Change, ChangeError, Manifest, collect
from .datasets import r2e_key
from .images import image_for
from .interpreter import Interpreter, Interpreters
from .scripts import program
from .task import SweTask

TEST_TIMEOUT_S = 300.0
SETUP_TIMEOUT_S = 300.0
PASSING = ("PASSED", "XFAIL")
HOME = "/tmp/cascade-home"
RUNNER_ENV = {"HOME": HOME, "LANG": "C.UTF-8", "TERM": "dumb"}
RUNNER_FLAGS = ["-I", "-B", "-c"]
MAX_LISTED = 5
STATUS_RANK = {"PASSED": 0, "XFAIL": 1, "SKIPPED": 2, "XPASS": 3, "FAILED": 4, "ERROR": 5}


@dataclass(frozen=True)
class Verdict:
    """How the grading tests went: each FAIL_TO_PASS and PASS_TO_PASS test, passed or not."""

    fail_to_pass: dict[str, bool]
    pass_to_pass: dict[str, bool]

    @property
    def resolved(self) -> bool:
        return all(self.fail_to_pass.values()) and all(self.pass_to_pass.values())

    def reward(self, suffix: str = "") -> Reward:
        f2p, p2p = self.fail_to_pass, self.pass_to_pass
        components = {
            "fail_to_pass": _share(f2p),
            "pass_to_pass": _share(p2p),
            "resolved": int(self.resolved),
        }
        if self.resolved:
            return Reward(
                1.0,
                components,
                reason=f"resolved: {len(f2p)} FAIL_TO_PASS and {len(p2p)} PASS_TO_PASS tests pass{suffix}",
            )
        failing = [t for t, ok in f2p.items() if not ok]
        broken = [t for t, ok in p2p.items() if not ok]
        parts = [f"{len(failing)}/{len(f2p)} FAIL_TO_PASS still fail ({_names(failing)})"] if failing else []
        parts += [f"{len(broken)}/{len(p2p)} PASS_TO_PASS now fail ({_names(broken)})"] if broken else []
        return Reward.zero("not resolved: " + "; ".join(parts) + suffix, **components)


def verdict(task: SweTask, statuses: dict[str, str]) -> Verdict:
    """SWE-bench's rule over reported statuses: a test passes only when it was reported passing.

    An R2E-Gym task's ids are keys of node ids (``datasets.r2e_key``): tests that share a key all
    have to pass for it."""
    if task.id_format == "r2e":
        keyed: dict[str, str] = {}
        for nodeid, status in statuses.items():
            key = r2e_key(nodeid)
            if STATUS_RANK.get(status, 9) >= STATUS_RANK.get(keyed.get(key, "PASSED"), 9):
                keyed[key] = status
        statuses = keyed
    return Verdict(
        {t: statuses.get(t) in PASSING for t in task.fail_to_pass},
        {t: statuses.get(t) in PASSING for t in task.pass_to_pass},
    )


async def open_workspace(
    sandbox: Sandbox,
    task: SweTask,
    *,
    hidden: Sequence[str] = (),
    setup_timeout_s: float = SETUP_TIMEOUT_S,
    check_patch: bool = True,
    for_agent: bool = True,
) -> Session:
    """A session holding the task's base repository, set up (and the test patch checked to apply to it,
    with ``check_patch``; the task's hidden tests removed, ``for_agent``); ``SandboxError`` if it cannot
    be had."""
    if isinstance(sandbox, DockerSandbox):  # the repository is in the row's image or its per-instance one
        workspace, files = (
            Workspace(workdir=task.workdir, image=image_for(task), workdir_mb=sandbox.workdir_mb),
            None,
        )
    else:
        workspace, files = (
            Workspace(workdir=task.workdir, source=task.source, hidden=tuple(hidden)),
            task.files,
        )
    session = await sandbox.asession(workspace=workspace, files=files)
    try:
        if task.setup_patch.strip():
            applied = await _patch(session, task.setup_patch)
            if not applied.ok:
                raise SandboxError(
                    f"workspace setup of {task.instance_id or 'the task'} failed: its setup_patch does not "
                    f"apply: {applied.describe()} {applied.text[-300:]}"
                )
        if task.setup_cmd:
            done = await session.arun(["bash", "-c", task.setup_cmd], timeout_s=setup_timeout_s)
            if not done.ok:
                raise SandboxError(
                    f"workspace setup of {task.instance_id or 'the task'} failed: setup_cmd {done.describe()}"
                )
        if for_agent and task.hidden_tests:
            gone = await session.arun(["rm", "-f", "--", *task.hidden_tests], timeout_s=60)
            if not gone.ok:
                raise SandboxError(
                    f"hiding the tests of {task.instance_id or 'the task'} failed: {gone.describe()}"
                )
        if check_patch and task.test_patch.strip():
            applied = await _patch(session, task.test_patch, dry_run=True)
            if not applied.ok:
                raise SandboxError(
                    f"workspace setup of {task.instance_id or 'the task'} failed: the task's "
                    f"test_patch does not apply to its base: {applied.describe()} {applied.text[-300:]}"
                )
    except BaseException:
        await session.aclose()
        raise
    return session


async def grade(
    sandbox: Sandbox,
    task: SweTask,
    session: Session,
    base: Manifest,
    *,
    hidden: Sequence[str] = (),
    test_timeout_s: float = TEST_TIMEOUT_S,
    setup_timeout_s: float = SETUP_TIMEOUT_S,
    interpreters: Interpreters | None = None,
    legacy_python: bool = False,
    defences_off: Sequence[str] = (),
) -> Reward:
    """Score the agent's work in ``session`` (whose workspace held ``base`` at setup) in a clean room.

    ``interpreters``: the env's (its cache of the task's interpreter); a fresh one probes again.
    ``legacy_python``: grade on Python < 3.8 without the audit hook (else such a run masks).
    ``defences_off``: runner defences to leave out (``audit``, ``supervisor``, ``guard``,
    ``outcomes``), only for the tests that show each one is needed."""
    try:
        change = await collect(session, base, task)
    except ChangeError as exc:
        return Reward.zero(f"the agent's change cannot be graded: {exc}")
    except SandboxError as exc:
        return Reward.failed(f"the agent's workspace could not be read: {exc}")
    ignored = f"; {change.describe_ignored()}" if change.ignored else ""
    counts = {
        "files_changed": len(change.written) + len(change.deleted),
        "paths_ignored": len(change.ignored),
    }
    if change.empty:
        return Reward.zero(
            f"no change to grade: the workspace differs from the base only in ignored paths{ignored}"
            if change.ignored
            else "no change to grade: the workspace is as the base was",
            **counts,
        )
    try:
        room = await open_workspace(
            sandbox, task, hidden=hidden, setup_timeout_s=setup_timeout_s, check_patch=False, for_agent=False
        )
    except SandboxError as exc:
        return Reward.failed(f"the clean room could not be set up: {exc}")
    try:
        try:  # probed before the change is written (or known for the image)
            interpreter = await (interpreters or Interpreters()).find(room, task)
        except SandboxError as exc:
            return Reward.failed(f"the clean room could not be set up: {exc}", **counts)
        options = {"legacy": legacy_python, "defences_off": list(defences_off)}
        reward = await _grade_in(room, task, change, test_timeout_s, interpreter, options)
    finally:
        await room.aclose()
    reward.components.update(counts)
    if ignored and not reward.masked:
        reward.reason = (reward.reason or "") + ignored
    return reward


async def _grade_in(
    room: Session,
    task: SweTask,
    change: Change,
    timeout_s: float,
    interpreter: Interpreter,
    options: dict[str, object],
) -> Reward:
    """Apply ``change`` and the test patch in the fresh workspace ``room``, run the tests, score them."""
    try:
        if change.deleted:  # first: a deleted file may be where the change puts a directory
            gone = await room.arun(
                ["xargs", "-0", "-r", "rm", "-f", "--"], "\0".join(change.deleted), timeout_s=60
            )
            if not gone.ok:
                raise SandboxError(f"removing deleted files: {gone.describe()}")
        if change.written:
            await room.awrite(change.written)
    except SandboxError as exc:
        if room.lost:
            return Reward.failed(f"the clean room was lost: {exc}")
        return Reward.zero(f"the agent's change could not be applied to the base: {exc}")
    if task.test_patch.strip():
        applied = await _patch(room, task.test_patch)
        if not applied.ok:  # it applied to the base at setup and the change never touches its files
            return Reward.failed(f"the test patch did not apply in the clean room: {applied.describe()}")
    if task.test_setup_cmd:
        done = await room.arun(["bash", "-c", task.test_setup_cmd], timeout_s=60)
        if not done.ok:  # it copies what the image holds outside the repository: the change cannot stop it
            return Reward.failed(f"the task's test_setup_cmd failed in the clean room: {done.describe()}")
    nonce = secrets.token_hex(16)
    result = await room.arun(
        [interpreter.path, *RUNNER_FLAGS, program()],
        json.dumps({**runner_request(task, nonce, sorted(change.written)), **options}),
        timeout_s=timeout_s,
        env={**RUNNER_ENV, "PATH": interpreter.env_path},
        output_limit_mb=16,
    )
    return judge_run(task, result, nonce)


def runner_request(task: SweTask, nonce: str, agent_paths: list[str]) -> dict[str, object]:
    """The runner's JSON request: the tests, what it runs, and what the task declares for them."""
    return {
        "nonce": nonce,
        "framework": task.framework,
        "tests": list(dict.fromkeys(task.tests)),
        "files": list(task.targets) or list(dict.fromkeys(t.split("::", 1)[0] for t in task.tests)),
        "agent_paths": agent_paths,
        "paths": list(task.test_paths),
        "env": dict(task.test_env),
        "warnings": list(task.warnings),
        "options": list(task.runner_options),
    }


def judge_run(task: SweTask, result: ExecResult, nonce: str) -> Reward:
    """Score the runner's report in ``result``: the verdict, or why the run cannot be trusted."""
    if result.killed_by == "sandbox" or (result.error and result.killed_by is None):
        return Reward.failed(f"the test run did not complete: {result.describe()}")
    report = read_report(result.stdout, nonce)
    if "unsupported" in report.events and not report.began:
        return Reward.failed(
            f"the task's interpreter cannot be graded safely: {report.events['unsupported']}"
        )
    if "crash" in report.events and not report.began:
        return Reward.failed(f"the test runner failed before running any test: {report.events['crash']}")
    if not report.began:
        return Reward.failed(f"the test runner did not start: {result.describe()} {result.text[-300:]}")
    if report.foreign:
        return Reward.zero(f"the test run wrote on the result channel: {report.foreign}")
    if "forged" in report.events:
        return Reward.zero(f"the test run forged a record: {report.events['forged']}")
    if "tampered" in report.events:
        return Reward.zero(
            f"the test run tampered with the test framework: {'; '.join(report.events['tampered'])}"
        )
    if not report.ended:
        why = f"killed ({result.killed_by})" if result.killed_by else f"exited with code {result.exit_code}"
        crash = f": {report.events['crash']}" if "crash" in report.events else ""
        return Reward.zero(f"the test run ended before the runner's final report ({why}{crash})")
    refused = report.events.get("refused")
    suffix = f"; the runner refused: {'; '.join(refused)}" if refused else ""
    return verdict(task, report.statuses).reward(suffix)


@dataclass
class Report:
    """What the runner reported: statuses by test id, and the run's other events."""

    statuses: dict[str, str]
    events: dict[str, str | list[str]]
    began: bool = False
    ended: bool = False
    foreign: str = ""
    """Why the channel cannot be trusted (a line without the nonce, a test reported twice, ...)."""


def read_report(stream: bytes, nonce: str) -> Report:
    """Parse the runner's channel: ``<nonce> <json>`` lines, ``begin`` first and ``end`` last."""
    report = Report({}, {})
    for number, line in enumerate(stream.decode("utf-8", errors="replace").splitlines(), start=1):
        tag, _, body = line.partition(" ")
        try:
            record = json.loads(body) if tag == nonce else None
        except ValueError:
            record = None
        in_order = (
            isinstance(record, dict)
            and not report.ended
            and (report.began or "begin" in record or "crash" in record or "unsupported" in record)
        )
        if not in_order or not isinstance(record, dict):
            report.foreign = report.foreign or f"line {number} is not the runner's: {line[:80]!r}"
            continue
        report.began |= "begin" in record
        report.ended |= "end" in record
        if "test" in record:
            test_id = str(record["test"])
            if test_id in report.statuses:
                report.foreign = report.foreign or f"test {test_id} was reported twice"
            report.statuses[test_id] = str(record.get("status"))
        for key in ("tampered", "crash", "forged", "refused", "unsupported"):
            if key in record:
                report.events[key] = record[key]
    return report


async def _patch(session: Session, diff: str, *, dry_run: bool = False) -> ExecResult:
    argv = ["patch", "-p1", "--batch", "--forward", *(["--dry-run"] if dry_run else [])]
    return await session.arun(argv, diff, timeout_s=60)


def _share(results: dict[str, bool]) -> float:
    return sum(results.values()) / len(results) if results else 1.0


def _names(tests: list[str]) -> str:
    return ", ".join(tests[:MAX_LISTED]) + (", ..." if len(tests) > MAX_LISTED else "")
