"""The CPU work of scoring one repair reply: edits parsed and applied, the patch, the similarity.

``score_repair`` is a top-level function so that the env can run it in a ``VerifierPool`` worker
(with a hard time limit) when the reply or the files are large, and inline when they are small.
A format error comes back in ``Outcome.error`` rather than as an exception, so it crosses the
process boundary intact.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .edits import (
    MAX_ANSWER_CHARS,
    MAX_EDITS,
    EditFormatError,
    apply_edits,
    make_patch,
    parse_edits,
    solution_text,
)
from .rows import RepairSpec
from .similarity import normalized_change, similarity_reward


@dataclass
class Outcome:
    """What scoring a reply found: a format error, or the patch (and the similarity, when asked)."""

    error: str | None = None
    patch: str = ""
    edits: int = 0
    changed: list[str] = field(default_factory=list)
    """Keys of the files the edits change."""
    similarity: float | None = None
    file_similarity: dict[str, float] = field(default_factory=dict)


def score_repair(
    spec: RepairSpec,
    answer: str,
    with_similarity: bool,
    max_chars: int = MAX_ANSWER_CHARS,
    max_edits: int = MAX_EDITS,
) -> Outcome:
    """Parse ``answer``'s edits, apply them to ``spec.files`` and diff; with the similarity if asked."""
    try:
        text = solution_text(answer, required=spec.solution_tags)
        edits = parse_edits(text, max_chars=max_chars, max_edits=max_edits)
        changed = apply_edits(spec.files, edits)
    except EditFormatError as exc:
        return Outcome(error=str(exc))
    outcome = Outcome(
        patch=make_patch(spec.files, changed, spec.diff_path), edits=len(edits), changed=sorted(changed)
    )
    if with_similarity:
        predicted = {key: normalized_change(spec.files[key], new) for key, new in changed.items()}
        outcome.similarity, outcome.file_similarity = similarity_reward(predicted, spec.reference)
    return outcome
