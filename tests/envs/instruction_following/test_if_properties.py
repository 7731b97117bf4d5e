"""Every IFEval / IFEvalG checker on hostile input: a bool, never an exception, the same verdict twice,
and linear time on the inputs that make the reference's backtracking regexes quadratic."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cascade_envs.envs.instruction_following import text
from cascade_envs.envs.instruction_following.env import InstructionFollowingEnv
from cascade_envs.envs.instruction_following.registry import get_instruction

# kwargs for every id, taken from the bundled samples (which cover all 54 ids)
KWARGS = {
    check["id"]: check["kwargs"]
    for loaded in InstructionFollowingEnv().tasks
    for check in loaded.task.checks
    if get_instruction(check["id"]).family in ("ifeval", "ifevalg")
}
IDS = sorted(KWARGS)

# Texts made of the characters the checkers look for, so hypothesis reaches their branches.
ALPHABET = st.sampled_from([*"*-[]<>.\"'!?,\n \t#:", "***", "\n\n", "P.S.", "Section 1", "Leaves", "gold"])
TEXTS = st.one_of(st.text(), st.lists(ALPHABET, max_size=60).map("".join))


def test_every_id_has_sample_kwargs():
    assert len(IDS) == 54


@pytest.mark.parametrize("iid", IDS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(response=TEXTS)
def test_checker_returns_a_stable_bool(iid, response):
    check = get_instruction(iid).check
    verdict = check(response, **KWARGS[iid])
    assert isinstance(verdict, bool)
    for cached in (text.punkt_sentences, text.word_tokens, text.detect_language):
        cached.cache_clear()
    assert check(response, **KWARGS[iid]) is verdict


N = 100_000
HOSTILE = {
    "newlines": "\n" * N,
    "spaces": " " * N,
    "open-brackets": "[" * N,
    "stars": "*" * N,
    "angles": "<" * N + ">",
    "dashes": "-" * N,
    "blank-lines-with-spaces": " \n" * (N // 2),
    "repeated-first-word": "Every " * (N // 6),
    "markdown-soup": "* a\n- b\n[x] <<t>> ***\n\n" * (N // 22),
    "sentences": "Mr. Smith went home. He was tired! " * (N // 36),
    "binary": "\x00\ufffd\ud800" * (N // 3),
}


@pytest.mark.slow
@pytest.mark.parametrize("iid", IDS)
def test_hostile_100k_inputs_in_bounded_time(iid):
    check = get_instruction(iid).check
    for name, hostile in HOSTILE.items():
        start = time.perf_counter()
        verdict = check(hostile, **KWARGS[iid])
        elapsed = time.perf_counter() - start
        assert isinstance(verdict, bool), name
        assert elapsed < 15, f"{iid} took {elapsed:.1f}s on {name}"
