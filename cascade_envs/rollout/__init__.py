"""Rollouts: policies and the concurrent episode runner."""

from .policy import OpenAIChatPolicy, Policy, PolicyError, SamplingParams, make_policy
from .runner import EpisodeResult, GroupResult, RolloutRunner, run_rollouts

__all__ = [
    "EpisodeResult",
    "GroupResult",
    "OpenAIChatPolicy",
    "Policy",
    "PolicyError",
    "RolloutRunner",
    "SamplingParams",
    "make_policy",
    "run_rollouts",
]
