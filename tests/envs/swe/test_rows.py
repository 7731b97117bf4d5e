"""SWE rows (SWE-bench layout) and the test-log parsers: no sandbox, no SDK."""

from __future__ import annotations

import json

import pytest

from cascade_envs.core import TaskError
from cascade_envs.envs.swe.grading import PASSED, parse_pytest, parse_unittest, verdict
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


@pytest.mark.parametrize(("change", "field"), [
    ({"problem_statement": "  "}, "problem_statement"),
    ({"FAIL_TO_PASS": "[]"}, "FAIL_TO_PASS"),
    ({"FAIL_TO_PASS": "[not json"}, "FAIL_TO_PASS"),
    ({"PASS_TO_PASS": [1, 2]}, "PASS_TO_PASS"),
    ({"test_log_format": "tap"}, "test_log_format"),
    ({"workdir": "testbed"}, "workdir"),
    ({"workdir": "/"}, "workdir"),
    ({"repo_snapshot": "bundled:swe/repos/missing.json"}, "repo_snapshot"),
    ({"repo_snapshot": None}, "repo_snapshot"),
    ({"repo_snapshot": "bundled:swe/tasks.jsonl"}, "repo_snapshot"),
    ({"test_patch": "--- a/../../etc/passwd\n+++ b/../../etc/passwd\n"}, "test_patch"),
    ({"setup_cmd": ""}, "setup_cmd"),
    ({"image": 3, "repo_snapshot": None}, "image"),
])
def test_bad_rows_name_their_field(change, field):
    with pytest.raises(TaskError) as caught:
        read_task({**row("durations"), **change})
    assert caught.value.field == field


def test_a_row_may_name_a_host_directory(tmp_path):
    task = read_task({**row("durations"), "repo_snapshot": str(tmp_path)})
    assert task.files is None and task.source == str(tmp_path)


UNITTEST_LOG = """test_a (tests.test_x.T.test_a) ... ok
test_b (tests.test_x.T.test_b) ... FAIL
test_c (tests.test_x.T)
A docstring line ... ERROR
test_d (tests.test_x.T.test_d) ... skipped 'later'
test_e (tests.test_x.T.test_e) ... expected failure
"""


def test_unittest_log_parser_reads_both_id_styles_and_docstrings():
    statuses = parse_unittest(UNITTEST_LOG)
    assert statuses == {"tests.test_x.T.test_a": PASSED, "tests.test_x.T.test_b": "FAILED",
                        "tests.test_x.T.test_c": "FAILED", "tests.test_x.T.test_d": "FAILED",
                        "tests.test_x.T.test_e": PASSED}


def test_pytest_log_parser_reads_the_short_summary():
    log = "PASSED tests/a.py::test_one\nFAILED tests/a.py::test_two - assert 1 == 2\nERROR tests/b.py::test_three\n"
    assert parse_pytest(log) == {"tests/a.py::test_one": PASSED, "tests/a.py::test_two": "FAILED",
                                 "tests/b.py::test_three": "FAILED"}


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
