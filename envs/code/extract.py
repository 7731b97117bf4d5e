"""Finding the solution in a model's answer: the last fenced code block, and its language."""

from __future__ import annotations

import re
from dataclasses import dataclass

FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([^\s`]*)[^\n`]*$", re.MULTILINE)
LANGUAGES = {
    "python": "python", "python3": "python", "py": "python", "py3": "python",
    "cpp": "cpp", "c++": "cpp", "cc": "cpp", "cxx": "cpp", "c++17": "cpp", "cpp17": "cpp",
}


@dataclass(frozen=True)
class CodeBlock:
    code: str
    language: str | None
    """Normalised language (``"python"``, ``"cpp"``), ``None`` when the fence names none,
    or the fence's own word when it names a language this env does not run."""


def last_code_block(text: str) -> CodeBlock | None:
    """The last complete fenced block in ``text`` (``None`` when there is none).

    A fence opens with three or more backticks (or tildes) at the start of a line and closes
    with a line holding at least as many of the same character; an unclosed fence is ignored.
    """
    blocks: list[CodeBlock] = []
    pos = 0
    while (opening := FENCE.search(text, pos)) is not None:
        marker, info = opening.group(1), opening.group(2).lower()
        closing = re.compile(r"^[ \t]*" + re.escape(marker[0]) + "{" + str(len(marker)) + r",}[ \t]*$", re.MULTILINE)
        end = closing.search(text, opening.end())
        if end is None:
            break
        body = text[opening.end() + 1 : end.start()] if opening.end() < end.start() else ""
        info = info.lstrip("{.").rstrip("}")
        blocks.append(CodeBlock(body.rstrip("\n") + "\n" if body.strip() else "", LANGUAGES.get(info, info or None)))
        pos = end.end()
    return blocks[-1] if blocks else None
