"""verl's ``verl.plugins`` entry point: importing this registers the ``"cascade"`` agent loop and the
``cascade_grpo`` advantage estimator in every verl process (verl loads the entry point on ``import verl``)."""

from __future__ import annotations

from . import advantage, agent_loop

__all__ = ["advantage", "agent_loop"]
