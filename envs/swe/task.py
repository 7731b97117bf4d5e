"""A SWE task row, read and checked: the repository to set up, the issue, and the tests that grade it.

Rows use the SWE-bench layout (field names read unchanged); the other public datasets' rows
(SWE-Gym, SWE-smith, R2E-Gym) are first put in it by ``datasets.adapt``:

- ``instance_id``, ``repo``, ``base_commit``, ``problem_statement`` (the issue the agent sees);
- ``FAIL_TO_PASS``, ``PASS_TO_PASS``: test ids, as a list or the JSON text of one (SWE-bench),
  in the format of the row's runner: ``path::name`` node ids (pytest), ``module.Class.test``
  (unittest), ``test_x (module.Class)`` or ``test_x (module.Class.test_x)`` or a test's docstring
  line (Django, as its verbose log prints them), bare function names (SymPy), R2E-Gym's
  ``Class.test`` keys (``test_id_format: r2e``);
- ``test_patch``: a unified diff that adds the grading tests, applied (``patch -p1``) to a fresh
  copy of the base after the episode, with the agent's screened change (``grading.py``), so an
  agent that edits or deletes tests cannot change what grades it; ``patch``: the gold fix (used
  by scripted checks, never shown to the policy);
- ``image`` (or ``image_name``, R2E's ``docker_image``; else ``datasets.image_for_row``'s template):
  the image with the repository at ``workdir`` (docker).

How the tests run (the trusted runner runs them itself; nothing here is run as a shell command):

- ``test_cmd``: the row's test command, read by ``testcmd.read_command`` for its runner, the
  interpreter it names, its variables (``PYTHONPATH``, ``PYTHONWARNINGS``, others) and targets;
  a SWE-bench row without one gets SWE-bench's command for its repository (``datasets.py``);
- ``test_framework`` (``unittest``, ``pytest``, ``django``, ``sympy``; ``test_log_format`` is read
  as the same): overrides the command's; without either, ``pytest`` when a test id holds ``::``,
  else ``unittest``;
- ``test_files``: what the runner runs (pytest paths, Django labels, SymPy test files); default:
  the command's targets, else the files of the test ids (pytest) or of ``test_patch``;
- ``python`` (an interpreter's absolute path, or relative to ``workdir``) or ``test_env`` (a conda
  env's name, or an environment's directory): the interpreter the tests need; else the one the
  command names, else the image's (``interpreter.py``);
- ``test_globs``: ``fnmatch`` patterns of the repository's test files and helpers, added to the
  defaults of ``changes.TEST_GLOBS``: the grader owns them, the agent's edits to them are ignored.

Beyond SWE-bench, for repositories that travel with the row instead of in an image, and for the
other datasets' layouts:

- ``repo_snapshot``: the repository at its base: ``bundled:swe/repos/<name>.json`` (a JSON object
  ``{"files": {path: text}}``) or a host directory; copied into the workspace at ``workdir``;
- ``workdir`` (default ``/testbed``), ``setup_cmd`` (a shell command run after the copy; failing
  masks the episode); ``setup_patch``: a diff applied before it (SWE-smith's bug);
- ``hidden_tests``: files removed from the agent's workspace at setup and graded as the base has
  them (SWE-smith's FAIL_TO_PASS files); ``test_setup_cmd``: a shell command the grader runs in
  the clean room after the change, before the tests (R2E-Gym's hidden tests copied in);
- ``install_cmd``: a shell command run once when the row's per-instance docker image is built
  (``images.py``: its test dependencies), never in an episode.

A row needs a ``repo_snapshot`` or an image; it is read once, when its env loads it.
"""

from __future__ import annotations

import json
import os
import posixpath
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cascade_envs.core import TaskError
from cascade_envs.data import BUNDLED, DataError, decode_json_field, resolve_path
from cascade_envs.sandbox.docker import REFERENCE

from .datasets import adapt, image_for_row, test_patch_targets
from .testcmd import TestCommand, read_command

FRAMEWORKS = ("unittest", "pytest", "django", "sympy")
ID_FORMATS = ("native", "r2e")
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
    targets: tuple[str, ...] = ()
    """What the runner runs: pytest paths, Django labels, SymPy test files (unittest: the ids)."""
    python: str | None = None
    """The interpreter the row declares (absolute), or ``None``: the image's (``interpreter.py``)."""
    test_env: dict[str, str] = field(default_factory=dict)
    test_paths: tuple[str, ...] = ()
    """``sys.path`` entries the tests need (``PYTHONPATH``), relative to the repository or absolute."""
    warnings: tuple[str, ...] = ()
    runner_options: tuple[str, ...] = ()
    id_format: str = "native"
    setup_patch: str = ""
    hidden_tests: tuple[str, ...] = ()
    test_setup_cmd: str | None = None

    @property
    def patched_files(self) -> list[str]:
        """The paths ``test_patch`` touches (both sides of each file header)."""
        return diff_paths(self.test_patch)

    @property
    def test_files(self) -> list[str]:
        """Files the grader owns beyond the globs: the test patch's, the hidden tests, the pytest ids' files."""
        ids = [t.split("::", 1)[0] for t in self.tests if "::" in t and self.framework == "pytest"]
        return list(dict.fromkeys([*self.patched_files, *self.hidden_tests, *ids]))

    @property
    def tests(self) -> tuple[str, ...]:
        """Every grading test id: FAIL_TO_PASS, then PASS_TO_PASS."""
        return self.fail_to_pass + self.pass_to_pass

    @property
    def setup_changes(self) -> bool:
        """Whether setting the workspace up changes what was copied in (so its files must be listed)."""
        return bool(self.setup_cmd or self.setup_patch or self.hidden_tests)


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


def read_task(row: dict[str, Any], *, image_template: str | None = None) -> SweTask:
    """Check ``row`` (of any dataset ``datasets.py`` reads) and read what the env needs; ``TaskError``
    names the bad field. ``image_template``: the name of the image of a row (``datasets.image_for_row``)."""
    image = image_for_row(row, image_template)
    row = adapt(row)
    statement = row.get("problem_statement")
    if not isinstance(statement, str) or not statement.strip():
        raise TaskError("expected the issue text as a non-empty string", "problem_statement")
    fail_to_pass = _test_ids(row, "FAIL_TO_PASS", required=True)
    pass_to_pass = _test_ids(row, "PASS_TO_PASS", required=False)
    test_patch = _text(row, "test_patch", default="")
    setup_patch = _text(row, "setup_patch", default="")
    hidden = _strings(row, "hidden_tests")
    for name, paths in (
        ("test_patch", diff_paths(test_patch)),
        ("setup_patch", diff_paths(setup_patch)),
        ("hidden_tests", hidden),
    ):
        for path in paths:
            if path.startswith("/") or ".." in path.split("/"):
                raise TaskError(f"{path!r} is outside the repository", name)
    command = read_command(row["test_cmd"]) if row.get("test_cmd") is not None else TestCommand()
    if row.get("test_cmd") is not None and not isinstance(row["test_cmd"], str):
        raise TaskError("expected a shell command", "test_cmd")
    field_name = "test_framework" if row.get("test_framework") is not None else "test_log_format"
    inferred = command.framework or (
        "pytest" if any("::" in t for t in fail_to_pass + pass_to_pass) else "unittest"
    )
    framework = _text(row, field_name, default=inferred)
    if framework not in FRAMEWORKS:
        raise TaskError(f"expected one of {', '.join(FRAMEWORKS)}, got {framework!r}", field_name)
    id_format = _text(row, "test_id_format", default="native")
    if id_format not in ID_FORMATS:
        raise TaskError(f"expected one of {', '.join(ID_FORMATS)}, got {id_format!r}", "test_id_format")
    globs = _strings(row, "test_globs")
    workdir = _text(row, "workdir", default="/testbed")
    if not workdir.startswith("/") or os.path.normpath(workdir) in ("/", "/tmp", "/usr"):
        raise TaskError(f"expected an absolute directory of its own, got {workdir!r}", "workdir")
    workdir = os.path.normpath(workdir)
    image_field = next((name for name in ("image", "docker_image", "image_name") if row.get(name)), "image")
    if image is not None and (not isinstance(image, str) or not REFERENCE.fullmatch(image)):
        raise TaskError(f"expected a docker image name, got {image!r}", image_field)
    files, source = _snapshot(row.get("repo_snapshot"))
    if files is None and source is None and image is None:
        raise TaskError(
            "a row needs a repository: 'repo_snapshot' or an 'image' that holds it", "repo_snapshot"
        )
    setup, install, test_setup = row.get("setup_cmd"), row.get("install_cmd"), row.get("test_setup_cmd")
    for name, value in (("setup_cmd", setup), ("install_cmd", install), ("test_setup_cmd", test_setup)):
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise TaskError("expected a shell command", name)
    targets = _targets(row, framework, command, test_patch, fail_to_pass + pass_to_pass)
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
        workdir=workdir,
        setup_cmd=setup,
        install_cmd=install,
        image=image,
        base_commit=base if isinstance(base, str) else None,
        files=files,
        source=source,
        targets=targets,
        python=_python(row, command, workdir),
        test_env=dict(command.env),
        test_paths=command.paths,
        warnings=command.warnings,
        runner_options=command.options,
        id_format=id_format,
        setup_patch=setup_patch,
        hidden_tests=tuple(hidden),
        test_setup_cmd=test_setup,
    )


def _targets(
    row: dict[str, Any], framework: str, command: TestCommand, test_patch: str, tests: tuple[str, ...]
) -> tuple[str, ...]:
    """What the runner runs (``SweTask.targets``): the row's ``test_files``, the command's, or the default."""
    given = _strings(row, "test_files")
    if given or command.targets:
        return tuple(given or command.targets)
    if framework == "pytest":
        return tuple(dict.fromkeys(t.split("::", 1)[0] for t in tests))
    if framework in ("django", "sympy"):
        found = test_patch_targets(test_patch, framework)
        if not found:
            raise TaskError(f"a {framework} row needs test files: 'test_files' or a test_patch", "test_files")
        return tuple(found if framework == "django" else [p for p in found if p.endswith(".py")])
    return ()


def _python(row: dict[str, Any], command: TestCommand, workdir: str) -> str | None:
    """The interpreter the row declares: ``python``, ``test_env``, the command's; absolute, or ``None``."""
    python, env = row.get("python"), row.get("test_env")
    for name, value in (("python", python), ("test_env", env)):
        if value is not None and (not isinstance(value, str) or not value.strip() or "\0" in value):
            raise TaskError("expected a path or a name", name)
    if isinstance(python, str):
        return posixpath.normpath(posixpath.join(workdir, python))
    if isinstance(env, str):
        folder = env if env.startswith("/") else f"/opt/miniconda3/envs/{env}"
        return posixpath.join(folder, "bin", "python")
    if command.python:
        return posixpath.normpath(posixpath.join(workdir, command.python))
    if command.conda:
        return posixpath.join(command.conda[0], "envs", command.conda[1], "bin", "python")
    return None


def _strings(row: dict[str, Any], name: str) -> list[str]:
    value = decode_json_field(row.get(name) or [], name)
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise TaskError("expected a list of non-empty strings", name)
    return value


def _text(row: dict[str, Any], name: str, *, default: str) -> str:
    value = row.get(name)
    if value is None:
        return default
    if not isinstance(value, str) or (
        not value.strip() and name not in ("test_patch", "patch", "setup_patch")
    ):
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
