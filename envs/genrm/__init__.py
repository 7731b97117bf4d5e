"""GenRM pairwise preference (``cascade/GenRM-v0``, the RLHF stage): a generative reward model
compares the answers of a group pair by pair; ``aggregate`` turns its verdicts into rewards.

The env module imports the judge client; the prompt and aggregation modules are pure and cheap.
"""

from __future__ import annotations

from .aggregate import (
    STRATEGIES,
    Coefficients,
    Outcome,
    RolloutScore,
    Verdict,
    aggregate_group,
    comparison_plan,
    conciseness_bonuses,
    length_weights,
)
from .prompt import PROMPT_FORMATS, comparison_messages, parse_verdict, render_conversation

__all__ = [
    "PROMPT_FORMATS",
    "STRATEGIES",
    "Coefficients",
    "Outcome",
    "RolloutScore",
    "Verdict",
    "aggregate_group",
    "comparison_messages",
    "comparison_plan",
    "conciseness_bonuses",
    "length_weights",
    "parse_verdict",
    "render_conversation",
]
