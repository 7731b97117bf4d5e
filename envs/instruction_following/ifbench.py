"""The IFBench family: AllenAI IFBench's 58 out-of-distribution instruction checkers.

Importing this module registers every checker in the instruction registry (family ``"ifbench"``).
The semantics follow the IFBench definitions, with the deliberate differences documented on each
checker and listed with their reasons in ``tests/envs/instruction_following/test_ifbench_agreement.py``.
"""

from __future__ import annotations

from . import ifbench_count, ifbench_custom, ifbench_format, ifbench_words
from .registry import INSTRUCTIONS

IFBENCH_IDS: tuple[str, ...] = tuple(
    sorted(i for i, spec in INSTRUCTIONS.items() if spec.family == "ifbench")
)
"""Every IFBench instruction id."""

__all__ = [
    "IFBENCH_IDS",
    "ifbench_count",
    "ifbench_custom",
    "ifbench_format",
    "ifbench_words",
]
