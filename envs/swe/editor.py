"""The file editor's commands (OpenHands' ``file_editor``: view, create, str_replace, insert, undo_edit),
carried out on the files of a sandbox workspace.

The SDK's own executor edits the host's disk; here every read and write goes through the
session's agent (``Session.aread``/``awrite``, confined to the workspace) and directory listings
run ``find`` inside the sandbox. Paths are absolute paths inside the workspace, as the policy
sees it (``root``, e.g. ``/testbed``); anything outside it is refused. Mistakes raise
``ToolError`` with a message the policy can act on.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field

from cascade_envs.sandbox import SandboxError, Session
from cascade_envs.tools import ToolError

SNIPPET_LINES = 4
MAX_FILE_MB = 4.0
MAX_HISTORY = 10


@dataclass
class Editor:
    """One episode's editor: the workspace root as the policy sees it, and the undo history per file."""

    session: Session
    root: str
    history: dict[str, list[str]] = field(default_factory=dict)

    def relative(self, path: str) -> str:
        """``path`` (absolute, inside ``root``) relative to the workspace; ``ToolError`` otherwise."""
        if not path.startswith("/"):
            raise ToolError(
                f"the path {path!r} is not an absolute path; maybe you meant {posixpath.join(self.root, path)}"
            )
        norm = posixpath.normpath(path)
        if norm == self.root:
            return "."
        if not norm.startswith(self.root.rstrip("/") + "/"):
            raise ToolError(
                f"the path {path!r} is outside the workspace {self.root}: only files under it can be edited"
            )
        return norm[len(self.root.rstrip("/")) + 1 :]

    async def kind(self, rel: str) -> str:
        """``"file"``, ``"dir"`` or ``"missing"``."""
        result = await self.session.arun(
            [
                "bash",
                "-c",
                'if [ -d "$1" ]; then echo dir; elif [ -e "$1" ]; then echo file; else echo missing; fi',
                "bash",
                rel,
            ],
            timeout_s=10,
        )
        if not result.ok:
            raise SandboxError(f"could not inspect {rel!r}: {result.describe()}")
        return result.text.strip()

    async def read(self, path: str, rel: str) -> str:
        try:
            data = await self.session.aread(rel, MAX_FILE_MB)
        except SandboxError as exc:
            if str(exc).startswith("agent error:"):
                raise ToolError(f"cannot read {path}: {str(exc).split(':', 1)[1].strip()}") from None
            raise
        if b"\0" in data[:8192]:
            raise ToolError(f"{path} is a binary file; the file editor handles text files only")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise ToolError(f"{path} is not UTF-8 text; the file editor handles text files only") from None

    async def write(self, rel: str, text: str) -> None:
        try:
            await self.session.awrite({rel: text})
        except SandboxError as exc:
            if str(exc).startswith("agent error:"):
                raise ToolError(
                    f"cannot write {posixpath.join(self.root, rel)}: {str(exc).split(':', 1)[1].strip()}"
                ) from None
            raise

    def remember(self, rel: str, old: str) -> None:
        stack = self.history.setdefault(rel, [])
        stack.append(old)
        del stack[:-MAX_HISTORY]

    async def view(self, path: str, view_range: list[int] | None = None) -> str:
        rel = self.relative(path)
        kind = await self.kind(rel)
        if kind == "missing":
            raise ToolError(f"the path {path} does not exist. Please provide a valid path.")
        if kind == "dir":
            if view_range:
                raise ToolError("the view_range parameter is not allowed when path points to a directory")
            listing = await self.session.arun(
                ["find", rel, "-maxdepth", "2", "-not", "-path", "*/.*"], timeout_s=30
            )
            if not listing.ok and listing.killed_by:
                raise ToolError(f"listing {path} failed: {listing.describe()}")
            lines = sorted(
                posixpath.normpath(posixpath.join(self.root, line))
                for line in listing.text.splitlines()
                if line
            )
            return (
                f"Here's the files and directories up to 2 levels deep in {path}, excluding hidden items:\n"
                + "\n".join(lines)
            )
        text = await self.read(path, rel)
        lines = text.split("\n")
        start, end = 1, len(lines)
        if view_range:
            if len(view_range) != 2 or not all(isinstance(n, int) for n in view_range):
                raise ToolError("view_range must be a list of two integers")
            start, end = view_range[0], (len(lines) if view_range[1] == -1 else view_range[1])
            if not 1 <= start <= len(lines):
                raise ToolError(
                    f"invalid view_range {view_range}: its first element should be within [1, {len(lines)}]"
                )
            if end < start or end > len(lines):
                raise ToolError(
                    f"invalid view_range {view_range}: its second element should be -1 or within "
                    f"[{start}, {len(lines)}]"
                )
        return f"Here's the result of running `cat -n` on {path}:\n" + numbered(lines[start - 1 : end], start)

    async def create(self, path: str, file_text: str | None) -> str:
        rel = self.relative(path)
        if file_text is None:
            raise ToolError("parameter `file_text` is required for command: create")
        if await self.kind(rel) != "missing":
            raise ToolError(f"file already exists at: {path}. Cannot overwrite files using command `create`.")
        await self.write(rel, file_text)
        self.history.pop(rel, None)
        return f"File created successfully at: {path}"

    async def str_replace(self, path: str, old_str: str | None, new_str: str | None) -> str:
        rel = self.relative(path)
        if old_str is None:
            raise ToolError("parameter `old_str` is required for command: str_replace")
        new_str = new_str or ""
        if old_str == new_str:
            raise ToolError("no replacement was performed: `new_str` and `old_str` must be different")
        text = await self.existing(path, rel)
        count = text.count(old_str)
        if count == 0:
            raise ToolError(
                f"no replacement was performed, old_str `{old_str}` did not appear verbatim in {path}."
            )
        if count > 1:
            lines = [i + 1 for i, line in enumerate(text.split("\n")) if old_str.split("\n")[0] in line]
            raise ToolError(
                f"no replacement was performed. Multiple occurrences of old_str `{old_str}` in lines "
                f"{lines}. Please ensure it is unique."
            )
        at = text.split(old_str)[0].count("\n")
        updated = text.replace(old_str, new_str)
        await self.write(rel, updated)
        self.remember(rel, text)
        return self.edited(path, updated, at, new_str.count("\n"))

    async def insert(self, path: str, insert_line: int | None, new_str: str | None) -> str:
        rel = self.relative(path)
        if insert_line is None:
            raise ToolError("parameter `insert_line` is required for command: insert")
        if new_str is None:
            raise ToolError("parameter `new_str` is required for command: insert")
        text = await self.existing(path, rel)
        lines = text.split("\n")
        if not 0 <= insert_line <= len(lines):
            raise ToolError(
                f"invalid `insert_line` parameter: {insert_line}. It should be within [0, {len(lines)}]"
            )
        updated = "\n".join([*lines[:insert_line], *new_str.split("\n"), *lines[insert_line:]])
        await self.write(rel, updated)
        self.remember(rel, text)
        return self.edited(path, updated, insert_line, new_str.count("\n") + 1)

    async def undo_edit(self, path: str) -> str:
        rel = self.relative(path)
        stack = self.history.get(rel)
        if not stack:
            raise ToolError(f"no edit history found for {path}")
        text = stack.pop()
        await self.write(rel, text)
        return (
            f"Last edit to {path} undone successfully. Here's the result of running `cat -n` on {path}:\n"
            + numbered(text.split("\n"), 1)
        )

    async def existing(self, path: str, rel: str) -> str:
        kind = await self.kind(rel)
        if kind != "file":
            raise ToolError(
                f"the path {path} does not exist" if kind == "missing" else f"the path {path} is a directory"
            )
        return await self.read(path, rel)

    @staticmethod
    def edited(path: str, text: str, at: int, added: int) -> str:
        lines = text.split("\n")
        start = max(0, at - SNIPPET_LINES)
        end = min(len(lines), at + added + SNIPPET_LINES + 1)
        return (
            f"The file {path} has been edited. Here's the result of running `cat -n` on a snippet of {path}:\n"
            + numbered(lines[start:end], start + 1)
            + "\nReview the changes and make sure they are as expected. Edit the file again if necessary."
        )


def numbered(lines: list[str], first: int) -> str:
    """``cat -n`` style: right-aligned line numbers, a tab, the line."""
    return "\n".join(f"{n:6}\t{line}" for n, line in enumerate(lines, first))
