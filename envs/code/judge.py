"""Judging one solution: build it once, run every test in one sandbox session, compare.

Each response gets one sandbox session (one ~6 ms start, not one per test). C++ is compiled once
per distinct source (binaries cached by source hash, shared by the G rollouts of a prompt that
agree). The solution never sees expected outputs: comparison and checkers run outside its
sandbox. Verdicts follow competitive-programming usage (WA, TLE, MLE, OLE, RE, CE).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from ...core import Reward
from ...sandbox import EXECUTABLE, File, Sandbox, SandboxError, Session, get_sandbox
from ...sandbox.results import ExecResult
from .compare import compare_output, compare_value, describe_value
from .extract import last_code_block
from .harness import DRIVER, DRIVER_NAME, SOLUTION_NAME, parse_result
from .subtasks import SubtaskVerdict, all_failed, run_subtasks, summary
from .task import CHECKER_EXIT, CodeTask


@dataclass
class JudgeConfig:
    """Limits and policy. Task fields (``time_limit_s``, ``memory_mb``, ``total_time_s``) win."""

    time_limit_s: float = 5.0
    """CPU seconds per test; the wall clock may run to ``wall_factor`` times that (plus 0.5 s) when
    the machine is busy, so a loaded host does not turn correct solutions into time-outs."""
    wall_factor: float = 2.0
    memory_mb: int = 1024
    total_time_s: float = 120.0
    compile_timeout_s: float = 30.0
    compile_memory_mb: int = 2048
    checker_timeout_s: float = 10.0
    stop_at_first_failure: bool = True
    cpp_flags: tuple[str, ...] = ("-O2", "-std=c++17")
    cache_size: int = 512
    max_concurrency: int = 0
    """Responses judged at once by one ``Judge`` (0: one per CPU core); the rest wait their turn."""


@dataclass
class Program:
    """Something runnable in a session: the files it needs and how to start it."""

    files: dict[str, File]
    argv: list[str]
    error: str | None = None
    """Set when the program could not be built (compile error)."""


@dataclass
class Verdict:
    passed: bool
    reason: str
    tests_total: int
    tests_run: int = 0
    tests_passed: int = 0
    failed_test: int | None = None
    time_s: float = 0.0
    max_test_time_s: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)
    score: float | None = None
    """The reward when it is not all or nothing (IOI subtasks: the fraction of the points earned)."""

    def reward(self, language: str) -> Reward:
        components = {
            "language": language,
            "tests_total": self.tests_total,
            "tests_run": self.tests_run,
            "tests_passed": self.tests_passed,
            "pass_rate": self.tests_passed / self.tests_total if self.tests_total else 0.0,
            "failed_test": self.failed_test,
            "time_s": round(self.time_s, 4),
            "max_test_time_s": round(self.max_test_time_s, 4),
            **self.details,
        }
        value = float(self.passed) if self.score is None else self.score
        return (
            Reward(value, components, reason=self.reason) if value else Reward.zero(self.reason, **components)
        )


def _subtask_verdict(verdict: Verdict, subtasks: list[SubtaskVerdict]) -> Verdict:
    """``verdict`` scored by its subtasks: points fraction, reason and per-subtask details."""
    verdict.score, verdict.reason = summary(subtasks)
    verdict.passed = all(v.accepted for v in subtasks)
    verdict.details = {
        **verdict.details,
        "points": sum(v.earned for v in subtasks),
        "max_points": sum(v.points for v in subtasks),
        "subtasks": [v.to_dict() for v in subtasks],
    }
    return verdict


class CheckerError(Exception):
    """The task's checker failed (exit 3, crash, time-out): the response cannot be scored."""


def run_failure(result: ExecResult, cpu_limit_s: float = float("inf")) -> str | None:
    """Why a run did not complete normally, in judge words (``None`` when it did).

    A sandbox lost for reasons of its own raises ``SandboxError`` (the reward is masked); one the
    program killed or stopped (``killed_by="agent_killed"``) is the program's failure.
    """
    if result.killed_by == "sandbox":
        raise SandboxError(result.error or "sandbox lost")
    if result.killed_by == "agent_killed":
        return "runtime error: the program killed or stopped its sandbox"
    if result.killed_by in ("timeout", "cpu_time") or result.cpu_s > cpu_limit_s:
        what = "wall clock" if result.killed_by == "timeout" else "cpu time"
        return f"time limit exceeded ({what})"
    if result.killed_by == "memory":
        return "memory limit exceeded"
    if result.killed_by == "output_limit":
        return "output limit exceeded"
    if result.killed_by == "file_size":
        return "file size limit exceeded"
    if result.error:
        return f"runtime error: {result.error}"
    if result.killed_by or result.exit_code:
        tail = result.stderr[-400:].decode("utf-8", errors="replace").strip()
        what = result.killed_by or f"exit code {result.exit_code}"
        return f"runtime error ({what})" + (f": {tail}" if tail else "")
    return None


class Judge:
    """Scores code answers against a task's tests in a sandbox."""

    def __init__(self, sandbox: Sandbox | str | None = None, config: JudgeConfig | None = None):
        self._sandbox = sandbox
        self.config = config or JudgeConfig()
        self._binaries: OrderedDict[str, Program] = OrderedDict()
        self._building: dict[str, asyncio.Future[Program]] = {}
        self._slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )

    def _slot(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        if loop not in self._slots:
            self._slots[loop] = asyncio.Semaphore(self.config.max_concurrency or os.cpu_count() or 1)
        return self._slots[loop]

    @property
    def sandbox(self) -> Sandbox:
        if not isinstance(self._sandbox, Sandbox):
            self._sandbox = get_sandbox(self._sandbox)
        return self._sandbox

    async def ascore(self, task: CodeTask, answer: str, config: JudgeConfig | None = None) -> Reward:
        """The reward of ``answer``: 1 when its last code block passes every test, else 0 with the reason."""
        block = last_code_block(answer)
        if block is None:
            return Reward.zero("no fenced code block in the answer")
        language = block.language or (task.languages[0] if len(task.languages) == 1 else "python")
        if language not in task.languages:
            return Reward.zero(
                f"solution language {language!r} not accepted (expected {', '.join(task.languages)})"
            )
        if not block.code.strip():
            return Reward.zero("the last code block is empty")
        if task.n_tests == 0:
            return Reward.failed("the task has no tests: it cannot be scored")
        _ = self.sandbox  # no usable backend is a refusal (SandboxError, one line), never a masked reward
        try:
            verdict = await self.judge(task, block.code, language, config)
        except SandboxError as exc:
            return Reward.failed(f"sandbox failure: {exc}", language=language)
        except CheckerError as exc:
            return Reward.failed(f"checker failure: {exc}", language=language)
        return verdict.reward(language)

    async def judge(
        self, task: CodeTask, code: str, language: str, config: JudgeConfig | None = None
    ) -> Verdict:
        cfg = config or self.config
        async with self._slot(), await self.sandbox.asession() as session:
            if task.fn_name:  # the driver imports the solution and calls the function
                program = Program(
                    {SOLUTION_NAME: File(code.encode()), DRIVER_NAME: File(DRIVER.encode())},
                    [self.sandbox.python, DRIVER_NAME, task.fn_name],
                )
            else:
                program = await self.build(session, code, language, "solution")
            if program.error:
                failed = Verdict(False, f"compile error: {program.error}", task.n_tests)
                if task.subtasks:
                    return _subtask_verdict(failed, all_failed(task.subtasks, failed.reason))
                return failed
            await session.awrite(program.files)
            checker = _CheckerRun(self, task, cfg) if task.checker else None
            run = self._run_subtasks if task.subtasks else self._run_tests
            try:
                return await run(session, program, task, checker, cfg)
            finally:
                if checker:
                    await checker.aclose()

    async def _run_tests(
        self,
        session: Session,
        program: Program,
        task: CodeTask,
        checker: _CheckerRun | None,
        cfg: JudgeConfig,
    ) -> Verdict:
        verdict = Verdict(True, f"{task.n_tests}/{task.n_tests} tests passed", task.n_tests)
        for index in range(task.n_tests):
            failure = await self._run_test(session, program, task, checker, cfg, verdict, index)
            if failure is None:
                verdict.tests_passed += 1
                continue
            if verdict.passed:
                verdict.passed, verdict.failed_test = False, index
                verdict.reason = f"test {index + 1}/{task.n_tests}: {failure}"
            if cfg.stop_at_first_failure or failure.startswith("time budget"):
                break
        return verdict

    async def _run_test(
        self,
        session: Session,
        program: Program,
        task: CodeTask,
        checker: _CheckerRun | None,
        cfg: JudgeConfig,
        verdict: Verdict,
        index: int,
    ) -> str | None:
        """Run hidden test ``index`` (its time added to ``verdict``): ``None`` when it passed, else why not."""
        budget = task.total_time_s or cfg.total_time_s
        remaining = budget - verdict.time_s
        if remaining <= 0:
            return f"time budget of {budget:g}s per response exhausted"
        given, expected = task.inputs[index], task.outputs[index]
        limit = task.time_limit_s or cfg.time_limit_s
        out_mb = max(1.0, 4 * len(expected) / (1 << 20) + 1)
        wall = min(limit * cfg.wall_factor + 0.5, remaining)
        result = await session.arun(
            program.argv,
            given,
            timeout_s=wall,
            memory_mb=task.memory_mb or cfg.memory_mb,
            output_limit_mb=out_mb,
        )
        verdict.tests_run += 1
        verdict.time_s += result.wall_s
        verdict.max_test_time_s = max(verdict.max_test_time_s, result.wall_s)
        return run_failure(result, limit) or await self._check(result, given, expected, task, checker)

    async def _run_subtasks(
        self,
        session: Session,
        program: Program,
        task: CodeTask,
        checker: _CheckerRun | None,
        cfg: JudgeConfig,
    ) -> Verdict:
        """IOI rules: each subtask's tests until its first failure; the score is the points fraction."""
        verdict = Verdict(True, "", task.n_tests)

        async def run(index: int) -> str | None:
            failure = await self._run_test(session, program, task, checker, cfg, verdict, index)
            if failure is None:
                verdict.tests_passed += 1
            elif verdict.failed_test is None:
                verdict.failed_test = index
            return failure

        subtasks = await run_subtasks(task.subtasks, run)
        return _subtask_verdict(verdict, subtasks)

    async def _check(
        self, result: ExecResult, given: str, expected: str, task: CodeTask, checker: _CheckerRun | None
    ) -> str | None:
        if checker is not None and not task.fn_name:
            return await checker.check(given, result.stdout, expected)
        want = json.loads(expected) if task.fn_name else None
        try:  # whatever the program printed, comparing it is a verdict, never a failure to score
            if task.fn_name:
                ok, value = parse_result(result.text)
                if not ok:
                    return str(value)
                if compare_value(value, want, task.float_tolerance):
                    return None
                return f"wrong answer: returned {describe_value(value)}, expected {describe_value(want)}"
            return compare_output(result.text, expected, task.float_tolerance)
        except (ArithmeticError, RecursionError, ValueError, MemoryError) as exc:
            return f"wrong answer: unreadable output ({type(exc).__name__})"

    async def build(self, session: Session, source: str, language: str, name: str) -> Program:
        """A runnable program for ``source``; C++ is compiled in ``session`` once per distinct source."""
        if language == "python":
            return Program({f"{name}.py": File(source.encode())}, [self.sandbox.python, f"{name}.py"])
        key = hashlib.sha256(json.dumps([source, self.config.cpp_flags, name]).encode()).hexdigest()
        if key in self._binaries:
            self._binaries.move_to_end(key)
            program = self._binaries[key]
        elif key in self._building:
            program = await asyncio.shield(self._building[key])
        else:
            future: asyncio.Future[Program] = asyncio.get_running_loop().create_future()
            self._building[key] = future
            try:
                program = await self._compile(session, source, name)
                future.set_result(program)
            except BaseException as exc:
                future.set_exception(exc)
                future.exception()  # mark retrieved: waiters re-raise it themselves
                raise
            finally:
                del self._building[key]
            self._binaries[key] = program
            while len(self._binaries) > self.config.cache_size:
                self._binaries.popitem(last=False)
        return program

    async def _compile(self, session: Session, source: str, name: str) -> Program:
        cfg = self.config
        await session.awrite({f"{name}.cpp": source})
        result = await session.arun(
            ["g++", *cfg.cpp_flags, f"{name}.cpp", "-o", name],
            timeout_s=cfg.compile_timeout_s,
            memory_mb=cfg.compile_memory_mb,
        )
        if result.killed_by == "sandbox":
            raise SandboxError(result.error or "sandbox lost while compiling")
        if not result.ok:
            if result.killed_by:
                return Program({}, [], f"compiler stopped: {result.killed_by}")
            tail = result.stderr[-600:].decode("utf-8", errors="replace").strip()
            return Program({}, [], tail or f"g++ exit code {result.exit_code}")
        binary = await session.aread(name)
        return Program({name: File(binary, EXECUTABLE)}, [f"./{name}"])


class _CheckerRun:
    """A task's checker in its own sandbox session (never the solution's), built on first use."""

    def __init__(self, judge: Judge, task: CodeTask, config: JudgeConfig):
        self.judge, self.task, self.config = judge, task, config
        self.session: Session | None = None
        self.program: Program | None = None

    async def check(self, given: str, output: bytes, expected: str) -> str | None:
        assert self.task.checker is not None
        if self.session is None:
            self.session = await self.judge.sandbox.asession()
            self.program = await self.judge.build(
                self.session, self.task.checker.source, self.task.checker.language, "checker"
            )
            if self.program.error:
                raise CheckerError(f"checker does not compile: {self.program.error}")
            await self.session.awrite(self.program.files)
        assert self.program is not None
        await self.session.awrite({"input.txt": given, "output.txt": output, "answer.txt": expected})
        result = await self.session.arun(
            [*self.program.argv, "input.txt", "output.txt", "answer.txt"],
            timeout_s=self.config.checker_timeout_s,
            memory_mb=1024,
        )
        if result.killed_by == "sandbox":
            raise SandboxError(result.error or "checker sandbox lost")
        if result.killed_by or result.exit_code not in (0, 1, 2, 7):
            raise CheckerError(result.describe())
        if result.exit_code == 0:
            return None
        message = (result.stderr or result.stdout)[-300:].decode("utf-8", errors="replace").strip()
        return f"{CHECKER_EXIT[result.exit_code]} (checker)" + (f": {message}" if message else "")

    async def aclose(self) -> None:
        if self.session is not None:
            await self.session.aclose()
