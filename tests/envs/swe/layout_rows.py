"""The repositories and rows of the SWE layout tests, in the images ``layouts.py`` builds.

``calc`` (pytest; its bug in the base for SWE-bench and SWE-Gym rows, injected by the row for
SWE-smith), ``shapes`` (R2E-Gym's hidden tests), Django 4.2.16's own source and tests from its
sdist (the test tree pruned to what the row needs), SymPy 1.13.3's own source (its tests pruned to
``sympy/utilities/tests``). Each image is tagged with the name its dataset publishes for the row.
"""

from __future__ import annotations

import json
import tarfile
import time
import zipfile
from functools import cache
from typing import Any

from .layouts import CONDA, WHEELS, Layout, Tree, build, log, sdist, unavailable
from .repos import unified

CALC_IMAGE = "swebench/sweb.eval.x86_64.acme_1776_calc-7:latest"
"""SWE-bench's name for the image of row ``acme__calc-7``; the others are SWE-Gym's, SWE-smith's, R2E-Gym's."""
GYM_IMAGE = "xingyaoww/sweb.eval.x86_64.acme_s_calc-8:latest"
SMITH_IMAGE = "jyangballin/swesmith.x86_64.acme_1776_calc.1a2b3c4d"
SHAPES_IMAGE = "namanjain12/shapes_final:0f1e2d3c4b5a69788796"
DJANGO_IMAGE = "swebench/sweb.eval.x86_64.django_1776_django-99001:latest"
SYMPY_IMAGE = "swebench/sweb.eval.x86_64.sympy_1776_sympy-99002:latest"


def prepare() -> None:
    """Build every layout image the tests and ``bench_swe.py --images`` use (``.ci/swe.sh``, before the tests)."""
    why = unavailable()
    if why is not None:
        log(f"images not prepared: {why}")
        return
    start = time.monotonic()
    for make in (
        lambda: calc_image(True),
        lambda: calc_image(False),
        shapes_image,
        django_image,
        sympy_image,
    ):
        make()
    print(f"swe layout images ready in {time.monotonic() - start:.1f} s", flush=True)


# ----- calc: a pytest repository (SWE-bench, SWE-Gym, SWE-smith rows) ----------------------------------------

CALC_OPS = '''def add(a, b):
    return a + b


def mean(values):
    """The arithmetic mean of ``values``."""
    return sum(values) / len(values)
'''
CALC_BUG = ("    return sum(values) / len(values)\n", "    return sum(values) / max(len(values) - 1, 1)\n")
CALC_TESTS = """from calc.ops import add, mean


def test_add():
    assert add(2, 3) == 5


def test_add_negative():
    assert add(-2, -3) == -5


def test_mean_of_one():
    assert mean([4]) == 4
"""
CALC_NEW_TEST = "\n\ndef test_mean_of_many():\n    assert mean([1, 2, 3, 6]) == 3\n"


def calc_tree(bug: bool, new_test: bool = False) -> Tree:
    ops = CALC_OPS.replace(*CALC_BUG) if bug else CALC_OPS
    tests = CALC_TESTS + (CALC_NEW_TEST if new_test else "")
    return {
        "calc/__init__.py": b'"""Arithmetic."""\n',
        "calc/ops.py": ops.encode(),
        "tests/test_ops.py": tests.encode(),
        "README.md": b"# calc\n",
    }


def calc_image(bug: bool) -> str:
    """The calc repository in SWE-bench's layout (conda env ``testbed`` with pytest, installed editable): with its
    bug, under SWE-bench's and SWE-Gym's names for two of its rows; clean, under SWE-smith's name of its snapshot."""
    names = (CALC_IMAGE, GYM_IMAGE) if bug else (SMITH_IMAGE,)
    return build(Layout(CONDA, ("pytest",), calc_tree(bug, new_test=not bug), editable=True), *names)


def calc_fix() -> str:
    return unified("calc/ops.py", CALC_OPS.replace(*CALC_BUG), CALC_OPS)


def calc_regression() -> str:
    """The fix plus a change that breaks ``add``: a PASS_TO_PASS test fails."""
    return unified("calc/ops.py", CALC_OPS.replace(*CALC_BUG), CALC_OPS.replace("a + b", "a + b + 0.5"))


def calc_row(instance: str) -> dict[str, Any]:
    """A row in SWE-bench's format (SWE-Gym's is the same): no image, no test command."""
    return {
        "repo": "acme/calc",
        "instance_id": instance,
        "base_commit": "c0ffee" * 6 + "c0ff",
        "version": "0.1",
        "environment_setup_commit": "c0ffee" * 6 + "c0ff",
        "hints_text": "",
        "created_at": "2024-01-01T00:00:00Z",
        "problem_statement": "mean([1, 2, 3, 6]) returns 4.0; the mean is 3.",
        "patch": calc_fix(),
        "test_patch": unified("tests/test_ops.py", CALC_TESTS, CALC_TESTS + CALC_NEW_TEST),
        "FAIL_TO_PASS": json.dumps(["tests/test_ops.py::test_mean_of_many"]),
        "PASS_TO_PASS": json.dumps(
            [
                "tests/test_ops.py::test_add",
                "tests/test_ops.py::test_add_negative",
                "tests/test_ops.py::test_mean_of_one",
            ]
        ),
    }


def smith_row() -> dict[str, Any]:
    """A row in SWE-smith's format: ``patch`` is the bug, the image is the repository's snapshot."""
    clean = CALC_OPS
    return {
        "instance_id": "acme__calc.1a2b3c4d.func_pm_op_change__k3j2m1",
        "repo": "swesmith/acme__calc.1a2b3c4d",
        "patch": unified("calc/ops.py", clean, clean.replace(*CALC_BUG)),
        "FAIL_TO_PASS": ["tests/test_ops.py::test_mean_of_many"],
        "PASS_TO_PASS": [
            "tests/test_ops.py::test_add",
            "tests/test_ops.py::test_add_negative",
            "tests/test_ops.py::test_mean_of_one",
        ],
        "created_at": "2025-04-01T00:00:00",
        "image_name": SMITH_IMAGE,
        "problem_statement": "mean([1, 2, 3, 6]) returns 4.0; the mean is 3.",
    }


# ----- shapes: R2E-Gym's layout (a venv beside the repository, hidden tests in /r2e_tests) -------------------

SHAPES_GEO = """def area(w, h):
    return w * h


def perimeter(w, h):
    return 2 * (w + h)
"""
SHAPES_BUG = ("    return w * h\n", "    return w + h\n")
R2E_TESTS = """from shapes.geo import area, perimeter


class TestArea:
    def test_area(self):
        assert area(2, 3) == 6

    def test_square(self):
        assert area(3, 3) == 9


def test_perimeter():
    assert perimeter(2, 3) == 10


def test_perimeter_square():
    assert perimeter(1, 1) == 4


def test_known_bug():
    assert perimeter(0, 0) == 1
"""


def shapes_image() -> str:
    tree = {"shapes/__init__.py": b"", "shapes/geo.py": SHAPES_GEO.replace(*SHAPES_BUG).encode()}
    extra = {"r2e_tests/test_1.py": R2E_TESTS.encode()}
    return build(Layout("/testbed/.venv", ("pytest",), tree, extra), SHAPES_IMAGE)


def r2e_row(image: str) -> dict[str, Any]:
    """A row in R2E-Gym's own format (its fields, its keys, its logs)."""
    before = (
        "=========================== short test summary info ============================\n"
        "FAILED r2e_tests/test_1.py::TestArea::test_area - assert 5 == 6\n"
        "FAILED r2e_tests/test_1.py::TestArea::test_square - assert 6 == 9\n"
        "PASSED r2e_tests/test_1.py::test_perimeter\nPASSED r2e_tests/test_1.py::test_perimeter_square\n"
        "FAILED r2e_tests/test_1.py::test_known_bug - assert 0 == 1\n"
    )
    diff = {
        "header": {"file": {"path": "shapes/geo.py"}},
        "old_file_content": SHAPES_GEO.replace(*SHAPES_BUG),
        "new_file_content": SHAPES_GEO,
    }
    return {
        "repo_name": "shapes",
        "commit_hash": image.rpartition(":")[2],
        "docker_image": image,
        "problem_statement": "area(2, 3) returns 5; the area of a 2 by 3 rectangle is 6.",
        "parsed_commit_content": json.dumps({"file_diffs": [diff]}),
        "execution_result_content": json.dumps(
            {"old_commit_res_stdout": before, "new_commit_res_stdout": ""}
        ),
        "expected_output_json": json.dumps(
            {
                "TestArea.test_area": "PASSED",
                "TestArea.test_square": "PASSED",
                "test_perimeter": "PASSED",
                "test_perimeter_square": "PASSED",
                "test_known_bug": "FAILED",
            }
        ),
        "modified_files": ["shapes/geo.py"],
    }


# ----- Django 4.2.16 (its own tests/runtests.py) --------------------------------------------------------------

DJANGO = "Django-4.2.16"
DJANGO_BUG = (
    '    return re.sub(r"[-\\s]+", "-", value).strip("-_")\n',
    '    return re.sub(r"[-\\s]+", "-", value).strip("-")\n',
)
DJANGO_TEST = '''
    def test_slugify_strips_underscores(self):
        """Underscores around a slug are stripped, as dashes are."""
        self.assertEqual(text.slugify("__init__"), "init")
        self.assertEqual(text.slugify("_-a b-_"), "a-b")
'''
DJANGO_ANCHOR = "    def test_unescape_string_literal(self):\n"


@cache
def django_files() -> Tree:
    """Django's source and the tests the row needs (runtests.py, test_sqlite.py, urls.py, utils_tests), from its sdist."""
    keep = ("django/", "tests/runtests.py", "tests/test_sqlite.py", "tests/urls.py", "tests/utils_tests/")
    out: Tree = {}
    with tarfile.open(sdist(DJANGO)) as tar:
        for member in tar.getmembers():
            path = member.name.split("/", 1)[1] if "/" in member.name else ""
            if member.isfile() and path.startswith(keep):
                handle = tar.extractfile(member)
                assert handle is not None
                out[path] = handle.read()
    return out


def django_image() -> str:
    tree = dict(django_files())
    text = tree["django/utils/text.py"].decode()
    assert DJANGO_BUG[0] in text
    tree["django/utils/text.py"] = text.replace(*DJANGO_BUG).encode()
    return build(Layout(CONDA, ("asgiref", "sqlparse"), tree, editable=True), DJANGO_IMAGE)


def django_row(image: str) -> dict[str, Any]:
    """A SWE-bench row as SWE-bench has Django's: no test command, ids as Django's verbose log prints them."""
    tests = django_files()["tests/utils_tests/test_text.py"].decode()
    text = django_files()["django/utils/text.py"].decode()
    cls = "utils_tests.test_text.TestUtilsText"
    return {
        "repo": "django/django",
        "instance_id": "django__django-99001",
        "base_commit": "0" * 40,
        "version": "4.2",
        "image": image,
        "problem_statement": "slugify() keeps leading and trailing underscores: slugify('__init__') gives '__init__'.",
        "patch": unified("django/utils/text.py", text.replace(*DJANGO_BUG), text),
        "test_patch": unified(
            "tests/utils_tests/test_text.py",
            tests,
            tests.replace(DJANGO_ANCHOR, DJANGO_TEST.lstrip("\n") + "\n" + DJANGO_ANCHOR),
        ),
        "FAIL_TO_PASS": json.dumps(
            ["Underscores around a slug are stripped, as dashes are.", f"test_slugify ({cls}.test_slugify)"]
        ),
        "PASS_TO_PASS": json.dumps(
            [
                f"test_wrap ({cls}.test_wrap)",
                f"test_normalize_newlines ({cls})",  # the pre-3.11 form: both are mapped
                f"test_phone2numeric ({cls}.test_phone2numeric)",
                f"test_get_valid_filename ({cls}.test_get_valid_filename)",
            ]
        ),
    }


def django_regression() -> str:
    text = django_files()["django/utils/text.py"].decode()
    return unified("django/utils/text.py", text.replace(*DJANGO_BUG), text.replace('"f": "3"', '"f": "4"'))


# ----- SymPy 1.13.3 (bin/test's conventions) -------------------------------------------------------------------

SYMPY = "sympy-1.13.3-py3-none-any.whl"
SYMPY_BUG = ("    y = y % len(x)\n    return x[y:] + x[:y]\n", "    return x[y:] + x[:y]\n")
SYMPY_TESTS = "sympy/utilities/tests/test_iterables.py"
SYMPY_NEW = """

def test_rotate_left_past_the_end():
    assert rotate_left([0, 1, 2], 4) == [1, 2, 0]


@XFAIL
def test_rotate_known_to_fail():
    assert rotate_left([0, 1], 1) == [0, 1]


@slow
def test_rotate_slow():
    assert rotate_left(list(range(10**6)), 1)[0] == 1
"""


@cache
def sympy_files() -> Tree:
    """SymPy's source from its wheel, its tests pruned to ``sympy/utilities/tests``."""
    out: Tree = {}
    with zipfile.ZipFile(WHEELS / SYMPY) as wheel:
        for name in wheel.namelist():
            tests = "/tests/" in name and not name.startswith("sympy/utilities/tests/")
            if name.startswith("sympy/") and not tests and not name.endswith("/"):
                out[name] = wheel.read(name)
    return out


def _sympy_iterables() -> str:
    return sympy_files()["sympy/utilities/iterables.py"].decode()


def sympy_image() -> str:
    tree = dict(sympy_files())
    assert SYMPY_BUG[0] in _sympy_iterables()
    tree["sympy/utilities/iterables.py"] = _sympy_iterables().replace(*SYMPY_BUG).encode()
    return build(Layout(CONDA, ("mpmath",), tree, editable=True), SYMPY_IMAGE)


def sympy_row(image: str) -> dict[str, Any]:
    """A SWE-bench row as SWE-bench has SymPy's: no test command, bare test names."""
    tests = sympy_files()[SYMPY_TESTS].decode()
    imports = "from sympy.testing.pytest import raises, warns_deprecated_sympy\n"
    after = tests.replace(
        imports, "from sympy.testing.pytest import XFAIL, raises, slow, warns_deprecated_sympy\n"
    )
    return {
        "repo": "sympy/sympy",
        "instance_id": "sympy__sympy-99002",
        "base_commit": "1" * 40,
        "version": "1.13",
        "image": image,
        "problem_statement": "rotate_left([0, 1, 2], 4) gives [0, 1, 2]; it should wrap around: [1, 2, 0].",
        "patch": unified(
            "sympy/utilities/iterables.py", _sympy_iterables().replace(*SYMPY_BUG), _sympy_iterables()
        ),
        "test_patch": unified(SYMPY_TESTS, tests, after + SYMPY_NEW),
        "FAIL_TO_PASS": json.dumps(["test_rotate_left_past_the_end"]),
        "PASS_TO_PASS": json.dumps(["test_rotate", "test_flatten", "test_group", "test_sift"]),
    }


def sympy_regression() -> str:
    text = _sympy_iterables()
    broken = text.replace("def rotate_right(x, y):\n", "def rotate_right(x, y):\n    return list(x)\n", 1)
    return unified("sympy/utilities/iterables.py", text.replace(*SYMPY_BUG), broken)
