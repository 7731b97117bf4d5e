import math

import pytest

from cascade_envs import ChatSpace, Completion, Reward, TextSpace
from cascade_envs.core import as_completion
from cascade_envs.reasoning import has_visible_text, overlong_reason, split_reasoning


def test_nan_reward_is_masked_not_scored():
    r = Reward(float("nan"))
    assert r.masked and "NaN" in r.error


def test_failed_and_zero_rewards_differ():
    assert Reward.failed("judge down").masked
    zero = Reward.zero("wrong letter")
    assert not zero.masked and zero.value == 0.0 and zero.reason == "wrong letter"


def test_completion_is_a_str_with_generation_facts():
    c = Completion("hi", finish_reason="length", token_ids=[1, 2], logprobs=[-0.1, -0.2])
    assert c == "hi" and isinstance(c, str) and c.truncated
    assert c.to_dict()["token_ids"] == [1, 2]


def test_as_completion_decodes_invalid_utf8_with_replacement():
    c = as_completion(b"ok \xff\xfe end")
    assert c.startswith("ok ") and "\ufffd" in c


def test_as_completion_rejects_non_text():
    with pytest.raises(TypeError, match="model's text"):
        as_completion(42)


def test_spaces():
    chat, text = ChatSpace(seed=0), TextSpace(max_length=5)
    assert chat.contains(chat.sample())
    assert chat.contains([{"role": "user", "content": "x"}])
    assert not chat.contains([{"role": "wizard", "content": "x"}])
    assert not chat.contains("x")
    assert text.contains("abc") and not text.contains("abcdef") and not text.contains(3)


@pytest.mark.parametrize(
    ("text", "reasoning", "answer", "unterminated"),
    [
        ("<think>a</think>B", "a", "B", False),
        ("  <think>\na\n</think>\n\nB\n", "a", "B", False),
        ("a</think>B", "a", "B", False),  # opening tag was in the prompt
        ("<think>never closed", "never closed", "", True),
        ("plain answer", "", "plain answer", False),
        ("", "", "", False),
        ("<think></think>", "", "", False),
        ("x <think>late</think> y", "x <think>late", "y", False),
        # both tags match in any letter case
        ("<THINK>a</THINK>\\boxed{32}", "a", "\\boxed{32}", False),
        ("<Think>a</tHiNk>B", "a", "B", False),
        ("a</THINK>B", "a", "B", False),
        ("<THINK>never closed", "never closed", "", True),
    ],
)
def test_split_reasoning(text, reasoning, answer, unterminated):
    split = split_reasoning(text)
    assert (split.reasoning, split.answer, split.unterminated) == (reasoning, answer, unterminated)


INVISIBLE = [
    "",
    " \n\t\r\f\v",
    "\x00\x1f\x7f\x85",  # whitespace and controls (Cc)
    "\u00a0\u1680\u2000\u200a\u202f\u205f\u3000",  # space separators (Zs)
    "\u2028\u2029",  # line and paragraph separators (Zl, Zp)
    "\u200b\u200c\u200d\u2060\ufeff",  # zero-width space, joiners, word joiner, BOM (Cf)
    "\u00ad\u061c\u180e\u200e\u200f\u202a\u202e\u2066\u2069\u2062",  # soft hyphen, direction marks, invisible times
    "\U000e0001\U000e0041\U000e007f",  # tag characters (Cf)
    "\ud800",  # a lone surrogate (Cs)
    "\u034f\u115f\u1160\u3164\uffa0\u17b4\u180b\ufe0f\U000e0100",  # other default-ignorables
    "\u2800",  # Braille blank
]


@pytest.mark.parametrize("text", INVISIBLE)
def test_text_of_invisible_characters_only_is_no_answer(text):
    assert not has_visible_text(text)
    assert not has_visible_text(f"\u200b{text} \u2060")


@pytest.mark.parametrize(
    "text", ["a", "0", ".", "\ufffd", "\U0001f600", "\u00e9", "\u4e2d", "\u200b\u200bx\u200b"]
)
def test_any_visible_character_is_an_answer(text):
    assert has_visible_text(text)


def test_overlong_rule():
    assert overlong_reason(Completion("x", finish_reason="length"), split_reasoning("x"))
    assert overlong_reason(Completion("<think>x"), split_reasoning("<think>x"))
    assert overlong_reason(Completion("x", finish_reason="stop"), split_reasoning("x")) is None


def test_reward_value_is_float():
    assert isinstance(Reward(1).value, float) and not math.isnan(Reward(True).value)
