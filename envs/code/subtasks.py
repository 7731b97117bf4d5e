"""IOI-style subtasks: groups of hidden tests with points, public (sample) tests, per-subtask verdicts.

A row opts in with two extra ``verifier_metadata`` keys (``unit_tests`` stays the hidden tests):

- ``subtasks``: ``[{"name": "n <= 10", "points": 30, "tests": [0, 1, 2]}, ...]``, each test an index
  into ``unit_tests`` (a test may serve several subtasks; every test must belong to one);
- ``public_tests``: ``{"inputs": [...], "outputs": [...]}``, the samples shown in the statement, which
  a solver may run before submitting (they never score).

A subtask's points are earned when every one of its tests passes; the reward is the fraction of the
total points earned. Each subtask gets one verdict (``accepted``, ``wrong answer``, ``time limit
exceeded``, ``runtime error``, ...) with its first failing test's short message. The best result
per subtask over several submissions is ``ioi_points``.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ...core import TaskError

VERDICTS = (
    "accepted",
    "wrong answer",
    "presentation error",
    "time limit exceeded",
    "memory limit exceeded",
    "output limit exceeded",
    "runtime error",
    "compile error",
)
MESSAGE_CHARS = 300
"""The longest first-failure message kept per subtask (it goes back into prompts)."""


@dataclass(frozen=True)
class Subtask:
    name: str
    points: float
    tests: tuple[int, ...]


@dataclass(frozen=True)
class SubtaskVerdict:
    """One subtask's result for one submission."""

    name: str
    points: float
    earned: float
    verdict: str
    message: str = ""
    failed_test: int | None = None
    """Index (into the hidden tests) of the first test that failed."""

    @property
    def accepted(self) -> bool:
        return self.verdict == "accepted"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SubtaskVerdict:
        return cls(**{k: data[k] for k in ("name", "points", "earned", "verdict", "message", "failed_test")})


def parse_subtasks(meta: dict[str, Any], n_tests: int) -> tuple[Subtask, ...]:
    """The row's ``subtasks`` (empty when absent); ``TaskError`` naming the bad field."""
    raw = meta.get("subtasks")
    if raw is None:
        return ()
    field = "verifier_metadata.subtasks"
    if not isinstance(raw, list) or not raw:
        raise TaskError("expected a non-empty list of {name, points, tests}", field)
    subtasks: list[Subtask] = []
    covered: set[int] = set()
    for i, item in enumerate(raw):
        where = f"{field}[{i}]"
        if not isinstance(item, dict):
            raise TaskError("expected an object {name, points, tests}", where)
        points, tests = item.get("points"), item.get("tests")
        if (
            isinstance(points, bool)
            or not isinstance(points, (int, float))
            or not math.isfinite(points)
            or points < 0
        ):
            raise TaskError(f"expected a finite number >= 0, got {points!r:.40}", f"{where}.points")
        if (
            not isinstance(tests, list)
            or not tests
            or not all(isinstance(t, int) and not isinstance(t, bool) for t in tests)
        ):
            raise TaskError("expected a non-empty list of test indices", f"{where}.tests")
        bad = [t for t in tests if not 0 <= t < n_tests]
        if bad or len(set(tests)) != len(tests):
            what = f"index {bad[0]} out of range (0..{n_tests - 1})" if bad else "a test listed twice"
            raise TaskError(what, f"{where}.tests")
        name = item.get("name", f"subtask {i + 1}")
        if not isinstance(name, str) or not name.strip():
            raise TaskError("expected a non-empty string", f"{where}.name")
        if any(s.name == name.strip() for s in subtasks):
            raise TaskError(f"{name.strip()!r} names two subtasks", f"{where}.name")
        covered.update(tests)
        subtasks.append(Subtask(name.strip(), float(points), tuple(tests)))
    if sum(s.points for s in subtasks) <= 0:
        raise TaskError("the subtasks' points must add up to more than 0", field)
    if len(covered) != n_tests:
        missing = min(set(range(n_tests)) - covered)
        raise TaskError(f"hidden test {missing} belongs to no subtask", field)
    return tuple(subtasks)


def verdict_of(failure: str) -> str:
    """The verdict word of a judge failure message (``time limit exceeded (cpu time)`` -> ``time limit exceeded``)."""
    text = failure.split(": ", 1)[-1] if failure.startswith("test ") else failure
    for verdict in VERDICTS:
        if text.startswith(verdict):
            return verdict
    if text.startswith("time budget"):
        return "time limit exceeded"
    if text.startswith(("the function returned no result", "the result is not JSON")):
        return "runtime error"
    if text.startswith("file size limit"):
        return "output limit exceeded"
    if text.startswith("partial"):
        return "wrong answer"
    return "runtime error"


RunTest = Callable[[int], Awaitable[str | None]]
"""Runs hidden test ``index``: ``None`` when it passed, else the failure message."""


async def run_subtasks(subtasks: Sequence[Subtask], run_test: RunTest) -> list[SubtaskVerdict]:
    """Judge each subtask in order, stopping a subtask at its first failure; a shared test runs once."""
    results: dict[int, str | None] = {}
    verdicts = []
    for subtask in subtasks:
        failure, failed = None, None
        for index in subtask.tests:
            if index not in results:
                results[index] = await run_test(index)
            if results[index] is not None:
                failure, failed = results[index], index
                break
        if failure is None:
            verdicts.append(SubtaskVerdict(subtask.name, subtask.points, subtask.points, "accepted"))
        else:
            message = f"test {failed + 1 if failed is not None else '?'}: {failure}"[:MESSAGE_CHARS]
            verdicts.append(
                SubtaskVerdict(subtask.name, subtask.points, 0.0, verdict_of(failure), message, failed)
            )
    return verdicts


def all_failed(subtasks: Sequence[Subtask], failure: str) -> list[SubtaskVerdict]:
    """Every subtask failed for one reason that is not a test's (a compile error)."""
    verdict, message = verdict_of(failure), failure[:MESSAGE_CHARS]
    return [SubtaskVerdict(s.name, s.points, 0.0, verdict, message) for s in subtasks]


def summary(verdicts: Sequence[SubtaskVerdict]) -> tuple[float, str]:
    """``(fraction of the points earned, reason)`` of one submission."""
    total = sum(v.points for v in verdicts)
    earned = sum(v.earned for v in verdicts)
    parts = [f"{v.name}: {v.verdict}" for v in verdicts]
    return (earned / total if total else 0.0), f"{earned:g}/{total:g} points ({'; '.join(parts)})"


def ioi_points(submissions: Iterable[Sequence[SubtaskVerdict]]) -> tuple[float, float]:
    """``(points, max_points)`` under IOI rules: per subtask, the best result of any submission."""
    best: dict[str, float] = {}
    total: dict[str, float] = {}
    for verdicts in submissions:
        for v in verdicts:
            total[v.name] = v.points
            best[v.name] = max(best.get(v.name, 0.0), v.earned)
    return sum(best.values()), sum(total.values())
