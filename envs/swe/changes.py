"""The agent's change: what its workspace holds that the base did not, screened before it is graded.

The grader never runs in the workspace the agent touched. It lists that workspace's files
(``scripts/collect.py``, run in the sandbox, reading without following symlinks or opening
special files) against the base's list taken at setup, and keeps only what a fix may contain:

- regular files whose content changed, new regular files and deletions of base files;
- never: symbolic links, FIFOs and other special files; files it could not read; names that are
  not UTF-8; hidden paths (any component starting with ``.``) and ``__pycache__``, which are not
  even listed;
- never test files: those ``test_patch`` touches, the task's hidden tests and the files its
  pytest ids name (and any path in the way of one), and those matching the default test globs (``TEST_GLOBS``) or the row's own ``test_globs``;
- never interpreter or test-runner hook files (``HOOK_FILES``: ``conftest.py``, pytest, tox,
  setup and pyproject configuration, ``sitecustomize``/``usercustomize``, ``*.pth``, and package
  metadata in ``*.egg-info``/``*.dist-info``, whose entry points can load a pytest plugin);
- never compiled or binary files (``COMPILED``, or a NUL byte in the content);
- never a new top-level module or package (a name at the repository root that the base does not
  have), which could shadow the standard library or an installed package;
- never a file over ``MAX_FILE_MB``.

What is left (``Change``) is applied to a fresh copy of the base (``grading.py``). A workspace that
cannot be listed within the limits (``MAX_ENTRIES`` files, ``MAX_CHANGE_MB`` of changed content)
is a ``ChangeError``: the agent's doing, a 0.
"""

from __future__ import annotations

import hashlib
import marshal
import posixpath
import struct
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from cascade_envs.core import CascadeError
from cascade_envs.sandbox import EXECUTABLE, File, SandboxError, Session

from .scripts import source
from .task import SweTask

PRUNE = ("__pycache__",)
"""Directory and file names never listed (with every name that starts with ``.``)."""
TEST_GLOBS = (
    "test/*",
    "tests/*",
    "testing/*",
    "*/test/*",
    "*/tests/*",
    "*/testing/*",
    "test_*.py",
    "*/test_*.py",
    "*_test.py",
    "*_tests.py",
    "tests.py",
    "*/tests.py",
    "testing.py",
    "*/testing.py",
    "*/_testing.py",
    "*/testutils.py",
    "*/_testutils.py",
)
"""Paths of test files and helpers (``fnmatch``, whose ``*`` also matches ``/``)."""
HOOK_FILES = (
    "conftest.py",
    "pytest.ini",
    "pytest.toml",
    "tox.ini",
    "setup.cfg",
    "pyproject.toml",
    "setup.py",
    "noxfile.py",
    "sitecustomize.py",
    "usercustomize.py",
)
HOOK_SUFFIXES = (".pth",)
METADATA_SUFFIXES = (".egg-info", ".dist-info")
"""Folders of package metadata: their entry points can load a pytest plugin."""
COMPILED = (".pyc", ".pyo", ".so", ".pyd", ".dll", ".dylib", ".o", ".a", ".egg", ".whl")
MODULE_SUFFIXES = (".py", ".so", ".pyd", ".pyc")
MAX_ENTRIES = 100_000
MAX_FILE_MB = 4
MAX_CHANGE_MB = 32
COLLECT_TIMEOUT_S = 120.0
MAX_LISTED = 5


class ChangeError(CascadeError):
    """The agent's workspace cannot be read into a change within the limits: the agent's doing."""


@dataclass(frozen=True)
class Entry:
    """One listed path: ``kind`` is ``file``, ``link`` or ``other``; ``sha`` its content's SHA-256 (files)."""

    kind: str
    mode: int = 0o644
    sha: bytes = b""
    error: str = ""
    big: bool = False
    data: bytes | None = None


Manifest = dict[str, Entry]


@dataclass(frozen=True)
class Change:
    """The screened change: files to write, base files to delete, and what was ignored (path: why)."""

    written: dict[str, File] = field(default_factory=dict)
    deleted: tuple[str, ...] = ()
    ignored: dict[str, str] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.written and not self.deleted

    def describe_ignored(self) -> str:
        """``"N path(s) ignored (p: why, ...)"``, or ``""``."""
        if not self.ignored:
            return ""
        items = list(self.ignored.items())
        listed = ", ".join(f"{path}: {why}" for path, why in items[:MAX_LISTED])
        return f"{len(items)} path(s) ignored ({listed}{', ...' if len(items) > MAX_LISTED else ''})"


async def manifest(session: Session, task: SweTask) -> Manifest:
    """The workspace's files at setup, before the agent acts: from the row's snapshot when that is all
    the workspace holds (no ``setup_cmd``, ``setup_patch`` or ``hidden_tests``), else listed in the workspace."""
    if task.files is not None and not task.setup_changes:
        return {
            path: Entry("file", sha=hashlib.sha256(text.encode()).digest())
            for path, text in task.files.items()
            if not _pruned(path)
        }
    return await _collect(session, None)


def _pruned(path: str) -> bool:
    return any(part.startswith(".") or part in PRUNE for part in path.split("/"))


async def collect(session: Session, base: Manifest, task: SweTask) -> Change:
    """The agent's screened change in ``session``'s workspace against ``base``.

    ``ChangeError`` when the workspace is over the limits; ``SandboxError`` when the session is lost.
    """
    return screen(base, await _collect(session, base), task)


def screen(base: Manifest, now: Manifest, task: SweTask) -> Change:
    """Keep what a fix may contain (module docstring) of the difference between ``base`` and ``now``."""
    roots = {path.split("/", 1)[0] for path in base}
    written: dict[str, File] = {}
    ignored: dict[str, str] = {}
    for path, entry in now.items():
        was = base.get(path)
        if was is not None and was.kind == entry.kind == "file" and was.sha == entry.sha and not entry.error:
            continue
        why = _refused(path, entry, task, new_root=path.split("/", 1)[0] not in roots)
        if why is None and entry.data is None:
            why = "its content was not sent"
        if why is not None:
            ignored[path] = why
            continue
        assert entry.data is not None
        written[path] = File(entry.data, EXECUTABLE if entry.mode & 0o111 else 0o644)
    deleted = []
    for path, entry in base.items():
        if entry.kind == "file" and (now.get(path) is None or now[path].kind != "file"):
            why = _protected(path, task)
            if why is None:
                deleted.append(path)
            else:
                ignored.setdefault(path, f"deleting {why}")
    return Change(written, tuple(deleted), ignored)


def _refused(path: str, entry: Entry, task: SweTask, *, new_root: bool) -> str | None:
    """Why a changed or new path is not part of the fix, or ``None``."""
    if entry.kind == "link":
        return "a symbolic link"
    if entry.kind != "file":
        return "not a regular file"
    if entry.error:
        return f"unreadable ({entry.error})"
    if not _utf8(path):
        return "a name that is not UTF-8"
    why = _protected(path, task)
    if why is not None:
        return why
    if path.endswith(COMPILED) or (entry.data is not None and b"\0" in entry.data):
        return "a compiled or binary file"
    if new_root and ("/" in path or path.endswith(MODULE_SUFFIXES)):
        return "a new top-level module or package"
    if entry.big:
        return f"larger than {MAX_FILE_MB} MB"
    return None


def _protected(path: str, task: SweTask) -> str | None:
    """Why the grader owns ``path`` (a test or hook file), or ``None``."""
    if path in task.test_files or any(p.startswith(path + "/") for p in task.test_files):
        return "a file of the test patch" if path in task.patched_files else "a test file of the task"
    if any(fnmatchcase(path, glob) for glob in (*TEST_GLOBS, *task.test_globs)):
        return "a test file"
    name = posixpath.basename(path)
    if (
        name in HOOK_FILES
        or name.endswith(HOOK_SUFFIXES)
        or any(part.endswith(METADATA_SUFFIXES) for part in path.split("/")[:-1])
    ):
        return "a test-runner or interpreter hook file"
    return None


def _utf8(path: str) -> bool:
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


RECORD = struct.Struct("!BIQ32sBII")
KINDS = {0: "file", 1: "link", 2: "other"}
OVER, END = 254, 255
DATA, BIG = 1, 2


async def _collect(session: Session, base: Manifest | None) -> Manifest:
    request = {
        "base": None
        if base is None
        else {p.encode("utf-8", "surrogateescape"): e.sha for p, e in base.items() if e.kind == "file"},
        "content": base is not None,
        "prune": [name.encode() for name in PRUNE],
        "max_entries": MAX_ENTRIES,
        "max_file_bytes": MAX_FILE_MB << 20,
        "max_total_bytes": MAX_CHANGE_MB << 20,
    }
    result = await session.arun(
        ["python3", "-I", "-S", "-c", source("collect")],
        marshal.dumps(request, 4),
        timeout_s=COLLECT_TIMEOUT_S,
        output_limit_mb=MAX_CHANGE_MB + 16,
    )
    if session.lost or result.killed_by == "sandbox":
        raise SandboxError(f"listing the workspace: {result.describe()}")
    if not result.ok:
        raise ChangeError(f"the workspace could not be listed: {result.describe()} {result.stderr[-300:]!r}")
    return parse(result.stdout)


def parse(stream: bytes) -> Manifest:
    """The collector's records as a manifest; ``ChangeError`` when they end early or the tree is too big."""
    out: Manifest = {}
    at = 0
    while at + RECORD.size <= len(stream):
        kind, mode, size, sha, flags, path_len, extra_len = RECORD.unpack_from(stream, at)
        at += RECORD.size
        if kind == END:
            return out
        if kind == OVER:
            raise ChangeError(f"the workspace holds more than {MAX_ENTRIES} files")
        path = stream[at : at + path_len].decode("utf-8", "surrogateescape")
        extra = stream[at + path_len : at + path_len + extra_len].decode("utf-8", "replace")
        at += path_len + extra_len
        data = None
        if flags & DATA:
            data, at = stream[at : at + size], at + size
        out[path] = Entry(
            KINDS.get(kind, "other"),
            mode,
            sha,
            error=extra if kind == 0 else "",
            big=bool(flags & BIG),
            data=data,
        )
    raise ChangeError("the workspace listing ended early (more changed content than the limit?)")
