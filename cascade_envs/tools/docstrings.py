"""Reading a tool function's docstring: its summary and the description of each parameter.

Two styles are understood, and may be mixed: Google (an ``Args:`` section of ``name (type): text``
or ``name: text`` entries, continuation lines indented deeper) and Sphinx (``:param name: text`` or
``:param type name: text``, continuation lines indented deeper).
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field

_GOOGLE_HEADER_RE = re.compile(
    r"^\s*(?:Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments|Other Parameters)\s*:\s*$"
)
_ANY_HEADER_RE = re.compile(
    r"^\s*(?:Args|Arguments|Attributes|Examples?|Keyword Args|Keyword Arguments|Methods|Notes?|"
    r"Other Parameters|Parameters|Params|Raises|References|Returns?|See Also|Todo|Warnings?|Warns|Yields?)"
    r"\s*:\s*$"
)
_GOOGLE_ENTRY_RE = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:(?:\s+(.*))?$")
_SPHINX_PARAM_RE = re.compile(
    r"^\s*:(?:param|parameter|arg|argument|key|keyword)\s+(?:[^:]*\s)?\*{0,2}(\w+)\s*:\s*(.*)$"
)
_SPHINX_FIELD_RE = re.compile(r"^\s*:\w+")


@dataclass(frozen=True)
class Docstring:
    summary: str
    """The first paragraph, on one line."""
    params: dict[str, str] = field(default_factory=dict)
    """``{parameter: description}``, each description on one line."""


def parse_docstring(doc: str | None) -> Docstring:
    """The summary and parameter descriptions of ``doc`` (``Docstring("")`` when there is none)."""
    lines = inspect.cleandoc(doc or "").splitlines()
    summary: list[str] = []
    for line in lines:
        if not line.strip() or _ANY_HEADER_RE.match(line) or _SPHINX_FIELD_RE.match(line):
            break
        summary.append(line.strip())
    params: dict[str, str] = {}
    for index, line in enumerate(lines):
        if _GOOGLE_HEADER_RE.match(line):
            for name, text in _google_entries(lines, index):
                params.setdefault(name, text)
        elif match := _SPHINX_PARAM_RE.match(line):
            rest, _ = _deeper_lines(lines, index)
            params.setdefault(match.group(1), _join([match.group(2), *rest]))
    return Docstring(" ".join(summary), params)


def _google_entries(lines: list[str], header: int) -> list[tuple[str, str]]:
    """The ``(name, text)`` entries of the Google section whose header is ``lines[header]``."""
    _, end = _deeper_lines(lines, header)
    body = [line for line in lines[header + 1 : end] if line.strip()]
    if not body:
        return []
    entry_indent = _indent(body[0])
    entries: list[tuple[str, list[str]]] = []
    for line in body:
        if _indent(line) == entry_indent and (match := _GOOGLE_ENTRY_RE.match(line.strip())):
            entries.append((match.group(1), [match.group(2) or ""]))
        elif _indent(line) > entry_indent and entries:
            entries[-1][1].append(line.strip())
    return [(name, _join(parts)) for name, parts in entries]


def _deeper_lines(lines: list[str], start: int) -> tuple[list[str], int]:
    """The stripped non-blank lines after ``lines[start]`` indented deeper than it, and where they end."""
    indent, end = _indent(lines[start]), start + 1
    while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > indent):
        end += 1
    return [line.strip() for line in lines[start + 1 : end] if line.strip()], end


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _join(parts: list[str]) -> str:
    return " ".join(part for part in parts if part)
