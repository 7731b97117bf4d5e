"""Rollouts: the concurrent episode runner (and, re-exported, the policy protocol it drives)."""

from ..policies import make_policy
from ..policy import ContextOverflowError, Policy, PolicyError, SamplingParams
from .runner import EpisodeResult, GroupResult, RolloutRunner, run_rollouts

__all__ = [
    "ContextOverflowError",
    "EpisodeResult",
    "GroupResult",
    "Policy",
    "PolicyError",
    "RolloutRunner",
    "SamplingParams",
    "make_policy",
    "run_rollouts",
]
