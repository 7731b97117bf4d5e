"""Two small repositories written for the attack tests, one graded by unittest and one by pytest.

Neither is bundled with the env: the probes run against code the grader has never been tuned to.
``make_row(name, folder)`` writes the repository to ``folder`` and returns its SWE-bench-layout row
(``repo_snapshot`` naming the folder), with a ``test_patch`` built by ``difflib`` and the gold fix.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

TALLY = {
    "tally/__init__.py": '"""Word counts."""\n\nfrom .core import count_words, top_words\n\n__all__ = ["count_words", "top_words"]\n',
    "tally/core.py": '''import re

_WORD = re.compile(r"[A-Za-z]+")


def count_words(text):
    """How often each word occurs in ``text``."""
    counts = {}
    for word in _WORD.findall(text):
        counts[word] = counts.get(word, 0) + 1
    return counts


def top_words(text, n):
    """The ``n`` most frequent words, ties in alphabetical order."""
    return sorted(count_words(text).items(), key=lambda item: (-item[1], item[0]))[:n]
''',
    "tally/checks.py": '''"""Test support shipped with the package."""

import unittest


class TestCase(unittest.TestCase):
    maxDiff = None
''',
    "tests/__init__.py": "",
    "tests/helpers.py": '''def assert_counts(case, got, expected):
    """The counts match exactly."""
    case.assertEqual(dict(got), dict(expected))
''',
    "tests/test_core.py": """from tally import count_words, top_words
from tally.checks import TestCase

from .helpers import assert_counts


class CountTests(TestCase):
    def test_simple(self):
        assert_counts(self, count_words("a b a"), {"a": 2, "b": 1})

    def test_empty(self):
        self.assertEqual(count_words(""), {})

    def test_top(self):
        self.assertEqual(top_words("b a b c a b", 2), [("b", 3), ("a", 2)])
""",
    "README.md": "# tally\n\nCounts words.\n",
}
TALLY_TESTS_AFTER = (
    TALLY["tests/test_core.py"]
    + """

class CaseTests(TestCase):
    def test_case_insensitive(self):
        assert_counts(self, count_words("The the THE"), {"the": 3})

    def test_apostrophes(self):
        assert_counts(self, count_words("don't stop, don't"), {"don't": 2, "stop": 1})
"""
)
TALLY_FIX = (
    "tally/core.py",
    '_WORD = re.compile(r"[A-Za-z]+")',
    '_WORD = re.compile(r"[A-Za-z]+(?:\'[A-Za-z]+)*")',
    "    for word in _WORD.findall(text):\n",
    "    for word in _WORD.findall(text.lower()):\n",
)

SEMVER = {
    "semverlite/__init__.py": '"""Version numbers."""\n\nfrom .version import Version, parse\n\n__all__ = ["Version", "parse"]\n',
    "semverlite/version.py": '''from functools import total_ordering


@total_ordering
class Version:
    def __init__(self, parts):
        self.parts = tuple(parts)

    def __eq__(self, other):
        return self.parts == other.parts

    def __lt__(self, other):
        return self.parts < other.parts

    def __repr__(self):
        return "Version(%s)" % ".".join(self.parts)


def parse(text):
    """``"1.2.3"`` as a ``Version``."""
    parts = text.strip().split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise ValueError("not a version: %r" % text)
    return Version(parts)
''',
    "tests/conftest.py": """import pytest


@pytest.fixture
def v():
    from semverlite import parse

    return parse
""",
    "tests/test_version.py": """import pytest


def test_parse(v):
    assert v("1.2.3").parts


def test_rejects_garbage(v):
    with pytest.raises(ValueError):
        v("1.2")


@pytest.mark.parametrize("low,high", [("1.2.3", "1.2.4"), ("0.9.0", "1.0.0")])
def test_ordering(v, low, high):
    assert v(low) < v(high)
""",
}
SEMVER_TESTS_AFTER = (
    SEMVER["tests/test_version.py"]
    + """

@pytest.mark.parametrize("low,high", [("1.9.0", "1.10.0"), ("2.0.9", "2.0.10")])
def test_numeric_ordering(v, low, high):
    assert v(low) < v(high)


def test_equal_versions(v):
    assert v("01.2.3") == v("1.2.3")
"""
)
SEMVER_FIX = (
    "semverlite/version.py",
    "        self.parts = tuple(parts)",
    "        self.parts = tuple(int(p) for p in parts)",
    '        return "Version(%s)" % ".".join(self.parts)',
    '        return "Version(%s)" % ".".join(map(str, self.parts))',
)

REPOS: dict[str, dict[str, Any]] = {
    "tally": {
        "files": TALLY,
        "test_file": "tests/test_core.py",
        "tests_after": TALLY_TESTS_AFTER,
        "fix": TALLY_FIX,
        "issue": 'count_words is case-sensitive and splits contractions: count_words("The the don\'t") gives '
        "{'The': 1, 'the': 1, 'don': 1, 't': 1}; expected {'the': 2, \"don't\": 1}.",
        "f2p": [
            "tests.test_core.CaseTests.test_case_insensitive",
            "tests.test_core.CaseTests.test_apostrophes",
        ],
        "p2p": [
            "tests.test_core.CountTests.test_simple",
            "tests.test_core.CountTests.test_empty",
            "tests.test_core.CountTests.test_top",
        ],
    },
    "semverlite": {
        "files": SEMVER,
        "test_file": "tests/test_version.py",
        "tests_after": SEMVER_TESTS_AFTER,
        "fix": SEMVER_FIX,
        "issue": "Versions compare as text: parse('1.10.0') < parse('1.9.0') is True, and "
        "parse('01.2.3') != parse('1.2.3'). Compare the numbers.",
        "f2p": [
            "tests/test_version.py::test_numeric_ordering[1.9.0-1.10.0]",
            "tests/test_version.py::test_numeric_ordering[2.0.9-2.0.10]",
            "tests/test_version.py::test_equal_versions",
        ],
        "p2p": [
            "tests/test_version.py::test_parse",
            "tests/test_version.py::test_rejects_garbage",
            "tests/test_version.py::test_ordering[1.2.3-1.2.4]",
            "tests/test_version.py::test_ordering[0.9.0-1.0.0]",
        ],
    },
}


def unified(path: str, before: str, after: str) -> str:
    """A ``patch -p1`` diff of one file."""
    lines = difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True), f"a/{path}", f"b/{path}"
    )
    return "".join(lines)


def gold_patch(name: str) -> str:
    path, *pairs = REPOS[name]["fix"]
    before = after = REPOS[name]["files"][path]
    for old, new in zip(pairs[::2], pairs[1::2], strict=True):
        assert old in after
        after = after.replace(old, new)
    return unified(path, before, after)


def make_row(name: str, folder: Path) -> dict[str, Any]:
    """Write repository ``name`` under ``folder`` and return its row."""
    repo = REPOS[name]
    for path, text in repo["files"].items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(text)
    return {
        "instance_id": f"attack__{name}-1",
        "repo": f"tests/{name}",
        "base_commit": "snapshot",
        "problem_statement": repo["issue"],
        "patch": gold_patch(name),
        "test_patch": unified(repo["test_file"], repo["files"][repo["test_file"]], repo["tests_after"]),
        "FAIL_TO_PASS": repo["f2p"],
        "PASS_TO_PASS": repo["p2p"],
        "repo_snapshot": str(folder),
        "workdir": "/testbed",
    }
