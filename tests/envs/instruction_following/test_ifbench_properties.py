"""IFBench checkers on hostile input (random, empty, binary, huge text) and their kwargs contracts."""

from __future__ import annotations

import asyncio
import sys
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cascade_envs.core import TaskError
from cascade_envs.envs.instruction_following.env import InstructionFollowingEnv
from cascade_envs.envs.instruction_following.ifbench import IFBENCH_IDS
from cascade_envs.envs.instruction_following.ifbench_text import require
from cascade_envs.envs.instruction_following.registry import get_instruction, validate_kwargs
from cascade_envs.envs.instruction_following.text import ResourceUnavailable

SAMPLE_KWARGS = {
    "count:conjunctions": {"small_n": 3},
    "count:keywords_multiple": {
        "keyword1": "sun",
        "keyword2": "moon",
        "keyword3": "star",
        "keyword4": "sky",
        "keyword5": "sea",
    },
    "count:numbers": {"N": 2},
    "count:person_names": {"N": 2},
    "count:pronouns": {"N": 3},
    "count:unique_word_count": {"N": 4},
    "count:word_count_range": {"min_words": 2, "max_words": 9},
    "count:words_japanese": {"N": 2},
    "format:list": {"sep": "-"},
    "format:options": {"options": "yes/no/maybe"},
    "ratio:overlap": {"reference_text": "the quick brown fox", "percentage": 50},
    "ratio:stop_words": {"percentage": 40},
    "repeat:repeat_change": {"prompt_to_repeat": "Write a poem about the sea."},
    "repeat:repeat_span": {"prompt_to_repeat": "Write a poem about the sea.", "n_start": 1, "n_end": 3},
    "sentence:increment": {"small_n": 2},
    "sentence:keyword": {"word": "apple", "N": 2},
    "words:keywords_specific_position": {"keyword": "blue", "n": 1, "m": 2},
    "words:repeats": {"small_n": 2},
    "words:words_position": {"keyword": "blue"},
}
CHECKS = [(i, validate_kwargs(i, SAMPLE_KWARGS.get(i, {}))) for i in IFBENCH_IDS]

NASTY = [
    "",
    " ",
    "\n\n\n",
    "\x00" * 50,
    "\ud800 lone surrogate \udfff",
    "\u200b\u200d\ufeff",
    "((((([[[[[{{{{{",
    "\"'\"'\"'\"'",
    "*" * 300 + "-" * 300,
    "Question" * 100,
    "?!" * 200,
    "🏳️‍🌈" * 50,
    '"""' + "," * 200 + "\t" * 200,
    "日本語のテキストです。" * 30,
    "a.b.c. Mr. Dr. e.g. i.e. ... ???",
    "\r\n".join(["line"] * 100),
    bytes(range(256)).decode("latin-1"),
]


@pytest.mark.parametrize(("instruction_id", "kwargs"), CHECKS, ids=[c[0] for c in CHECKS])
@pytest.mark.parametrize("text", NASTY, ids=range(len(NASTY)))
def test_nasty_text_gives_a_bool(instruction_id, kwargs, text):
    assert type(get_instruction(instruction_id).check(text, **kwargs)) is bool


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(max_size=400), data=st.data())
def test_random_text_gives_a_bool(text, data):
    instruction_id, kwargs = data.draw(st.sampled_from(CHECKS))
    assert type(get_instruction(instruction_id).check(text, **kwargs)) is bool


@settings(max_examples=25, deadline=None)
@given(text=st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=200))
def test_every_checker_gives_a_bool_on_the_same_random_text(text):
    for instruction_id, kwargs in CHECKS:
        assert type(get_instruction(instruction_id).check(text, **kwargs)) is bool


@pytest.mark.slow
def test_huge_response_is_checked_in_bounded_time():
    huge = ("The quick brown fox jumps over the lazy dog? Yes! (a [b {c] d) \"q 'r' s\" 猫. \n" * 12_000)[
        :1_000_000
    ]
    for instruction_id, kwargs in CHECKS:
        start = time.perf_counter()
        assert type(get_instruction(instruction_id).check(huge, **kwargs)) is bool
        assert time.perf_counter() - start < 5, instruction_id


@pytest.mark.parametrize(
    ("instruction_id", "kwargs", "message"),
    [
        ("count:word_count_range", {"min_words": 10}, "missing required kwarg 'max_words'"),
        ("count:word_count_range", {"min_words": 10, "max_words": 5}, "above max_words"),
        ("count:words_japanese", {"N": 0}, "at least 1"),
        ("count:numbers", {"N": -1}, "at least 0"),
        ("count:numbers", {"N": 2.5}, "integer"),
        ("sentence:keyword", {"word": "", "N": 2}, "non-empty string"),
        ("repeat:repeat_span", {"prompt_to_repeat": "a b c", "n_start": 2, "n_end": 1}, "before n_start"),
        ("format:options", {}, "missing required kwarg 'options'"),
        ("words:vowel", {"N": 3}, "unknown kwarg"),
    ],
)
def test_bad_kwargs_fail_at_load_time(instruction_id, kwargs, message):
    with pytest.raises(TaskError, match=message):
        validate_kwargs(instruction_id, kwargs)


def test_public_row_kwargs_are_coerced():
    row_kwargs = {"N": 39.0, "percentage": None, "keyword": None}
    assert validate_kwargs("count:person_names", row_kwargs) == {"N": 39}
    assert validate_kwargs("ratio:stop_words", {"percentage": 23.0}) == {"percentage": 23.0}


@pytest.mark.parametrize(
    ("instruction_id", "module", "text"),
    [
        ("words:start_verb", "textblob.en", "Imagine a world."),
        ("format:emoji", "emoji", "Hello there 🚀."),
        ("words:odd_even_syllables", "syllapy", "cat apple dog"),
    ],
)
def test_missing_package_masks_the_reward(monkeypatch, instruction_id, module, text):
    require.cache_clear()
    monkeypatch.setitem(sys.modules, module, None)
    try:
        with pytest.raises(ResourceUnavailable, match="cascade-envs\\[verifiers\\]"):
            get_instruction(instruction_id).check(text)
        env = InstructionFollowingEnv(tasks=[], inline_chars=1000)  # in-process: the package is absent here
        task = env.load({"prompt": "p", "instruction_id_list": [instruction_id], "kwargs": [{}]})
        reward = asyncio.run(env.ascore(task.task, text))
        assert reward.masked and "resource unavailable" in reward.error
    finally:
        require.cache_clear()
