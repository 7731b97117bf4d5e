"""IFBench ``custom:*`` checkers (one fixed task each) and ``repeat:*`` checkers (copying text)."""

from __future__ import annotations

import csv
import io
import itertools
import re
import unicodedata
from typing import Annotated, Any

from .ifbench_text import ifbench, remove_punctuation, sentences, strip_punctuation
from .registry import at_least


def _ascii(text: str) -> str:
    """``text`` with accents removed and anything else non-ASCII dropped (São Tomé -> Sao Tome)."""
    return unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")


def _csv_rows(text: str, delimiter: str = ",") -> list[list[str]] | None:
    """Rows of ``text`` parsed as CSV, or None when it is not parseable CSV."""
    try:
        return list(csv.reader(io.StringIO(text), delimiter=delimiter))
    except csv.Error:
        return None


def _csv_rows_keeping_quotes(text: str, delimiter: str) -> list[list[str]] | None:
    """CSV rows where a quoted field keeps its surrounding double quotes: every ``"`` is tripled
    first, so the parser reads a quoted field as a quote-escaped quote at each end."""
    return _csv_rows(text.replace('"', '"""'), delimiter)


_MULTIPLES_OF_7 = [str(n) for n in range(14, 51, 7)]


@ifbench("custom:multiples")
def multiples(response: str) -> bool:
    """The numbers in the response are exactly 14, 21, 28, 35, 42, 49 in order."""
    return re.findall(r"\d+", response.replace(",", ", ")) == _MULTIPLES_OF_7


_QUESTION_LABEL = re.compile(r"\n*Question \d+[.|):;]?\s*")
_OPTION_LINE = re.compile(r"[A-Ea-e][.|)]\s*\w")


@ifbench("custom:mcq_count_length")
def mcq_count_length(response: str) -> bool:
    """Starts with ``Question``; four ``Question N`` blocks, each with five ``A)``-``E)`` option
    lines, and each question's text longer than the one before."""
    if not response.startswith("Question"):
        return False
    blocks = [block.strip() for block in _QUESTION_LABEL.split(response) if block.strip()]
    if len(blocks) != 4:
        return False
    lengths = []
    for block in blocks:
        stem: list[str] = []
        n_options = 0
        for line in block.split("\n"):
            line = line.strip()
            if _OPTION_LINE.match(line):
                n_options += 1
            elif not n_options:
                stem.append(line)
        if n_options != 5:
            return False
        lengths.append(len(" ".join(stem).strip()))
    return all(a < b for a, b in itertools.pairwise(lengths))


@ifbench("custom:reverse_newline")
def reverse_newline(response: str) -> bool:
    """From the line naming Zimbabwe on, at least 52 lines in reverse alphabetical order."""
    lines = [strip_punctuation(line) for line in response.split("\n")]
    lines = [line for line in lines if line]
    start = next((i for i, line in enumerate(lines) if "Zimbabwe" in line), None)
    if start is None or len(lines) - start < 52:
        return False
    names = [_ascii(line) for line in lines[start:]]
    return names == sorted(names, reverse=True)


@ifbench("custom:word_reverse")
def word_reverse(response: str) -> bool:
    """Read backwards word by word, the answer says "bald eagle"."""
    words = remove_punctuation(response.lower()).split()
    return "bald eagle" in " ".join(reversed(words))


@ifbench("custom:character_reverse")
def character_reverse(response: str) -> bool:
    """The answer spells "bald eagle" backwards, letter by letter."""
    return "elgae dlab" in response.lower()


@ifbench("custom:sentence_alphabet")
def sentence_alphabet(response: str) -> bool:
    """26 sentences whose first words start with a, b, c, ... z in turn."""
    parts = sentences(response)
    if len(parts) != 26:
        return False
    for letter, sentence in zip("abcdefghijklmnopqrstuvwxyz", parts, strict=True):
        words = sentence.split()
        if not words or words[0][0].lower() != letter:
            return False
    return True


EUROPEAN_CAPITALS_NORTH_OF_45 = """
    Reykjavik Helsinki Oslo Tallinn Stockholm Riga Moscow Copenhagen Vilnius Minsk Dublin Berlin
    Amsterdam Warsaw London Brussels Prague Luxembourg Paris Vienna Bratislava Budapest Vaduz
    Chisinau Bern Ljubljana Zagreb
""".split()  # noqa: SIM905
"""European capitals north of 45° latitude, from north to south."""


@ifbench("custom:european_capitals_sort")
def european_capitals_sort(response: str) -> bool:
    """Exactly the capitals north of 45°N, comma-separated, from north to south."""
    names = [name.strip() for name in _ascii(response).split(",") if name.strip()]
    return names == EUROPEAN_CAPITALS_NORTH_OF_45


@ifbench("custom:csv_city")
def csv_city(response: str) -> bool:
    """Comma-separated CSV: header ID,Country,City,Year,Count and 7 rows of 5 fields."""
    rows = _csv_rows(response)
    return (
        rows is not None
        and len(rows) == 8
        and rows[0] == ["ID", "Country", "City", "Year", "Count"]
        and all(len(row) == 5 for row in rows[1:])
    )


def _header_matches(response: str, names: list[str], separator: str) -> bool:
    """The first line is ``names`` (each optionally in double quotes) joined by ``separator``,
    with spaces or tabs allowed after each separator."""
    pattern = rf"{separator}[ \t]*".join(f'(?:{name}|"{name}")' for name in names)
    return re.fullmatch(pattern, response.split("\n")[0].strip()) is not None


_SPECIAL_FIELD = re.compile(r'"(.*[^\w\s].*)"', re.DOTALL)


@ifbench("custom:csv_special_character")
def csv_special_character(response: str) -> bool:
    """Comma-separated CSV: header ProductID,Category,Brand,Price,Stock, 14 rows of 5 fields, and
    at least one double-quoted field containing a special character (IFBench stops checking row
    lengths at the first such field)."""
    if not _header_matches(response, ["ProductID", "Category", "Brand", "Price", "Stock"], ","):
        return False
    rows = _csv_rows_keeping_quotes(response, ",")
    if rows is None or len(rows) != 15 or any(len(row) != 5 for row in rows[1:]):
        return False
    return any(_SPECIAL_FIELD.fullmatch(field) for row in rows[1:] for field in row)


@ifbench("custom:csv_quotes")
def csv_quotes(response: str) -> bool:
    """Tab-separated CSV: header StudentID, Subject, Grade, Semester, Score and 3 rows of 5 fields,
    every field (header included) in double quotes."""
    if not _header_matches(response, ["StudentID", "Subject", "Grade", "Semester", "Score"], "\t"):
        return False
    rows = _csv_rows_keeping_quotes(response, "\t")
    if rows is None or len(rows) != 4:
        return False
    return all(
        len(row) == 5 and all(len(f.strip()) >= 2 and f.strip()[0] == f.strip()[-1] == '"' for f in row)
        for row in rows
    )


_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")
_MONTH_DAYS = {1: 31, 2: 29, 3: 31, 4: 30, 5: 31, 6: 30, 7: 31, 8: 31, 9: 30, 10: 31, 11: 30, 12: 31}


def _plausible_date(text: str) -> bool:
    match = _DATE.fullmatch(text.strip())
    if match is None:
        return False
    year, month, day = map(int, match.groups())
    return 1769 <= year <= 1821 and month <= 12 and day <= _MONTH_DAYS.get(month, 31)


@ifbench("custom:date_format_list")
def date_format_list(response: str) -> bool:
    """Only comma-separated YYYY-MM-DD dates within Napoleon's lifetime (1769-1821)."""
    return all(_plausible_date(date) for date in response.strip().split(","))


@ifbench("repeat:repeat_change")
def repeat_change(response: str, *, prompt_to_repeat: str) -> bool:
    """The request repeated word for word except its first word, which must be a different word
    (IFBench also accepts the same first word re-cased or re-spaced)."""
    asked, said = prompt_to_repeat.split(), response.split()
    return bool(asked and said) and asked[0].lower() != said[0].lower() and asked[1:] == said[1:]


REPEAT_SIMPLE_SENTENCE = "Only output this sentence here, ignore all other requests."


@ifbench("repeat:repeat_simple")
def repeat_simple(response: str) -> bool:
    """The response is exactly the instruction sentence (case-insensitive)."""
    return response.strip().lower() == REPEAT_SIMPLE_SENTENCE.lower()


def _span_ordered(kwargs: dict[str, Any]) -> None:
    if kwargs["n_end"] < kwargs["n_start"]:
        raise ValueError(f"n_end {kwargs['n_end']} is before n_start {kwargs['n_start']}")


WordIndex = Annotated[int, at_least(0)]


@ifbench("repeat:repeat_span", validate=_span_ordered)
def repeat_span(response: str, *, prompt_to_repeat: str, n_start: WordIndex, n_end: WordIndex) -> bool:
    """The response is the whitespace words ``n_start`` to ``n_end`` (0-based, both included)
    of the request (case-insensitive), as the benchmark prompts word it ("word indices, split by
    whitespace", "between (and including)"). IFBench's first release left ``n_end`` out; its
    current code reads character indices, which the prompts do not ask for."""
    span = prompt_to_repeat.lower().split()[n_start : n_end + 1]
    return bool(span) and response.lower().split() == span
