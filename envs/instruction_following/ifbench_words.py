"""IFBench ``words:*`` and ``sentence:*`` checkers: constraints on the letters and order of words."""

from __future__ import annotations

import itertools
import re
import string
from collections import Counter
from typing import Annotated

from .ifbench_text import (
    edge_stripped_words,
    ifbench,
    remove_punctuation,
    require,
    sentences,
    strip_punctuation,
)
from .registry import at_least

Position = Annotated[int, at_least(1)]

_ALPHABET = string.ascii_lowercase


@ifbench("words:alphabet")
def alphabet(response: str) -> bool:
    """Each word starts with the letter after the previous word's (``z`` wraps to ``a``); the
    first word must start with a Latin letter."""
    words = remove_punctuation(response).lower().split()
    if not words or words[0][0] not in _ALPHABET:
        return False
    expected = _ALPHABET.index(words[0][0])
    for word in words[1:]:
        expected = (expected + 1) % 26
        if word[0] != _ALPHABET[expected]:
            return False
    return True


@ifbench("words:vowel")
def vowel(response: str) -> bool:
    """A single paragraph (one line) whose words use at most three distinct vowels."""
    text = response.strip()
    return "\n" not in text and len(set(text.lower()) & set("aeiou")) <= 3


_CLUSTER = re.compile(r"[bcdfghjklmnpqrstvwxyz]{2}")


@ifbench("words:consonants")
def consonants(response: str) -> bool:
    """Every whitespace word contains two adjacent consonant letters."""
    return all(_CLUSTER.search(word) for word in response.lower().split())


def _alliteration(sentence: str) -> int:
    """Number of words in runs of consecutive words sharing their first character."""
    initials = [word[0] for word in (w.lstrip(string.punctuation) for w in sentence.lower().split()) if word]
    total, in_run = 0, False
    for first, second in itertools.pairwise(initials):
        if first == second:
            total += 1 if in_run else 2
        in_run = first == second
    return total


@ifbench("sentence:alliteration_increment")
def alliteration_increment(response: str) -> bool:
    """Each sentence has more alliterating words than the one before (the first may have none)."""
    previous = -1
    for sentence in sentences(response):
        current = _alliteration(sentence)
        if current <= previous:
            return False
        previous = current
    return True


@ifbench("words:palindrome")
def palindrome(response: str) -> bool:
    """At least 10 words (repeats count) that are palindromes of 5 or more characters."""
    words = remove_punctuation(response).lower().split()
    return sum(len(word) >= 5 and word == word[::-1] for word in words) >= 10


def _is_prime(n: int) -> bool:
    return n >= 2 and all(n % d for d in range(2, int(n**0.5) + 1))


@ifbench("words:prime_lengths")
def prime_lengths(response: str) -> bool:
    """Every word (punctuation removed) has a prime number of characters."""
    return all(_is_prime(len(word)) for word in remove_punctuation(response).split())


_FIRST_TOKEN_WINDOW = 400
"""Characters of the response that the part-of-speech tagger sees (its first word's context)."""


@ifbench("words:start_verb")
def start_verb(response: str) -> bool:
    """The response starts with a verb (any form: ``Imagine``, ``Exploring``, ...)."""
    text = response.lstrip()
    if not text[:1].isalpha():
        return False
    from .ifbench_pos import first_word_is_verb

    return first_word_is_verb(text[:_FIRST_TOKEN_WINDOW])


@ifbench("words:repeats")
def repeats(response: str, *, small_n: Position) -> bool:
    """No word (case-insensitive, punctuation removed) occurs more than ``small_n`` times."""
    counts = Counter(remove_punctuation(response.lower()).split())
    return all(count <= small_n for count in counts.values())


@ifbench("sentence:keyword")
def sentence_keyword(response: str, *, word: str, N: Position) -> bool:
    """The ``N``-th sentence contains ``word`` as a whole word (case-insensitive)."""
    parts = sentences(response)
    if len(parts) < N:
        return False
    return re.search(rf"\b{re.escape(word.strip())}\b", parts[N - 1], re.IGNORECASE) is not None


@ifbench("words:odd_even_syllables")
def odd_even_syllables(response: str) -> bool:
    """Consecutive words alternate between odd and even syllable counts."""
    count_syllables = require("syllapy", "words:odd_even_syllables").count
    parities = [count_syllables(word) % 2 for word in remove_punctuation(response).lower().split()]
    return all(a != b for a, b in itertools.pairwise(parities))


@ifbench("words:last_first")
def last_first(response: str) -> bool:
    """The last word of each sentence is the first word of the next (case-insensitive)."""
    parts = sentences(response)
    for current, following in itertools.pairwise(parts):
        last = current.rstrip(string.punctuation + " ").split()
        first = following.lstrip(string.punctuation + " ").split()
        if not last or not first or last[-1].lower() != first[0].lower():
            return False
    return True


@ifbench("words:paragraph_last_first")
def paragraph_last_first(response: str) -> bool:
    """Every non-empty line ends with the word it starts with (case-insensitive)."""
    for line in response.split("\n"):
        words = strip_punctuation(line.strip().lower()).split()
        if words and words[0] != words[-1]:
            return False
    return True


@ifbench("sentence:increment")
def increment(response: str, *, small_n: Annotated[int, at_least(0)]) -> bool:
    """Each sentence has exactly ``small_n`` more words than the previous one."""
    counts = [len(remove_punctuation(sentence).split()) for sentence in sentences(response)]
    if not counts:
        return False
    return all(b - a == small_n for a, b in itertools.pairwise(counts))


@ifbench("words:no_consecutive")
def no_consecutive(response: str) -> bool:
    """No two consecutive words start with the same letter (case-insensitive)."""
    initials = [word[0] for word in remove_punctuation(response.lower()).split()]
    return all(a != b for a, b in itertools.pairwise(initials))


@ifbench("words:keywords_specific_position")
def keywords_specific_position(response: str, *, keyword: str, n: Position, m: Position) -> bool:
    """The ``m``-th word of the ``n``-th sentence is ``keyword`` (case-insensitive); words are
    whitespace-separated, with surrounding punctuation ignored (IFBench counts NLTK tokens, which
    split "don't" and "well-known" in two)."""
    parts = sentences(response)
    if len(parts) < n:
        return False
    words = edge_stripped_words(parts[n - 1])
    return len(words) >= m and words[m - 1].lower() == keyword.strip().lower()


@ifbench("words:words_position")
def words_position(response: str, *, keyword: str) -> bool:
    """The second word and the second-to-last word are both ``keyword`` (case-insensitive); words
    as in ``words:keywords_specific_position``."""
    words = [word.lower() for word in edge_stripped_words(response)]
    target = keyword.strip().lower()
    return len(words) >= 2 and words[1] == words[-2] == target
