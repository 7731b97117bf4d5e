"""Shared text primitives: the rule-based and Punkt sentence splitters, NLTK word tokens offline,
and the faster langdetect detector, which must give langdetect's own n-grams and probabilities."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cascade_envs.envs.instruction_following import text


@pytest.mark.parametrize(
    ("raw", "sentences"),
    [
        (
            "Mr. Smith went to Washington. He arrived at 3.30 pm!",
            ["Mr. Smith went to Washington.", "He arrived at 3.30 pm!"],
        ),
        # the reference's quirks are kept: "www." ends a sentence, "Inc." loses its period
        ("Visit www.example.com today. Or not?", ["Visit www.", "example.com today.", "Or not?"]),
        ("Wait... what? Really.", ["Wait...", "what?", "Really."]),
        ('He said "stop." Then left.', ['He said "stop".', "Then left."]),
        ("The U.S.A. He left.", ["The U.S.A.", "He left."]),
        ("Acme Inc. They sell.", ["Acme Inc", "They sell."]),
        ("", []),
    ],
)
def test_rule_based_sentences(raw, sentences):
    assert text.split_sentences(raw) == sentences


def test_punkt_sentences_and_word_tokens_work_offline():
    assert text.punkt_sentences("Dr. Watson arrived. He was late.") == ("Dr. Watson arrived.", "He was late.")
    assert text.word_tokens("Don't stop. It's 5 p.m. now!") == (
        "Do", "n't", "stop", ".", "It", "'s", "5", "p.m.", "now", "!",
    )  # fmt: skip
    assert text.count_words("it's a well-known fact") == 6


def test_compare():
    assert text.compare(2, "less than", 3) and not text.compare(3, "less than", 3)
    assert text.compare(3, "at least", 3) and not text.compare(2, "at least", 3)


def _reference(cls, raw: str):
    detector = cls(text._language_factory())
    detector.append(raw)
    ngrams = detector._extract_ngrams()
    try:
        probabilities = [(p.lang, p.prob) for p in detector.get_probabilities()]
    except Exception as exc:  # langdetect raises when a text has no features
        probabilities = type(exc).__name__
    return ngrams, probabilities


CHARS = st.sampled_from(
    [*"abcXYZ  .,éßİ你好ひカ한\u0219\u06cc\u1ea1ÀÉ\n", "HELLO", "World", "bonjour", "der"]
)


@settings(max_examples=150, deadline=None)
@given(raw=st.one_of(st.text(max_size=200), st.lists(CHARS, max_size=80).map("".join)))
def test_fast_detector_matches_langdetect(raw):
    from langdetect.detector import Detector

    assert _reference(text._detector_class(), raw) == _reference(Detector, raw)


def test_fast_detector_matches_langdetect_on_real_text():
    from langdetect.detector import Detector

    for raw in (
        "The committee met on Tuesday to discuss the new library and its reading rooms.",
        "Bonjour, je voudrais un café et un croissant, s'il vous plaît.",
        "Это простой текст на русском языке о погоде.",
        "这是一个关于天气的简单句子。今天天气很好。",
        "SHOUTING IN CAPITALS WITH a few lower words",
    ):
        assert _reference(text._detector_class(), raw) == _reference(Detector, raw)
