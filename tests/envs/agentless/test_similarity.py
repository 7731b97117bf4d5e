"""The SWE-RL similarity reward against hand-computed values, and reading reference patches."""

from __future__ import annotations

import pytest

from cascade_envs.envs.agentless.edits import make_patch
from cascade_envs.envs.agentless.patches import PatchError, apply_patch, parse_patch
from cascade_envs.envs.agentless.similarity import (
    change_similarity,
    normalized_change,
    similarity_cost,
    similarity_reward,
)


def test_the_normal_form_is_the_hunks_without_the_header_lines():
    assert normalized_change("x = 1\n", "x = 2\n") == "@@ -1 +1 @@\n-x = 1\n+x = 2"
    assert normalized_change("x = 1\n", "x = 1\n") == ""
    # splitlines(): the final newline does not matter, as in SWE-RL
    assert normalized_change("x = 1", "x = 2\n") == normalized_change("x = 1\n", "x = 2")


def test_change_similarity_by_hand():
    # 2 * matches / total length: "abcd" vs "abce" share "abc"
    assert change_similarity("abcd", "abce") == pytest.approx(2 * 3 / 8)
    # one changed character of 25: 2 * 24 / 50
    predicted, reference = normalized_change("x = 1\n", "x = 3\n"), normalized_change("x = 1\n", "x = 2\n")
    assert len(predicted) == len(reference) == 25
    assert change_similarity(predicted, reference) == pytest.approx(24 / 25)
    assert change_similarity(reference, reference) == 1.0
    assert change_similarity("", reference) == change_similarity(reference, "") == 0.0


def test_autojunk_is_off():
    # 300 characters with a popular one: autojunk would junk "a" and find no match
    reference = "a" * 150 + "b" * 150
    assert change_similarity(reference, reference[::-1]) == pytest.approx(2 * 150 / 600)


def test_the_reward_is_the_mean_over_every_file_either_side_touches():
    reward, scores = similarity_reward({"a.py": "abcd", "b.py": "xy"}, {"a.py": "abce", "c.py": "zz"})
    assert scores == {"a.py": pytest.approx(0.75), "b.py": 0.0, "c.py": 0.0}
    assert reward == pytest.approx(0.75 / 3)
    assert similarity_reward({}, {}) == (1.0, {})
    assert similarity_reward({"a.py": "abce"}, {"a.py": "abce"})[0] == 1.0


def test_similarity_cost_counts_the_pairs_compared():
    assert similarity_cost({"a.py": "x" * 10, "b.py": "y" * 7}, {"a.py": "z" * 3}) == 30


# ----- reference patches --------------------------------------------------------------------------

OLD = "import os\n\n\ndef f(x):\n    return x + 1\n\n\ndef g(y):\n    return y * 2\n"


def test_a_patch_written_by_make_patch_reads_back_to_the_same_file():
    new = OLD.replace("x + 1", "x + 2").replace("import os\n", "import os\nimport sys\n")
    (file_patch,) = parse_patch(make_patch({"m.py": OLD}, {"m.py": new}))
    assert (file_patch.old, file_patch.new) == ("m.py", "m.py")
    assert apply_patch({"m.py": OLD}, file_patch) == new


def test_hunks_shifted_by_earlier_hunks_and_offsets_apply():
    patch = (
        "--- a/m.py\n+++ b/m.py\n@@ -1,2 +1,3 @@\n import os\n+import re\n \n"
        "@@ -9,1 +10,1 @@\n-    return y * 2\n+    return y * 3\n"
    )
    (file_patch,) = parse_patch(patch)
    assert apply_patch({"m.py": OLD}, file_patch) == OLD.replace(
        "import os\n", "import os\nimport re\n"
    ).replace("y * 2", "y * 3")
    offset = patch.replace("@@ -9,1 +10,1 @@", "@@ -7,1 +8,1 @@")  # wrong line number, unique lines
    assert apply_patch({"m.py": OLD}, parse_patch(offset)[0]) == apply_patch({"m.py": OLD}, file_patch)


def test_new_files_and_missing_final_newlines():
    (created,) = parse_patch("--- /dev/null\n+++ b/new.py\n@@ -0,0 +1,2 @@\n+a = 1\n+b = 2\n")
    assert created.old is None and apply_patch({}, created) == "a = 1\nb = 2\n"
    (tail,) = parse_patch(
        "--- a/t.py\n+++ b/t.py\n@@ -1 +1 @@\n-x = 1\n\\ No newline at end of file\n+x = 2\n"
    )
    assert apply_patch({"t.py": "x = 1"}, tail) == "x = 2\n"


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ("not a patch", "no file changes"),
        ("--- a/m.py\n+++ b/m.py\n@@ -4,1 +4,1 @@\n-def h(x):\n+def k(x):\n", "not in the file"),
        ("--- a/m.py\n+++ b/m.py\n@@ -1,3 +1,3 @@\n-import os\n+import re\n", "ends before"),
        ("--- a/m.py\n+++ b/m.py\n@@ -1,1 +1,1 @@\n?import os\n", "unexpected line"),
        ("diff --git a/logo.png b/logo.png\nBinary files a/logo.png and b/logo.png differ\n", "binary"),
        ("diff --git a/a.py b/b.py\nrename from a.py\nrename to b.py\n", "renames"),
    ],
)
def test_unusable_patches_raise(patch: str, message: str):
    with pytest.raises(PatchError, match=message):
        for file_patch in parse_patch(patch):
            apply_patch({"m.py": OLD}, file_patch)


def test_ambiguous_hunks_away_from_their_line_raise():
    text = "x\ny\nx\ny\n"
    (file_patch,) = parse_patch("--- a/m.py\n+++ b/m.py\n@@ -9,1 +9,1 @@\n-y\n+z\n")
    with pytest.raises(PatchError, match="more than one place"):
        apply_patch({"m.py": text}, file_patch)
