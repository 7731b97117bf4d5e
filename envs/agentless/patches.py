"""Reading a task's reference patch: a git-style unified diff applied to the task's files in memory.

The similarity reward compares the model's change with the reference change in one normal form,
so the reference is applied to the files the task shows and diffed again the way the model's
edits are (see ``similarity.py``). A hunk applies at the line its header names, shifted by what
earlier hunks added or removed; if its old lines are not there it may apply where they occur once
elsewhere in the file (as ``patch`` tolerates an offset). Anything else — a hunk whose lines are
not in the file, binary or rename sections, a malformed hunk — raises ``PatchError``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from .edits import join_lines, split_lines

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_NO_NEWLINE = "\\ No newline at end of file"


class PatchError(ValueError):
    """A reference patch that cannot be read or applied to the task's files."""


@dataclass
class FilePatch:
    """The hunks of one file: ``old``/``new`` paths (``None`` for /dev/null), raw text per hunk."""

    old: str | None
    new: str | None
    hunks: list[list[str]] = field(default_factory=list)


def parse_patch(text: str) -> list[FilePatch]:
    """The file sections of a unified diff (with or without ``diff --git`` lines)."""
    patches: list[FilePatch] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith(("GIT binary patch", "Binary files ")):
            raise PatchError("the patch has a binary section")
        if line.startswith(("rename from ", "copy from ")):
            raise PatchError("the patch renames or copies a file")
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            patches.append(FilePatch(_path(line[4:]), _path(lines[i + 1][4:])))
            i += 2
            continue
        match = _HUNK.match(line)
        if match:
            if not patches:
                raise PatchError(f"a hunk before any '---'/'+++' header: {line[:80]!r}")
            old_len, new_len = int(match.group(2) or 1), int(match.group(4) or 1)
            hunk, i = _read_hunk(lines, i + 1, old_len, new_len)
            patches[-1].hunks.append([line, *hunk])
            continue
        i += 1
    if not patches or not any(p.hunks for p in patches):
        raise PatchError("no file changes found in the patch")
    return patches


def _path(header: str) -> str | None:
    name = header.split("\t")[0].strip()
    if name == "/dev/null":
        return None
    return name[2:] if name.startswith(("a/", "b/")) else name


def _read_hunk(lines: list[str], i: int, old_len: int, new_len: int) -> tuple[list[str], int]:
    """The body lines of one hunk (``old_len`` old lines, ``new_len`` new ones) from line ``i``."""
    body: list[str] = []
    old = new = 0
    while old < old_len or new < new_len or (i < len(lines) and lines[i] == _NO_NEWLINE):
        if i >= len(lines):
            raise PatchError("a hunk ends before its header's line counts")
        line = lines[i] or " "  # some tools strip the space of an empty context line
        kind = line[0]
        if kind == " ":
            old, new = old + 1, new + 1
        elif kind == "-":
            old += 1
        elif kind == "+":
            new += 1
        elif line != _NO_NEWLINE:
            raise PatchError(f"an unexpected line in a hunk: {line[:80]!r}")
        body.append(line)
        i += 1
    if old != old_len or new != new_len:
        raise PatchError("a hunk's lines do not add up to its header's counts")
    return body, i


def apply_patch(files: Mapping[str, str], patch: FilePatch) -> str:
    """The content of ``patch``'s file after it applies (``files`` holds the file, unless it is new)."""
    if patch.old is None:
        lines: list[str] = []
        final_newline = True
    else:
        lines, final_newline = split_lines(files[patch.old])
    shift = 0
    for hunk in patch.hunks:
        match = _HUNK.match(hunk[0])
        assert match is not None
        old_lines, new_lines, new_final = _sides(hunk[1:], final_newline)
        start = max(int(match.group(1)) - 1, 0) + shift if old_lines else int(match.group(1)) + shift
        if lines[start : start + len(old_lines)] != old_lines:
            start = _unique_place(lines, old_lines, hunk[0])
        lines[start : start + len(old_lines)] = new_lines
        shift += len(new_lines) - len(old_lines)
        final_newline = new_final
    return join_lines(lines, final_newline)


def _sides(body: list[str], final_newline: bool) -> tuple[list[str], list[str], bool]:
    """A hunk's old and new lines, and whether the new file ends with a line break."""
    old: list[str] = []
    new: list[str] = []
    for k, line in enumerate(body):
        if line == _NO_NEWLINE:
            previous = body[k - 1][0] if k else " "
            final_newline = previous == "-"  # the marker after '-' is about the old side only
            continue
        if line[0] in " -":
            old.append(line[1:])
        if line[0] in " +":
            new.append(line[1:])
    return old, new, final_newline


def _unique_place(lines: list[str], old_lines: list[str], header: str) -> int:
    hay, needle = "\n" + "\n".join(lines) + "\n", "\n" + "\n".join(old_lines) + "\n"
    found = hay.find(needle)
    if found < 0 or hay.find(needle, found + 1) >= 0:
        problem = "not in" if found < 0 else "in more than one place of"
        raise PatchError(f"the old lines of hunk {header!r} are {problem} the file")
    return hay.count("\n", 0, found)
