"""IFBench ``count:*`` and ``ratio:*`` checkers: counts and proportions of words, sentences, marks."""

from __future__ import annotations

import re
from collections import Counter

from .ifbench_text import (
    PUNCTUATION,
    STOPWORDS,
    count_words,
    ifbench,
    remove_punctuation,
    sentences,
    strip_punctuation,
    word_tokens,
)

_WORD = re.compile(r"\w+")


@ifbench("count:word_count_range")
def word_count_range(response: str, *, min_words: int, max_words: int) -> bool:
    """The response has between ``min_words`` and ``max_words`` words (inclusive)."""
    return min_words <= count_words(response) <= max_words


@ifbench("count:unique_word_count")
def unique_word_count(response: str, *, N: int) -> bool:
    """At least ``N`` distinct words (case-insensitive, edge punctuation ignored)."""
    words = {strip_punctuation(word) for word in response.lower().split()}
    words.discard("")
    return len(words) >= N


@ifbench("ratio:stop_words")
def stop_words(response: str, *, percentage: float) -> bool:
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
    """Twice as many declarative (``.``) as interrogative (``?``) sentences."""
    ends = _ending_counts(response)
    return ends["."] == 2 * ends["?"]


@ifbench("ratio:sentence_balance")
def sentence_balance(response: str) -> bool:
    """As many declarative (``.``) as interrogative (``?``) as exclamatory (``!``) sentences."""
    ends = _ending_counts(response)
    return ends["."] == ends["?"] == ends["!"]


_CONJUNCTIONS = frozenset({"and", "but", "for", "nor", "or", "so", "yet"})


@ifbench("count:conjunctions")
def conjunctions(response: str, *, small_n: int) -> bool:
    """At least ``small_n`` different coordinating conjunctions (FANBOYS)."""
    used = {strip_punctuation(word).lower() for word in response.split()}
    return len(used & _CONJUNCTIONS) >= small_n


PERSON_NAMES = (
    "Emma Liam Sophia Jackson Olivia Noah Ava Lucas Isabella Mason Mia Ethan Charlotte Alexander Amelia "
    "Benjamin Harper Leo Zoe Daniel Chloe Samuel Lily Matthew Grace Owen Abigail Gabriel Ella Jacob "
    "Scarlett Nathan Victoria Elijah Layla Nicholas Audrey David Hannah Christopher Penelope Thomas Nora "
    "Andrew Aria Joseph Claire Ryan Stella Jonathan"
).split()
"""The 50 names the instruction lists; only these count."""
_PERSON_NAME = re.compile(r"\b(?:" + "|".join(PERSON_NAMES) + r")\b")


@ifbench("count:person_names")
def person_names(response: str, *, N: int) -> bool:
    """At least ``N`` different names from the instruction's list, as whole words."""
    return len(set(_PERSON_NAME.findall(response))) >= N


def _char_trigrams(text: str) -> set[str]:
    return {text[i : i + 3] for i in range(len(text) - 2)}


@ifbench("ratio:overlap")
def overlap(response: str, *, reference_text: str, percentage: float) -> bool:
    """The share of the response's distinct character trigrams that also occur in
    ``reference_text`` is within ``percentage`` ± 2 points."""
    ngrams = _char_trigrams(response)
    if not ngrams:
        return False
    shared = 100 * len(ngrams & _char_trigrams(reference_text)) / len(ngrams)
    return percentage - 2 <= shared <= percentage + 2


_DIGITS = re.compile(r"\d+")


@ifbench("count:numbers")
def numbers(response: str, *, N: int) -> bool:
    """Exactly ``N`` numbers; punctuation inside a number (``3.14``, ``1,000``) keeps it one number."""
    return len(_DIGITS.findall(remove_punctuation(response))) == N


_JAPANESE = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff]")


@ifbench("count:words_japanese")
def words_japanese(response: str, *, N: int) -> bool:
    """Every ``N``-th whitespace word contains Japanese script (words that are plain numbers or
    pure punctuation are exempt)."""
    if N < 1:
        return False
    for word in response.split()[N - 1 :: N]:
        word = strip_punctuation(word)
        if word and not word.isdigit() and not _JAPANESE.search(word):
            return False
    return True


PRONOUNS = frozenset(
    """
    i me we us you he him she her it they them my mine our ours your yours his hers its their theirs
    myself ourselves yourself yourselves himself herself itself themselves this that these those who
    whom whose which what whoever whomever whatever whichever anybody anyone anything everybody
    everyone everything nobody nothing somebody someone something each either neither both all some
    any none
    """.split()
)


@ifbench("count:pronouns")
def pronouns(response: str, *, N: int) -> bool:
    """At least ``N`` pronoun tokens (personal, possessive, reflexive, demonstrative, interrogative,
    relative and indefinite); ``she/her`` counts as two."""
    tokens = word_tokens(response.lower().replace("/", " "))
    return sum(token in PRONOUNS for token in tokens) >= N


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
    return _MARKS <= set(rest)


_KEYWORD_TIMES = (1, 2, 3, 5, 7)


@ifbench("count:keywords_multiple")
def keywords_multiple(
    response: str, *, keyword1: str, keyword2: str, keyword3: str, keyword4: str, keyword5: str
) -> bool:
    """``keyword1`` .. ``keyword5`` occur exactly 1, 2, 3, 5 and 7 times (case-insensitive)."""
    text = response.lower()
    keywords = (keyword1, keyword2, keyword3, keyword4, keyword5)
    return all(
        text.count(keyword.strip().lower()) == times
        for keyword, times in zip(keywords, _KEYWORD_TIMES, strict=True)
    )


@ifbench("ratio:sentence_words")
def sentence_words(response: str) -> bool:
    """Exactly three sentences, all of the same length in characters."""
    parts = sentences(response)
    return len(parts) == 3 and len({len(part.strip()) for part in parts}) == 1


__all__ = ["PERSON_NAMES", "PRONOUNS", "PUNCTUATION"]
