"""Workspace mode: what one session's file system holds and where its commands work.

Code judging needs a scratch dir and nothing else; an agent needs a repository it can edit, at the
path its task names (e.g. ``/testbed``), plus whatever the task's image or extra mounts provide. A
``Workspace`` says so per session, and every backend serves it from the same launch path::

    ws = Workspace(workdir="/testbed", source="/data/repos/calc")     # a host tree copied in
    async with await sandbox.asession(workspace=ws) as s:
        await s.arun(["python3", "-m", "unittest"])                    # runs in /testbed

- ``workdir``: where commands run and the only place (with ``/tmp`` and ``/dev/shm``) they can
  write; a size-capped RAM disk of ``workdir_mb`` in ``bwrap``, a host temp dir in ``local`` (which
  cannot place it at ``workdir``: ``Session.workdir`` says where it really is), a tmpfs of
  ``workdir_mb`` in ``docker`` too, holding a copy of what the image has there (without ``source``);
- ``source``: a host directory copied into the workdir when the session starts (regular files
  with their mode bits; symlinks and special files are refused);
- ``image`` (``docker``): the container image, e.g. a SWE-bench instance image with the repository
  already at ``/testbed`` (copied into the session's tmpfs, so the image never changes); ``root``
  (``bwrap``): a host directory served read-only as ``/``
  (an unpacked image; it must hold the sandbox's Python and an empty ``workdir``);
- ``mounts``: extra host paths, read-only unless ``writable``;
- ``hidden``: host directories the session must not read (e.g. the task files with gold answers):
  an empty read-only directory is shown in their place wherever the backend would show them;
- ``env``: the environment of every command (``Workspace.command_env``).

Network stays off unless the session asks for it; the per-command limits (timeout, memory,
output, file size, processes) are the sandbox's. Closing the session removes everything.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .results import File, SandboxError

COPY_CHUNK = 32 << 20
"""Bytes per write request when a source tree is copied in."""


@dataclass(frozen=True)
class Mount:
    """A host path shown inside the sandbox at ``target`` (read-only unless ``writable``)."""

    source: str
    target: str
    writable: bool = False

    def __post_init__(self) -> None:
        if not os.path.isabs(self.target):
            raise ValueError(f"mount target must be an absolute path, got {self.target!r}")
        if not os.path.exists(self.source):
            raise ValueError(f"mount source {self.source!r} does not exist")


@dataclass(frozen=True)
class Workspace:
    """A session's file system (see the module docstring)."""

    workdir: str = "/testbed"
    source: str | None = None
    image: str | None = None
    root: str | None = None
    mounts: tuple[Mount, ...] = ()
    workdir_mb: int = 256
    env: Mapping[str, str] = field(default_factory=dict)
    hidden: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not os.path.isabs(self.workdir) or os.path.normpath(self.workdir) in (
            "/",
            "/usr",
            "/proc",
            "/dev",
            "/tmp",
        ):
            raise ValueError(f"workspace workdir must be an absolute path of its own, got {self.workdir!r}")
        if self.source is not None and not os.path.isdir(self.source):
            raise ValueError(f"workspace source {self.source!r} is not a directory")
        if self.root is not None and not os.path.isdir(self.root):
            raise ValueError(f"workspace root {self.root!r} is not a directory")
        if self.workdir_mb < 1:
            raise ValueError("workspace workdir_mb must be at least 1")
        if not all(os.path.isabs(path) for path in self.hidden):
            raise ValueError(f"workspace hidden paths must be absolute, got {self.hidden!r}")
        object.__setattr__(self, "mounts", tuple(self.mounts))
        object.__setattr__(self, "hidden", tuple(os.path.normpath(path) for path in self.hidden))

    def command_env(self, workdir: str) -> dict[str, str]:
        """The environment of a command in this workspace (``workdir``: where it really is)."""
        base = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": workdir,
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            "TERM": "dumb",
        }
        return {**base, **self.env}


def source_files(source: str, limit_mb: int) -> list[dict[str, File]]:
    """The regular files under ``source`` as write requests of at most ``COPY_CHUNK`` bytes each.

    Raises ``SandboxError`` for a symlink, a special file or a tree larger than ``limit_mb``.
    """
    try:
        return _chunks(Path(source), limit_mb)
    except OSError as exc:
        raise SandboxError(f"workspace source {source!r} cannot be read: {exc}") from exc


def _chunks(root: Path, limit_mb: int) -> list[dict[str, File]]:
    source = str(root)
    chunks: list[dict[str, File]] = [{}]
    size = total = 0
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        rel = path.relative_to(root).as_posix()
        if stat.S_ISDIR(info.st_mode):
            continue
        if not stat.S_ISREG(info.st_mode):
            raise SandboxError(
                f"workspace source {source!r}: {rel!r} is not a regular file (symlinks are refused)"
            )
        total += info.st_size
        if total > limit_mb << 20:
            raise SandboxError(f"workspace source {source!r} is larger than the workdir cap of {limit_mb} MB")
        if size and size + info.st_size > COPY_CHUNK:
            chunks.append({})
            size = 0
        chunks[-1][rel] = File(path.read_bytes(), stat.S_IMODE(info.st_mode) | 0o600)
        size += info.st_size
    return [chunk for chunk in chunks if chunk]
