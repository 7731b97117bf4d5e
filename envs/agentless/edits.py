"""SEARCH/REPLACE edits, the repair format of Agentless and SWE-RL: parse, apply in memory, diff.

An edit names a file with a ``### path`` line, then gives the lines to find and the lines to put
in their place::

    ### pkg/module.py
    <<<<<<< SEARCH
    old line(s)
    =======
    new line(s)
    >>>>>>> REPLACE

The rules here (every broken one raises ``EditFormatError``, the model's fault):

- Marker lines are exact (trailing spaces allowed); code fences around blocks are optional. A
  block edits the file of the closest ``### path`` line above it, so one header may serve
  several blocks. A ``=======`` line outside a block is prose (a Markdown underline).
- Paths are keys of the task's files: absolute paths, ``..`` parts and unknown files are
  errors, never filesystem access; ``./``, doubled slashes and surrounding backticks are
  normalised.
- SEARCH holds at least one line and matches whole lines of the file character for character
  (indentation and trailing spaces included) in exactly one place: a block matching twice is
  ambiguous and rejected (SWE-RL replaces every match, NeMo Gym the first: both can edit the
  wrong place silently). An empty REPLACE deletes the lines; SEARCH equal to REPLACE is an error.
- Blocks apply in order, each to the file as the previous ones left it; a block repeated
  verbatim applies once (as NeMo Gym dedupes). Edits that leave every file as it was are an error.
- Bounds: the reply's length, the number of blocks; control characters other than tab, line
  feed, carriage return, vertical tab and form feed mark binary content and are rejected.
"""

from __future__ import annotations

import difflib
import posixpath
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

SEARCH = "<<<<<<< SEARCH"
DIVIDER = "======="
REPLACE = ">>>>>>> REPLACE"
MAX_ANSWER_CHARS = 400_000
MAX_EDITS = 100
_PATH_LINE = re.compile(r"^###[ \t]+(\S.*?)\s*$")
_BINARY = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")


class EditFormatError(ValueError):
    """The reply's edits are missing, malformed or do not apply: a format error."""


@dataclass(frozen=True)
class Edit:
    """One SEARCH/REPLACE block: the file it names, the lines to find and their replacement."""

    path: str
    search: tuple[str, ...]
    replace: tuple[str, ...]
    line: int
    """Line number of the block's SEARCH marker in the reply (from 1), for error messages."""


def solution_text(answer: str, *, required: bool) -> str:
    """The part of ``answer`` holding the edits: inside ``<solution>…</solution>`` when the reply
    has that block (it must then have exactly one), else the whole answer (unless ``required``)."""
    opens, closes = answer.count("<solution>"), answer.count("</solution>")
    if opens == closes == 0 and not required:
        return answer
    if opens != 1 or closes != 1:
        raise EditFormatError(
            f"expected one <solution>...</solution> block, found {opens} opening and {closes} closing tag(s)"
        )
    start, end = answer.index("<solution>") + len("<solution>"), answer.index("</solution>")
    if end < start:
        raise EditFormatError("</solution> comes before <solution>")
    return answer[start:end]


def parse_edits(text: str, *, max_chars: int = MAX_ANSWER_CHARS, max_edits: int = MAX_EDITS) -> list[Edit]:
    """The SEARCH/REPLACE blocks of ``text``, in order, exact duplicates dropped."""
    if len(text) > max_chars:
        raise EditFormatError(f"the reply has {len(text)} characters, over the {max_chars} parsed")
    edits: list[Edit] = []
    path: str | None = None
    block: tuple[int, list[str], list[str] | None] | None = None  # (marker line, search, replace)
    for number, raw in enumerate(text.split("\n"), start=1):
        marker = raw.rstrip()
        if block is None:
            if marker == SEARCH:
                if path is None:
                    raise EditFormatError(f"line {number}: a SEARCH block with no '### path' line above it")
                block = (number, [], None)
            elif marker == REPLACE:
                raise EditFormatError(f"line {number}: '{REPLACE}' without a SEARCH block")
            elif match := _PATH_LINE.match(raw):
                path = match.group(1)
            continue
        start, search, replace = block
        if marker == SEARCH:
            raise EditFormatError(
                f"line {number}: a new SEARCH block starts before the one of line {start} ends"
            )
        if replace is None:
            if marker == DIVIDER:
                block = (start, search, [])
            elif marker == REPLACE:
                raise EditFormatError(f"line {number}: the block of line {start} has no '{DIVIDER}' line")
            else:
                search.append(raw)
            continue
        if marker == DIVIDER:
            raise EditFormatError(f"line {number}: a second '{DIVIDER}' in the block of line {start}")
        if marker != REPLACE:
            replace.append(raw)
            continue
        assert path is not None
        edit = Edit(path, tuple(search), tuple(replace), start)
        if not any(
            e.path == edit.path and e.search == edit.search and e.replace == edit.replace for e in edits
        ):
            edits.append(edit)
            if len(edits) > max_edits:
                raise EditFormatError(f"more than {max_edits} SEARCH/REPLACE blocks")
        block = None
    if block is not None:
        raise EditFormatError(f"the block of line {block[0]} never reaches '{REPLACE}'")
    if not edits:
        raise EditFormatError("no SEARCH/REPLACE edit found")
    for edit in edits:
        binary = _BINARY.search("\n".join(edit.search + edit.replace))
        if binary:
            raise EditFormatError(f"the block of line {edit.line} holds binary content ({binary.group()!r})")
    return edits


def resolve_path(path: str, files: Mapping[str, str]) -> str:
    """The key of ``files`` that ``path`` names; relative, inside the repository, and known."""
    name = path.strip().strip("`")
    if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:[\\/]", name):
        raise EditFormatError(f"{path!r} is an absolute path; name files relative to the repository")
    if ".." in re.split(r"[\\/]", name):
        raise EditFormatError(f"{path!r} leaves the repository ('..')")
    key = posixpath.normpath(name) if name else name
    if key not in files:
        known = ", ".join(sorted(files)[:10])
        raise EditFormatError(f"{path!r} is not one of the given files ({known})")
    return key


def split_lines(text: str) -> tuple[list[str], bool]:
    """``text`` as its lines (split at ``\\n`` only) and whether it ends with a line break."""
    if not text:
        return [], False
    lines = text.split("\n")
    if lines[-1] == "":
        return lines[:-1], True
    return lines, False


def join_lines(lines: list[str], final_newline: bool) -> str:
    return "\n".join(lines) + ("\n" if final_newline and lines else "")


def apply_edits(files: Mapping[str, str], edits: list[Edit]) -> dict[str, str]:
    """The new content of every file the edits change (the others are left out)."""
    current: dict[str, str] = {}
    for edit in edits:
        key = resolve_path(edit.path, files)
        where = f"the block of line {edit.line} ({key})"
        if not edit.search:
            raise EditFormatError(f"{where} has an empty SEARCH part")
        if edit.search == edit.replace:
            raise EditFormatError(f"{where}: SEARCH and REPLACE are identical")
        text = current.get(key, files[key])
        lines, final_newline = split_lines(text)
        hay, needle = "\n" + "\n".join(lines) + "\n", "\n" + "\n".join(edit.search) + "\n"
        found = hay.find(needle)
        if found < 0:
            raise EditFormatError(
                f"{where}: the SEARCH lines are not in the file{_near_miss(lines, edit.search)}"
            )
        if hay.find(needle, found + 1) >= 0:
            raise EditFormatError(
                f"{where}: the SEARCH lines match more than one place; include more context"
            )
        first = hay.count("\n", 0, found)
        lines[first : first + len(edit.search)] = edit.replace
        current[key] = join_lines(lines, final_newline)
    changed = {key: text for key, text in current.items() if text != files[key]}
    if not changed:
        raise EditFormatError("the edits leave every file unchanged")
    return changed


def _near_miss(lines: list[str], search: tuple[str, ...]) -> str:
    """A hint when the SEARCH lines match once whitespace is ignored."""
    hay = "\n" + "\n".join(_squash(line) for line in lines) + "\n"
    if "\n" + "\n".join(_squash(line) for line in search) + "\n" in hay:
        return " (they match once whitespace is ignored: copy indentation and spacing exactly)"
    return ""


def _squash(line: str) -> str:
    return "".join(line.split())


def unified_diff(path: str, old: str, new: str, context: int = 3) -> str:
    """A git-style diff of one file (``diff --git``, ``---``/``+++``, hunks), "" when unchanged.

    Lines without a final line break get git's ``\\ No newline at end of file`` marker, so the
    diff applies with ``git apply`` / ``patch``.
    """
    old_lines, new_lines = _with_ends(old), _with_ends(new)
    body = list(difflib.unified_diff(old_lines, new_lines, f"a/{path}", f"b/{path}", n=context))
    if not body:
        return ""
    out = [f"diff --git a/{path} b/{path}\n"]
    for line in body:
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def _with_ends(text: str) -> list[str]:
    lines, final_newline = split_lines(text)
    ended = [line + "\n" for line in lines]
    if ended and not final_newline:
        ended[-1] = lines[-1]
    return ended


def make_patch(
    files: Mapping[str, str], changed: Mapping[str, str], diff_path: Callable[[str], str] = str
) -> str:
    """One git-style patch of every changed file, in path order; ``diff_path`` maps a key to the
    path the patch names (e.g. without a leading repository folder)."""
    return "".join(unified_diff(diff_path(key), files[key], changed[key]) for key in sorted(changed))
