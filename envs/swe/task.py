"""A SWE task row, read and checked: the repository to set up, the issue, and the tests that grade it.

Rows use the SWE-bench layout, which SWE-Gym and R2E-Gym share (field names read unchanged):

- ``instance_id``, ``repo``, ``base_commit``, ``problem_statement`` (the issue the agent sees);
- ``FAIL_TO_PASS``, ``PASS_TO_PASS``: test ids, as a list or the JSON text of one (SWE-bench);
- ``test_patch``: a unified diff that adds the grading tests, applied (``patch -p1``) to a fresh
  copy of the base after the episode, with the agent's screened change (``grading.py``), so an
  agent that edits or deletes tests cannot change what grades it; ``patch``: the gold fix (used
  by scripted checks, never shown to the policy);
- ``image`` (or R2E's ``docker_image``): the image with the repository at ``workdir`` (docker).

Beyond SWE-bench, for repositories that travel with the row instead of in an image:

- ``repo_snapshot``: the repository at its base: ``bundled:swe/repos/<name>.json`` (a JSON object
  ``{"files": {path: text}}``) or a host directory; copied into the workspace at ``workdir``;
- ``test_framework`` (``unittest`` or ``pytest``; ``test_log_format`` is read as the same; default:
  ``pytest`` when a test id holds ``::``, else ``unittest``): how the project's runner runs the
  test ids (``module.Class.test`` for unittest, ``path::name`` node ids for pytest);
- ``test_globs``: ``fnmatch`` patterns of the repository's test files and helpers, added to the
  defaults of ``changes.TEST_GLOBS``: the grader owns them, the agent's edits to them are ignored;
- ``workdir`` (default ``/testbed``), ``setup_cmd`` (a shell command run after the copy; failing
  masks the episode);
- ``install_cmd``: a shell command run once when the row's per-instance docker image is built
  (``images.py``: its test dependencies), never in an episode.

``test_cmd`` (SWE-bench's per-repository command) is not used: the runner runs the test ids itself.
A row needs a ``repo_snapshot`` or an ``image``; it is read once, when its env loads it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cascade_envs.core import TaskError
from cascade_envs.data import BUNDLED, DataError, decode_json_field, resolve_path
from cascade_envs.sandbox.docker import REFERENCE

FRAMEWORKS = ("unittest", "pytest")
MAX_SNAPSHOT_MB = 64


@dataclass(frozen=True)
class SweTask:
    """What the env needs of a row."""

    instance_id: str
    problem_statement: str
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    test_patch: str
    patch: str
    framework: str
    test_globs: tuple[str, ...]
    workdir: str
    setup_cmd: str | None
    install_cmd: str | None
    image: str | None
    base_commit: str | None
    files: dict[str, str] | None
    """The repository at its base (``repo_snapshot``), or ``None`` when it lives in ``image``."""
    source: str | None
    """A host directory holding the repository (``repo_snapshot`` naming one)."""

    @property
    def patched_files(self) -> list[str]:
        """The paths ``test_patch`` touches (both sides of each file header)."""
        return diff_paths(self.test_patch)

    @property
    def tests(self) -> tuple[str, ...]:
        """Every grading test id: FAIL_TO_PASS, then PASS_TO_PASS."""
        return self.fail_to_pass + self.pass_to_pass


def diff_paths(diff: str) -> list[str]:
    """Paths named by the ``---``/``+++`` headers of a ``-p1`` unified diff (``/dev/null`` skipped)."""
    paths: list[str] = []
    for line in diff.splitlines():
        if line.startswith(("--- ", "+++ ")):
            name = line[4:].split("\t")[0].strip()
            if name != "/dev/null" and "/" in name:
                path = name.split("/", 1)[1]
                if path not in paths:
                    paths.append(path)
    return paths


def read_task(row: dict[str, Any]) -> SweTask:
    """Check ``row`` and read what the env needs; ``TaskError`` names the bad field."""
    statement = row.get("problem_statement")
    if not isinstance(statement, str) or not statement.strip():
        raise TaskError("expected the issue text as a non-empty string", "problem_statement")
    fail_to_pass = _test_ids(row, "FAIL_TO_PASS", required=True)
    pass_to_pass = _test_ids(row, "PASS_TO_PASS", required=False)
    test_patch = _text(row, "test_patch", default="")
    for path in diff_paths(test_patch):
        if path.startswith("/") or ".." in path.split("/"):
            raise TaskError(f"the diff touches {path!r}, outside the repository", "test_patch")
    field = "test_framework" if row.get("test_framework") is not None else "test_log_format"
    inferred = "pytest" if any("::" in t for t in fail_to_pass + pass_to_pass) else "unittest"
    framework = _text(row, field, default=inferred)
    if framework not in FRAMEWORKS:
        raise TaskError(f"expected one of {', '.join(FRAMEWORKS)}, got {framework!r}", field)
    globs = decode_json_field(row.get("test_globs") or [], "test_globs")
    if not isinstance(globs, list) or not all(isinstance(g, str) and g.strip() for g in globs):
        raise TaskError("expected a list of fnmatch patterns", "test_globs")
    workdir = _text(row, "workdir", default="/testbed")
    if not workdir.startswith("/") or os.path.normpath(workdir) in ("/", "/tmp", "/usr"):
        raise TaskError(f"expected an absolute directory of its own, got {workdir!r}", "workdir")
    image_field = next((name for name in ("image", "docker_image", "image_name") if row.get(name)), "image")
    image = row.get(image_field) or None
    if image is not None and (not isinstance(image, str) or not REFERENCE.fullmatch(image)):
        raise TaskError(f"expected a docker image name, got {image!r}", image_field)
    files, source = _snapshot(row.get("repo_snapshot"))
    if files is None and source is None and image is None:
        raise TaskError(
            "a row needs a repository: 'repo_snapshot' or an 'image' that holds it", "repo_snapshot"
        )
    setup, install = row.get("setup_cmd"), row.get("install_cmd")
    for name, command in (("setup_cmd", setup), ("install_cmd", install)):
        if command is not None and (not isinstance(command, str) or not command.strip()):
            raise TaskError("expected a shell command", name)
    instance = row.get("instance_id")
    base = row.get("base_commit")
    return SweTask(
        instance_id=str(instance) if instance is not None else "",
        problem_statement=statement,
        fail_to_pass=fail_to_pass,
        pass_to_pass=pass_to_pass,
        test_patch=test_patch,
        patch=_text(row, "patch", default=""),
        framework=framework,
        test_globs=tuple(globs),
        workdir=os.path.normpath(workdir),
        setup_cmd=setup,
        install_cmd=install,
        image=image,
        base_commit=base if isinstance(base, str) else None,
        files=files,
        source=source,
    )


def _text(row: dict[str, Any], name: str, *, default: str) -> str:
    value = row.get(name)
    if value is None:
        return default
    if not isinstance(value, str) or (not value.strip() and name not in ("test_patch", "patch")):
        raise TaskError("expected a non-empty string", name)
    return value


def _test_ids(row: dict[str, Any], name: str, *, required: bool) -> tuple[str, ...]:
    value = decode_json_field(row.get(name, None if required else []), name)
    if not isinstance(value, list) or not all(isinstance(t, str) and t.strip() for t in value):
        raise TaskError("expected a list of test ids (or the JSON text of one)", name)
    if required and not value:
        raise TaskError("no test fails before the fix: the task cannot grade a fix", name)
    return tuple(value)


def _snapshot(value: Any) -> tuple[dict[str, str] | None, str | None]:
    """``(files, None)`` for a JSON snapshot, ``(None, directory)`` for a host dir, ``(None, None)`` for none."""
    if value is None:
        return None, None
    if not isinstance(value, str) or not value.strip():
        raise TaskError(
            "expected a snapshot file (bundled:swe/repos/<name>.json) or a directory", "repo_snapshot"
        )
    if not value.startswith(BUNDLED) and Path(value).expanduser().is_dir():
        return None, str(Path(value).expanduser().resolve())
    try:
        path = resolve_path(value)
    except DataError as exc:
        raise TaskError(str(exc), "repo_snapshot") from None
    if path.stat().st_size > MAX_SNAPSHOT_MB << 20:
        raise TaskError(f"larger than {MAX_SNAPSHOT_MB} MB", "repo_snapshot")
    try:
        files = json.loads(path.read_text(encoding="utf-8"))["files"]
    except (ValueError, KeyError, TypeError) as exc:
        raise TaskError(
            f"{value}: not a snapshot ({{'files': {{path: text}}}}): {exc}", "repo_snapshot"
        ) from None
    if (
        not isinstance(files, dict)
        or not files
        or not all(
            isinstance(p, str)
            and isinstance(t, str)
            and p
            and not p.startswith("/")
            and ".." not in p.split("/")
            for p, t in files.items()
        )
    ):
        raise TaskError(f"{value}: 'files' must map relative paths to text", "repo_snapshot")
    return files, None
