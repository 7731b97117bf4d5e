"""Answer checks off the event loop: time and size limits, zero vs masked, and each env's aclose.

Instruction following, structured outputs and MCQA run their CPU-bound checks in an env-owned
``VerifierPool``. Pathological answers must finish within the time limit plus a small overhead
and score 0 with "verifier limit: ..."; a verifier failure (crashed worker, broken task) is masked.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cascade_envs import Reward
from cascade_envs.env import run_sync
from cascade_envs.envs.instruction_following import env as if_env
from cascade_envs.envs.instruction_following.env import InstructionFollowingEnv
from cascade_envs.envs.instruction_following.text import ResourceUnavailable
from cascade_envs.envs.mcqa import env as mcqa_env
from cascade_envs.envs.mcqa.env import MCQAEnv
from cascade_envs.envs.mcqa.grading import GRADING_MODES, regex_steps
from cascade_envs.envs.structured_outputs import env as so_env
from cascade_envs.envs.structured_outputs.env import StructuredOutputEnv

OVERHEAD_S = 5.0  # reaping, and start-up of a fresh worker after a kill, on a loaded CI machine
PATIENT_S = 60.0  # the limit where a test is about something else (a worker imports this module)


# Top-level, so a verifier worker can import them in place of the real check.
def crash(*_args: object) -> None:
    os._exit(7)


def unavailable(*_args: object) -> None:
    raise ResourceUnavailable("punkt model not installed")


def alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


def worker_pids(env) -> list[int]:
    return [w.process.pid for w in env.verifier.pool._live]


def timed(env, task: dict, answer: str) -> tuple[Reward, float]:
    start = time.perf_counter()
    reward = run_sync(env.areward(task, answer))
    return reward, time.perf_counter() - start


def assert_limit(reward: Reward, text: str) -> None:
    assert reward.value == 0.0 and not reward.masked, reward
    assert reward.reason.startswith("verifier limit: ") and text in reward.reason, reward.reason


# ----- instruction following ----------------------------------------------------------------------

IF_ROW = {
    "prompt": "Write at least one sentence.",
    "instruction_id_list": ["length_constraints:number_sentences"],
    "kwargs": [{"num_sentences": 1, "relation": "at least"}],
}


@pytest.fixture
def instruction_env() -> Iterator[InstructionFollowingEnv]:
    env = InstructionFollowingEnv([], timeout_s=0.5, workers=1)
    yield env
    env.close()


def test_if_answers_go_to_the_pool_and_agree_with_in_process_checks():
    pooled_env = InstructionFollowingEnv([], timeout_s=PATIENT_S, workers=1)
    inline = InstructionFollowingEnv([], inline_chars=10_000)
    try:
        for answer in ("This is a sentence. " * 100, "", "no", "A. B? C! " * 50):
            pooled, _ = timed(pooled_env, IF_ROW, answer)
            assert pooled == run_sync(inline.areward(IF_ROW, answer))
        assert pooled_env.verifier.pool.live_workers == 1
        assert inline.verifier._pool is None  # short enough: checked in-process, nothing started
    finally:
        pooled_env.close()


def test_if_slow_answer_is_stopped_at_the_time_limit(instruction_env):
    timed(instruction_env, IF_ROW, "Warm up. " * 200)  # start the worker (start-up is not a check)
    reward, elapsed = timed(instruction_env, IF_ROW, "A. B. " * 31_000)  # ~2 s of Punkt
    assert_limit(reward, "the check took over 0.5 s")
    assert elapsed < 0.5 + OVERHEAD_S
    assert timed(instruction_env, IF_ROW, "Fine. " * 200)[0].value == 1.0  # a fresh worker took over


def test_if_huge_answer_scores_zero_unchecked(instruction_env):
    reward, elapsed = timed(instruction_env, IF_ROW, "word " * 50_000)  # the answer is stripped
    assert_limit(reward, "answer has 249999 characters, over the 200000 checked")
    assert elapsed < 0.5 and instruction_env.verifier._pool is None


def test_if_verifier_failures_are_masked(monkeypatch):
    env = InstructionFollowingEnv([], timeout_s=PATIENT_S, workers=1)
    try:
        monkeypatch.setattr(if_env, "follow_checks", crash)
        reward, _ = timed(env, IF_ROW, "Long enough. " * 100)
        assert reward.masked and "exit code 7" in reward.error
        monkeypatch.setattr(if_env, "follow_checks", unavailable)
        reward, _ = timed(env, IF_ROW, "Long enough. " * 100)
        assert reward.masked and reward.error == "resource unavailable: punkt model not installed"
    finally:
        env.close()


# ----- structured outputs -------------------------------------------------------------------------


def so_row(schema: dict, schema_type: str = "json") -> dict:
    return {"prompt": "Answer.", "schema_str": json.dumps(schema), "schema_type": schema_type}


WORDS = so_row({"type": "object", "properties": {"text": {"type": "string", "pattern": r"^(\w+\s?)*$"}}})
TABLE = so_row(
    {
        "type": "array",
        "items": {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}},
    },
    "csv",
)


@pytest.fixture
def structured_env() -> Iterator[StructuredOutputEnv]:
    env = StructuredOutputEnv([], timeout_s=1.0, workers=2)
    yield env
    env.close()


def test_so_catastrophic_pattern_is_stopped_and_does_not_stall_other_answers(structured_env):
    evil = json.dumps({"text": "a" * 30 + "!"})
    good = json.dumps({"text": "hello world"})
    task = structured_env.load(WORDS)

    async def together():
        await asyncio.gather(structured_env.areward(task, good), structured_env.areward(task, good))  # warm
        start = time.perf_counter()
        slow = asyncio.ensure_future(structured_env.areward(task, evil))
        fast = await asyncio.gather(*(structured_env.areward(task, good) for _ in range(5)))
        slow_still_running = not slow.done()
        return await slow, fast, slow_still_running, time.perf_counter() - start

    reward, fast, slow_still_running, total_s = run_sync(together())
    assert_limit(reward, "the check took over 1 s")
    assert reward.components["error_type"] == "verifier_limit"
    assert [r.value for r in fast] == [1.0] * 5 and slow_still_running  # answered while the evil one ran
    assert total_s < 1.0 + OVERHEAD_S


def test_so_megabyte_csv_scores_zero_quickly(structured_env):
    csv = "name,age\n" + "\n".join(f"person {i},{i}" for i in range(66_000))
    assert len(csv) > 1_200_000
    reward, elapsed = timed(structured_env, TABLE, csv)
    assert_limit(reward, f"answer has {len(csv)} characters, over the 200000 checked")
    assert elapsed < 0.5


def test_so_large_csv_under_the_limit_is_checked_in_a_worker():
    env = StructuredOutputEnv([], timeout_s=PATIENT_S, workers=1)
    csv = "name,age\n" + "".join(f"person {i},{i}\n" for i in range(10_000))
    try:
        assert timed(env, TABLE, csv)[0].value == 1.0
        assert env.verifier.pool.live_workers == 1
    finally:
        env.close()


def test_so_crashed_worker_is_masked(monkeypatch):
    env = StructuredOutputEnv([], timeout_s=PATIENT_S, workers=1)
    monkeypatch.setattr(so_env, "check_text", crash)
    try:
        reward, _ = timed(env, WORDS, json.dumps({"text": "hi"}))  # has a pattern: always a worker
    finally:
        env.close()
    assert reward.masked and "exit code 7" in reward.error


# ----- MCQA ---------------------------------------------------------------------------------------

SIMPLE = r"Final:\s*([A-D])"  # provably cheap on a short answer: checked in-process
NESTED = r"Final:\s*((?:[A-D]\s?)+)"  # a repeat inside a repeat: no bound, always a worker


def mcqa_row(regex: str) -> dict:
    return {
        "prompt": "Pick one.",
        "options": [{"A": "yes"}, {"B": "no"}],
        "expected_answer": "A",
        "grading_mode": "strict_single_letter_boxed",
        "template_metadata": {"output_regex": regex},
    }


@pytest.fixture
def mcqa() -> Iterator[MCQAEnv]:
    env = MCQAEnv([], timeout_s=1.0, workers=1)
    yield env
    env.close()


def test_mcqa_regex_rows_run_in_process_only_when_provably_cheap(mcqa):
    reward, _ = timed(mcqa, mcqa_row(SIMPLE), "Final: A")
    assert reward.value == 1.0 and mcqa.verifier._pool is None
    reward, _ = timed(mcqa, mcqa_row(SIMPLE), "Final: " + " " * 2000 + "A")  # too long to bound cheaply
    assert reward.value == 1.0 and mcqa.verifier.pool.live_workers == 1
    reward, _ = timed(mcqa, mcqa_row(NESTED), "Final: A")
    assert reward.value == 1.0


def test_mcqa_regex_cost_bound():
    assert regex_steps(SIMPLE, 1000) < mcqa_env.INLINE_STEPS < regex_steps(SIMPLE, 10_000)
    for unbounded in (NESTED, r"^(\w+\s?)*$", r"(?:.*){100}Z", r"(a)\1", r"(?=a)a", ["ok", r"(ab|b)*"]):
        assert regex_steps(unbounded, 10) == math.inf, unbounded
    assert regex_steps(r".*answer is\s*([A-D])", 1000) > mcqa_env.INLINE_STEPS  # two unbounded repeats


def test_mcqa_catastrophic_regex_on_a_short_answer_scores_zero_in_bounded_time(mcqa):
    timed(mcqa, mcqa_row(NESTED), "Final: A")  # warm
    reward, elapsed = timed(mcqa, mcqa_row(r"^(\w+\s?)*$"), "a" * 28 + "!")  # 29 characters
    assert_limit(reward, "the check took over 1 s")
    assert elapsed < 1.0 + OVERHEAD_S + mcqa_env.PROBE_TIMEOUT_S


def test_mcqa_regex_that_times_out_on_any_answer_is_masked(mcqa):
    reward, _ = timed(mcqa, mcqa_row(r"(?:.*){100}Z"), "\\boxed{A}")
    assert reward.masked and "times out even on a short canonical answer" in reward.error
    start = time.perf_counter()  # the verdict on the regex is cached: one time-out, no probes
    reward = run_sync(mcqa.areward(mcqa_row(r"(?:.*){100}Z"), "\\boxed{B}"))
    assert reward.masked and time.perf_counter() - start < 1.0 + OVERHEAD_S


def test_mcqa_crashed_worker_is_masked(monkeypatch):
    env = MCQAEnv([], timeout_s=PATIENT_S, workers=1)
    monkeypatch.setattr(mcqa_env, "regex_letter", crash)
    try:
        reward, _ = timed(env, mcqa_row(NESTED), "Final: A")
    finally:
        env.close()
    assert reward.masked and "exit code 7" in reward.error


def test_mcqa_size_limit_and_linear_builtin_modes():
    env = MCQAEnv([], max_answer_chars=300_000)
    plain = {k: v for k, v in mcqa_row("x").items() if k != "template_metadata"}
    for text in ("\\boxed{" * 40_000, "Answer: " * 35_000, "**Answer:** A or " * 15_000, "A, " * 90_000):
        for mode in GRADING_MODES:
            start = time.perf_counter()
            reward = run_sync(env.areward({**plain, "grading_mode": mode}, text))
            assert not reward.masked and time.perf_counter() - start < 1.0, (mode, text[:20])
    assert env.verifier._pool is None  # built-in extractors run in-process
    reward, _ = timed(env, plain, "A" * 300_001)
    assert_limit(reward, "answer has 300001 characters, over the 300000 checked")


# ----- closing ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make_env", "task", "answer"),
    [
        (lambda: InstructionFollowingEnv([], workers=1), IF_ROW, "A sentence. " * 100),
        (lambda: StructuredOutputEnv([], workers=1), WORDS, json.dumps({"text": "hi there"})),
        (lambda: MCQAEnv([], workers=1), mcqa_row(NESTED), "Final: A"),
    ],
)
def test_aclose_stops_the_env_pool(make_env, task, answer):
    env = make_env()
    assert timed(env, task, answer)[0].value == 1.0
    pids = worker_pids(env)
    assert len(pids) == 1 and alive(pids[0])
    run_sync(env.aclose())
    assert not alive(pids[0]) and env.verifier.pool.live_workers == 0
