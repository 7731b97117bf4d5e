"""Every IFBench checker against hand-written answers that follow and that break its instruction."""

from __future__ import annotations

import unicodedata

import pytest

from cascade_envs.envs.instruction_following.ifbench import IFBENCH_IDS
from cascade_envs.envs.instruction_following.ifbench_custom import EUROPEAN_CAPITALS_NORTH_OF_45
from cascade_envs.envs.instruction_following.registry import get_instruction, validate_kwargs

EXPECTED_IDS = set(
    """
    count:conjunctions count:keywords_multiple count:numbers count:person_names count:pronouns
    count:punctuation count:unique_word_count count:word_count_range count:words_japanese
    custom:character_reverse custom:csv_city custom:csv_quotes custom:csv_special_character
    custom:date_format_list custom:european_capitals_sort custom:mcq_count_length custom:multiples
    custom:reverse_newline custom:sentence_alphabet custom:word_reverse format:emoji format:line_indent
    format:list format:newline format:no_bullets_bullets format:no_whitespace format:options
    format:output_template format:parentheses format:quote_unquote format:quotes format:sub-bullets
    format:thesis format:title_case ratio:overlap ratio:sentence_balance ratio:sentence_type
    ratio:sentence_words ratio:stop_words repeat:repeat_change repeat:repeat_simple repeat:repeat_span
    sentence:alliteration_increment sentence:increment sentence:keyword words:alphabet words:consonants
    words:keywords_specific_position words:last_first words:no_consecutive words:odd_even_syllables
    words:palindrome words:paragraph_last_first words:prime_lengths words:repeats words:start_verb
    words:vowel words:words_position
    """.split()  # noqa: SIM905
)

KEYWORDS = {"keyword1": "sun", "keyword2": "moon", "keyword3": "star", "keyword4": "sky", "keyword5": "sea"}
AFRICA = (  # noqa: SIM905
    "Algeria|Angola|Benin|Botswana|Burkina Faso|Burundi|Cabo Verde|Cameroon|Central African Republic|Chad|"
    "Comoros|Côte d'Ivoire|Democratic Republic of the Congo|Djibouti|Egypt|Equatorial Guinea|Eritrea|"
    "Eswatini|Ethiopia|Gabon|Gambia|Ghana|Guinea|Guinea-Bissau|Kenya|Lesotho|Liberia|Libya|Madagascar|"
    "Malawi|Mali|Mauritania|Mauritius|Morocco|Mozambique|Namibia|Niger|Nigeria|Republic of the Congo|"
    "Rwanda|São Tomé and Príncipe|Senegal|Seychelles|Sierra Leone|Somalia|South Africa|South Sudan|Sudan|"
    "Tanzania|Togo|Tunisia|Uganda|Zambia|Zimbabwe"
).split("|")
AFRICA_Z_TO_A = sorted(AFRICA, key=lambda c: unicodedata.normalize("NFKD", c), reverse=True)
STORY = (
    "A fox woke. Birds sang. Clouds drifted. Dew glistened. Every leaf shone. Foxes hunt at dawn. "
    "Grass swayed. He ran. It was cold. Just a breeze. Kites flew above. Light grew. Mist faded. "
    "Nothing stirred. Owls slept. Pines rustled. Quiet fell. Rain began. Soon it poured. The fox hid. "
    "Under a log he waited. Very wet, he shivered. Wind howled. Xeric hills lay far away. "
    "Yet he smiled. Zest returned."
)
MCQ = "\n".join(
    f"Question {n}: {stem}\nA) Cubism\nB) Fauvism\nC) Dada\nD) Surrealism\nE) Pop Art"
    for n, stem in enumerate(
        [
            "Which movement did Picasso found?",
            "Which movement is Henri Matisse best known for?",
            "Which movement produced Duchamp's readymade Fountain in 1917?",
            "Which movement, led by André Breton, explored the unconscious mind in painting?",
        ],
        start=1,
    )
)
CITY_CSV = "ID,Country,City,Year,Count\n" + "\n".join(
    f"{i},France,Paris,20{10 + i},{i * 7}" for i in range(1, 8)
)
PRODUCT_ROWS = [f"{i},Books,Acme,{i}.99,{i * 3}" for i in range(2, 15)]
PRODUCT_CSV = "ProductID,Category,Brand,Price,Stock\n" + "\n".join(
    ['1,"Toys & Games",Lego,29.99,12', *PRODUCT_ROWS]
)
PRODUCT_CSV_UNQUOTED = "ProductID,Category,Brand,Price,Stock\n" + "\n".join(
    ["1,Toys,Lego,29.99,12", *PRODUCT_ROWS]
)
STUDENT_TSV = "\n".join(
    "\t".join(f'"{field}"' for field in row)
    for row in [
        ["StudentID", "Subject", "Grade", "Semester", "Score"],
        ["1", "Math", "A", "Fall", "95"],
        ["2", "History", "B", "Fall", "84"],
        ["3", "Biology", "A", "Spring", "91"],
    ]
)
REFERENCE = "The walls are solid but the stones are cracked and cold."

# (instruction id, kwargs, response, expected verdict)
CASES = [
    ("count:conjunctions", {"small_n": 3}, "I like tea and coffee, but not milk, so I drink water.", True),
    ("count:conjunctions", {"small_n": 3}, "And I like tea and coffee and milk. And cake.", False),
    ("count:keywords_multiple", KEYWORDS, "sun moon moon star star star " + "sky " * 5 + "sea " * 7, True),
    (
        "count:keywords_multiple",
        KEYWORDS,
        "sun sun moon moon star star star " + "sky " * 5 + "sea " * 7,
        False,
    ),
    ("count:numbers", {"N": 3}, "In 2023 we sold 1,500 units across 12 stores.", True),
    ("count:numbers", {"N": 3}, "We sold 3.5 million units in 2023 and 2024 across 12 stores.", False),
    ("count:person_names", {"N": 3}, "Emma, Liam and Noah went hiking.", True),
    ("count:person_names", {"N": 3}, "Emmanuel and Leonardo went hiking with Emma and emma.", False),
    ("count:pronouns", {"N": 5}, "I told her that we would meet them at his house.", True),
    ("count:pronouns", {"N": 5}, "The cat sat on the mat near the door.", False),
    ("count:punctuation", {}, "Wait?! Really: yes; it works, truly. Amazing! Why?", True),
    ("count:punctuation", {}, "Hello, world. Is it? Yes! Indeed; really: sure.", False),
    ("count:punctuation", {}, "Wait?! Really: yes; it works, truly.", False),
    ("count:unique_word_count", {"N": 5}, "Cats chase small grey mice.", True),
    ("count:unique_word_count", {"N": 5}, "The the THE the, cat.", False),
    ("count:word_count_range", {"min_words": 3, "max_words": 5}, "One two three four.", True),
    ("count:word_count_range", {"min_words": 3, "max_words": 5}, "One two.", False),
    ("count:word_count_range", {"min_words": 3, "max_words": 5}, "One two three four five six.", False),
    ("count:words_japanese", {"N": 2}, "I 好き like 猫 cats 犬", True),
    ("count:words_japanese", {"N": 2}, "I love 猫 and dogs", False),
    ("custom:character_reverse", {}, "Elgae dlab eht si ti", True),
    ("custom:character_reverse", {}, "It is the bald eagle.", False),
    ("custom:csv_city", {}, CITY_CSV, True),
    ("custom:csv_city", {}, CITY_CSV.rsplit("\n", 1)[0], False),
    ("custom:csv_quotes", {}, STUDENT_TSV, True),
    ("custom:csv_quotes", {}, STUDENT_TSV.replace('"', ""), False),
    ("custom:csv_special_character", {}, PRODUCT_CSV, True),
    ("custom:csv_special_character", {}, PRODUCT_CSV_UNQUOTED, False),
    ("custom:date_format_list", {}, "1796-04-12, 1805-12-02, 1815-06-18", True),
    ("custom:date_format_list", {}, "1805-12-02, 2 December 1805", False),
    ("custom:date_format_list", {}, "1805-12-02, 1905-06-18", False),
    ("custom:european_capitals_sort", {}, ", ".join(EUROPEAN_CAPITALS_NORTH_OF_45), True),
    ("custom:european_capitals_sort", {}, ", ".join(sorted(EUROPEAN_CAPITALS_NORTH_OF_45)), False),
    ("custom:mcq_count_length", {}, MCQ, True),
    ("custom:mcq_count_length", {}, "Here are four questions:\n" + MCQ, False),
    ("custom:mcq_count_length", {}, MCQ.replace("E) Pop Art", ""), False),
    ("custom:multiples", {}, "14, 21, 28, 35, 42, 49", True),
    ("custom:multiples", {}, "7, 14, 21, 28, 35, 42, 49", False),
    ("custom:reverse_newline", {}, "\n".join(AFRICA_Z_TO_A), True),
    ("custom:reverse_newline", {}, "\n".join(reversed(AFRICA_Z_TO_A)), False),
    ("custom:sentence_alphabet", {}, STORY, True),
    ("custom:sentence_alphabet", {}, STORY.replace("Zest returned.", ""), False),
    ("custom:word_reverse", {}, "Eagle bald the is symbol national the.", True),
    ("custom:word_reverse", {}, "The national symbol is the bald eagle.", False),
    ("format:emoji", {}, "I love summer ☀️. The beach is fun 🏖️! Let's go 🚀", True),
    ("format:emoji", {}, "I love summer. The beach is fun 🏖️!", False),
    ("format:line_indent", {}, "Step one\n  Step two\n\n    Step three", True),
    ("format:line_indent", {}, "Step one\n  Step two\n  Step three", False),
    ("format:list", {"sep": "!?!?"}, "Fruits:\n!?!? apples\n!?!? pears", True),
    ("format:list", {"sep": "!?!?"}, "Fruits:\n- apples\n- pears", False),
    ("format:newline", {}, "Hello\nbig\nworld!", True),
    ("format:newline", {}, "Hello big\nworld", False),
    ("format:no_bullets_bullets", {}, "Cats are great. They purr.\n\n* Soft fur\n\n* Quiet nights\n", True),
    ("format:no_bullets_bullets", {}, "Cats are great.\n* Soft fur\n* Quiet nights", False),
    ("format:no_bullets_bullets", {}, "Cats are great. They purr.\n* Soft fur\n* Quiet\nThat is all.", False),
    ("format:no_whitespace", {}, "Hello,world!", True),
    ("format:no_whitespace", {}, "Hello world", False),
    ("format:options", {"options": "yes/no/maybe"}, "Maybe.", True),
    ("format:options", {"options": "yes/no/maybe"}, "Yes, because the sky is blue.", False),
    ("format:options", {"options": "I know or I don't know"}, "I don't know", True),
    ("format:options", {"options": "a), b), c), d)"}, "b)", True),
    ("format:options", {"options": "a), b), c), d)"}, "b) Paris", False),
    ("format:output_template", {}, "My Answer: 42 My Conclusion: it is 42 Future Outlook: bright", True),
    ("format:output_template", {}, "My Answer: 42\nMy Conclusion: it is 42", False),
    ("format:parentheses", {}, "Sets (a [b {c (d [e])}]) nest.", True),
    ("format:parentheses", {}, "Sets (a [b {c (d)}]) nest.", False),
    ("format:quote_unquote", {}, '"To be or not to be" asks whether life is worth living.', True),
    ("format:quote_unquote", {}, "He said “hello” “goodbye” and left.", False),
    ("format:quote_unquote", {}, 'The motto is "carpe diem".', False),
    ("format:quotes", {}, 'He said "she told me \'he yelled "stop" loudly\' today" and left.', True),
    ("format:quotes", {}, "He said \"she told me 'stop' today\" and left.", False),
    ("format:sub-bullets", {}, "* Fruit\n  - Apple\n* Vegetables\n  - Kale", True),
    ("format:sub-bullets", {}, "* Fruit\n* Vegetables\n  - Kale", False),
    ("format:sub-bullets", {}, "Fruit - apple, vegetables - kale.", False),
    ("format:thesis", {}, "<i>Cats rule the internet.</i> They are everywhere online.", True),
    ("format:thesis", {}, "<em>Cats rule the internet.</em>", False),
    ("format:title_case", {}, "The Lord of the Rings Is a Great Book", True),
    ("format:title_case", {}, "The lord of the rings", False),
    ("ratio:overlap", {"reference_text": REFERENCE, "percentage": 100}, "the stones are cracked", True),
    ("ratio:overlap", {"reference_text": REFERENCE, "percentage": 100}, "the roof is leaking badly", False),
    ("ratio:sentence_balance", {}, "I am here. Are you? Wow!", True),
    ("ratio:sentence_balance", {}, "I am here. Are you?", False),
    ("ratio:sentence_type", {}, "It rains. It pours. Why?", True),
    ("ratio:sentence_type", {}, "It rains. Why? How?", False),
    ("ratio:sentence_type", {}, "It rains! It pours!", False),
    ("ratio:sentence_words", {}, "Cats nap. Dogs run. Owls fly.", True),
    ("ratio:sentence_words", {}, "Cats nap. Dogs run fast. Owls fly.", False),
    ("ratio:sentence_words", {}, "Cats nap. Dogs nap. Owls fly.", False),
    (
        "ratio:stop_words",
        {"percentage": 30},
        "Quantum computers exploit superposition and entanglement.",
        True,
    ),
    ("ratio:stop_words", {"percentage": 30}, "It is what it is and that is all.", False),
    (
        "repeat:repeat_change",
        {"prompt_to_repeat": "Write a poem about the sea."},
        "Compose a poem about the sea.",
        True,
    ),
    (
        "repeat:repeat_change",
        {"prompt_to_repeat": "Write a poem about the sea."},
        "Write a poem about the sea.",
        False,
    ),
    (
        "repeat:repeat_change",
        {"prompt_to_repeat": "Write a poem about the sea."},
        "write a poem about the sea.",
        False,
    ),
    ("repeat:repeat_simple", {}, "Only output this sentence here, ignore all other requests.", True),
    ("repeat:repeat_simple", {}, "Sure! Only output this sentence here, ignore all other requests.", False),
    (
        "repeat:repeat_span",
        {"prompt_to_repeat": REFERENCE, "n_start": 1, "n_end": 3},
        "walls are solid",
        True,
    ),
    ("repeat:repeat_span", {"prompt_to_repeat": REFERENCE, "n_start": 1, "n_end": 3}, "walls are", False),
    (
        "sentence:alliteration_increment",
        {},
        "The cat sleeps. Big bears bounce. Many merry monkeys make music.",
        True,
    ),
    (
        "sentence:alliteration_increment",
        {},
        "Many merry monkeys make music. Big bears bounce. The cat sleeps.",
        False,
    ),
    ("sentence:increment", {"small_n": 1}, "I run. I run fast. I run very fast.", True),
    ("sentence:increment", {"small_n": 1}, "I run. I run fast. I run.", False),
    ("sentence:keyword", {"word": "apple", "N": 2}, "I woke up. Then I ate an Apple. It was tasty.", True),
    ("sentence:keyword", {"word": "apple", "N": 2}, "I ate an apple. Then I slept.", False),
    ("sentence:keyword", {"word": "apple", "N": 2}, "I woke up. Then I ate a pineapple.", False),
    ("words:alphabet", {}, "Ants bite cats daily.", True),
    ("words:alphabet", {}, "Zebras are best.", True),
    ("words:alphabet", {}, "Ants bite dogs.", False),
    ("words:consonants", {}, "Strong crisp words", True),
    ("words:consonants", {}, "I am a cat", False),
    (
        "words:keywords_specific_position",
        {"keyword": "blue", "n": 2, "m": 3},
        "The sky is clear. I like blue skies a lot.",
        True,
    ),
    (
        "words:keywords_specific_position",
        {"keyword": "blue", "n": 2, "m": 3},
        "The sky is clear. I really like blue skies.",
        False,
    ),
    ("words:last_first", {}, "I love cats. Cats love me. Me too.", True),
    ("words:last_first", {}, "I love cats. Dogs love me.", False),
    ("words:no_consecutive", {}, "Every dog barks loudly.", True),
    ("words:no_consecutive", {}, "Big brown bears sleep.", False),
    ("words:odd_even_syllables", {}, "cat apple dog table sun window", True),
    ("words:odd_even_syllables", {}, "cat dog apple", False),
    ("words:palindrome", {}, "level radar civic kayak refer rotor madam stats tenet racecar", True),
    ("words:palindrome", {}, "level radar civic and many other words", False),
    ("words:paragraph_last_first", {}, "Time waits for no one, time.\nLove is all you need, love!", True),
    ("words:paragraph_last_first", {}, "Time waits for no one, time.\nLove is all you need.", False),
    ("words:prime_lengths", {}, "We are all one.", True),
    ("words:prime_lengths", {}, "This is good.", False),
    ("words:repeats", {"small_n": 2}, "The cat and the dog.", True),
    ("words:repeats", {"small_n": 2}, "The cat, the dog, THE bird.", False),
    ("words:start_verb", {}, "Imagine a world without war.", True),
    ("words:start_verb", {}, "Exploring the ocean reveals new species.", True),
    ("words:start_verb", {}, "The world is big.", False),
    ("words:start_verb", {}, "**Title: Build a House**", False),
    ("words:vowel", {}, "A cat sat at a mat and had a nap.", True),
    ("words:vowel", {}, "Education is important.", False),
    ("words:vowel", {}, "A cat sat.\nA rat ran.", False),
    ("words:words_position", {"keyword": "blue"}, "The blue sky is very Blue today.", True),
    ("words:words_position", {"keyword": "blue"}, "The sky is blue.", False),
]

# Answers where we deliberately differ from upstream IFBench (see each checker's docstring).
CASES += [
    ("format:title_case", {}, "Don't Stop Believing in the Dream", True),
    ("count:conjunctions", {"small_n": 3}, "And then, and again and, but never.", False),
    ("count:pronouns", {"N": 1}, "The plan, i.e. the map, works.", False),
    ("words:words_position", {"keyword": "blue"}, "The blue sky — truly blue — ok.", True),
    ("words:keywords_specific_position", {"keyword": "blue", "n": 1, "m": 4}, "I don't like blue.", True),
    ("format:sub-bullets", {}, "No bullets here - none at all.", False),
    ("format:line_indent", {}, "Step one\n\n\n  Step two\n\n\n    Step three", True),
    ("format:newline", {}, "Hello big\n \nworld", False),
    ("repeat:repeat_span", {"prompt_to_repeat": REFERENCE, "n_start": 0, "n_end": 0}, "the", True),
]


def test_all_58_ifbench_ids_are_registered():
    assert set(IFBENCH_IDS) == EXPECTED_IDS
    assert len(EXPECTED_IDS) == 58
    assert all(get_instruction(i).family == "ifbench" for i in IFBENCH_IDS)


def test_every_id_has_a_passing_and_a_failing_case():
    verdicts = {(case[0], case[3]) for case in CASES}
    assert {i for i, ok in verdicts if ok} == EXPECTED_IDS
    assert {i for i, ok in verdicts if not ok} == EXPECTED_IDS


@pytest.mark.parametrize(
    ("instruction_id", "kwargs", "response", "expected"),
    CASES,
    ids=[f"{c[0]}-{'pass' if c[3] else 'fail'}-{n}" for n, c in enumerate(CASES)],
)
def test_checker_verdict(instruction_id, kwargs, response, expected):
    spec = get_instruction(instruction_id)
    assert spec.check(response, **validate_kwargs(instruction_id, kwargs)) is expected
