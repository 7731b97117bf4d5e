"""What the trainer trains on (``TrainSequence``) and what a log-prob source says about it (``TokenScores``).

Both are built once and never changed: the batch builder makes the sequences, each log-prob source
returns its scores beside them, and the loop pads both into tensors.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TrainSequence:
    """One trained sequence: a prompt, the response tokens with their loss mask, and the advantage."""

    prompt_ids: list[int]
    response_ids: list[int]
    advantage: float
    env_id: str
    logprobs: list[float] | None = None
    """Log-probabilities the inference engine gave the response tokens (0 where ``loss_mask`` is 0)."""
    loss_mask: list[int] | None = None
    """1 on tokens the policy sampled, 0 on env/template tokens; ``None`` means all 1."""
    group: int = -1
    """The index of its group in the step's batch (``-1``: none); a sharded run never splits a group."""

    def __post_init__(self) -> None:
        if self.loss_mask is None:
            object.__setattr__(self, "loss_mask", [1] * len(self.response_ids))

    @property
    def trained_tokens(self) -> int:
        return sum(self.loss_mask or ())


@dataclass(frozen=True, slots=True)
class TokenScores:
    """A log-prob source's view of one sequence's response tokens, one entry per token."""

    logprobs: list[float]
    """The log-probability of each response token (NaN where the source has none)."""
    top1: list[bool] | None = None
    """Whether each response token is the source's most likely one (``None``: not computed)."""
