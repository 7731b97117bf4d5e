"""The batch builder: prompts from an ``EnvMix``, G rollouts each, rewards, advantages, filtering.

One call of ``BatchBuilder.build`` produces the training batch of one GRPO step:

1. draw prompts from the mix and play each ``group_size`` times with the rollout engine (the
   runner applies each env's reward, group scoring and the overlong rule included);
2. drop masked samples (a verifier error, a failed episode, a completion without token ids);
3. dynamic filtering: drop groups whose remaining rewards are all equal (no learning signal) and
   draw fresh prompts, until the batch holds ``prompts_per_step`` groups or ``max_rounds`` rounds
   are spent;
4. group-normalised advantages, and one training sequence per model turn
   (``prompt_token_ids + token_ids`` of the turn's completion, advantage of its episode).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..core import Completion, Message
from ..mix import EnvMix
from ..rollout.policy import Policy, SamplingParams
from ..rollout.runner import EpisodeResult, GroupResult, RolloutRunner


@dataclass
class TrainSequence:
    """One trained sequence: a prompt, the sampled response tokens and their advantage."""

    prompt_ids: list[int]
    response_ids: list[int]
    advantage: float
    env_id: str
    logprobs: list[float] | None = None
    """Log-probabilities the inference engine gave the sampled tokens (for MOPD / checks)."""


@dataclass
class RolloutBatch:
    """What one step trains on, plus everything played to get it (for metrics)."""

    sequences: list[TrainSequence] = field(default_factory=list)
    groups: list[GroupResult] = field(default_factory=list)
    """The kept groups."""
    played: list[GroupResult] = field(default_factory=list)
    """Every group played this step, filtered ones included."""
    rounds: int = 0
    groups_filtered: int = 0
    groups_masked: int = 0
    samples_masked: int = 0
    generation_s: float = 0.0
    rollout_s: float = 0.0
    generated_tokens: int = 0
    mask_reasons: Counter[str] = field(default_factory=Counter)
    """Why samples were left out of the loss (first 120 characters of each reason)."""

    @property
    def empty(self) -> bool:
        return not self.sequences

    @property
    def filtered_fraction(self) -> float:
        return self.groups_filtered / max(len(self.played), 1)


class _BusyTimer:
    """Wraps a policy and measures the wall time during which at least one generation runs."""

    def __init__(self, policy: Policy):
        self.policy = policy
        self.busy_s = 0.0
        self._active = 0
        self._since = 0.0

    async def agenerate(self, messages: list[Message], *, sampling: SamplingParams, thinking: bool = True) -> Completion:
        if self._active == 0:
            self._since = time.perf_counter()
        self._active += 1
        try:
            return await self.policy.agenerate(messages, sampling=sampling, thinking=thinking)
        finally:
            self._active -= 1
            if self._active == 0:
                self.busy_s += time.perf_counter() - self._since

    async def aclose(self) -> None:
        await self.policy.aclose()


def episode_problem(episode: EpisodeResult) -> str | None:
    """Why an episode cannot be trained on, or ``None`` when it can."""
    if episode.error:
        return episode.error
    if episode.reward.masked:
        return episode.reward.error or "masked reward"
    if not episode.completions:
        return "no model turn"
    for completion in episode.completions:
        if not completion.prompt_token_ids or completion.token_ids is None:
            return "the rollout engine returned no token ids"
    return None


class BatchBuilder:
    """Builds the rollout batch of each step; see the module docstring."""

    def __init__(
        self,
        policy: Policy,
        mix: EnvMix,
        *,
        sampling: SamplingParams,
        group_size: int,
        prompts_per_step: int,
        dynamic_filtering: bool = True,
        max_rounds: int = 4,
        concurrency: int = 256,
        results_path: Any = None,
    ):
        self.mix = mix
        self.prompts_per_step = prompts_per_step
        self.dynamic_filtering = dynamic_filtering
        self.max_rounds = max_rounds
        self.timer = _BusyTimer(policy)
        self.runner = RolloutRunner(
            self.timer,
            sampling=sampling,
            group_size=group_size,
            concurrency=concurrency,
            env_kwargs=mix.env_kwargs,
            results_path=results_path,
        )

    def build(self) -> RolloutBatch:
        batch = RolloutBatch()
        start, busy = time.perf_counter(), self.timer.busy_s
        while len(batch.groups) < self.prompts_per_step and batch.rounds < self.max_rounds:
            batch.rounds += 1
            played = self.runner.run(self.mix.sample(self.prompts_per_step - len(batch.groups)))
            for group in played:
                batch.played.append(group)
                self._add_group(batch, group)
        batch.rollout_s = time.perf_counter() - start
        batch.generation_s = self.timer.busy_s - busy
        batch.generated_tokens = sum(
            len(c.token_ids or ()) for g in batch.played for e in g.episodes for c in e.completions
        )
        return batch

    def _add_group(self, batch: RolloutBatch, group: GroupResult) -> None:
        import torch

        from .losses import group_advantages

        problems = [episode_problem(e) for e in group.episodes]
        valid = [p is None for p in problems]
        batch.samples_masked += valid.count(False)
        batch.mask_reasons.update(f"{group.env_id}: {p[:120]}" for p in problems if p is not None)
        rewards = [e.reward.value for e in group.episodes]
        kept = [r for r, ok in zip(rewards, valid, strict=True) if ok]
        if len(kept) < 2 and self.dynamic_filtering:
            batch.groups_masked += 1
            return
        if self.dynamic_filtering and max(kept) == min(kept):
            batch.groups_filtered += 1
            return
        advantages = group_advantages(torch.tensor([rewards], dtype=torch.float64), torch.tensor([valid]))[0]
        batch.groups.append(group)
        for episode, ok, advantage in zip(group.episodes, valid, advantages.tolist(), strict=True):
            if not ok:
                continue
            for completion in episode.completions:
                batch.sequences.append(
                    TrainSequence(
                        prompt_ids=list(completion.prompt_token_ids or ()),
                        response_ids=list(completion.token_ids or ()),
                        advantage=float(advantage),
                        env_id=group.env_id,
                        logprobs=list(completion.logprobs) if completion.logprobs is not None else None,
                    )
                )
