"""Reading code tasks from rows in the public code RL layout (NeMo Gym ``code_gen``).

A row carries ``verifier_metadata.unit_tests = {"inputs": [...], "outputs": [...], "fn_name": ...}``
(optionally ``{"packed": base64(zlib(json))}``). Without ``fn_name`` each test is a stdin/stdout
pair; with it, a LeetCode-style function call: each input holds one JSON value per line (the
arguments) and each output one JSON value (the return value); a ``class Solution`` is instantiated
and its method called. Optional extras, all under ``verifier_metadata``:

- ``checker``: ``{"language": "python" | "cpp", "source": ...}``, a checker program called as
  ``checker <input> <output> <answer>`` with testlib exit codes (0 accepted, 1 wrong answer,
  2 presentation error, 3 checker failure, 7 partial);
- ``time_limit_s`` / ``memory_mb`` per test, ``total_time_s`` per response;
- ``float_tolerance`` (absolute or relative) for numeric comparison;
- ``languages``: the languages accepted (default: Python and C++);
- ``public_tests``: the tests a solver may see (the statement's examples), in the ``unit_tests``
  layout (``fn_name`` and the limits are the row's); they never score, ``unit_tests`` do: they are
  ``CodeEnv.acheck``, what test-time scaling screens candidates with;
- ``subtasks``: IOI-style groups of the ``unit_tests`` with points (``subtasks.py``); the reward is
  then the fraction of the points earned.

Each limit must be a finite number in its range (``LIMITS``): ``time_limit_s`` 0.01-3600 CPU
seconds, ``total_time_s`` 0.01-86400 s, ``memory_mb`` a whole number 16-1048576 MiB,
``float_tolerance`` from 0 (exact) to under 1; otherwise the row is refused with a ``TaskError``
naming the field.
"""

from __future__ import annotations

import base64
import json
import math
import zlib
from dataclasses import dataclass
from typing import Any

from ...core import TaskError
from ...data import Prompt, decode_json_field
from .subtasks import Subtask, parse_subtasks

SUPPORTED_LANGUAGES = ("python", "cpp")
CHECKER_EXIT = {0: "accepted", 1: "wrong answer", 2: "presentation error", 3: "checker failure", 7: "partial"}


@dataclass(frozen=True)
class Checker:
    language: str
    source: str


@dataclass(frozen=True)
class CodeTask:
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    fn_name: str | None = None
    checker: Checker | None = None
    time_limit_s: float | None = None
    memory_mb: int | None = None
    total_time_s: float | None = None
    float_tolerance: float | None = None
    languages: tuple[str, ...] = SUPPORTED_LANGUAGES
    subtasks: tuple[Subtask, ...] = ()

    @property
    def n_tests(self) -> int:
        return len(self.inputs)


@dataclass(frozen=True)
class CodeProblem:
    """The code env's task: the row's prompt, its tests (parsed once), and its ``verifier_metadata`` as
    given, which a verification service reads (it parses rows itself)."""

    prompt: Prompt
    tests: CodeTask
    metadata: dict[str, Any]
    public: CodeProblem | None = None
    """The same problem with its ``public_tests`` as its tests, when the row has them."""


def public_problem(prompt: Prompt, row: dict[str, Any]) -> CodeProblem | None:
    """The problem a solver may check itself on: ``verifier_metadata.public_tests`` as its tests."""
    meta = row["verifier_metadata"]
    public = decode_json_field(meta.get("public_tests"), "verifier_metadata.public_tests")
    if public is None:
        return None
    if isinstance(public, dict) and "fn_name" not in public:
        unit = _unit_tests(meta)
        public = {**public, "fn_name": unit.get("fn_name")} if unit.get("fn_name") else public
    public_meta = {k: v for k, v in meta.items() if k not in ("public_tests", "subtasks")}
    public_meta["unit_tests"] = public
    try:
        tests = parse_code_task({"verifier_metadata": public_meta})
    except TaskError as exc:
        raise TaskError(
            str(exc).replace("unit_tests", "public_tests"), "verifier_metadata.public_tests"
        ) from exc
    return CodeProblem(prompt, tests, public_meta)


def _unit_tests(meta: dict[str, Any]) -> dict[str, Any]:
    tests = decode_json_field(meta.get("unit_tests"), "verifier_metadata.unit_tests")
    if not isinstance(tests, dict):
        raise TaskError("expected an object with 'inputs' and 'outputs'", "verifier_metadata.unit_tests")
    if "packed" in tests:
        try:
            unpacked = json.loads(_inflate(base64.b64decode(tests["packed"])))
        except Exception as exc:
            raise TaskError(f"cannot unpack: {exc}", "verifier_metadata.unit_tests.packed") from exc
        tests = {**unpacked, "fn_name": tests.get("fn_name", unpacked.get("fn_name"))}
    return tests


LIMITS: dict[str, tuple[float, float, str]] = {
    "time_limit_s": (0.01, 3600.0, "CPU seconds per test"),
    "total_time_s": (0.01, 86400.0, "seconds per response"),
    "memory_mb": (16, 1 << 20, "MiB per test, a whole number"),
    "float_tolerance": (0.0, 1.0, "absolute or relative; 0 is exact, under 1"),
}
"""Accepted range ``(low, high, unit)`` of each task limit, ``low <= value <= high`` (a
``float_tolerance`` of 1 or more is refused: relative to the expected value, it would accept 0 for
every answer). Out of range or not finite, the row is refused at load: a NaN time limit used to
report every answer as "did not answer in time", ``memory_mb: 1e30`` could not be set as a
process limit and scored every answer a plain 0, and a NaN tolerance broke the comparison."""


def _limit(meta: dict[str, Any], name: str) -> Any:
    value = meta.get(name)
    if value is None:
        return None
    low, high, unit = LIMITS[name]
    field = f"verifier_metadata.{name}"
    whole = name == "memory_mb"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TaskError(f"expected a finite number ({unit}), got {value!r:.40}", field)
    if whole and value != int(value):
        raise TaskError(f"expected a whole number of MiB, got {value!r}", field)
    too_high = value >= high if name == "float_tolerance" else value > high
    if value < low or too_high:
        upper = f"under {high:g}" if name == "float_tolerance" else f"at most {high:g}"
        raise TaskError(f"{value!r:.40} is out of range: at least {low:g} and {upper} ({unit})", field)
    return int(value) if whole else float(value)


def parse_code_task(row: dict[str, Any]) -> CodeTask:
    """Validate the test data of a row; raise ``TaskError`` naming the bad field."""
    meta = row.get("verifier_metadata")
    if not isinstance(meta, dict):
        raise TaskError("missing or not an object", "verifier_metadata")
    tests = _unit_tests(meta)
    fn_name = tests.get("fn_name") or None
    if fn_name is not None and (not isinstance(fn_name, str) or not fn_name.isidentifier()):
        raise TaskError("expected a Python identifier", "verifier_metadata.unit_tests.fn_name")
    inputs, outputs = _pairs(tests, "verifier_metadata.unit_tests", fn_name)
    checker = meta.get("checker")
    if checker is not None:
        if not (
            isinstance(checker, dict)
            and checker.get("language") in SUPPORTED_LANGUAGES
            and isinstance(checker.get("source"), str)
            and checker["source"].strip()
        ):
            raise TaskError(
                "expected {'language': 'python'|'cpp', 'source': str}", "verifier_metadata.checker"
            )
        checker = Checker(checker["language"], checker["source"])
    languages = meta.get("languages", SUPPORTED_LANGUAGES)
    if isinstance(languages, str):
        languages = [languages]
    if (
        not isinstance(languages, (list, tuple))
        or not languages
        or not set(languages) <= set(SUPPORTED_LANGUAGES)
    ):
        raise TaskError(
            f"expected a list drawn from {list(SUPPORTED_LANGUAGES)}", "verifier_metadata.languages"
        )
    if fn_name and "python" not in languages:
        raise TaskError("function-call tests run Python solutions only", "verifier_metadata.languages")
    return CodeTask(
        inputs=tuple(inputs),
        outputs=tuple(outputs),
        fn_name=fn_name,
        checker=checker,
        time_limit_s=_limit(meta, "time_limit_s"),
        memory_mb=_limit(meta, "memory_mb"),
        total_time_s=_limit(meta, "total_time_s"),
        float_tolerance=_limit(meta, "float_tolerance") or None,
        languages=tuple(("python",) if fn_name else languages),
        subtasks=parse_subtasks(meta, len(inputs)),
    )


def _pairs(tests: dict[str, Any], field: str, fn_name: str | None) -> tuple[list[str], list[str]]:
    """The ``inputs`` and ``outputs`` of a test set, checked (JSON values for function-call tests)."""
    inputs, outputs = tests.get("inputs"), tests.get("outputs")
    for name, value in (("inputs", inputs), ("outputs", outputs)):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise TaskError("expected a list of strings", f"{field}.{name}")
    assert isinstance(inputs, list) and isinstance(outputs, list)
    if len(inputs) != len(outputs):
        raise TaskError(f"{len(inputs)} inputs but {len(outputs)} outputs", field)
    if fn_name:
        for i, (inp, out) in enumerate(zip(inputs, outputs, strict=True)):
            try:
                [json.loads(line) for line in inp.split("\n")]
                json.loads(out)
            except json.JSONDecodeError as exc:
                raise TaskError(f"test {i}: function-call tests need JSON values: {exc}", field) from exc
    return inputs, outputs


MAX_UNPACKED_BYTES = 512 * 1024 * 1024
"""Largest test set a ``packed`` field may expand to (a zip bomb is a row error, not an OOM)."""


def _inflate(data: bytes) -> bytes:
    """zlib-decompress ``data``, refusing output past ``MAX_UNPACKED_BYTES``."""
    inflater = zlib.decompressobj()
    out = inflater.decompress(data, MAX_UNPACKED_BYTES)
    if inflater.unconsumed_tail:
        raise ValueError(f"the packed tests expand past {MAX_UNPACKED_BYTES // 2**20} MiB")
    return out + inflater.flush()
