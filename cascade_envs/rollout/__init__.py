"""Rollouts: the concurrent episode runner (and, re-exported, the policy protocol it drives)."""

from ..policy import ContextOverflowError, Policy, PolicyError, SamplingParams
from ..policies import make_policy
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
