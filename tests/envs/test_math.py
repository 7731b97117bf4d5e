"""cascade/Math-v0: symbolic equivalence, the env's own worker pool, NeMo Gym parity, bad input."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cascade_envs import make
from cascade_envs.env import run_sync
from cascade_envs.envs.math.env import MathEnv
from cascade_envs.envs.math.verify import strip_delimiters
from cascade_envs.workers import CallTimeout, WorkerDied

_ENV: list[MathEnv] = []


def shared_env() -> MathEnv:
    """One env for this module's checks (its one warm worker), closed when the module is done."""
    if not _ENV:
        _ENV.append(MathEnv([], timeout_s=20, workers=1))
    return _ENV[0]


@pytest.fixture(scope="module", autouse=True)
def _close_shared_env():
    yield
    while _ENV:
        _ENV.pop().close()


def score(text, gold: str = "4", env: MathEnv | None = None, **task):
    env = env or shared_env()
    return run_sync(env.areward({"prompt": "Solve.", "expected_answer": gold, **task}, text))


# ----- the env's own worker pool (the pool itself: tests/test_workers.py) ----------------------


def test_the_env_owns_its_pool_and_aclose_stops_it():
    env = MathEnv([], timeout_s=20, workers=2)
    assert env._pool is None  # nothing is started before the first check
    assert score("\\boxed{4}", env=env).value == 1.0
    pool = env.pool
    assert pool.live_workers == 1
    env.close()
    assert pool.live_workers == 0
    assert score("\\boxed{4}", env=env).value == 1.0  # a later check starts a fresh worker
    run_sync(env.aclose())
    assert pool.live_workers == 0


def test_two_envs_do_not_share_workers():
    first, second = MathEnv([], workers=1), MathEnv([], workers=1)
    try:
        assert first.pool is not second.pool
    finally:
        first.close()
        second.close()


# ----- scoring ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "gold", "value"),
    [
        ("so \\boxed{4}", "4", 1.0),
        ("\\boxed{4.0}", "4", 1.0),
        ("\\boxed{\\frac{1}{2}}", "0.5", 1.0),
        ("\\boxed{\\dfrac{2}{4}}", "\\(\\frac{1}{2}\\)", 1.0),
        ("\\boxed{\\sqrt{8}}", "$2\\sqrt{2}$", 1.0),
        ("The answer is 4", "4", 1.0),  # no box: the last expression
        ("\\boxed{x = 3}", "3", 1.0),
        ("\\boxed{5}", "4", 0.0),
        ("first \\boxed{4}, then finally \\boxed{5}", "4", 0.0),  # the last box counts
        ("\\boxed{\\pi}", "3.14", 0.0),
    ],
)
def test_equivalence(text, gold, value):
    reward = score(text, gold)
    assert reward.value == value and not reward.masked
    if value == 0.0:
        assert reward.reason == "answer is not equivalent to expected_answer"


def test_components_and_reasoning_split():
    reward = score("<think>maybe \\boxed{5}</think>Therefore \\boxed{\\frac{8}{2}}", "4")
    assert reward.value == 1.0
    assert reward.components == {"expected_answer": "4", "extracted_answer": "4"}


def test_think_tags_in_any_letter_case_split_the_reasoning_off():
    assert score("<THINK>30 + 2 is \\boxed{31}? No.</THINK>\\boxed{32}", "32").value == 1.0
    assert (
        score("<Think>so \\boxed{32}</think>\\boxed{31}", "32").value == 0.0
    )  # the reasoning is not the answer


def test_no_extractable_answer():
    reward = score("I do not know.", "4")
    assert reward.value == 0.0 and reward.reason == "no answer could be extracted"


def test_unparseable_gold_is_masked_not_zero():
    reward = score("\\boxed{4}", "\\(\\)")
    assert reward.masked and "expected_answer" in reward.error


def test_strip_delimiters():
    assert strip_delimiters(" \\(\\frac{1}{2}\\) ") == "\\frac{1}{2}"
    assert strip_delimiters("$x$") == "x"
    assert strip_delimiters("$") == "$"


def test_numeric_gold_is_accepted():
    assert MathEnv([]).load_task({"prompt": "Solve.", "expected_answer": 12}).expected_answer == "12"
    with pytest.raises(ValueError):
        MathEnv([], timeout_s=0)


def test_bundled_samples_score_real_answers():
    env = make("cascade/Math-v0", timeout_s=30, workers=1)
    assert len(env.tasks) >= 20

    async def all_samples():
        good = [
            env.areward(t, f"Answer: \\boxed{{{strip_delimiters(t.task.expected_answer)}}}")
            for t in env.tasks
        ]
        bad = [env.areward(t, "\\boxed{\\frac{7}{5}}") for t in env.tasks]
        return await asyncio.gather(*good), await asyncio.gather(*bad)

    try:
        good, bad = run_sync(all_samples())
    finally:
        env.close()
    assert [r.value for r in good] == [1.0] * len(env.tasks), [r.to_dict() for r in good if r.value != 1.0]
    assert [r.value for r in bad] == [0.0] * len(env.tasks)


# ----- NeMo Gym parity ------------------------------------------------------------------------


def rollout_text(rollout: dict) -> str:
    return "".join(
        part["text"]
        for item in rollout["response"]["output"]
        if item["type"] == "message"
        for part in item["content"]
        if part["type"] == "output_text"
    )


@pytest.mark.slow
def test_nemo_gym_rows_and_rollouts(shared_data: Path):
    """Our reward equals upstream's symbolic ``library_reward`` on every recorded rollout.

    Upstream then asks an LLM judge when the library says 0; we do not (symbolic only). In these
    five rollouts the judge agreed with the library, so the final rewards match too.
    """
    folder = shared_data / "nemo-gym-rows" / "math_with_judge"
    env = MathEnv(str(folder / "example.jsonl"), timeout_s=120, workers=2)
    by_question = {t.task.question: t for t in env.tasks}
    rollouts = [json.loads(line) for line in (folder / "example_rollouts.jsonl").read_text().splitlines()]
    tasks = [
        next(t for q, t in by_question.items() if q in r["responses_create_params"]["input"][0]["content"])
        for r in rollouts
    ]

    async def all_rollouts():
        return await asyncio.gather(
            *(env.areward(t, rollout_text(r)) for t, r in zip(tasks, rollouts, strict=True))
        )

    try:
        rewards = run_sync(all_rollouts())
    finally:
        env.close()
    for rollout, reward in zip(rollouts, rewards, strict=True):
        assert not reward.masked, reward.error
        assert reward.value == rollout["library_reward"] == rollout["reward"]
        assert reward.components["extracted_answer"] == rollout["extracted_answer"]


# ----- bad input --------------------------------------------------------------------------------

# Empty, whitespace, invalid UTF-8, megabyte, unterminated-think and length-cut answers are
# checked for every env by cascade_envs.testing.check_env (tests/test_conformance.py).


def test_megabyte_response_is_bounded():
    env = MathEnv([], timeout_s=5, workers=1)
    start = time.perf_counter()
    try:
        reward = score("1 + " * 250_000 + "\\boxed{4}", env=env)
    finally:
        env.close()
    assert time.perf_counter() - start < 15
    assert (reward.value, reward.masked) == (0.0, False)
    assert reward.reason.startswith("verifier limit: the answer has 1,000,009 characters")


def test_an_answer_that_hangs_sympy_scores_0_within_the_timeout():
    """Attack: an answer built to stall the check (a tower of exponents) would buy a mask if a time-out
    were the verifier's fault; the gold answer checks against itself in time, so it is the answer's 0."""
    env = MathEnv([], timeout_s=2, workers=1)
    try:
        assert score("\\boxed{2}", "2", env=env).value == 1.0  # warm: start-up is not part of a check
        start = time.perf_counter()
        reward = score("\\boxed{9^{9^{9^{9}}}}", "2", env=env)
        assert time.perf_counter() - start < 10
        assert (reward.value, reward.masked) == (0.0, False)
        assert reward.reason.startswith("verifier limit: verification timed out after 2 s")
        assert score("\\boxed{2}", "2", env=env).value == 1.0  # the pool recovered
    finally:
        env.close()


def test_a_check_that_fails_for_the_gold_answer_too_masks(monkeypatch):
    """When the gold answer cannot be checked either (sympy stalls on it, an overloaded machine), no
    answer is at fault: masked, with both reasons; a check that crashes is weighed the same way."""
    env = MathEnv([], timeout_s=1, workers=1)
    calls = []

    async def overloaded(gold, response):
        calls.append(response)
        raise CallTimeout("timed out")

    monkeypatch.setattr(env.pool, "call", overloaded)
    reward = score("\\boxed{3}", "2", env=env)
    assert reward.masked and reward.error == (
        "verification timed out after 1 s; the gold answer checked against itself failed too "
        "(verification timed out after 1 s)"
    )
    assert calls == ["\\boxed{3}", "\\boxed{2}"]  # the answer, then the control

    async def crashes_on_the_answer(gold, response):
        if response == "\\boxed{3}":
            raise WorkerDied("out of memory")
        return {"gold_parsed": True, "correct": True, "extracted": "2"}

    monkeypatch.setattr(env.pool, "call", crashes_on_the_answer)
    reward = score("\\boxed{3}", "2", env=env)
    assert (reward.value, reward.masked) == (0.0, False)
    assert reward.reason.startswith("verifier limit: math-verify failed: out of memory")
    env.close()


@settings(max_examples=40, deadline=None)
@given(
    text=st.lists(
        st.sampled_from(
            [
                "\\boxed{",
                "}",
                "{",
                "\\frac",
                "2",
                "x",
                "^",
                "=",
                "\\sqrt",
                " ",
                "-",
                "(",
                ")",
                "\\",
                "1.5",
                "\\infty",
                ",",
            ]
        )
        | st.text(max_size=3),
        max_size=25,
    ).map("".join)
)
def test_random_responses_never_crash(text):
    reward = score(text, "2")
    assert reward.value in (0.0, 1.0)
    assert not reward.masked or reward.error.startswith(("verification timed out", "math-verify failed"))
