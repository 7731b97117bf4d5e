"""The 29 instructions that AllenAI's IF-RLVR set (IFEvalG) adds to IFEval's 25.

These are the "verifiable instructions" of the Nemotron instruction-following RL data (NeMo Gym's
``instruction_following`` server). Verdicts follow the reference checkers; where they differ it is
on purpose: keywords and phrases are matched literally rather than compiled as regexes,
``copy:repeat_phrase`` requires every repetition to change exactly one word (the fixed upstream
rule; an older copy only looked at the last one), and a missing kwarg is a load-time error instead
of a randomly drawn value.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

from .ifeval import Count, Index, count_keyword, divided_paragraphs, letter_frequency
from .registry import instruction
from .text import Relation, compare, split_sentences, word_tokens

instruction("letters:letter_counting2", "ifevalg")(letter_frequency)


# ----- copying ------------------------------------------------------------------------------


def _same_text(a: str, b: str) -> bool:
    return a.strip().lower() == b.strip().lower()


@instruction("copy:copy", "ifevalg")
def copy(response: str, *, prompt_to_repeat: str) -> bool:
    """The answer is the instruction copied verbatim (case-insensitive)."""
    return _same_text(response, prompt_to_repeat)


@instruction("copy:copying_simple", "ifevalg")
def copying_simple(response: str, *, prompt_to_repeat: str) -> bool:
    """The answer is the request repeated without change (case-insensitive)."""
    return _same_text(response, prompt_to_repeat)


@instruction("copy:copying_multiple", "ifevalg")
def copying_multiple(response: str, *, prompt_to_repeat: str, N: Index) -> bool:
    """The request repeated ``N`` times, separated by ``******``."""
    copies = response.split("******")
    return len(copies) == N and all(_same_text(c, prompt_to_repeat) for c in copies)


def _span_order(kwargs: dict[str, Any]) -> None:
    if kwargs["n_end"] <= kwargs["n_start"]:
        raise ValueError(f"n_end {kwargs['n_end']} must be greater than n_start {kwargs['n_start']}")


@instruction("new:copy_span_idx", "ifevalg", validate=_span_order)
def copy_span_idx(response: str, *, prompt_to_repeat: str, n_start: Count, n_end: Count) -> bool:
    """The answer is ``prompt_to_repeat[n_start:n_end]`` (character indices, case-insensitive)."""
    return _same_text(response, prompt_to_repeat[n_start:n_end])


def phrase_spans(text: str, head: str, tail: str) -> list[str]:
    """Non-overlapping spans ``head … tail`` within one line, shortest first (``head.*?tail``), in linear time."""
    spans, pos = [], 0
    while (start := text.find(head, pos)) >= 0:
        body = start + len(head)
        newline = text.find("\n", body)
        limit = len(text) if newline < 0 else newline
        end = text.find(tail, body, limit)
        if end < 0:
            if newline < 0:
                break
            pos = newline + 1
            continue
        spans.append(text[start : end + len(tail)])
        pos = end + len(tail)
    return spans


@instruction("copy:repeat_phrase", "ifevalg")
def repeat_phrase(response: str, *, phrase: str, small_n: Index) -> bool:
    """The phrase appears exactly ``small_n`` times, each time with exactly one word replaced."""
    words = phrase.split()
    found = phrase_spans(response, words[0] + " ", " " + words[-1])
    if len(found) != small_n:
        return False
    for span in found:
        tokens = span.split()
        if len(tokens) != len(words) or sum(a != b for a, b in zip(tokens, words, strict=True)) != 1:
            return False
    return True


# ----- keywords -----------------------------------------------------------------------------


@instruction("keywords:word_once", "ifevalg")
def word_once(response: str, *, keyword: str) -> bool:
    """The keyword occurs exactly once (case-insensitive)."""
    return count_keyword(keyword, response) == 1


@instruction("keywords:word_count_different_numbers", "ifevalg")
def word_count_different_numbers(
    response: str, *, keyword: str, frequency: Count, relation: Relation
) -> bool:
    """The keyword occurs ``relation`` ``frequency`` times (case-insensitive)."""
    return compare(count_keyword(keyword, response), relation, frequency)


@instruction("count:count_increment_word", "ifevalg")
def count_increment_word(response: str, *, keyword1: str, keyword2: str) -> bool:
    """``keyword1`` occurs once and ``keyword2`` twice (case-insensitive)."""
    return count_keyword(keyword1, response) == 1 and count_keyword(keyword2, response) == 2


@instruction("keywords:exclude_word_harder", "ifevalg")
def exclude_word_harder(response: str, *, keyword: str, instruction: str | None = None) -> bool:
    """The keyword never appears between spaces (``instruction`` is accepted for row compatibility)."""
    return f" {keyword.strip()} " not in response


@instruction("keywords:keyword_specific_position", "ifevalg")
def keyword_specific_position(response: str, *, keyword: str, n: Index, m: Index) -> bool:
    """``keyword`` is word ``m`` of sentence ``n`` (NLTK word tokens, case-sensitive)."""
    sentences = split_sentences(response)
    if len(sentences) < n:
        return False
    words = word_tokens(sentences[n - 1])
    return len(words) >= m and words[m - 1] == keyword.strip()


@instruction("keywords:no_adjacent_consecutive", "ifevalg")
def no_adjacent_consecutive(response: str) -> bool:
    """No two adjacent words start with consecutive letters of the alphabet."""
    words = response.split()
    for left, right in itertools.pairwise(words):
        a, b = left[0].lower(), right[0].lower()
        if len(a) != 1 or len(b) != 1 or ord(b) - ord(a) == 1:
            return False
    return True


@instruction("keywords:palindrome", "ifevalg")
def palindrome(response: str) -> bool:
    """Some whitespace-separated word reads the same backwards."""
    return any(word == word[::-1] for word in response.split())


@instruction("keywords:start_end", "ifevalg")
def start_end(response: str) -> bool:
    """The first and last word tokens are the same word (case-insensitive)."""
    words = word_tokens(response)
    return len(words) >= 2 and words[0].lower() == words[-1].lower()


# ----- first / last words -------------------------------------------------------------------


def _bare(word: str) -> str:
    return re.sub(r"[^\w\s]", "", word)


@instruction("first_word:first_word_sent", "ifevalg")
def first_word_sent(response: str, *, first_word: str) -> bool:
    """Every sentence starts with ``first_word`` (case-insensitive)."""
    target = first_word.strip().lower()
    return all(s.strip() and s.split()[0].lower() == target for s in split_sentences(response))


@instruction("first_word:first_word_answer", "ifevalg")
def first_word_answer(response: str, *, first_word: str) -> bool:
    """The answer starts with ``first_word`` (case-insensitive)."""
    words = response.split()
    return bool(words) and words[0].lower() == first_word.strip().lower()


@instruction("last_word:last_word_sent", "ifevalg")
def last_word_sent(response: str, *, last_word: str) -> bool:
    """Every sentence ends with ``last_word`` before its punctuation (case-insensitive)."""
    target = last_word.strip().lower()
    return all(s.strip() and _bare(s.split()[-1]).lower() == target for s in split_sentences(response))


@instruction("last_word:last_word_answer", "ifevalg")
def last_word_answer(response: str, *, last_word: str) -> bool:
    """The answer ends with ``last_word``, punctuation aside (case-insensitive)."""
    words = response.split()
    return bool(words) and _bare(words[-1]).lower() == last_word.strip().lower()


# ----- format -------------------------------------------------------------------------------


@instruction("paragraphs:paragraphs", "ifevalg")
def paragraphs(response: str) -> bool:
    """Two paragraphs separated by the markdown divider ``***``."""
    return divided_paragraphs(response) == 2


@instruction("paragraphs:paragraphs2", "ifevalg")
def paragraphs2(response: str) -> bool:
    """Two paragraphs separated by a blank line."""
    parts = response.split("\n\n")
    inner_empty = any(not p.strip() for p in parts[1:-1])
    return not inner_empty and sum(1 for p in parts if p.strip()) == 2


@instruction("detectable_format:sentence_hyphens", "ifevalg")
def sentence_hyphens(response: str) -> bool:
    """Sentences joined by hyphens with no spaces around them."""
    expected = split_sentences(response.replace("-", " "))
    return all(
        part == part.strip() and part == gold
        for part, gold in zip(response.split("-"), expected, strict=False)
    )


@instruction("detectable_format:square_brackets", "ifevalg")
def square_brackets(response: str) -> bool:
    """Every whitespace-separated word is wrapped in square brackets."""
    return all(word.startswith("[") and word.endswith("]") for word in response.split())


@instruction("detectable_format:bigram_wrapping", "ifevalg")
def bigram_wrapping(response: str) -> bool:
    """Every word pair is wrapped in double angular brackets, ``<<I am>> <<at home>>``."""
    words = response.split()
    return all(words[i].startswith("<<") and words[i + 1].endswith(">>") for i in range(0, len(words) - 1, 2))


@instruction("punctuation:punctuation_dot", "ifevalg")
def punctuation_dot(response: str) -> bool:
    """No dots at all."""
    return "." not in response


@instruction("punctuation:punctuation_exclamation", "ifevalg")
def punctuation_exclamation(response: str) -> bool:
    """No exclamation marks at all."""
    return "!" not in response


# ----- counting -----------------------------------------------------------------------------


@instruction("count:lowercase_counting", "ifevalg")
def lowercase_counting(response: str, *, N: Count) -> bool:
    """At most ``N`` all-lowercase words (``\\b[a-z]+\\b``) in total."""
    return sum(1 for _ in re.finditer(r"\b[a-z]+\b", response)) <= N


@instruction("letters:letter_counting", "ifevalg")
def letter_counting(response: str, *, N: Count, relation: Relation) -> bool:
    """The number of ASCII letters compared with ``N``."""
    return compare(sum(1 for ch in response if "a" <= ch <= "z" or "A" <= ch <= "Z"), relation, N)


@instruction("count:count_unique", "ifevalg")
def count_unique(response: str) -> bool:
    """No word token is repeated."""
    words = word_tokens(response)
    return len(words) == len(set(words))


@instruction("count:counting_composition", "ifevalg")
def counting_composition(response: str, *, n_sent: Count, n_words: Count) -> bool:
    """Three ``***``-divided paragraphs of ``n_sent`` sentences of ``n_words`` word tokens each.

    As in the reference, a leading or trailing divider leaves an empty paragraph with no
    sentences, which fails unless ``n_sent`` is 0.
    """
    parts = re.split(r"\s?\*\*\*\s?", response)
    count = len(parts)
    for index, part in enumerate(parts):
        if not part.strip():
            if index not in (0, len(parts) - 1):
                return False
            count -= 1
        sentences = split_sentences(part)
        if len(sentences) != n_sent or any(len(word_tokens(s)) != n_words for s in sentences):
            return False
    return count == 3
