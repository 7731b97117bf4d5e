"""Rows of each public SWE dataset in its own format, their images' names and their test commands: no sandbox."""

from __future__ import annotations

import json
import subprocess

import pytest

from cascade_envs.core import TaskError
from cascade_envs.envs.swe.datasets import dataset_of, eval_script_command, reverse_diff
from cascade_envs.envs.swe.grading import runner_request, verdict
from cascade_envs.envs.swe.interpreter import candidates
from cascade_envs.envs.swe.scripts import RUNNER, program, source
from cascade_envs.envs.swe.task import read_task
from cascade_envs.envs.swe.testcmd import read_command

from .repos import unified

DJANGO_PATCH = unified("tests/auth_tests/test_validators.py", "a = 1\n", "a = 2\n") + unified(
    "tests/auth_tests/fixtures/data.json", "{}\n", "[]\n"
)
SWE_BENCH = {
    "instance_id": "django__django-11099",
    "repo": "django/django",
    "base_commit": "d26b2424437dabeeca94d7900b37d2df4410da0c",
    "version": "3.0",
    "problem_statement": "UsernameValidator allows trailing newline in usernames.",
    "patch": unified("django/contrib/auth/validators.py", "x = 1\n", "x = 2\n"),
    "test_patch": DJANGO_PATCH,
    "FAIL_TO_PASS": json.dumps(["test_ascii_validator (auth_tests.test_validators.UsernameValidatorsTests)"]),
    "PASS_TO_PASS": json.dumps(["test_help_text (auth_tests.test_validators.MinimumLengthValidatorTest)"]),
}


@pytest.mark.parametrize(
    ("command", "framework", "python", "env", "paths", "targets"),
    [
        (
            "PYTHONPATH=_vendor python3 -m pytest -rA tests/test_a.py",
            "pytest",
            None,
            {},
            ("_vendor",),
            ("tests/test_a.py",),
        ),
        (
            "source /opt/conda/bin/activate; conda activate py39; pytest --tb=no -p no:cacheprovider t.py",
            "pytest",
            None,
            {},
            (),
            ("t.py",),
        ),
        (
            "QT_QPA_PLATFORM=minimal PYTHONHASHSEED=0 xvfb-run --auto-servernum .venv/bin/python -W ignore -m pytest -rA r2e_tests",
            "pytest",
            ".venv/bin/python",
            {"QT_QPA_PLATFORM": "minimal"},
            (),
            ("r2e_tests",),
        ),
        (
            "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 a.b",
            "django",
            None,
            {},
            (),
            ("a.b",),
        ),
        (
            "bin/test -C --verbose sympy/core/tests/test_basic.py",
            "sympy",
            None,
            {"SYMPY_USE_CACHE": "no"},
            (),
            ("sympy/core/tests/test_basic.py",),
        ),
        (
            "export LC_ALL=C.UTF-8 && tox --current-env -epy39 -v -- tests/test_x.py",
            "pytest",
            None,
            {"LC_ALL": "C.UTF-8"},
            (),
            ("tests/test_x.py",),
        ),
        ("env/bin/pytest tests", "pytest", "env/bin/python", {}, (), ("tests",)),
        ("python -m unittest tests.test_a", "unittest", None, {}, (), ("tests.test_a",)),
        ("make test", None, None, {}, (), ()),
    ],
)
def test_a_test_command_is_read_for_what_the_runner_needs(command, framework, python, env, paths, targets):
    got = read_command(command)
    assert (got.framework, got.python, got.env, got.paths, got.targets) == (
        framework,
        python,
        env,
        paths,
        targets,
    )


def test_the_command_declares_warnings_and_conda_envs_and_never_other_python_variables():
    got = read_command(
        "source /opt/conda/bin/activate && conda activate py39 && "
        "PYTHONWARNINGS='ignore::UserWarning' PYTHONDONTWRITEBYTECODE=1 python -W error::DeprecationWarning -m pytest"
    )
    assert got.conda == ("/opt/conda", "py39") and got.env == {}
    assert got.warnings == ("ignore::UserWarning", "error::DeprecationWarning")
    task = read_task(
        {
            **SWE_BENCH,
            "repo": "o/r",
            "test_cmd": "source /opt/conda/bin/activate; conda activate py39; pytest",
        }
    )
    assert task.python == "/opt/conda/envs/py39/bin/python"
    with pytest.raises(TaskError, match="test command") as caught:
        read_task({**SWE_BENCH, "test_cmd": "pytest 'unclosed"})
    assert caught.value.field == "test_cmd"


def test_a_swe_bench_django_row_is_run_by_runtests_with_swe_bench_s_settings():
    task = read_task(SWE_BENCH)
    assert dataset_of(SWE_BENCH) == "swe-bench" and task.framework == "django"
    assert task.image == "swebench/sweb.eval.x86_64.django_1776_django-11099:latest"
    assert task.targets == ("auth_tests.test_validators",)  # the .json of the test patch is not a target
    assert task.runner_options == ("--verbosity", "2", "--settings=test_sqlite", "--parallel", "1")
    assert (
        "--parallel" not in read_task({**SWE_BENCH, "version": "1.9"}).runner_options
    )  # SWE-bench: 1.9 without
    request = runner_request(task, "n", [])
    assert request["framework"] == "django" and request["files"] == ["auth_tests.test_validators"]


def test_other_repositories_run_as_their_ids_say():
    pytest_row = {
        **SWE_BENCH,
        "repo": "acme/x",
        "FAIL_TO_PASS": ["tests/test_a.py::test_x"],
        "PASS_TO_PASS": [],
    }
    assert read_task(pytest_row).framework == "pytest" and read_task(pytest_row).targets == (
        "tests/test_a.py",
    )
    unittest_row = {**pytest_row, "FAIL_TO_PASS": ["tests.test_a.T.test_x"]}
    assert read_task(unittest_row).framework == "unittest" and read_task(unittest_row).targets == ()


def test_a_swe_bench_sympy_row_runs_the_test_patch_s_files_without_the_cache():
    sympy = {
        **SWE_BENCH,
        "instance_id": "sympy__sympy-20590",
        "repo": "sympy/sympy",
        "test_patch": unified("sympy/core/tests/test_basic.py", "a\n", "b\n"),
        "FAIL_TO_PASS": ["test_immutable"],
        "PASS_TO_PASS": ["test__aresame"],
    }
    task = read_task(sympy)
    assert task.framework == "sympy" and task.targets == ("sympy/core/tests/test_basic.py",)
    assert task.test_env == {"SYMPY_USE_CACHE": "no"}
    assert task.warnings == ("ignore::UserWarning", "ignore::SyntaxWarning")


def test_a_swe_bench_5_row_brings_its_eval_script_and_log_parser():
    script = (
        "#!/bin/bash\nset -uxo pipefail\nsource /opt/miniconda3/bin/activate\nconda activate testbed\ncd /testbed\n"
        ": '>>>>> Start Test Output'\n./tests/runtests.py --verbosity 2 --settings=test_sqlite auth_tests.test_validators\n"
        ": '>>>>> End Test Output'\n"
    )
    row = {**SWE_BENCH, "eval_script": script, "log_parser": "parse_log_django", "image": "swebench/x:latest"}
    task = read_task(row)
    assert task.framework == "django" and task.targets == ("auth_tests.test_validators",)
    assert (
        task.runner_options == ("--verbosity", "2", "--settings=test_sqlite")
        and task.image == "swebench/x:latest"
    )
    assert eval_script_command(script).startswith("./tests/runtests.py")
    with pytest.raises(TaskError) as caught:
        read_task({**row, "eval_script": "pytest\n"})
    assert caught.value.field == "eval_script"


def test_image_templates_name_a_row_s_image():
    assert read_task(SWE_BENCH, image_template="registry.local/{repo}:{base_commit}").image == (
        "registry.local/django/django:d26b2424437dabeeca94d7900b37d2df4410da0c"
    )
    with pytest.raises(TaskError, match="names 'nothing'"):
        read_task(SWE_BENCH, image_template="x/{nothing}")
    with pytest.raises(TaskError) as caught:
        read_task(SWE_BENCH, image_template="x/{instance_id} ;rm -rf")
    assert caught.value.field == "image"


SMITH_BUG = unified(
    "src/calc/ops.py", "def add(a, b):\n    return a + b\n", "def add(a, b):\n    return a - b\n"
)
SWE_SMITH = {
    "instance_id": "acme__calc.1a2b3c4d.func_pm_op_swap__x1y2z3",
    "repo": "swesmith/acme__calc.1a2b3c4d",
    "patch": SMITH_BUG,
    "FAIL_TO_PASS": ["tests/test_ops.py::test_add"],
    "PASS_TO_PASS": ["tests/test_ops.py::test_sub", "test.py::test_top"],
    "image_name": "jyangballin/swesmith.x86_64.acme_1776_calc.1a2b3c4d",
    "problem_statement": "add() subtracts.",
}


def test_a_swe_smith_row_applies_its_bug_hides_its_failing_tests_and_is_fixed_by_the_reverse(tmp_path):
    task = read_task(SWE_SMITH)
    assert dataset_of(SWE_SMITH) == "swe-smith" and task.image == SWE_SMITH["image_name"]
    assert task.setup_patch == SMITH_BUG and task.hidden_tests == ("tests/test_ops.py",)
    assert task.framework == "pytest" and set(task.targets) == {"tests/test_ops.py", "test.py"}
    assert {"tests/test_ops.py", "test.py"} <= set(task.test_files)  # the grader owns them, globs or not
    (tmp_path / "src" / "calc").mkdir(parents=True)
    (tmp_path / "src/calc/ops.py").write_text("def add(a, b):\n    return a + b\n")
    for diff in (task.setup_patch, task.patch):  # the bug, then the gold fix: back where it started
        subprocess.run(
            ["patch", "-p1", "--batch"], input=diff.encode(), cwd=tmp_path, check=True, capture_output=True
        )
    assert (tmp_path / "src/calc/ops.py").read_text() == "def add(a, b):\n    return a + b\n"
    assert reverse_diff(reverse_diff(SMITH_BUG)) == SMITH_BUG


def r2e_row() -> dict:
    old, new = "def area(w, h):\n    return w + h\n", "def area(w, h):\n    return w * h\n"
    summary = "=== short test summary info ===\n{}\n"
    before = summary.format(
        "FAILED r2e_tests/test_1.py::TestArea::test_area - assert 5 == 6\nPASSED r2e_tests/test_1.py::test_zero"
    )
    commit = {
        "file_diffs": [
            {"header": {"file": {"path": "shapes/geo.py"}}, "old_file_content": old, "new_file_content": new},
            {
                "header": {"file": {"path": "tests/test_geo.py"}},
                "old_file_content": "",
                "new_file_content": "x",
            },
        ]
    }
    return {
        "repo_name": "shapes",
        "commit_hash": "0123456789abcdef0123",
        "docker_image": "namanjain12/shapes_final:0123456789abcdef0123",
        "problem_statement": "area() adds.",
        "parsed_commit_content": json.dumps(commit),
        "execution_result_content": json.dumps({"old_commit_res_stdout": before}),
        "expected_output_json": json.dumps(
            {"TestArea.test_area": "PASSED", "test_zero": "PASSED", "test_known_bug": "FAILED"}
        ),
    }


def test_an_r2e_gym_row_grades_its_hidden_tests_in_its_venv():
    task = read_task(r2e_row())
    assert (
        dataset_of(r2e_row()) == "r2e-gym" and task.image == "namanjain12/shapes_final:0123456789abcdef0123"
    )
    assert task.fail_to_pass == ("TestArea.test_area",) and task.pass_to_pass == ("test_zero",)
    assert task.python == "/testbed/.venv/bin/python" and candidates(task) == ("/testbed/.venv/bin/python",)
    assert task.targets == ("r2e_tests",) and "cp -r /r2e_tests r2e_tests" in (task.test_setup_cmd or "")
    assert "ignore" in task.warnings and task.id_format == "r2e" and "r2e_tests/*" in task.test_globs
    assert task.patch.startswith("--- a/shapes/geo.py") and "tests/test_geo.py" not in task.patch
    statuses = {
        "r2e_tests/test_1.py::TestArea::test_area": "PASSED",
        "r2e_tests/test_1.py::test_zero": "PASSED",
        "r2e_tests/test_2.py::test_zero": "FAILED",  # one key, two files: both must pass
    }
    assert verdict(task, statuses).pass_to_pass == {"test_zero": False}
    del statuses["r2e_tests/test_2.py::test_zero"]
    assert verdict(task, statuses).resolved


def test_the_image_s_interpreters_are_tried_in_order_and_a_row_s_own_is_the_only_one():
    task = read_task(SWE_BENCH)
    assert candidates(task)[0] == "/opt/miniconda3/envs/testbed/bin/python"
    assert candidates(task)[-2:] == ("/testbed/.venv/bin/python", "python3")
    assert candidates(task, "/usr/bin/python3.11") == ("/usr/bin/python3.11",)
    assert candidates(read_task({**SWE_BENCH, "test_env": "py39"}), "/x") == (
        "/opt/miniconda3/envs/py39/bin/python",
    )
    assert read_task({**SWE_BENCH, "python": ".venv/bin/python"}).python == "/testbed/.venv/bin/python"


@pytest.mark.parametrize("name", [*RUNNER, "collect"])
def test_the_sandbox_scripts_keep_to_python_3_6_syntax(name):
    """They run under the image's interpreter: SWE-bench's Django 3.x envs are Python 3.6."""
    import ast

    ast.parse(source(name), feature_version=(3, 6))


def test_the_runner_program_is_one_namespace_within_argv_limits():
    """Its parts' relative imports are left out (each name is defined by a part before); Linux caps one
    argument at 128 KiB."""
    import ast

    text = program()
    inner = ast.literal_eval(ast.parse(text).body[0].value.args[0].args[0])  # exec(compile(<text>, ...))
    assert "from ." not in inner and "def install_hook" in inner and "def main" in inner
    assert len(text.encode()) < 128 * 1024 - 4096
