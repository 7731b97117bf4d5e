"""IFBench ``count:*`` and ``ratio:*`` checkers: counts and proportions of words, sentences, marks."""

from __future__ import annotations

import itertools
import re
from collections import Counter
from typing import Annotated, Any

from .ifbench_text import (
    STOPWORDS,
    count_words,
    ifbench,
    remove_punctuation,
    sentences,
    strip_punctuation,
)
from .registry import at_least

Count = Annotated[int, at_least(0)]
Percentage = Annotated[float, at_least(0)]

_WORD = re.compile(r"\w+")


def _range_ordered(kwargs: dict[str, Any]) -> None:
    if kwargs["min_words"] > kwargs["max_words"]:
        raise ValueError(f"min_words {kwargs['min_words']} is above max_words {kwargs['max_words']}")


@ifbench("count:word_count_range", validate=_range_ordered)
def word_count_range(response: str, *, min_words: Count, max_words: Count) -> bool:
    """The response has between ``min_words`` and ``max_words`` words (inclusive)."""
    return min_words <= count_words(response) <= max_words


@ifbench("count:unique_word_count")
def unique_word_count(response: str, *, N: Count) -> bool:
    """At least ``N`` distinct words (case-insensitive, edge punctuation ignored; a token of pure
    punctuation is not a word, where IFBench counts it as the empty word)."""
    words = {strip_punctuation(word) for word in response.lower().split()}
    words.discard("")
    return len(words) >= N


@ifbench("ratio:stop_words")
def stop_words(response: str, *, percentage: Percentage) -> bool:
    """Stop words are at most ``percentage``% of the words."""
    words = _WORD.findall(response.lower())
    if not words:
        return False
    return 100 * sum(word in STOPWORDS for word in words) / len(words) <= percentage


def _ending_counts(response: str) -> Counter[str]:
    """How many sentences end in each final character."""
    return Counter(sentence[-1] for sentence in sentences(response) if sentence)


@ifbench("ratio:sentence_type")
def sentence_type(response: str) -> bool:
    """Twice as many declarative (``.``) as interrogative (``?``) sentences, and at least one
    question (IFBench also passes 0:0, e.g. text without any sentence punctuation)."""
    ends = _ending_counts(response)
    return ends["?"] > 0 and ends["."] == 2 * ends["?"]


@ifbench("ratio:sentence_balance")
def sentence_balance(response: str) -> bool:
    """As many declarative (``.``) as interrogative (``?``) as exclamatory (``!``) sentences, and
    at least one of each (IFBench also passes 0:0:0)."""
    ends = _ending_counts(response)
    return ends["."] == ends["?"] == ends["!"] > 0


_CONJUNCTIONS = frozenset({"and", "but", "for", "nor", "or", "so", "yet"})


@ifbench("count:conjunctions")
def conjunctions(response: str, *, small_n: Count) -> bool:
    """At least ``small_n`` different coordinating conjunctions (FANBOYS). IFBench counts written
    forms, so "and", "And" and "and," are three; here they are one."""
    used = {strip_punctuation(word).lower() for word in response.split()}
    return len(used & _CONJUNCTIONS) >= small_n


PERSON_NAMES = """
    Emma Liam Sophia Jackson Olivia Noah Ava Lucas Isabella Mason Mia Ethan Charlotte Alexander
    Amelia Benjamin Harper Leo Zoe Daniel Chloe Samuel Lily Matthew Grace Owen Abigail Gabriel Ella
    Jacob Scarlett Nathan Victoria Elijah Layla Nicholas Audrey David Hannah Christopher Penelope
    Thomas Nora Andrew Aria Joseph Claire Ryan Stella Jonathan
""".split()  # noqa: SIM905
"""The 50 names the instruction lists; only these count."""
_PERSON_NAME = re.compile(r"\b(?:" + "|".join(PERSON_NAMES) + r")\b")


@ifbench("count:person_names")
def person_names(response: str, *, N: Count) -> bool:
    """At least ``N`` different names from the instruction's list, as whole words."""
    return len(set(_PERSON_NAME.findall(response))) >= N


def _char_trigrams(text: str) -> set[str]:
    return {text[i : i + 3] for i in range(len(text) - 2)}


@ifbench("ratio:overlap")
def overlap(response: str, *, reference_text: str, percentage: Percentage) -> bool:
    """The share of the response's distinct character trigrams that also occur in
    ``reference_text`` is within ``percentage`` ± 2 points."""
    ngrams = _char_trigrams(response)
    if not ngrams:
        return False
    shared = 100 * len(ngrams & _char_trigrams(reference_text)) / len(ngrams)
    return percentage - 2 <= shared <= percentage + 2


_DIGITS = re.compile(r"\d+")


@ifbench("count:numbers")
def numbers(response: str, *, N: Count) -> bool:
    """Exactly ``N`` numbers; punctuation inside a number (``3.14``, ``1,000``) keeps it one number."""
    return len(_DIGITS.findall(remove_punctuation(response))) == N


_JAPANESE = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff]")


@ifbench("count:words_japanese")
def words_japanese(response: str, *, N: Annotated[int, at_least(1)]) -> bool:
    """Every ``N``-th whitespace word contains Japanese script (words that are plain numbers or
    pure punctuation are exempt)."""
    for word in response.split()[N - 1 :: N]:
        word = strip_punctuation(word)
        if word and not word.isdigit() and not _JAPANESE.search(word):
            return False
    return True


PRONOUNS = frozenset(
    """
    i me we us you he him she her it they them my mine our ours your yours his hers its their
    theirs myself ourselves yourself yourselves himself herself itself themselves this that these
    those who whom whose which what whoever whomever whatever whichever anybody anyone anything
    everybody everyone everything nobody nothing somebody someone something each either neither
    both all some any none
    """.split()  # noqa: SIM905
)


_DOTTED_ABBREVIATION = re.compile(r"\b(?:\w\.){2,}")


@ifbench("count:pronouns")
def pronouns(response: str, *, N: Count) -> bool:
    """At least ``N`` pronoun tokens (IFBench's list: personal, possessive, reflexive,
    demonstrative, interrogative, relative, indefinite). Words are ``\\w+`` runs (IFBench: NLTK
    tokens), so ``she/her`` counts two and ``it's`` counts ``it``; dotted abbreviations (``i.e.``)
    are not words."""
    text = _DOTTED_ABBREVIATION.sub(" ", response.lower())
    return sum(token in PRONOUNS for token in _WORD.findall(text)) >= N


_MARKS = frozenset(".,!?;:")


@ifbench("count:punctuation")
def punctuation(response: str) -> bool:
    """Uses ``. , ! ? ; :`` and an interrobang (``?!``, ``!?`` or ``‽``); the marks of one ``?!``
    do not also count as the plain ``?`` and ``!``."""
    for pair in ("?!", "!?"):
        if pair in response:
            rest = response.replace(pair, "", 1)
            break
    else:
        if "‽" not in response:
            return False
        rest = response
    return set(rest) >= _MARKS


_KEYWORD_TIMES = (1, 2, 3, 5, 7)


@ifbench("count:keywords_multiple")
def keywords_multiple(
    response: str, *, keyword1: str, keyword2: str, keyword3: str, keyword4: str, keyword5: str
) -> bool:
    """``keyword1`` .. ``keyword5`` occur exactly 1, 2, 3, 5 and 7 times (case-insensitive).
    Occurrences are substrings, as in IFBench: "whispered" counts as an occurrence of "whisper"."""
    text = response.lower()
    keywords = [keyword.strip().lower() for keyword in (keyword1, keyword2, keyword3, keyword4, keyword5)]
    return all(text.count(keyword) == times for keyword, times in zip(keywords, _KEYWORD_TIMES, strict=True))


@ifbench("ratio:sentence_words")
def sentence_words(response: str) -> bool:
    """Exactly three sentences, all of the same length in characters, no two sharing a word
    (case-insensitive, punctuation ignored). IFBench does not check the "different words" part."""
    parts = sentences(response)
    if len(parts) != 3 or len({len(part) for part in parts}) != 1:
        return False
    vocabularies = [set(_WORD.findall(part.lower())) for part in parts]
    return all(not (a & b) for a, b in itertools.combinations(vocabularies, 2))
