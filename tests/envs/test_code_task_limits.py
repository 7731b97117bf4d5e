"""cascade/Code-v0: a task's own limits are checked when it loads, so a bad limit never becomes a
silent 0 or a misleading verdict (``envs/code/task.py``: ``LIMITS``)."""

from __future__ import annotations

import math

import pytest

from cascade_envs.core import TaskError
from cascade_envs.envs.code.env import CodeEnv
from cascade_envs.envs.code.task import LIMITS, parse_code_task


def row(**meta) -> dict:
    return {
        "prompt": "Echo the input.",
        "verifier_metadata": {"unit_tests": {"inputs": ["1\n"], "outputs": ["1\n"]}, **meta},
    }


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("memory_mb", 1e30, "out of range"),  # scored every answer a plain 0: no such process limit
        ("memory_mb", math.nan, "finite"),
        ("memory_mb", math.inf, "finite"),
        ("memory_mb", 2.5, "whole number"),
        ("memory_mb", 8, "out of range"),
        ("memory_mb", 0, "out of range"),
        ("memory_mb", True, "finite number"),
        ("memory_mb", "256", "finite number"),
        ("time_limit_s", math.nan, "finite"),  # masked as "did not answer in time"
        ("time_limit_s", math.inf, "finite"),
        ("time_limit_s", -1, "out of range"),
        ("time_limit_s", 0, "out of range"),
        ("time_limit_s", 1e-9, "out of range"),
        ("time_limit_s", 1e9, "out of range"),
        ("total_time_s", math.nan, "finite"),
        ("total_time_s", 0, "out of range"),
        ("total_time_s", 1e12, "out of range"),
        ("float_tolerance", math.nan, "finite"),  # masked with InvalidOperation
        ("float_tolerance", -math.inf, "finite"),
        ("float_tolerance", -1e-9, "out of range"),
        ("float_tolerance", 1, "out of range"),  # relative 1 accepts 0 for every expected value
        ("float_tolerance", 5.0, "out of range"),
    ],
)
def test_bad_limits_are_refused_at_load_naming_the_field(field, value, message):
    with pytest.raises(TaskError) as info:
        CodeEnv(tasks=[]).load_task(row(**{field: value}))
    assert info.value.field == f"verifier_metadata.{field}"
    assert message in str(info.value)
    low, high, unit = LIMITS[field]
    if message == "out of range":
        assert (
            f"at least {low:g}" in str(info.value)
            and f"{high:g}" in str(info.value)
            and unit in str(info.value)
        )


@pytest.mark.parametrize(
    ("field", "value", "stored"),
    [
        ("memory_mb", 256, 256),
        ("memory_mb", 256.0, 256),
        ("memory_mb", 16, 16),
        ("memory_mb", 1 << 20, 1 << 20),
        ("time_limit_s", 0.3, 0.3),
        ("time_limit_s", 2, 2.0),
        ("time_limit_s", 3600, 3600.0),
        ("total_time_s", 60, 60.0),
        ("float_tolerance", 1e-6, 1e-6),
        ("float_tolerance", 0.5, 0.5),
        ("float_tolerance", 0, None),  # 0 is exact comparison, as no tolerance
    ],
)
def test_limits_in_range_load(field, value, stored):
    task = parse_code_task(row(**{field: value}))
    assert getattr(task, field) == stored
    assert type(getattr(task, field)) is type(stored)


def test_a_zip_bomb_in_packed_tests_is_a_row_error_not_an_out_of_memory():
    import base64
    import zlib

    from cascade_envs.envs.code import task as task_module

    bomb = zlib.compress(b"[" + b" " * (task_module.MAX_UNPACKED_BYTES + 10) + b"]", 9)
    row = {"prompt": "p", "verifier_metadata": {"unit_tests": {"packed": base64.b64encode(bomb).decode()}}}
    with pytest.raises(TaskError) as err:
        task_module.parse_code_task(row)
    assert err.value.field == "verifier_metadata.unit_tests.packed" and "expand past 512 MiB" in str(
        err.value
    )
