"""InstructionFollowingEnv: a reply with nothing visible follows nothing; IFEval rows whose
``letter_frequency`` letter is not a-z (public IFEval keys 1122 ``#`` and 1129 ``!``) load and count it."""

from __future__ import annotations

import asyncio
import logging

import pytest

from cascade_envs.core import TaskError
from cascade_envs.envs.instruction_following import ifeval
from cascade_envs.envs.instruction_following.env import InstructionFollowingEnv
from cascade_envs.reasoning import NO_ANSWER

# Instructions that text with no content satisfies trivially (IFEval scores an empty reply as not
# following them: ``if response.strip() and instruction.check_following(response)``).
TRIVIAL = [
    ("punctuation:no_comma", {}),
    ("keywords:forbidden_words", {"forbidden_words": ["night"]}),
    ("length_constraints:number_words", {"num_words": 50, "relation": "less than"}),
    ("length_constraints:number_sentences", {"num_sentences": 3, "relation": "less than"}),
    ("keywords:letter_frequency", {"letter": "z", "let_frequency": 2, "let_relation": "less than"}),
    ("change_case:capital_word_frequency", {"capital_frequency": 2, "capital_relation": "less than"}),
    ("language:response_language", {"language": "en"}),
    ("change_case:english_lowercase", {}),
]
NOTHING_VISIBLE = [
    "",
    " \n\t ",
    "\u00a0\u3000",  # no-break and ideographic spaces
    "\u200b",  # zero-width space: not whitespace to str.strip()
    "\u200b\u200c\u200d\u2060\ufeff \u200e",  # joiners, word joiner, BOM, direction mark
    "<think>no commas, none at all</think>",  # think-only: the answer is empty
    "<think>plan</think>\n\u200b\n",
]


def row(iid: str, kwargs: dict) -> dict:
    return {"prompt": "Write something.", "instruction_id_list": [iid], "kwargs": [kwargs]}


@pytest.fixture(scope="module")
def envs():
    strict = InstructionFollowingEnv(tasks=[], inline_chars=10**6)
    loose = InstructionFollowingEnv(tasks=[], strict=False, inline_chars=10**6)
    yield strict, loose
    strict.close()
    loose.close()


@pytest.mark.parametrize(("iid", "kwargs"), TRIVIAL, ids=[i for i, _ in TRIVIAL])
def test_a_reply_with_nothing_visible_follows_nothing(envs, iid, kwargs):
    for env in envs:
        task = env.load(row(iid, kwargs))
        for answer in NOTHING_VISIBLE:
            reward = asyncio.run(env.areward(task, answer))
            assert reward.value == 0.0 and not reward.masked, (env.strict, iid, answer)
            assert reward.reason == NO_ANSWER
        real = "the stars shine over the quiet water and the moon is bright above the town"
        assert asyncio.run(env.areward(task, real)).value == 1.0  # a real reply still can


def test_loose_variants_with_nothing_visible_are_not_checked(envs):
    """Loose scoring drops the first or last line; a variant left with only invisible characters is
    empty. (Upstream IFEval would check "\\u200b" as text, since str.strip() keeps it, and pass it.)"""
    _, loose = envs
    task = loose.load(row("punctuation:no_comma", {}))
    assert asyncio.run(loose.areward(task, "Hello, world\n\u200b")).value == 0.0
    assert asyncio.run(loose.areward(task, "Hello, world\nno commas here")).value == 1.0


# ----- letter_frequency with a letter outside a-z ------------------------------------------------

IFEVAL_1122 = {  # the instruction list and kwargs of public IFEval key 1122 (letter "#")
    "key": 1122,
    "prompt": "make a tweet for playboy's twitter account without using capital letters. "
    "Include at least 4 hashtags, starting with '#'",
    "instruction_id_list": ["change_case:english_lowercase", "keywords:letter_frequency"],
    "kwargs": [{}, {"let_relation": "at least", "letter": "#", "let_frequency": 4}],
}
EXCLAIM = {  # the shape of key 1129: letter "!" (exclamation marks)
    "key": 1129,
    "prompt": "Write a cheer with plenty of exclamation marks.",
    "instruction_id_list": ["keywords:letter_frequency"],
    "kwargs": [{"let_relation": "at least", "letter": "!", "let_frequency": 2}],
}


def test_ifeval_rows_with_a_hash_or_bang_letter_load_and_count_it_literally(caplog):
    env = InstructionFollowingEnv(tasks=[IFEVAL_1122, EXCLAIM], inline_chars=10**6)
    try:
        hashtags, cheer = env.tasks
        assert hashtags.task.checks[1]["kwargs"]["letter"] == "#"
        assert cheer.task.checks[0]["kwargs"]["letter"] == "!"

        def value(task, answer):
            return asyncio.run(env.areward(task, answer)).value

        assert value(hashtags, "weekend mood: pool, sun and good company #summer #vibes #fun #playboy") == 1.0
        assert value(hashtags, "weekend mood #summer #vibes #fun") == 0.0  # three hashtags, many letters
        assert value(cheer, "go team! go!") == 1.0
        assert value(cheer, "go team go, go go go, aaaaaaaa!") == 0.0  # one "!", and plenty of every letter
        for letter, answer, followed in (("!", "wow!!", True), ("#", "a#", False)):
            task = env.load({**EXCLAIM, "kwargs": [{**EXCLAIM["kwargs"][0], "letter": letter}]})
            assert value(task, answer) == float(followed)
    finally:
        env.close()


def test_a_tolerated_letter_is_logged_once_per_character(caplog):
    ifeval._tolerated.discard("%")
    with caplog.at_level(logging.WARNING, logger="cascade_envs.instruction_following"):
        env = InstructionFollowingEnv(tasks=[])
        percent = {**EXCLAIM, "kwargs": [{**EXCLAIM["kwargs"][0], "letter": "%"}]}
        env.load_task(percent)
        env.load_task(percent)
    messages = [r.getMessage() for r in caplog.records if "'%'" in r.getMessage()]
    assert len(messages) == 1 and "counted literally" in messages[0]


@pytest.mark.parametrize(("letter", "stored"), [("Q", "q"), (" z ", "z"), ("#", "#"), ("!", "!"), ("é", "é")])
def test_letters_are_one_character_lower_cased(letter, stored):
    env = InstructionFollowingEnv(tasks=[])
    task = env.load({**EXCLAIM, "kwargs": [{**EXCLAIM["kwargs"][0], "letter": letter}]})
    assert task.task.checks[0]["kwargs"]["letter"] == stored


@pytest.mark.parametrize("letter", ["ab", "##", "", "  "])
def test_more_or_less_than_one_character_is_refused(letter):
    with pytest.raises(TaskError) as info:
        InstructionFollowingEnv(tasks=[]).load_task(
            {**EXCLAIM, "kwargs": [{**EXCLAIM["kwargs"][0], "letter": letter}]}
        )
    assert info.value.field == "kwargs" and "letter" in str(info.value)
