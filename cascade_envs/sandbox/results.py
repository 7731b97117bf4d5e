"""Value types of the sandbox layer: what a command produced and the files given to it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..core import CascadeError

FileData = bytes | str
"""A file's content; a ``str`` is written as UTF-8."""

EXECUTABLE = 0o755
REGULAR = 0o644


class SandboxError(CascadeError):
    """The sandbox itself failed (could not start, lost its agent): not the program's fault."""


@dataclass(frozen=True)
class File:
    """A file to place in the work dir, with its permission bits."""

    data: bytes
    mode: int = REGULAR


@dataclass
class ExecResult:
    """What one command did.

    ``exit_code`` is the process's exit status, or minus the signal number that killed it.
    ``killed_by`` says why it stopped early: ``"timeout"`` (wall clock), ``"cpu_time"``,
    ``"memory"`` (its address space, or what it wrote to RAM-backed files and shared memory, went
    over ``memory_mb``), ``"output_limit"``, ``"file_size"``, ``"signal:SIGSEGV"``-style names,
    ``"agent_killed"`` when the command killed or stopped the sandbox's agent (possible only where it
    can signal it: a failure the program caused), or ``"sandbox"`` when the sandbox died under it
    for reasons of its own (``error`` then says more).
    """

    exit_code: int
    stdout: bytes = b""
    stderr: bytes = b""
    wall_s: float = 0.0
    cpu_s: float = 0.0
    peak_memory_mb: float = 0.0
    killed_by: str | None = None
    truncated: bool = False
    error: str | None = None

    @property
    def ok(self) -> bool:
        """True when the command ran to completion and exited with status 0."""
        return self.exit_code == 0 and self.killed_by is None and self.error is None

    @property
    def text(self) -> str:
        """``stdout`` decoded as UTF-8 (invalid bytes replaced)."""
        return self.stdout.decode("utf-8", errors="replace")

    def describe(self) -> str:
        """A one-line account of how the command ended, for reward reasons."""
        if self.error:
            return self.error
        if self.killed_by:
            return f"killed: {self.killed_by} (wall {self.wall_s:.2f}s, cpu {self.cpu_s:.2f}s)"
        if self.exit_code:
            tail = self.stderr[-300:].decode("utf-8", errors="replace").strip()
            return f"exit code {self.exit_code}" + (f": {tail}" if tail else "")
        return "ok"

    def to_dict(self) -> dict[str, Any]:
        return {
            "exit_code": self.exit_code,
            "stdout": self.stdout.decode("utf-8", errors="replace"),
            "stderr": self.stderr.decode("utf-8", errors="replace"),
            "wall_s": self.wall_s,
            "cpu_s": self.cpu_s,
            "peak_memory_mb": self.peak_memory_mb,
            "killed_by": self.killed_by,
            "truncated": self.truncated,
            "error": self.error,
        }

    @classmethod
    def lost(cls, error: str, wall_s: float = 0.0) -> ExecResult:
        """A result for a command whose sandbox died under it."""
        return cls(exit_code=-9, wall_s=wall_s, killed_by="sandbox", error=error)


def normalise_files(files: Mapping[str, FileData | File] | None) -> dict[str, File]:
    """Coerce ``{path: bytes | str | File}`` to ``{path: File}``, rejecting unsafe paths."""
    out: dict[str, File] = {}
    for path, value in (files or {}).items():
        if not isinstance(path, str) or not path or path.startswith("/") or ".." in path.split("/"):
            raise ValueError(f"file paths must be relative and stay inside the work dir: {path!r}")
        if isinstance(value, File):
            out[path] = value
        elif isinstance(value, str):
            out[path] = File(value.encode())
        elif isinstance(value, (bytes, bytearray)):
            out[path] = File(bytes(value))
        else:
            raise TypeError(f"file {path!r}: expected bytes, str or File, got {type(value).__name__}")
    return out
