"""SWE rows (SWE-bench layout), the verdict and the change screen: no sandbox, no SDK."""

from __future__ import annotations

import hashlib
import json

import pytest

from cascade_envs.core import TaskError
from cascade_envs.envs.swe.changes import Entry, screen
from cascade_envs.envs.swe.grading import verdict
from cascade_envs.envs.swe.task import diff_paths, read_task

from .conftest import bundled_rows, row


def test_bundled_rows_read_and_hold_their_repositories():
    rows = bundled_rows()
    assert len(rows) >= 2
    for r in rows:
        task = read_task(r)
        assert task.files and task.workdir == "/testbed" and task.fail_to_pass and task.pass_to_pass
        assert task.patched_files and all(p.startswith("tests/") for p in task.patched_files)
        assert all(p in task.files for p in task.patched_files)  # the patch changes existing test files
        assert not set(task.fail_to_pass) & set(task.pass_to_pass)
        assert set(diff_paths(r["patch"])).isdisjoint(task.patched_files)  # the fix touches no test


def test_test_lists_may_be_lists_or_json_text():
    r = row("inilite")
    as_list = read_task({**r, "FAIL_TO_PASS": json.loads(r["FAIL_TO_PASS"])})
    assert as_list.fail_to_pass == read_task(r).fail_to_pass


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"problem_statement": "  "}, "problem_statement"),
        ({"FAIL_TO_PASS": "[]"}, "FAIL_TO_PASS"),
        ({"FAIL_TO_PASS": "[not json"}, "FAIL_TO_PASS"),
        ({"PASS_TO_PASS": [1, 2]}, "PASS_TO_PASS"),
        ({"test_framework": None, "test_log_format": "tap"}, "test_log_format"),
        ({"test_framework": "nose"}, "test_framework"),
        ({"test_globs": "tests/*"}, "test_globs"),
        ({"test_globs": [""]}, "test_globs"),
        ({"workdir": "testbed"}, "workdir"),
        ({"workdir": "/"}, "workdir"),
        ({"repo_snapshot": "bundled:swe/repos/missing.json"}, "repo_snapshot"),
        ({"repo_snapshot": "bundled:swe/tasks.jsonl"}, "repo_snapshot"),
        ({"test_patch": "--- a/../../etc/passwd\n+++ b/../../etc/passwd\n"}, "test_patch"),
        ({"setup_cmd": ""}, "setup_cmd"),
        ({"image": 3, "repo_snapshot": None}, "image"),
    ],
)
def test_bad_rows_name_their_field(change, field):
    with pytest.raises(TaskError) as caught:
        read_task({**row("durations"), **change})
    assert caught.value.field == field


def test_a_row_may_name_a_host_directory(tmp_path):
    task = read_task({**row("durations"), "repo_snapshot": str(tmp_path)})
    assert task.files is None and task.source == str(tmp_path)


def test_the_framework_is_named_or_inferred_from_the_ids():
    assert read_task(row("durations")).framework == "unittest"
    pytest_ids = {"FAIL_TO_PASS": ["tests/test_a.py::test_x[1-2]"], "PASS_TO_PASS": []}
    assert read_task({**row("durations"), **pytest_ids, "test_framework": None}).framework == "pytest"
    assert read_task({**row("durations"), "test_framework": "pytest"}).framework == "pytest"
    swe_bench = {
        k: v
        for k, v in row("durations").items()
        if k not in ("test_framework", "test_log_format", "test_cmd")
    }
    assert read_task({**swe_bench, "test_cmd": "pytest -rA"}).framework == "pytest"  # the row's command says


PASSED = "PASSED"


def test_verdict_follows_swe_bench_rules(durations):
    everything = {t: PASSED for t in (*durations.fail_to_pass, *durations.pass_to_pass)}
    assert verdict(durations, everything).reward().value == 1.0
    missing = dict(everything)
    del missing[durations.fail_to_pass[0]]  # absent from the log (import error, cut run): not passed
    reward = verdict(durations, missing).reward()
    assert reward.value == 0.0 and not reward.masked and "1/3 FAIL_TO_PASS still fail" in reward.reason
    broken = {**everything, durations.pass_to_pass[0]: "FAILED"}
    reward = verdict(durations, broken).reward()
    assert reward.value == 0.0 and "PASS_TO_PASS now fail" in reward.reason
    assert reward.components["pass_to_pass"] == pytest.approx(5 / 6)


def file(text: str, mode: int = 0o644) -> Entry:
    data = text.encode()
    return Entry("file", mode, sha=hashlib.sha256(data).digest(), data=data)


def test_the_screen_keeps_source_changes_and_drops_what_a_fix_never_holds(durations):
    base = {
        "durations/core.py": file("old"),
        "durations/__init__.py": file("init"),
        "tests/test_parse.py": file("t"),
        "tests/helper.py": file("h"),
        "setup.cfg": file("[x]"),
        "README.md": file("r"),
    }
    now = {
        **base,
        "durations/core.py": file("new"),  # kept: the fix
        "durations/extra.py": file("more", 0o755),  # kept: a new module inside the package
        "NOTES.md": file("notes"),  # kept: a new top-level non-module
        "tests/test_parse.py": file("gutted"),  # the test patch's file
        "tests/helper.py": file("hacked"),  # a test helper
        "durations/tests/test_new.py": file("x"),  # a new test file
        "durations/conftest.py": file("x"),
        "setup.cfg": file("[y]"),
        "durations/x.pth": file("x"),  # hooks
        "durations.egg-info/entry_points.txt": file("[pytest11]\nx = durations.hack\n"),
        "durations/fast.pyc": file("x"),
        "durations/blob.txt": file("a\0b"),  # compiled, binary
        "argparse.py": file("x"),
        "unittest/__init__.py": file("x"),  # new top-level modules
        "durations/link": Entry("link"),
        "durations/fifo": Entry("other"),  # special files
        "durations/locked.py": Entry("file", error="Permission denied"),
        "durations/huge.py": Entry("file", big=True),
        "bad\udcff.py": file("x"),
    }
    del now["README.md"], now["durations/__init__.py"]
    change = screen(base, now, durations)
    assert set(change.written) == {"durations/core.py", "durations/extra.py", "NOTES.md"}
    assert (
        change.written["durations/extra.py"].mode == 0o755
        and change.written["durations/core.py"].data == b"new"
    )
    assert set(change.deleted) == {"README.md", "durations/__init__.py"}
    why = change.ignored
    assert (
        why["tests/test_parse.py"] == "a file of the test patch" and why["tests/helper.py"] == "a test file"
    )
    assert why["durations/tests/test_new.py"] == "a test file"
    assert {
        why[p]
        for p in (
            "durations/conftest.py",
            "setup.cfg",
            "durations/x.pth",
            "durations.egg-info/entry_points.txt",
        )
    } == {"a test-runner or interpreter hook file"}
    assert why["durations/fast.pyc"] == why["durations/blob.txt"] == "a compiled or binary file"
    assert why["argparse.py"] == why["unittest/__init__.py"] == "a new top-level module or package"
    assert why["durations/link"] == "a symbolic link" and why["durations/fifo"] == "not a regular file"
    assert why["durations/locked.py"].startswith("unreadable") and why["durations/huge.py"].startswith(
        "larger than"
    )
    assert why["bad\udcff.py"] == "a name that is not UTF-8"


def test_deleting_tests_is_ignored_and_row_globs_add_to_the_defaults(durations):
    base = {"tests/test_parse.py": file("t"), "spec/check_core.py": file("c"), "durations/core.py": file("c")}
    custom = read_task({**row("durations"), "test_globs": ["spec/*"]})
    change = screen(base, {"durations/core.py": file("c")}, custom)
    assert change.deleted == () and set(change.ignored) == {"tests/test_parse.py", "spec/check_core.py"}
    assert change.empty and change.ignored["spec/check_core.py"] == "deleting a test file"
    assert screen(
        base, {"tests/test_parse.py": file("t"), "durations/core.py": file("c")}, durations
    ).deleted == ("spec/check_core.py",)


def test_public_swe_bench_rows_load_in_the_images_swe_bench_publishes(shared_data):
    """NeMo Gym's SWE-bench Verified rows (shared reference data), as they are: no test command, no image."""
    path = shared_data / "nemo-gym-rows" / "swebench" / "example.jsonl"
    for line in path.read_text().splitlines():
        r = json.loads(line)
        task = read_task(r)
        name = r["instance_id"].lower().replace("__", "_1776_")
        assert task.image == f"swebench/sweb.eval.x86_64.{name}:latest" and task.files is None
        assert task.framework == "pytest" and task.python is None  # the image's interpreter, found at setup
        assert set(task.targets) == {t.split("::")[0] for t in task.tests}
        assert task.patched_files and all("/tests/" in p for p in task.patched_files)
        gym = read_task(r, image_template="swe-gym").image
        assert gym == f"xingyaoww/sweb.eval.x86_64.{r['instance_id'].lower().replace('__', '_s_')}:latest"
