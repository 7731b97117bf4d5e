"""Test-time scaling over any env: best-of-N with a selector, generate-verify-refine, and more.

Strategies register by name (``register_strategy``) and are looked up with ``get_strategy``; each
module below registers its own on import. ``cascade-envs solve`` runs them over an env's tasks.
"""

from __future__ import annotations

from . import best_of_n, refine, submit  # noqa: F401  # each registers its strategy
from .base import (
    ROLES,
    STRATEGIES,
    Attempt,
    Budget,
    BudgetSpent,
    Role,
    SolveContext,
    Strategy,
    TaskOutcome,
    get_strategy,
    register_strategy,
)

__all__ = [
    "ROLES",
    "STRATEGIES",
    "Attempt",
    "Budget",
    "BudgetSpent",
    "Role",
    "SolveContext",
    "Strategy",
    "TaskOutcome",
    "get_strategy",
    "register_strategy",
]
