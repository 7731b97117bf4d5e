"""What the reward sees of a response: the reasoning split, the overlong rule and the no-answer rule (DESIGN.md §2).

The reward sees only the final answer. A ``<think>`` block that never closes, or a generation cut
at the length limit, earns 0 (the overlong penalty of the Cascade RL recipe). A final answer with
no visible character (``has_visible_text``) is no answer: it earns no point and reaches no
verifier, judge or group scorer (reason ``NO_ANSWER``).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from .core import Completion

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
EMPTY_THINK = f"{THINK_OPEN}{THINK_CLOSE}"
_OPEN_RE = re.compile(r"^\s*<think>", re.IGNORECASE)
_CLOSE_RE = re.compile(r"</think>", re.IGNORECASE)

NO_ANSWER = "no final answer: nothing visible after the reasoning"
"""The reason of every reply that has no visible answer, in every env."""
INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zs", "Zl", "Zp"})
"""Unicode categories that show nothing: controls, format characters (zero-width spaces and joiners,
BOM, direction marks, soft hyphen, tags), lone surrogates, and space, line and paragraph separators."""
_BLANK_RANGES = (
    (0x034F, 0x034F),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x2065, 0x2065),
    (0x2800, 0x2800),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0xE0000, 0xE0FFF),
)
_BLANK = frozenset(chr(code) for first, last in _BLANK_RANGES for code in range(first, last + 1))
"""Characters outside those categories that show nothing either: Unicode's other default-ignorable
code points (combining grapheme joiner, Hangul fillers, Khmer inherent vowels, Mongolian and other
variation selectors, the reserved ones) and the Braille blank."""


@dataclass(frozen=True)
class Split:
    """A response split into its reasoning and its final answer."""

    reasoning: str
    answer: str
    unterminated: bool = False


def split_reasoning(text: str) -> Split:
    """Split ``<think>…</think>`` off the front of ``text``.

    Both tags match in any letter case (``<THINK>…</Think>`` is a think block too). Chat templates
    often put the opening tag in the prompt, so a closing tag without an opening one also ends the
    reasoning. An opening tag with no closing tag is an unterminated block: the whole text is
    reasoning and there is no answer.
    """
    close = _CLOSE_RE.search(text)
    if close:
        reasoning = _OPEN_RE.sub("", text[: close.start()], count=1)
        return Split(reasoning.strip(), text[close.end() :].strip())
    match = _OPEN_RE.match(text)
    if match:
        return Split(text[match.end() :].strip(), "", unterminated=True)
    return Split("", text.strip())


def has_visible_text(text: str) -> bool:
    """Whether ``text`` shows anything: a character outside ``INVISIBLE_CATEGORIES`` and ``_BLANK``.

    Empty text, whitespace of any kind and zero-width or other invisible characters alone are no
    answer; any other character (a letter, a digit, punctuation, an emoji, U+FFFD) is visible.
    """
    category = unicodedata.category
    return any(c not in _BLANK and category(c) not in INVISIBLE_CATEGORIES for c in text)


def overlong_reason(completion: Completion, split: Split) -> str | None:
    """Why the response earns the overlong 0, or ``None`` when the rule does not apply."""
    if completion.truncated:
        return "overlong: generation was cut at the maximum length"
    if split.unterminated:
        return "overlong: the <think> block was never closed"
    return None
