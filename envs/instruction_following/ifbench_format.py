"""IFBench ``format:*`` checkers: layout, brackets, quotes, bullets and casing."""

from __future__ import annotations

import itertools
import re
import string

from .ifbench_text import PUNCTUATION, ifbench, remove_punctuation, require, sentences, strip_punctuation

_OPENERS = {")": "(", "]": "[", "}": "{"}


@ifbench("format:parentheses")
def parentheses(response: str) -> bool:
    """Brackets (any of ``()[]{}``) nest at least 5 deep and the innermost level is closed by its
    matching bracket; a mismatched closing bracket discards the nesting seen so far."""
    stack: list[str] = []
    deepest = 0
    for char in response:
        if char in "([{":
            stack.append(char)
            deepest = max(deepest, len(stack))
        elif char in _OPENERS:
            if stack and stack[-1] == _OPENERS[char]:
                stack.pop()
                if deepest >= 5:
                    return True
            else:
                stack, deepest = [], 0
    return False


@ifbench("format:quotes")
def quotes(response: str) -> bool:
    """Quotes nest at least three levels deep, alternating ``"`` and ``'``, and the three levels
    are closed again (an identical quote mark always closes the innermost open quote)."""
    stack: list[str] = []
    deepest = 0
    for char in response:
        if stack and char == stack[-1]:
            stack.pop()
            if deepest - len(stack) >= 3:
                return True
        elif char in "\"'":
            stack.append(char)
            deepest = max(deepest, len(stack))
    return False


def _option_list(options: str) -> list[str]:
    if "/" in options:
        parts = options.split("/")
    elif re.search(r"\bor\b", options):
        parts = re.split(r"\bor\b", options)
    else:
        parts = options.split(",")
    return [part.strip() for part in parts]


_LETTERED = re.compile(r"\W*[aA]\W*[bB]\W*[cC]")


@ifbench("format:options")
def options(response: str, *, options: str) -> bool:
    """The whole response is one of ``options`` (split on ``/``, ``or`` or ``,``). Lettered choices
    (``a), b), c)``) must be given verbatim (surrounding whitespace aside); word options ignore
    case and edge punctuation."""
    choices = _option_list(options)
    if _LETTERED.match(options):
        return response.strip() in choices
    answer = strip_punctuation(response).lower()
    return any(strip_punctuation(choice).lower() == answer for choice in choices)


@ifbench("format:newline")
def newline(response: str) -> bool:
    """Each word (punctuation removed) is on a line of its own. IFBench compares the number of
    non-empty lines with the number of words, which a blank-looking line can balance."""
    lines = [line.split() for line in remove_punctuation(response).split("\n")]
    words_per_line = [len(words) for words in lines if words]
    return bool(words_per_line) and all(count == 1 for count in words_per_line)


def _is_emoji(char: str) -> bool:
    return require("emoji", "format:emoji").is_emoji(char)


def _ends_with_emoji(text: str) -> bool:
    """Whether ``text`` ends with an emoji, possibly followed by one modifier character such as a
    variation selector."""
    return _is_emoji(text[-1]) or (len(text) > 1 and _is_emoji(text[-2]))


@ifbench("format:emoji")
def emoji_sentences(response: str) -> bool:
    """Every sentence ends with an emoji. The sentence splitter cuts after ``.!?``, so an emoji
    written after the final punctuation opens the next piece; that counts for the sentence before."""
    parts = [remove_punctuation(part).strip() for part in sentences(response)]
    if not any(parts):
        return False
    for index, part in enumerate(parts):
        if not part:
            return False
        if _ends_with_emoji(part):
            continue
        following = parts[index + 1] if index + 1 < len(parts) else ""
        if not following or not _is_emoji(following[0]):
            return False
    return True


@ifbench("format:line_indent")
def line_indent(response: str) -> bool:
    """Ignoring blank lines, each line is indented by more spaces than the line before (IFBench's
    blank-line removal skips the second of two consecutive blank lines)."""
    indents = [len(line) - len(line.lstrip(" ")) for line in response.split("\n") if line.strip()]
    return all(b > a for a, b in itertools.pairwise(indents))


_CURLY_DOUBLE = str.maketrans({"\u201c": '"', "\u201d": '"'})
_NOT_DOUBLE_QUOTE = string.digits + PUNCTUATION.replace('"', "")


@ifbench("format:quote_unquote")
def quote_unquote(response: str) -> bool:
    """No quoted phrase is directly followed by another quote or ends the response: some unquoted
    text must come after every quotation. Curly double quotes count as straight ones, as in
    IFBench's first release (its later code lost the curly characters)."""
    text = "".join(response.translate(_CURLY_DOUBLE).replace("'\"'", "").split())
    if '""' in text:
        return False
    return not text.strip(_NOT_DOUBLE_QUOTE).endswith('"')


@ifbench("format:list")
def special_list(response: str, *, sep: str) -> bool:
    """The list marker ``sep`` appears at least twice."""
    return response.count(sep) >= 2


_ITALIC = re.compile(r"<(i|em)>(.*?)</\1>", re.DOTALL)


@ifbench("format:thesis")
def thesis(response: str) -> bool:
    """Some HTML italic span (``<i>`` or ``<em>``) holds text and is followed by more text.
    IFBench only looks at the first opening tag and the first closing tag of either kind."""
    for match in _ITALIC.finditer(response):
        if match.group(2).strip() and response[match.end() :].strip():
            return True
    return False


@ifbench("format:sub-bullets")
def sub_bullets(response: str) -> bool:
    """There are ``*`` bullets, and every ``*`` is followed, before the next ``*``, by a ``-``
    sub-bullet. IFBench passes text with no ``*`` at all, so every loose variant with asterisks
    stripped passed there."""
    chunks = response.split("*")[1:]
    return bool(chunks) and all("-" in chunk for chunk in chunks)


@ifbench("format:no_bullets_bullets")
def no_bullets_bullets(response: str) -> bool:
    """At least two sentences of prose, then at least two ``*`` bullet lines and nothing else;
    blank lines are ignored (IFBench fails a blank line after a bullet)."""
    prose_sentences = bullets = 0
    for line in response.split("\n"):
        line = line.strip()
        if not line:
            continue
        if line.startswith("*"):
            if prose_sentences < 2:
                return False
            bullets += 1
        elif bullets:
            return False
        else:
            prose_sentences += len(sentences(line))
    return bullets >= 2


_WORD = re.compile(r"(?<![\w'’-])[^\W\d_][\w'’-]*")
MINOR_WORDS = frozenset(
    """
    a an the and but or nor for so yet as at by in of off on per to up via vs
    """.split()  # noqa: SIM905
)
"""Words title case may leave in lower case (articles, short conjunctions and prepositions)."""


@ifbench("format:title_case")
def title_case(response: str) -> bool:
    """Every major word starts with a capital letter; minor words (``a``, ``of``, ``the``, ...)
    may stay lower case except as the first word. IFBench requires every word capitalised, which
    the instruction ("every major word") does not ask, and splits contractions ("n't" fails)."""
    for index, word in enumerate(_WORD.findall(response)):
        if word[0].islower() and (index == 0 or word.lower() not in MINOR_WORDS):
            return False
    return True


@ifbench("format:output_template")
def output_template(response: str) -> bool:
    """Contains the three labels ``My Answer:``, ``My Conclusion:`` and ``Future Outlook:``."""
    return all(label in response for label in ("My Answer:", "My Conclusion:", "Future Outlook:"))


@ifbench("format:no_whitespace")
def no_whitespace(response: str) -> bool:
    """No whitespace character at all."""
    return not any(char.isspace() for char in response)
