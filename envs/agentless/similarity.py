"""The SWE-RL similarity reward: how close the model's change is to the reference change, file by file.

Each changed file's change is written in one normal form, the hunks of a 3-line-context unified
diff of its old and new content with the two header lines dropped (SWE-RL's form; lines split
with ``str.splitlines``). The reward is the mean, over every file either change touches, of
``difflib.SequenceMatcher(None, predicted, reference, autojunk=False).ratio()``; a file only one
side changes scores 0, and two empty changes score 1. A format error is scored elsewhere (−1 in
SWE-RL). ``ratio`` costs up to about ``4e-8 s × len(a) × len(b)``, hence ``similarity_cost``.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping


def normalized_change(old: str, new: str) -> str:
    """The change from ``old`` to ``new`` in SWE-RL's normal form ("" when they are equal)."""
    diff = difflib.unified_diff(
        old.splitlines(), new.splitlines(), fromfile="old", tofile="new", lineterm="", n=3
    )
    return "\n".join(list(diff)[2:])


def change_similarity(predicted: str, reference: str) -> float:
    """Similarity of two changes of one file; 0 when either is empty."""
    if not predicted or not reference:
        return 0.0
    return difflib.SequenceMatcher(None, predicted, reference, autojunk=False).ratio()


def similarity_reward(
    predicted: Mapping[str, str], reference: Mapping[str, str]
) -> tuple[float, dict[str, float]]:
    """The mean per-file similarity of two ``{path: change}`` maps, with each file's score."""
    paths = sorted(set(predicted) | set(reference))
    if not paths:
        return 1.0, {}
    scores = {path: change_similarity(predicted.get(path, ""), reference.get(path, "")) for path in paths}
    return sum(scores.values()) / len(scores), scores


def similarity_cost(predicted: Mapping[str, str], reference: Mapping[str, str]) -> int:
    """``Σ len(a) × len(b)`` over the files both change: what bounds the time of ``similarity_reward``."""
    return sum(len(text) * len(reference[path]) for path, text in predicted.items() if path in reference)
