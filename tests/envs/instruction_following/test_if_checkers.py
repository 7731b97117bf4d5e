"""Every IFEval and IFEvalG checker against answers that follow the instruction and answers that do not.

Each case is (instruction id, kwargs as a row gives them, a following answer, a violating answer).
Together they cover every id of the two families and every kwarg, with both relations.
"""

from __future__ import annotations

import pytest

from cascade_envs.envs.instruction_following.registry import (
    INSTRUCTIONS,
    get_instruction,
    load_families,
    validate_kwargs,
)
from cascade_envs.envs.instruction_following.text import detect_language

load_families()

LONG_EN = (
    "The committee met on Tuesday to discuss the new library. Everyone agreed that the building needs "
    "more light and quieter reading rooms. The budget will be presented next month."
)

CAPS_EN = "PLEASE RECYCLE YOUR BOTTLES AND CANS EVERY WEEK BECAUSE IT HELPS THE PLANET."

CASES = [
    (
        "keywords:existence",
        {"keywords": ["lantern", "logbook"]},
        "The LANTERN hung by the logbook.",
        "Only a lantern.",
    ),
    ("keywords:existence", {"keywords": ["C++"]}, "I write C++ daily.", "I write C daily."),
    (
        "keywords:frequency",
        {"keyword": "tea", "frequency": 2, "relation": "at least"},
        "Tea, then tea.",
        "One tea.",
    ),
    (
        "keywords:frequency",
        {"keyword": "tea", "frequency": 2, "relation": "less than"},
        "One tea.",
        "Tea and tea.",
    ),
    ("keywords:forbidden_words", {"forbidden_words": ["red", "blue"]}, "A reddish sky.", "A Red sky."),
    (
        "keywords:letter_frequency",
        {"letter": "z", "let_frequency": 2, "let_relation": "at least"},
        "Zig zag.",
        "Zig.",
    ),
    (
        "keywords:letter_frequency",
        {"letter": "Z", "let_frequency": 2, "let_relation": "less than"},
        "Zig.",
        "Zaz",
    ),
    (
        "language:response_language",
        {"language": "fr"},
        "Bonjour, je voudrais un café et un croissant.",
        LONG_EN,
    ),
    ("language:response_language", {"language": "en"}, LONG_EN, "Guten Tag, ich möchte bitte einen Kaffee."),
    (
        "length_constraints:number_sentences",
        {"num_sentences": 3, "relation": "at least"},
        LONG_EN,
        "One. Two.",
    ),
    (
        "length_constraints:number_sentences",
        {"num_sentences": 3, "relation": "less than"},
        "Dr. Who. Yes.",
        LONG_EN,
    ),
    (
        "length_constraints:number_paragraphs",
        {"num_paragraphs": 2},
        "First.\n***\nSecond.",
        "First.\n\nSecond.",
    ),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 2}, "***\nA\n***\nB\n***", "A\n***\n***\nB"),
    ("length_constraints:number_words", {"num_words": 5, "relation": "less than"}, "one two three", LONG_EN),
    ("length_constraints:number_words", {"num_words": 5, "relation": "at least"}, LONG_EN, "one two"),
    (
        "length_constraints:nth_paragraph_first_word",
        {"num_paragraphs": 3, "nth_paragraph": 2, "first_word": "Meanwhile"},
        'A.\n\n"Meanwhile, b.\n\nC.',
        "A.\n\nThen b.\n\nC.",
    ),
    (
        "length_constraints:nth_paragraph_first_word",
        {"num_paragraphs": 2, "nth_paragraph": 1, "first_word": "hello"},
        "Hello! there\n\nbye",
        "Hello there\n\nbye\n\nagain",
    ),
    (
        "detectable_content:number_placeholders",
        {"num_placeholders": 2},
        "At [place] on [date].",
        "At [place] on",
    ),
    (
        "detectable_content:postscript",
        {"postscript_marker": "P.S."},
        "Hi.\n\np. s. see you",
        "Hi. PS see you",
    ),
    ("detectable_content:postscript", {"postscript_marker": "P.P.S"}, "Hi.\nP.P.S. more", "Hi.\nP.S. more"),
    ("detectable_content:postscript", {"postscript_marker": "Note:"}, "Hi.\nNOTE: later", "Hi. Nota later"),
    ("detectable_format:number_bullet_lists", {"num_bullets": 3}, "* a\n* b\n- c", "* a\n* b\n**bold**"),
    ("detectable_format:constrained_response", {}, "My answer is maybe.", "My answer is probably."),
    (
        "detectable_format:number_highlighted_sections",
        {"num_highlights": 2},
        "*one* and **two**",
        "*one* and * *",
    ),
    (
        "detectable_format:multiple_sections",
        {"section_spliter": "Section", "num_sections": 2},
        "Section 1\nA\nSection 2\nB",
        "Section 1\nA\nSection two\nB",
    ),
    ("detectable_format:json_format", {}, '```json\n{"a": [1, 2]}\n```', "{'a': 1}"),
    ("detectable_format:title", {}, "<<Poem of Joy>>\nText", "<< >>\n<Poem>"),
    ("combination:two_responses", {}, "Yes.\n******\nNo.", "Yes.\n******\nYes."),
    (
        "combination:repeat_prompt",
        {"prompt_to_repeat": "Name a colour."},
        "name a colour. Red.",
        "Red. Name a colour.",
    ),
    (
        "startend:end_checker",
        {"end_phrase": "Any questions?"},
        'Done. any questions?"',
        "Any questions? Done.",
    ),
    (
        "change_case:capital_word_frequency",
        {"capital_frequency": 2, "capital_relation": "at least"},
        "The NASA and ESA teams.",
        "The NASA team.",
    ),
    (
        "change_case:capital_word_frequency",
        {"capital_frequency": 2, "capital_relation": "less than"},
        "The NASA team.",
        "NASA, ESA and JAXA.",
    ),
    ("change_case:english_capital", {}, CAPS_EN, CAPS_EN.replace("WEEK", "week")),
    ("change_case:english_lowercase", {}, LONG_EN.lower(), LONG_EN),
    ("punctuation:no_comma", {}, "No commas here.", "Yes, one."),
    ("startend:quotation", {}, ' "Quoted answer." ', '"Half quoted.'),
    # ----- IFEvalG -----
    (
        "copy:repeat_phrase",
        {"phrase": "Every cloud has a silver lining", "small_n": 2},
        "Every cloud has a golden lining. Every cloud has one silver lining.",
        "Every cloud has a golden lining. Every cloud has a silver lining.",
    ),
    ("copy:copy", {"prompt_to_repeat": "Name five rivers."}, " name five rivers. ", "Nile, Congo."),
    (
        "new:copy_span_idx",
        {"prompt_to_repeat": "The quick brown fox", "n_start": 4, "n_end": 9},
        "quick",
        "quick brown",
    ),
    ("detectable_format:sentence_hyphens", {}, "I ran.-You sat.", "I ran. - You sat."),
    ("keywords:no_adjacent_consecutive", {}, "apple cherry apple", "apple banana"),
    ("detectable_format:square_brackets", {}, "[all] [in] [brackets]", "[all] in [brackets]"),
    ("keywords:word_once", {"keyword": "pancakes"}, "I love Pancakes.", "Pancakes, pancakes."),
    (
        "keywords:word_count_different_numbers",
        {"keyword": "code", "frequency": 2, "relation": "at least"},
        "Code is code.",
        "Code.",
    ),
    (
        "keywords:word_count_different_numbers",
        {"keyword": "code", "frequency": 2, "relation": "less than"},
        "Code.",
        "Code is code.",
    ),
    (
        "keywords:exclude_word_harder",
        {"keyword": "noise", "instruction": "no noise"},
        "Noise-free.",
        "Some noise here.",
    ),
    ("paragraphs:paragraphs", {}, "One.\n***\nTwo.", "One.\n***\nTwo.\n***\nThree."),
    ("paragraphs:paragraphs2", {}, "One.\n\nTwo.", "One.\nTwo."),
    (
        "first_word:first_word_sent",
        {"first_word": "Leaves"},
        "Leaves fall. leaves fly!",
        "Leaves fall. Trees stand.",
    ),
    ("first_word:first_word_answer", {"first_word": "Saturday"}, "saturday is best.", "On Saturday."),
    (
        "last_word:last_word_sent",
        {"last_word": "station"},
        "At the station. Near a station!",
        "At the station. Home.",
    ),
    ("last_word:last_word_answer", {"last_word": "rain"}, "It ends in rain!", "Rain ends it."),
    ("detectable_format:bigram_wrapping", {}, "<<I am>> <<at home>>", "<<I am>> at home"),
    (
        "copy:copying_simple",
        {"prompt_to_repeat": "What is the tallest mountain?"},
        "What is the tallest mountain?",
        "Elbrus.",
    ),
    (
        "copy:copying_multiple",
        {"prompt_to_repeat": "List colours", "N": 2},
        "List colours\n******\nlist colours",
        "List colours",
    ),
    ("punctuation:punctuation_dot", {}, "No dots here", "A dot."),
    ("punctuation:punctuation_exclamation", {}, "Calm.", "Wow!"),
    ("count:lowercase_counting", {"N": 2}, "The Cat sat.", "the cat sat."),
    ("letters:letter_counting", {"N": 5, "relation": "at least"}, "abcde", "ab cd"),
    ("letters:letter_counting", {"N": 5, "relation": "less than"}, "ab 12", "abcde"),
    (
        "letters:letter_counting2",
        {"letter": "q", "let_frequency": 1, "let_relation": "at least"},
        "Quiet.",
        "Silent.",
    ),
    (
        "count:counting_composition",
        {"n_sent": 2, "n_words": 3},  # word tokens include the final period
        "Cats purr. Dogs bark.\n***\nBirds sing. Fish swim.\n***\nSun rises. Moon sets.",
        "Cats purr. Dogs bark.\n***\nBirds sing. Fish swim.\n***\nSun rises. Moon sets.\n***",
    ),
    ("count:count_unique", {}, "Every word differs here.", "the cat saw the dog."),
    (
        "count:count_increment_word",
        {"keyword1": "saffron", "keyword2": "lantern"},
        "Saffron, lantern, lantern.",
        "Saffron lantern.",
    ),
    ("keywords:palindrome", {}, "We saw a racecar.", "No such thing."),
    (
        "keywords:keyword_specific_position",
        {"keyword": "gold", "n": 2, "m": 3},
        "Leaves fall. Leaves turn gold today.",
        "Leaves fall. Leaves gold turn.",
    ),
    ("keywords:start_end", {}, "Blue skies are blue", "Blue skies are grey"),
]


@pytest.mark.parametrize(
    ("iid", "kwargs", "good", "bad"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)]
)
def test_follows_and_violates(iid, kwargs, good, bad):
    spec = get_instruction(iid)
    clean = validate_kwargs(iid, kwargs)
    assert spec.check(good, **clean) is True
    assert spec.check(bad, **clean) is False


def test_cases_cover_every_ifeval_and_ifevalg_id():
    ours = {i for i, s in INSTRUCTIONS.items() if s.family in ("ifeval", "ifevalg")}
    assert ours == {c[0] for c in CASES}


def test_cases_cover_every_kwarg():
    used = {(c[0], k) for c in CASES for k in c[1]}
    declared = {
        (i, k) for i, s in INSTRUCTIONS.items() if s.family in ("ifeval", "ifevalg") for k in s.params
    }
    assert declared == used


def test_repeat_phrase_needs_each_copy_changed_once():
    """Deliberate: an unchanged copy (zero replacements) does not count, as in open-instruct's fixed rule."""
    check = get_instruction("copy:repeat_phrase").check
    assert not check(
        "Time flies when having fun. Time runs when having fun.",
        phrase="Time flies when having fun",
        small_n=2,
    )
    assert check(
        "Time runs when having fun. Time goes when having fun.",
        phrase="Time flies when having fun",
        small_n=2,
    )


def test_counting_composition_fails_on_a_trailing_divider_like_upstream():
    check = get_instruction("count:counting_composition").check
    body = "Cats purr. Dogs bark.\n***\nBirds sing. Fish swim.\n***\nSun rises. Moon sets."
    assert check(body, n_sent=2, n_words=3)  # "Cats purr." is Cats, purr, .
    assert not check(body + "\n***", n_sent=2, n_words=3)


def test_keywords_are_literal_not_regex():
    """Deliberate: the reference compiles keywords as regexes (``a.c`` matched ``abc``; ``C++`` crashed)."""
    check = get_instruction("keywords:frequency").check
    assert check("abc", keyword="a.c", frequency=1, relation="less than")
    assert check("a.c", keyword="a.c", frequency=1, relation="at least")


def test_language_detection_is_seeded():
    """Mixed-language text is where unseeded langdetect flips between calls; ours never does."""
    text = "Ciao amigo, hello there, bonjour mes amis, hola que tal"
    verdicts = set()
    for _ in range(20):
        detect_language.cache_clear()
        verdicts.add(detect_language(text))
    assert len(verdicts) == 1


def test_undetectable_language_passes_like_ifeval():
    check = get_instruction("language:response_language").check
    assert check("12345 67890", language="de")
