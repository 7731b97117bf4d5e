"""The instruction registry: the id sets of each family and kwargs validation at load time."""

from __future__ import annotations

import logging

import pytest

from cascade_envs.core import TaskError
from cascade_envs.envs.instruction_following.registry import (
    INSTRUCTIONS,
    get_instruction,
    instruction,
    load_families,
    validate_kwargs,
)

load_families()

IFEVAL_IDS = {
    "keywords:existence", "keywords:frequency", "keywords:forbidden_words", "keywords:letter_frequency",
    "language:response_language", "length_constraints:number_sentences", "length_constraints:number_paragraphs",
    "length_constraints:number_words", "length_constraints:nth_paragraph_first_word",
    "detectable_content:number_placeholders", "detectable_content:postscript",
    "detectable_format:number_bullet_lists", "detectable_format:constrained_response",
    "detectable_format:number_highlighted_sections", "detectable_format:multiple_sections",
    "detectable_format:json_format", "detectable_format:title", "combination:two_responses",
    "combination:repeat_prompt", "startend:end_checker", "change_case:capital_word_frequency",
    "change_case:english_capital", "change_case:english_lowercase", "punctuation:no_comma", "startend:quotation",
}  # fmt: skip
IFEVALG_EXTRA_IDS = {
    "copy:repeat_phrase", "copy:copy", "new:copy_span_idx", "detectable_format:sentence_hyphens",
    "keywords:no_adjacent_consecutive", "detectable_format:square_brackets", "keywords:word_once",
    "keywords:word_count_different_numbers", "keywords:exclude_word_harder", "paragraphs:paragraphs",
    "paragraphs:paragraphs2", "first_word:first_word_sent", "first_word:first_word_answer",
    "last_word:last_word_sent", "last_word:last_word_answer", "detectable_format:bigram_wrapping",
    "copy:copying_simple", "copy:copying_multiple", "punctuation:punctuation_dot",
    "punctuation:punctuation_exclamation", "count:lowercase_counting", "letters:letter_counting",
    "letters:letter_counting2", "count:counting_composition", "count:count_unique", "count:count_increment_word",
    "keywords:palindrome", "keywords:keyword_specific_position", "keywords:start_end",
}  # fmt: skip


def family(name: str) -> set[str]:
    return {i for i, spec in INSTRUCTIONS.items() if spec.family == name}


def test_family_id_sets():
    assert family("ifeval") == IFEVAL_IDS
    assert family("ifevalg") == IFEVALG_EXTRA_IDS
    assert len(IFEVAL_IDS | IFEVALG_EXTRA_IDS) == 54


def test_unknown_id_is_a_task_error_naming_it():
    with pytest.raises(TaskError, match="keywords:existance") as info:
        get_instruction("keywords:existance")
    assert "did you mean keywords:existence" in str(info.value)
    assert info.value.field == "instruction_id_list"


def test_registering_an_id_twice_fails():
    with pytest.raises(ValueError, match="registered twice"):
        instruction("punctuation:no_comma", "ifeval")(lambda response: True)


def test_nulls_are_dropped_and_numbers_coerced():
    kwargs = {"num_words": "204", "relation": "less than", "keyword": None, "N": None}
    assert validate_kwargs("length_constraints:number_words", kwargs) == {
        "num_words": 204,
        "relation": "less than",
    }
    assert validate_kwargs("count:lowercase_counting", {"N": 39.0}) == {"N": 39}
    assert validate_kwargs("detectable_format:title", None) == {}
    assert validate_kwargs("paragraphs:paragraphs", {}) == {}
    assert validate_kwargs("count:lowercase_counting", '{"N": 3, "keyword": null}') == {"N": 3}
    with pytest.raises(TaskError, match="not JSON"):
        validate_kwargs("count:lowercase_counting", "{N: 3")


@pytest.mark.parametrize(
    ("iid", "kwargs", "expected"),
    [
        ("count:count_increment_word", {"keyword1": ["kaleidoscope"], "keyword2": "nebula"}, "keyword1"),
        ("first_word:first_word_sent", {"first_word": ["relationship"]}, "first_word"),
        ("keywords:forbidden_words", {"forbidden_words": "part"}, "forbidden_words"),
        ("keywords:frequency", {"keyword": "a", "frequency": 1, "relation": "Less_Than"}, "relation"),
    ],
)
def test_quirks_are_normalised_with_a_warning(caplog, iid, kwargs, expected):
    with caplog.at_level(logging.WARNING, logger="cascade_envs.instruction_following"):
        clean = validate_kwargs(iid, kwargs)
    assert any(expected in r.getMessage() and iid in r.getMessage() for r in caplog.records)
    assert clean[expected] in ("kaleidoscope", "relationship", ["part"], "less than")


@pytest.mark.parametrize(
    ("iid", "kwargs", "message"),
    [
        ("length_constraints:number_words", {"num_words": 10}, "missing required kwarg 'relation'"),
        (
            "length_constraints:number_words",
            {"num_words": 10, "relation": "about"},
            "'relation' must be one of",
        ),
        (
            "length_constraints:number_words",
            {"num_words": "ten", "relation": "at least"},
            "'num_words' must be an integer",
        ),
        (
            "length_constraints:number_words",
            {"num_words": 2.5, "relation": "at least"},
            "'num_words' must be an integer",
        ),
        (
            "length_constraints:number_words",
            {"num_words": True, "relation": "at least"},
            "'num_words' must be an integer",
        ),
        ("length_constraints:number_words", {"num_words": -1, "relation": "at least"}, "must be at least 0"),
        ("punctuation:no_comma", {"keywords": ["x"]}, "unknown kwarg"),
        ("keywords:existence", {"keywords": []}, "non-empty list"),
        ("keywords:existence", {"keywords": [3]}, "non-empty string"),
        ("keywords:word_once", {"keyword": "   "}, "non-empty string"),
        ("keywords:word_once", {"keyword": {"a": 1}}, "non-empty string"),
        (
            "keywords:letter_frequency",
            {"letter": "ab", "let_frequency": 1, "let_relation": "at least"},
            "single character",
        ),
        ("language:response_language", {"language": "xx"}, "not a language code"),
        (
            "length_constraints:nth_paragraph_first_word",
            {"num_paragraphs": 2, "nth_paragraph": 3, "first_word": "a"},
            "exceeds",
        ),
        (
            "length_constraints:nth_paragraph_first_word",
            {"num_paragraphs": 2, "nth_paragraph": 0, "first_word": "a"},
            "at least 1",
        ),
        ("new:copy_span_idx", {"prompt_to_repeat": "abc", "n_start": 2, "n_end": 2}, "greater than n_start"),
        ("copy:copying_multiple", {"prompt_to_repeat": "abc", "N": 0}, "at least 1"),
        ("count:count_increment_word", {"keyword1": "a"}, "missing required kwarg 'keyword2'"),
        ("detectable_format:title", ["not", "a", "dict"], "kwargs must be an object"),
    ],
)
def test_bad_kwargs_are_task_errors_naming_id_and_kwarg(iid, kwargs, message):
    with pytest.raises(TaskError, match=message) as info:
        validate_kwargs(iid, kwargs)
    assert iid in str(info.value)
    assert info.value.field == "kwargs"


def test_every_checker_declares_bool_and_typed_kwargs():
    for spec in INSTRUCTIONS.values():
        assert spec.hints.get("return") is bool, spec.id
        for name in spec.params:
            assert name in spec.hints, (spec.id, name)
