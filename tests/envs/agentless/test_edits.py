"""SEARCH/REPLACE edits: exact parsing, application in memory, and the unified diff."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from cascade_envs.envs.agentless.edits import (
    EditFormatError,
    apply_edits,
    make_patch,
    parse_edits,
    resolve_path,
    solution_text,
    unified_diff,
)

CALC = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
UTIL = "import os\n\nROOT = os.getcwd()\n"
FILES = {"pkg/calc.py": CALC, "pkg/util.py": UTIL}


def block(path: str, search: str, replace: str, fence: bool = True) -> str:
    body = f"### {path}\n<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE"
    return f"```python\n{body}\n```" if fence else body


def apply(text: str, files: dict[str, str] = FILES) -> dict[str, str]:
    return apply_edits(files, parse_edits(text))


# ----- parsing ----------------------------------------------------------------------------------------


def test_a_block_is_read_exactly_with_its_indentation_and_blank_lines():
    (edit,) = parse_edits(block("pkg/calc.py", "    return a + b", "    total = a + b\n\n    return total"))
    assert edit.path == "pkg/calc.py"
    assert edit.search == ("    return a + b",)
    assert edit.replace == ("    total = a + b", "", "    return total")
    assert edit.line == 3


def test_fences_are_optional_and_one_path_line_serves_several_blocks():
    text = (
        "Some prose first.\n### pkg/calc.py\n<<<<<<< SEARCH\n    return a + b\n=======\n    return b + a\n"
        ">>>>>>> REPLACE\n<<<<<<< SEARCH\n    return a - b\n=======\n    return -(b - a)\n>>>>>>> REPLACE\n"
    )
    edits = parse_edits(text)
    assert [e.path for e in edits] == ["pkg/calc.py", "pkg/calc.py"]
    assert apply_edits(FILES, edits)["pkg/calc.py"] == CALC.replace("a + b", "b + a").replace(
        "a - b", "-(b - a)"
    )


def test_marker_lines_may_have_trailing_spaces_and_a_blank_line_after_the_path():
    text = "### pkg/util.py  \n\n<<<<<<< SEARCH   \nROOT = os.getcwd()\n======= \nROOT = '/'\n>>>>>>> REPLACE\t\n"
    assert apply(text) == {"pkg/util.py": "import os\n\nROOT = '/'\n"}


def test_an_empty_replace_deletes_the_lines_and_a_blank_replace_line_is_kept():
    deleted = apply(block("pkg/util.py", "import os\n", "").replace("=======\n\n", "=======\n"))
    assert deleted == {"pkg/util.py": "ROOT = os.getcwd()\n"}
    (edit,) = parse_edits("### a.py\n<<<<<<< SEARCH\nx\n=======\n>>>>>>> REPLACE")
    assert edit.replace == ()
    (edit,) = parse_edits("### a.py\n<<<<<<< SEARCH\nx\n=======\n\n>>>>>>> REPLACE")
    assert edit.replace == ("",)


def test_a_divider_line_outside_a_block_is_prose():
    text = "Plan\n=======\n" + block("pkg/util.py", "import os", "import os.path")
    assert len(parse_edits(text)) == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("I would change add() to return b + a.", "no SEARCH/REPLACE edit found"),
        ("", "no SEARCH/REPLACE edit found"),
        ("<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE", "no '### path' line"),
        ("### a.py\n<<<<<<< SEARCH\nx\n=======\ny\n", "never reaches"),
        ("### a.py\n<<<<<<< SEARCH\nx\n>>>>>>> REPLACE", "has no '======='"),
        ("### a.py\n<<<<<<< SEARCH\nx\n=======\ny\n=======\nz\n>>>>>>> REPLACE", "a second '======='"),
        ("### a.py\n<<<<<<< SEARCH\nx\n<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE", "starts before"),
        ("### a.py\nx\n>>>>>>> REPLACE", "without a SEARCH block"),
    ],
)
def test_broken_formats_are_format_errors(text: str, message: str):
    with pytest.raises(EditFormatError, match=message):
        parse_edits(text)


def test_duplicate_blocks_apply_once():
    one = block("pkg/util.py", "ROOT = os.getcwd()", "ROOT = os.getcwd()\nHOME = os.path.expanduser('~')")
    assert len(parse_edits(one + "\n" + one)) == 1
    assert apply(one + "\n" + one)["pkg/util.py"].count("HOME") == 1


def test_size_and_count_limits():
    with pytest.raises(EditFormatError, match="over the 100 parsed"):
        parse_edits("x" * 101, max_chars=100)
    many = "\n".join(block("a.py", f"line {i}", f"line {i}!") for i in range(4))
    assert len(parse_edits(many, max_edits=4)) == 4
    with pytest.raises(EditFormatError, match="more than 3"):
        parse_edits(many, max_edits=3)


@pytest.mark.parametrize("char", ["\x00", "\x01", "\x1b", "\x7f"])
def test_binary_content_is_rejected(char: str):
    with pytest.raises(EditFormatError, match="binary content"):
        parse_edits(block("pkg/util.py", "import os", f"import os{char}"))


def test_tabs_form_feeds_and_carriage_returns_are_text():
    assert len(parse_edits(block("pkg/util.py", "import os", "import os\t# tab\x0c\r"))) == 1


def test_parsing_is_linear_on_a_huge_reply():
    text = (
        "### a.py\n"
        + "<<<<<<< SEARCH\n"
        + "x\n" * 200_000
        + "=======\n"
        + "y\n" * 200_000
        + ">>>>>>> REPLACE\n"
    )
    start = time.perf_counter()
    (edit,) = parse_edits(text, max_chars=len(text))
    assert len(edit.search) == 200_000 and time.perf_counter() - start < 2.0


# ----- the <solution> block -------------------------------------------------------------------------


def test_solution_block_is_used_when_present_and_may_be_required():
    assert solution_text("before <solution>EDITS</solution> after", required=False) == "EDITS"
    assert solution_text("EDITS", required=False) == "EDITS"
    with pytest.raises(EditFormatError, match="one <solution>"):
        solution_text("EDITS", required=True)
    with pytest.raises(EditFormatError, match="1 opening and 0 closing"):
        solution_text("<solution>EDITS", required=False)
    with pytest.raises(EditFormatError, match="2 opening"):
        solution_text("<solution>a</solution><solution>b</solution>", required=False)
    with pytest.raises(EditFormatError, match="comes before"):
        solution_text("</solution>x<solution>", required=False)


# ----- paths ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("../pkg/calc.py", "leaves the repository"),
        ("pkg/../../etc/passwd", "leaves the repository"),
        ("pkg\\..\\calc.py", "leaves the repository"),
        ("/etc/passwd", "absolute path"),
        ("/pkg/calc.py", "absolute path"),
        ("C:\\pkg\\calc.py", "absolute path"),
        ("pkg/missing.py", "not one of the given files"),
        ("calc.py", "not one of the given files"),
    ],
)
def test_bad_paths_are_format_errors(path: str, message: str):
    with pytest.raises(EditFormatError, match=message):
        resolve_path(path, FILES)


def test_dot_slash_doubled_slashes_and_backticks_are_normalised():
    assert resolve_path("./pkg/calc.py", FILES) == "pkg/calc.py"
    assert resolve_path("pkg//calc.py", FILES) == "pkg/calc.py"
    assert resolve_path("`pkg/calc.py`", FILES) == "pkg/calc.py"


# ----- applying ------------------------------------------------------------------------------------


def test_search_must_match_whole_lines_exactly():
    with pytest.raises(EditFormatError, match="not in the file"):
        apply(block("pkg/calc.py", "return a + b", "return b + a"))  # indentation missing
    with pytest.raises(EditFormatError, match="not in the file"):
        apply(block("pkg/calc.py", "    return a +", "    return a -"))  # part of a line
    with pytest.raises(EditFormatError, match="not in the file"):
        apply(block("pkg/calc.py", "    return a + b ", "    return b + a"))  # trailing space


def test_a_whitespace_near_miss_gets_a_hint():
    with pytest.raises(EditFormatError, match="match once whitespace is ignored"):
        apply(block("pkg/calc.py", "  return a + b", "  return b + a"))


def test_an_ambiguous_search_is_rejected_and_more_context_resolves_it():
    files = {"m.py": "def f():\n    pass\n\n\ndef g():\n    pass\n"}
    with pytest.raises(EditFormatError, match="more than one place"):
        apply(block("m.py", "    pass", "    return 1"), files)
    fixed = apply(block("m.py", "def g():\n    pass", "def g():\n    return 1"), files)
    assert fixed == {"m.py": "def f():\n    pass\n\n\ndef g():\n    return 1\n"}


def test_overlapping_matches_count_as_ambiguous():
    with pytest.raises(EditFormatError, match="more than one place"):
        apply(block("m.py", "x\nx", "y"), {"m.py": "x\nx\nx\n"})


def test_blocks_apply_in_order_to_the_result_of_the_previous_ones():
    text = (
        block("pkg/calc.py", "    return a + b", "    return add_impl(a, b)")
        + "\n"
        + block("pkg/calc.py", "    return add_impl(a, b)", "    return int(add_impl(a, b))")
    )
    assert "    return int(add_impl(a, b))\n" in apply(text)["pkg/calc.py"]


def test_several_files_and_only_changed_files_come_back():
    text = (
        block("pkg/calc.py", "    return a - b", "    return a - b  # noqa")
        + "\n"
        + block("pkg/util.py", "import os", "import os\nimport sys")
    )
    changed = apply(text, {**FILES, "pkg/other.py": "x = 1\n"})
    assert sorted(changed) == ["pkg/calc.py", "pkg/util.py"]


def test_identical_search_and_replace_and_no_op_edits_are_errors():
    with pytest.raises(EditFormatError, match="identical"):
        apply(block("pkg/util.py", "import os", "import os"))
    undo = (
        block("pkg/util.py", "import os", "import sys")
        + "\n"
        + block("pkg/util.py", "import sys", "import os")
    )
    with pytest.raises(EditFormatError, match="unchanged"):
        apply(undo)


def test_empty_search_is_an_error():
    with pytest.raises(EditFormatError, match="empty SEARCH"):
        apply("### pkg/util.py\n<<<<<<< SEARCH\n=======\nimport sys\n>>>>>>> REPLACE")


def test_the_final_newline_is_kept_either_way_and_the_last_line_can_be_matched():
    no_newline = {"m.py": "a = 1\nb = 2"}
    assert apply(block("m.py", "b = 2", "b = 3"), no_newline) == {"m.py": "a = 1\nb = 3"}
    assert apply(block("m.py", "b = 2", "b = 3"), {"m.py": "a = 1\nb = 2\n"}) == {"m.py": "a = 1\nb = 3\n"}
    everything = "### m.py\n<<<<<<< SEARCH\na = 1\nb = 2\n=======\n>>>>>>> REPLACE"
    assert apply(everything, {"m.py": "a = 1\nb = 2\n"}) == {"m.py": ""}
    assert apply(block("m.py", "a = 1\nb = 2", ""), {"m.py": "a = 1\nb = 2\n"}) == {"m.py": "\n"}


def test_crlf_files_need_crlf_search_lines():
    files = {"w.py": "a = 1\r\nb = 2\r\n"}
    with pytest.raises(EditFormatError, match="not in the file"):
        apply(block("w.py", "a = 1", "a = 3"), files)
    assert apply(block("w.py", "a = 1\r", "a = 3\r"), files) == {"w.py": "a = 3\r\nb = 2\r\n"}


# ----- diffs ---------------------------------------------------------------------------------------


def test_unified_diff_is_git_style_with_exact_hunks():
    new = CALC.replace("a - b", "b - a")
    assert unified_diff("pkg/calc.py", CALC, new) == (
        "diff --git a/pkg/calc.py b/pkg/calc.py\n"
        "--- a/pkg/calc.py\n"
        "+++ b/pkg/calc.py\n"
        "@@ -3,4 +3,4 @@\n"
        " \n"
        " \n"
        " def sub(a, b):\n"
        "-    return a - b\n"
        "+    return b - a\n"
    )
    assert unified_diff("pkg/calc.py", CALC, CALC) == ""


def test_a_missing_final_newline_is_marked_as_git_does():
    diff = unified_diff("m.py", "a = 1\nb = 2", "a = 1\nb = 3")
    assert diff.endswith("-b = 2\n\\ No newline at end of file\n+b = 3\n\\ No newline at end of file\n")


def test_the_patch_applies_with_git(tmp_path: Path):
    files = {**FILES, "pkg/tail.py": "x = 1\ny = 2"}
    text = "\n".join(
        [
            block("pkg/calc.py", "    return a - b", "    return b - a"),
            block("pkg/util.py", "import os", "import os\nimport sys"),
            block("pkg/tail.py", "y = 2", "y = 3\nz = 4"),
        ]
    )
    changed = apply(text, files)
    for path, content in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(content)
    (tmp_path / "fix.patch").write_text(make_patch(files, changed))
    result = subprocess.run(
        ["git", "apply", "fix.patch"], cwd=tmp_path, capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stderr
    for path, content in changed.items():
        assert (tmp_path / path).read_text() == content


def test_make_patch_can_drop_the_repository_folder():
    files = {"repo/pkg/a.py": "x = 1\n"}
    patch = make_patch(files, {"repo/pkg/a.py": "x = 2\n"}, lambda key: key.split("/", 1)[1])
    assert patch.startswith("diff --git a/pkg/a.py b/pkg/a.py\n--- a/pkg/a.py\n+++ b/pkg/a.py\n")
