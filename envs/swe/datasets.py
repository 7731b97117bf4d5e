"""The public SWE datasets' rows, read as they are published, and the names of the images they run in.

``adapt(row)`` turns a row of any of these into the project's row layout (``task.py``), without
changing what it asks:

- **SWE-bench** (full, Lite, Verified) and **SWE-Gym** share one format: ``instance_id``, ``repo``,
  ``base_commit``, ``patch`` (the fix), ``test_patch``, ``FAIL_TO_PASS``, ``PASS_TO_PASS``,
  ``version``, and no test command: the grader uses SWE-bench's per-repository one (Django's
  ``tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1``, without ``--parallel``
  for 1.9; SymPy's ``bin/test -C --verbose`` with its warning filters; pytest for the rest, whose
  ``path::name`` ids say so), whose targets are the test files of ``test_patch`` (Django: as dotted
  labels under ``tests/``). A SWE-bench 5 row carries its own ``eval_script`` and ``log_parser``: its test
  line (between the ``>>>>> Start/End Test Output`` markers) and parser name are read instead.
- **SWE-smith**: SWE-bench's format where ``patch`` is the *bug* (the fix is its reverse), an
  ``image_name`` per repository snapshot and no ``test_patch``. The workspace is the snapshot with
  the bug applied (``setup_patch``) and the FAIL_TO_PASS test files removed, as on the instance's
  branch; the grader puts them back (``hidden_tests``).
- **R2E-Gym**: ``repo_name``, ``commit_hash``, ``docker_image``, ``problem_statement``,
  ``parsed_commit_content`` (the commit, whose non-test files make the gold patch),
  ``expected_output_json`` (each hidden test's status after the fix, keyed as R2E's log parser
  keys them: the node id after the file, ``Class.test``) and ``execution_result_content`` (the
  run before the fix). The tests that must pass are those expected ``PASSED``: FAIL_TO_PASS the
  ones not passing before the fix, PASS_TO_PASS the rest. The hidden tests are in the image at
  ``/r2e_tests``; the grader copies them to ``/testbed/r2e_tests`` (``test_setup_cmd``) and runs
  them with pytest under ``/testbed/.venv``, ``/testbed`` on ``sys.path`` (the package is not
  installed there).

Why the ``swebench`` package is not used: from 5.0 it ships no per-repository tables (each row
carries its ``eval_script`` and ``log_parser``, read here); in 4.x its ``MAP_REPO_VERSION_TO_SPECS``
bears on grading only through the test commands above (its ``TEST_DJANGO``, ``TEST_SYMPY``, Django
1.9's exception; pytest for every other repository), written here as SWE-bench spells them; the rest
(install steps, pinned packages) is what its images already hold. Importing it would bring its
dependencies (``datasets``, ``modal``, ``docker``, ...) into the SDK's venv for two strings.
Unlike SWE-bench, a pytest row runs the files of its test ids, not every file of its test patch:
the same tests, without collecting a patched ``conftest.py`` or data file as a test module.

Image names (``image_for_row``): a row's own ``image``, ``image_name`` or ``docker_image``, else
the template of its dataset. ``IMAGE_TEMPLATES`` are the names the datasets publish: SWE-bench's
``swebench/sweb.eval.x86_64.<id>:latest`` with ``__`` spelt ``_1776_``, SWE-Gym's
``xingyaoww/sweb.eval.x86_64.<id>:latest`` with ``_s_``; a template is a preset's name or a format
string over the row's text fields plus ``swebench_id`` and ``swegym_id``, lower-cased after.
"""

from __future__ import annotations

import difflib
import re
import string
from typing import Any

from cascade_envs.core import TaskError
from cascade_envs.data import decode_json_field

IMAGE_TEMPLATES = {
    "swe-bench": "swebench/sweb.eval.x86_64.{swebench_id}:latest",
    "swe-gym": "xingyaoww/sweb.eval.x86_64.{swegym_id}:latest",
    "swe-smith": "{image_name}",
    "r2e-gym": "{docker_image}",
}
IMAGE_FIELDS = ("image", "image_name", "docker_image")
TEST_DJANGO = "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1"
TEST_SYMPY = "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose"
NON_TEST_EXTS = (".json", ".png", "csv", ".txt", ".md", ".jpg", ".jpeg", ".pkl", ".yml", ".yaml", ".toml")
"""Files of a test patch that are not test targets (SWE-bench's ``NON_TEST_EXTS``)."""
LOG_PARSERS = {"parse_log_django": "django", "parse_log_sympy": "sympy"}
START, END = ">>>>> Start Test Output", ">>>>> End Test Output"
R2E_TESTS = "/r2e_tests"
ANSI = re.compile(r"\x1b\[\d+m")


def dataset_of(row: dict[str, Any]) -> str:
    """``r2e-gym``, ``swe-smith`` or ``swe-bench`` (SWE-bench's format: SWE-Gym's and this project's rows)."""
    if "expected_output_json" in row or ("repo_name" in row and "commit_hash" in row):
        return "r2e-gym"
    if str(row.get("repo") or "").startswith("swesmith/") or "swesmith." in str(row.get("image_name") or ""):
        return "swe-smith"
    return "swe-bench"


def adapt(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` in the project's layout (see the module docstring); the row itself is not changed."""
    kind = dataset_of(row)
    if kind == "r2e-gym":
        return _r2e(row)
    if kind == "swe-smith":
        return _swe_smith(row)
    return _swe_bench(row)


def image_for_row(row: dict[str, Any], template: str | None = None) -> str | None:
    """The image ``row`` runs in: ``template`` (a preset or a format string) when given, else the row's own
    image field, else its dataset's template when it holds no repository of its own; ``None`` for a row
    whose repository travels with it."""
    named = next((row[f] for f in IMAGE_FIELDS if row.get(f)), None)
    if template is None or (named is None and row.get("repo_snapshot") is not None):
        if named is not None or row.get("repo_snapshot") is not None:
            return named
        template = dataset_of(row)
    pattern = IMAGE_TEMPLATES.get(template, template)
    fields = {k: v for k, v in row.items() if isinstance(v, str)}
    instance = fields.get("instance_id", "")
    fields.update(swebench_id=instance.replace("__", "_1776_"), swegym_id=instance.replace("__", "_s_"))
    try:
        names = [name for _, name, _, _ in string.Formatter().parse(pattern) if name is not None]
        missing = [n for n in names if n not in fields]
        if missing:
            raise TaskError(
                f"the image template {pattern!r} names {missing[0]!r}, which the row lacks", missing[0]
            )
        return pattern.format(**fields).lower()
    except (ValueError, IndexError) as exc:
        raise TaskError(f"bad image template {pattern!r}: {exc}", "image") from None


def _swe_bench(row: dict[str, Any]) -> dict[str, Any]:
    out = dict(row)
    if row.get("test_cmd") is None and row.get("eval_script"):
        out["test_cmd"] = eval_script_command(str(row["eval_script"]))
    if row.get("test_framework") is None and row.get("log_parser") in LOG_PARSERS:
        out["test_framework"] = LOG_PARSERS[row["log_parser"]]
    if out.get("test_cmd") is None and row.get("repo_snapshot") is None and row.get("test_framework") is None:
        repo = str(row.get("repo") or "")
        if repo == "django/django":
            out["test_cmd"] = (
                "./tests/runtests.py --verbosity 2" if row.get("version") == "1.9" else TEST_DJANGO
            )
        elif repo == "sympy/sympy":
            out["test_cmd"] = TEST_SYMPY
    return out


def eval_script_command(script: str) -> str:
    """The test line of a SWE-bench 5 ``eval_script``: what runs between its output markers."""
    lines = script.splitlines()
    start = next((i for i, line in enumerate(lines) if START in line), None)
    end = next((i for i, line in enumerate(lines) if END in line and start is not None and i > start), None)
    if start is None or end is None or end == start + 1:
        raise TaskError(f"no test command between the {START!r} and {END!r} markers", "eval_script")
    return "\n".join(lines[start + 1 : end])


def test_patch_targets(test_patch: str, framework: str) -> list[str]:
    """What SWE-bench runs for a test patch: its files (not ``NON_TEST_EXTS``); Django's as dotted labels."""
    files = re.findall(r"^diff --git a/.* b/(.*)$", test_patch, re.M) or [
        p for p in re.findall(r"^\+\+\+ b/(\S+)", test_patch, re.M)
    ]
    files = [f for f in dict.fromkeys(files) if not f.endswith(NON_TEST_EXTS)]
    if framework != "django":
        return files
    labels = []
    for path in files:
        path = path[: -len(".py")] if path.endswith(".py") else path
        labels.append((path[len("tests/") :] if path.startswith("tests/") else path).replace("/", "."))
    return labels


def _swe_smith(row: dict[str, Any]) -> dict[str, Any]:
    bug = row.get("patch")
    if not isinstance(bug, str) or not bug.strip():
        raise TaskError("a SWE-smith row needs its bug as a diff", "patch")
    f2p = decode_json_field(row.get("FAIL_TO_PASS") or [], "FAIL_TO_PASS")
    hidden = sorted({str(t).split("::", 1)[0] for t in f2p if "::" in str(t)})
    return {
        **row,
        "setup_patch": bug,
        "patch": reverse_diff(bug),
        "hidden_tests": hidden,
    }


def reverse_diff(diff: str) -> str:
    """The unified diff that undoes ``diff`` (headers, hunk ranges and ``+``/``-`` lines swapped)."""
    out: list[str] = []
    lines = diff.splitlines(keepends=True)
    swap = {"new file mode": "deleted file mode", "deleted file mode": "new file mode"}
    at = 0
    while at < len(lines):
        line = lines[at]
        if line.startswith("--- ") and at + 1 < len(lines) and lines[at + 1].startswith("+++ "):
            out += ["--- " + lines[at + 1][4:], "+++ " + line[4:]]
            at += 2
            continue
        hunk = re.match(r"^@@ -(\S+) \+(\S+) @@(.*)", line, re.S)
        if hunk:
            line = f"@@ -{hunk.group(2)} +{hunk.group(1)} @@{hunk.group(3)}"
        elif line.startswith("diff --git "):
            parts = line[len("diff --git ") :].rstrip("\n").split(" ")
            line = f"diff --git {' '.join(reversed(parts))}\n" if len(parts) == 2 else line
        elif line.startswith("index ") and ".." in line:
            head, _, mode = line[len("index ") :].partition(" ")
            old, _, new = head.partition("..")
            line = f"index {new.rstrip()}..{old}" + (f" {mode}" if mode else "\n")
        elif any(line.startswith(k) for k in swap):
            key = next(k for k in swap if line.startswith(k))
            line = swap[key] + line[len(key) :]
        elif line[:1] in "+-":
            line = ("-" if line[0] == "+" else "+") + line[1:]
        out.append(line)
        at += 1
    return "".join(out)


def _r2e(row: dict[str, Any]) -> dict[str, Any]:
    expected = _statuses(decode_json_field(row.get("expected_output_json"), "expected_output_json"))
    passing = [test for test, status in expected.items() if status == "PASSED"]
    if not passing:
        raise TaskError("no hidden test is expected to pass after the fix", "expected_output_json")
    before: dict[str, str] = {}
    if row.get("execution_result_content"):
        result = decode_json_field(row["execution_result_content"], "execution_result_content")
        before = (
            r2e_log_statuses(str(result.get("old_commit_res_stdout") or ""))
            if isinstance(result, dict)
            else {}
        )
    fail_to_pass = [t for t in passing if before.get(t) != "PASSED"] or passing
    commit = str(row.get("commit_hash") or "")
    return {
        "instance_id": row.get("instance_id") or f"{row.get('repo_name')}__{commit[:12]}",
        "repo": row.get("repo_name"),
        "base_commit": commit,
        "problem_statement": row.get("problem_statement"),
        "patch": r2e_gold_patch(row.get("parsed_commit_content")),
        "FAIL_TO_PASS": fail_to_pass,
        "PASS_TO_PASS": [t for t in passing if t not in fail_to_pass],
        "docker_image": row.get("docker_image"),
        "test_cmd": row.get("test_cmd") or ".venv/bin/python -W ignore -m pytest -rA r2e_tests",
        "test_id_format": "r2e",
        "test_setup_cmd": f"rm -rf r2e_tests && cp -r {R2E_TESTS} r2e_tests",
        "test_globs": ["r2e_tests/*"],
        "workdir": row.get("workdir") or "/testbed",
    }


def _statuses(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise TaskError("expected a JSON object of test statuses", "expected_output_json")
    return {ANSI.sub("", str(k)).split(" - ")[0]: str(v) for k, v in value.items()}


def r2e_key(nodeid: str) -> str:
    """R2E-Gym's key of a pytest node id: the parts after the file, joined by dots."""
    return ".".join(nodeid.split("::")[1:])


def r2e_log_statuses(log: str) -> dict[str, str]:
    """The statuses R2E-Gym reads from a ``pytest -rA`` log (its short test summary), keyed by ``r2e_key``."""
    if "short test summary info" not in log:
        return {}
    out: dict[str, str] = {}
    for line in log.split("short test summary info", 1)[1].strip().splitlines():
        for status in ("PASSED", "FAILED", "ERROR"):
            if status in line:
                out[r2e_key(ANSI.sub("", line.split(" ", 1)[-1])).split(" - ")[0]] = status
                break
    return out


def r2e_gold_patch(content: Any) -> str:
    """The fix of an R2E-Gym commit: its non-test Python files' changes as one ``-p1`` diff."""
    if not content:
        return ""
    commit = decode_json_field(content, "parsed_commit_content")
    diffs = commit.get("file_diffs", []) if isinstance(commit, dict) else []
    out: list[str] = []
    for diff in diffs:
        path = str(((diff.get("header") or {}).get("file") or {}).get("path") or "")
        parts = path.split("/")
        test = (
            parts[-1].startswith("test_")
            or path.endswith("_test.py")
            or bool({"tests", "test", "Tests"} & set(parts))
        )
        if path.endswith(".py") and not test:
            old, new = str(diff.get("old_file_content") or ""), str(diff.get("new_file_content") or "")
            out += difflib.unified_diff(
                old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{path}", f"b/{path}"
            )
    return "".join(out)
