"""Question tasks: the answer a final reply must state (``expected_answer``) and the wrong ones it must not.

A task answered by reading (how many visits, who is at 2pm) changes nothing, so its final state
cannot tell a right reply from any other; a row may therefore carry, beside NeMo Gym's fields:

- ``expected_answer``: a string, or a list of items that must **all** appear in the final reply
  (the reasoning split off); an item is a string or a list of strings, any one of which will do
  (``["hannah.brooks@fernbrook.io", "Hannah Brooks"]``: the address or the full name);
- ``distractors`` (only with ``expected_answer``): the competing wrong answers, those that a
  wrong reading of the data gives (another person, another day, another source's count); a reply
  that states one of them scores 0. This is what defeats a reply that lists every candidate
  (every number up to 2,000, every name in the directory) to contain the right one: such a list
  holds the distractors too. A row leaves out of them any value a good reply may quote (the daily
  figures behind a total it asks for), and may not list one that its expected answer contains
  (``TaskError``: a right reply would score 0).

Matching (``Reply``): text is NFKC-normalised and case-folded, split into word and number tokens
(punctuation and whitespace only separate them), and an item is found when its tokens appear
consecutively in the reply's: "Ready for review: Icon set" is found in 'the subject was "ready for
review - icon set"', "Ana" is not found in "Banana". Numbers are numbers: thousands separators go
("1,204" is 1204), ordinals count ("19th" is 19), and an item that is one number is found when the
reply states a number that rounds to it at the reply's precision (273.4286 is found as "273",
"273.4" or "273.43"; 11 is not found in "110" or "11.5"). Dates and times are read in a few
common forms ("2025-11-11", "11/11/2025", "Nov 11", "November 11th, 2025", "11 November"; "2pm",
"2:30 pm", "14:00"); a date item is also found without its year, never with another year. Numbers
written as words are not read: a row lists them as alternatives when they are natural ("0",
"none").

Bounds: a reply longer than ``MAX_ANSWER_CHARS`` (after the reasoning) scores 0 on a question
task: an answer is short, and a long one could list every candidate; so scanning costs linear
time over at most that many characters, against at most ``MAX_ITEMS`` x ``MAX_ALTERNATIVES``
items and ``MAX_DISTRACTORS`` distractors of at most ``MAX_ITEM_CHARS`` each (numbers are looked
up by bisection); a reason names at most ``MAX_SHOWN`` items, each cut to ``MAX_SHOWN_CHARS``.
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_left
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from cascade_envs.core import TaskError

MAX_ANSWER_CHARS = 2000
MAX_ITEMS = 16
MAX_ALTERNATIVES = 16
MAX_DISTRACTORS = 64
MAX_ITEM_CHARS = 200
MAX_SHOWN = 3
"""Items named in a reason, at most."""
MAX_SHOWN_CHARS = 100
"""Characters of an item named in a reason, at most."""

_MONTHS = {
    name: number
    for number, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sept", "sep"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ],
        start=1,
    )
    for name in names
}
_MONTH = "|".join(sorted(_MONTHS, key=len, reverse=True))
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_DATE_OR_TIME = re.compile(
    r"(?=\d|\b[adfjmnos])(?:"  # only where a date or a time can start: ~2x faster than trying every branch
    rf"(?<![\w.])(\d{{4}})-(\d{{1,2}})-(\d{{1,2}})(?!\d)"  # 2025-11-11
    rf"|(?<![\w./])(\d{{1,2}})/(\d{{1,2}})(?:/(\d{{4}}))?(?![\w/])"  # 11/11, 11/11/2025
    rf"|\b({_MONTH})\.?\s+{_DAY}\b(?:,?\s+(\d{{4}})\b)?"  # Nov 11, November 11th, 2025
    rf"|\b{_DAY}\s+(?:of\s+)?({_MONTH})\b\.?(?:,?\s+(\d{{4}})\b)?"  # 11 November, 11th of Nov 2025
    rf"|(?<![\w.:])(\d{{1,2}}):(\d{{2}})(?::\d{{2}})?(?:\s*([ap])\.?m\b\.?)?"  # 14:00, 2:30 pm
    rf"|(?<![\w.:])(\d{{1,2}})\s*([ap])\.?m\b\.?)",  # 2pm, 2 p.m.
    re.IGNORECASE,
)
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_TOKEN = re.compile(r"\d+(?:\.\d+)?|[^\W_]+")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_YEAR = re.compile(r"(d\d{4})y\d{4}")


def canonical(text: str) -> str:
    """``text`` as matching sees it: space-separated tokens, dates as ``dMMDD[yYYYY]``, times as ``tHHMM``."""
    text = _THOUSANDS.sub("", unicodedata.normalize("NFKC", text).casefold())
    text = _DATE_OR_TIME.sub(_date_or_time, text)
    return " ".join(_number(t) if t[0].isdigit() else t for t in _TOKEN.findall(text))


def _date_or_time(match: re.Match[str]) -> str:
    g = match.groups()
    if g[0]:
        date = (int(g[1]), int(g[2]), g[0])
    elif g[3]:
        month, day = int(g[3]), int(g[4])
        date = (day, month, g[5]) if month > 12 >= day else (month, day, g[5])
    elif g[6]:
        date = (_MONTHS[g[6].lower()], int(g[7]), g[8])
    elif g[10]:
        date = (_MONTHS[g[10].lower()], int(g[9]), g[11])
    else:
        hour, minute, half = (int(g[12]), int(g[13]), g[14]) if g[12] else (int(g[15]), 0, g[16])
        if half:
            if not 1 <= hour <= 12:
                return match.group(0)
            hour = hour % 12 + (12 if half.lower() == "p" else 0)
        return f" t{hour:02d}{minute:02d} " if hour < 24 and minute < 60 else match.group(0)
    month, day, year = date
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return match.group(0)
    return f" d{month:02d}{day:02d}{'y' + year if year else ''} "


def _number(token: str) -> str:
    """A number token without leading zeros ("00000064" is 64); its decimals stay (they give its precision)."""
    whole, dot, fraction = token.partition(".")
    return (whole.lstrip("0") or "0") + dot + fraction


@dataclass(frozen=True)
class Needle:
    """One way an item can appear: a run of tokens (space-padded), or a single number."""

    padded: str
    number: Decimal | None

    @classmethod
    def parse(cls, text: str) -> tuple[Needle, ...]:
        """The ways ``text`` may appear (a dated one may also appear without its year); empty if no tokens."""
        tokens = canonical(text)
        if not tokens:
            return ()
        if _NUMBER.fullmatch(tokens):
            return (cls(f" {tokens} ", Decimal(tokens)),)
        yearless = _YEAR.sub(r"\1", tokens)
        return tuple(cls(f" {t} ", None) for t in dict.fromkeys((tokens, yearless)))


class Reply:
    """A final reply, read once: its canonical tokens and the numbers it states, sorted, by precision."""

    def __init__(self, text: str):
        self.tokens = f" {canonical(text)} "
        self.numbers: dict[int, list[Decimal]] = {}
        for token in self.tokens.split():
            if _NUMBER.fullmatch(token):
                self.numbers.setdefault(len(token.partition(".")[2]), []).append(Decimal(token))
        for values in self.numbers.values():
            values.sort()

    def has(self, needle: Needle) -> bool:
        if needle.number is None:
            return needle.padded in self.tokens
        for (
            decimals,
            values,
        ) in self.numbers.items():  # a stated number that rounds to the needle's, at its precision
            half = Decimal(5).scaleb(-decimals - 1)
            nearest = bisect_left(values, needle.number - half)
            if nearest < len(values) and values[nearest] <= needle.number + half:
                return True
        return False

    def has_any(self, needles: tuple[Needle, ...]) -> bool:
        return any(self.has(n) for n in needles)


@dataclass(frozen=True)
class Item:
    """One thing the reply must state (any of its alternatives), or must not (a distractor)."""

    options: tuple[str, ...]
    needles: tuple[Needle, ...]

    @property
    def text(self) -> str:
        """The item as a reason names it (cut to ``MAX_SHOWN_CHARS``)."""
        text = " or ".join(repr(o) for o in self.options)
        return text if len(text) <= MAX_SHOWN_CHARS else text[: MAX_SHOWN_CHARS - 3] + "..."


@dataclass(frozen=True)
class ExpectedAnswer:
    """A row's ``expected_answer`` and ``distractors``, checked and ready to match."""

    items: tuple[Item, ...]
    distractors: tuple[Item, ...] = ()

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> ExpectedAnswer | None:
        """The row's answer fields, or ``None`` when it has none; ``TaskError`` names a bad field."""
        value, distractors = row.get("expected_answer"), row.get("distractors")
        if value is None:
            if distractors is not None:
                raise TaskError("only a row with an 'expected_answer' may list distractors", "distractors")
            return None
        listed = [value] if isinstance(value, str) else value
        if not isinstance(listed, list) or not 1 <= len(listed) <= MAX_ITEMS:
            raise TaskError(f"expected a string or a list of 1 to {MAX_ITEMS} items", "expected_answer")
        items = tuple(_item(entry, f"expected_answer[{i}]") for i, entry in enumerate(listed))
        wrong = [] if distractors is None else distractors
        if not isinstance(wrong, list) or len(wrong) > MAX_DISTRACTORS:
            raise TaskError(f"expected a list of at most {MAX_DISTRACTORS} strings", "distractors")
        decoys = tuple(_item(entry, f"distractors[{i}]", alternatives=False) for i, entry in enumerate(wrong))
        answer = cls(items, decoys)
        for item in items:
            for needle in item.needles:  # each form a right reply may take (a date without its year too)
                clash = answer._stated(Reply(needle.padded))
                if clash:
                    raise TaskError(
                        f"{clash} is found in the expected answer {item.text} (as {needle.padded.strip()!r}):"
                        " a right reply would score 0",
                        "distractors",
                    )
        return answer

    def check(self, reply: str) -> tuple[bool, str]:
        """Whether ``reply`` states the answer and no distractor, and why (a short, bounded reason)."""
        if len(reply) > MAX_ANSWER_CHARS:
            return False, (
                f"the final reply has {len(reply):,} characters; a question's answer must fit in "
                f"{MAX_ANSWER_CHARS:,}"
            )
        read = Reply(reply)
        missing = [item.text for item in self.items if not read.has_any(item.needles)]
        if missing:
            return False, f"the final reply does not state the expected answer: {_listed(missing)} not found"
        stated = self._stated(read)
        if stated:
            return False, f"the final reply also states {stated}, a wrong answer to the question"
        return True, "the final reply states the expected answer"

    def _stated(self, read: Reply) -> str | None:
        return next((d.text for d in self.distractors if read.has_any(d.needles)), None)


def _item(entry: Any, where: str, *, alternatives: bool = True) -> Item:
    options = entry if alternatives and isinstance(entry, list) else [entry]
    if not 1 <= len(options) <= MAX_ALTERNATIVES:
        raise TaskError(f"{where}: expected 1 to {MAX_ALTERNATIVES} alternatives", _field(where))
    needles: list[Needle] = []
    for option in options:
        if not isinstance(option, str) or not option.strip() or len(option) > MAX_ITEM_CHARS:
            kind = "a string or a list of strings" if alternatives else "a string"
            raise TaskError(
                f"{where}: expected {kind}, each non-empty and at most {MAX_ITEM_CHARS} characters",
                _field(where),
            )
        found = Needle.parse(option)
        if not found:
            raise TaskError(f"{where}: {option!r} has no word or number to look for", _field(where))
        needles += found
    return Item(tuple(options), tuple(needles))


def _field(where: str) -> str:
    return where.partition("[")[0]


def _listed(texts: list[str]) -> str:
    shown = ", ".join(texts[:MAX_SHOWN])
    return shown + (f" and {len(texts) - MAX_SHOWN} more" if len(texts) > MAX_SHOWN else "")
