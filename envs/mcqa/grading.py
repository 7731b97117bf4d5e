"""Answer-letter extraction for multiple-choice questions, one function per grading mode.

The modes and their semantics follow the public NeMo Gym ``mcqa`` rows (``grading_mode`` per row,
optional ``template_metadata.output_regex``), so released data scores the same way:

- ``strict_single_letter_boxed``: the letter inside the *last* ``\\boxed{...}``; tolerates a
  ``\\text{}`` wrapper, padding (``[C]``, ``(B)``) and a label with option text (``E: ...``).
- ``lenient_boxed``: strict first; otherwise the one option whose text appears in the last box.
- ``lenient_answer_colon``: the first ``Answer: X`` line, as a letter or an option's exact text.
- ``lenient_answer_colon_md``: the last markdown-tolerant ``**Answer:** X`` whose payload names a
  single choice (a list such as ``A or B`` is ambiguous and names none).
- custom regexes: case-insensitive, last match wins; they take priority over the mode. A pattern
  that does not compile is skipped (as upstream does); a captured letter is trusted even when the
  row lists no such option, so a row with a regex may have no options at all (as upstream).

An empty or blank capture names no option, even one whose text is empty (upstream would match it):
a reply that names nothing never scores.

Every built-in extractor is linear in the response length (``rfind`` and brace matching rather
than backtracking patterns), so the env runs them in-process. A row's own ``output_regex`` may
backtrack catastrophically, so the env runs it in a verifier worker (``regex_letter``) unless
``regex_steps`` bounds its cost on the answer to a few milliseconds.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
from collections import deque
from collections.abc import Callable, Sequence
from typing import cast

Options = list[tuple[str, str]]
"""``(letter, option text)`` pairs, letters upper-case, in row order."""

BOXED = "\\boxed{"
_TEXT_WRAP = re.compile(r"\\text\{\s*(.*?)\s*\}", re.S)
_LETTER_ONLY = re.compile(r"[^A-Za-z]*([A-Z])[^A-Za-z]*")
_LETTER_LABEL = re.compile(r"\s*([A-Z])\s*[:).\-]")
_ANSWER_COLON = re.compile(r"answer\s*:\s*(.+)", re.I)
_ANSWER_COLON_MD = re.compile(r"[*_]{0,2}Answer[*_]{0,2}\s*:[*_\s]{0,2}(.+)", re.I | re.M)
_SINGLE_LETTER = re.compile(r"(?<![A-Za-z])([A-Za-z])(?![A-Za-z])")
_LEADING_LETTER = re.compile(r"([a-zA-Z])(?![a-zA-Z0-9])")
_STANDALONE_UPPER = re.compile(r"\b[A-Z]\b")
_LIST_SEPARATOR = re.compile(r"\s*[/|&,;]\s*|\s+(?:or|and)\s+|\s+", re.I)
# Choice letters written in other scripts (Arabic, Bengali, full-width Latin) mean A-D.
_FOREIGN_LETTERS = str.maketrans(
    {
        c: f" {latin}"
        for chars, latin in zip(("أঅＡ", "بবＢ", "جডＣ", "دঢＤ"), "ABCD", strict=True)
        for c in chars
    }
)


def _last_match(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    last = deque(pattern.finditer(text), maxlen=1)
    return last[0] if last else None


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (nested braces balanced), or None."""
    start = text.rfind(BOXED)
    if start < 0:
        return None
    depth = 1
    begin = start + len(BOXED)
    for index in range(begin, len(text)):
        char = text[index]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[begin:index]
    return None


def strip_text_wrappers(text: str) -> str:
    """Remove any number of enclosing ``\\text{...}`` wrappers."""
    while match := _TEXT_WRAP.fullmatch(text):
        text = match.group(1)
    return text


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def strict_boxed(text: str, options: Options, allowed: set[str]) -> str | None:
    inner = last_boxed(text)
    if inner is None:
        return None
    inner = strip_text_wrappers(inner.strip())
    match = _LETTER_ONLY.fullmatch(inner) or _LETTER_LABEL.match(inner)
    letter = match.group(1) if match else None
    return letter if letter in allowed else None


def boxed_option_text(text: str, options: Options, allowed: set[str]) -> str | None:
    """The single option whose (normalised) text is contained in the last box."""
    inner = last_boxed(text)
    if inner is None:
        return None
    inner = inner.strip()
    candidates = {_norm(inner), _norm(strip_text_wrappers(inner))}
    found = {letter for letter, option in options if (o := _norm(option)) and any(o in c for c in candidates)}
    return found.pop() if len(found) == 1 else None


def lenient_boxed(text: str, options: Options, allowed: set[str]) -> str | None:
    return strict_boxed(text, options, allowed) or boxed_option_text(text, options, allowed)


def _letter_or_option_text(candidate: str, options: Options, allowed: set[str]) -> str | None:
    if len(candidate) == 1 and candidate.isalpha() and candidate.upper() in allowed:
        return candidate.upper()
    wanted = _norm(candidate)
    if not wanted:  # "Answer: \\text{}" names nothing, not an option whose text is empty
        return None
    return next((letter for letter, option in options if _norm(option) == wanted), None)


def answer_colon(text: str, options: Options, allowed: set[str]) -> str | None:
    match = _ANSWER_COLON.search(text)
    if not match:
        return None
    return _letter_or_option_text(strip_text_wrappers(match.group(1)).strip(), options, allowed)


def _is_choice_list(text: str, allowed: set[str]) -> bool:
    """True when two different allowed letters appear separated only by list separators."""
    hits = (m for m in _SINGLE_LETTER.finditer(text) if m.group(1).upper() in allowed)
    return any(
        a.group(1).upper() != b.group(1).upper() and _LIST_SEPARATOR.fullmatch(text, a.end(), b.start())
        for a, b in itertools.pairwise(hits)
    )


def choice_letter(payload: str, allowed: set[str]) -> str | None:
    """The one choice named by an answer payload such as ``B``, ``B because ...`` or ``(C).``."""
    candidate = payload.translate(_FOREIGN_LETTERS).strip().strip("*_` \t\n\r.,;:")
    if _is_choice_list(candidate, allowed):
        return None
    if len(candidate) == 1:
        letter: str | None = candidate
    elif match := _LEADING_LETTER.match(candidate):
        letter = match.group(1)
    else:
        last = _last_match(_STANDALONE_UPPER, candidate)
        letter = last.group(0) if last else None
    return letter.upper() if letter and letter.upper() in allowed else None


def answer_colon_md(text: str, options: Options, allowed: set[str]) -> str | None:
    for payload in reversed(_ANSWER_COLON_MD.findall(text)):
        if letter := choice_letter(payload, allowed):
            return letter
    return None


def custom_regex(
    text: str, patterns: Sequence[re.Pattern[str]], options: Options, allowed: set[str]
) -> str | None:
    """First pattern (in order) whose last match names a letter or an option's exact text.

    A captured single letter is returned even when it is not an option (the regex is trusted, as
    upstream does); it then simply fails to equal the gold letter.
    """
    for pattern in patterns:
        last = _last_match(pattern, text)
        if last is None:
            continue
        captured = (last.group(1) if pattern.groups else last.group(0)) or ""
        captured = captured.translate(_FOREIGN_LETTERS).strip().upper()
        if len(captured) == 1 and captured.isalpha():
            return captured
        wanted = _norm(captured)
        if (
            not wanted
        ):  # an empty capture names nothing (upstream matches it to an option whose text is empty)
            continue
        letter = next((letter for letter, option in options if _norm(option) == wanted), None)
        if letter:
            return letter
    return None


Extractor = Callable[[str, Options, set[str]], "str | None"]
GRADING_MODES: dict[str, Extractor] = {
    "strict_single_letter_boxed": strict_boxed,
    "lenient_boxed": lenient_boxed,
    "lenient_answer_colon": answer_colon,
    "lenient_answer_colon_md": answer_colon_md,
}
DEFAULT_MODE = "strict_single_letter_boxed"


def split_output_regex(value: object) -> tuple[list[str], list[tuple[str, str]]]:
    """``template_metadata.output_regex`` (a pattern or a list of them) as ``(usable, invalid)``:
    the patterns that compile, and ``(pattern, error)`` for those that do not. NeMo Gym skips an
    invalid pattern (its ``re.error`` is caught and the next pattern, then the grading mode,
    decides), so an invalid one is not the row's end. Raises ValueError for what upstream cannot
    read at all (not a string or a list of strings)."""
    patterns = [value] if isinstance(value, str) else value
    if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
        raise ValueError("expected a regex string or a list of them")
    usable, invalid = [], []
    for pattern in patterns:
        try:
            re.compile(pattern, re.IGNORECASE)
        except (re.error, RecursionError, OverflowError) as exc:
            invalid.append((pattern, str(exc)))
        else:
            usable.append(pattern)
    return usable, invalid


def compile_output_regex(value: object) -> list[re.Pattern[str]]:
    """The compiled usable patterns of ``template_metadata.output_regex``; invalid ones are skipped."""
    return [re.compile(p, re.IGNORECASE) for p in split_output_regex(value)[0]]


def regex_letter(text: str, output_regex: object, options: Options, allowed: set[str]) -> str | None:
    """``custom_regex`` with the row's ``output_regex`` (compiled here: this runs in a worker)."""
    return custom_regex(text, compile_output_regex(output_regex), options, allowed)


@functools.lru_cache(maxsize=1024)
def _choices(pattern: str) -> tuple[int, float]:
    """``(u, c)``: one match attempt explores at most ``c * (n + 1) ** u`` paths on ``n`` characters.

    ``u`` counts unbounded repeats, ``c`` the product of bounded repeats' and alternations'
    choices. A repeat over anything with choices (``(a+)+``, ``(a|b)*``), a backreference or a
    lookaround gives ``c = inf``: no polynomial bound is claimed.
    """
    try:
        import re._parser as sre  # type: ignore[import-not-found]  # private (no stub), hence the fallback: no bound

        parsed = sre.parse(pattern, re.IGNORECASE)
    except Exception:
        return 0, math.inf
    simple = {sre.LITERAL, sre.NOT_LITERAL, sre.ANY, sre.IN, sre.AT}
    repeats = {sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT}

    def walk(items: Sequence[tuple[object, object]]) -> tuple[int, float]:
        u, c = 0, 1.0
        for op, arg in items:
            if op in simple:
                continue
            if op in repeats:
                low, high, body = cast("tuple[int, int, Sequence[tuple[object, object]]]", arg)
                if walk(body) != (0, 1.0):
                    return 0, math.inf
                u, c = (u + 1, c) if high == sre.MAXREPEAT else (u, c * (high - low + 1))
            elif op == sre.SUBPATTERN:
                inner_u, inner_c = walk(arg[3])  # type: ignore[index]
                u, c = u + inner_u, c * inner_c
            elif op == sre.BRANCH:
                branches = [walk(branch) for branch in arg[1]]  # type: ignore[index]
                u, c = u + max(b[0] for b in branches), c * sum(b[1] for b in branches)
            else:
                return 0, math.inf
        return u, c

    return walk(parsed.data)


def regex_steps(output_regex: object, chars: int) -> float:
    """An upper bound on the paths ``regex_letter`` explores on a ``chars``-long answer (may be inf)."""
    patterns = [output_regex] if isinstance(output_regex, str) else output_regex
    if not isinstance(patterns, list):
        return math.inf
    total = 0.0
    for pattern in patterns:
        u, c = _choices(pattern) if isinstance(pattern, str) else (0, math.inf)
        total += (chars + 1) * c * (chars + 1) ** u  # a match attempt at every start
    return total
