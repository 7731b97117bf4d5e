"""The batch builder: prompts from an ``EnvMix``, G rollouts each, rewards, advantages, filtering.

One call of ``BatchBuilder.build`` produces the training batch of one step:

1. draw prompts from the mix and play each ``group_size`` times with the rollout engine (the
   runner scores each group through the env's scoring path, overlong rule included);
2. drop masked samples (a failed episode, a trajectory without token ids, and a verifier error
   when the advantage estimator reads rewards: MOPD trains on masked-reward samples);
3. ask the advantage estimator (``advantages.py``) for each group's verdict: it may leave a group
   out (GRPO's dynamic filtering skips groups whose rewards are all equal, ``rollout.mask_groups_below``
   groups where no rollout scores above a threshold), and then fresh prompts are drawn, until
   the batch holds ``prompts_per_step`` groups or ``max_rounds`` rounds are spent;
   each round oversamples: it plays as many prompts as fill the shortfall at the keep rate seen so
   far (``KeepRate``, at most ``max_oversampling`` times the shortfall), so a step rarely needs a
   second round and no round is a tiny generation batch. Kept groups beyond ``prompts_per_step``
   are not trained on (``groups_surplus``). Every round of a step uses the same weights, so the
   batch stays strictly on-policy;
4. the training sequences of each kept episode's ``Trajectory`` (one per episode when the chat
   template allows it, with env tokens masked), each with its episode's advantage.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..mix import EnvMix
from ..policy import Policy, SamplingParams
from ..rollout.runner import EpisodeResult, GroupResult, RolloutRunner
from .advantages import AdvantageEstimator, Skip
from .config import RolloutConfig
from .sequence import TrainSequence

log = logging.getLogger("cascade_envs.trainer")


@dataclass
class RolloutBatch:
    """What one step trains on, plus everything played to get it (for metrics)."""

    sequences: list[TrainSequence] = field(default_factory=list)
    groups: list[GroupResult] = field(default_factory=list)
    """The kept groups."""
    played: list[GroupResult] = field(default_factory=list)
    """Every group played this step, filtered ones included."""
    asked: int = 0
    """``prompts_per_step``: the groups the step asked for."""
    rounds: int = 0
    groups_filtered: int = 0
    groups_below_threshold: int = 0
    """Groups left out because no rollout scored above ``rollout.mask_groups_below``."""
    groups_masked: int = 0
    groups_surplus: int = 0
    """Kept groups played by oversampling beyond ``asked``: not trained on."""
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

    @property
    def fill_ratio(self) -> float:
        """Groups trained on / groups asked for (1.0: a full batch)."""
        return len(self.groups) / max(self.asked, 1)


class KeepRate:
    """Running estimate of the share of played groups the strategy keeps, to size each round.

    An exponential moving average over rounds (``smoothing``: the weight of the newest round),
    seeded at ``initial`` (below 1, so the first step already oversamples a little) and never
    below ``1 / max_oversampling``, which bounds how many prompts a round plays.
    """

    def __init__(self, max_oversampling: float, initial: float = 0.75, smoothing: float = 0.5):
        if max_oversampling < 1:
            raise ValueError(f"max_oversampling must be at least 1, got {max_oversampling}")
        self.max_oversampling = max_oversampling
        self.smoothing = smoothing
        self.value = self.bounded(initial)

    def bounded(self, rate: float) -> float:
        return min(1.0, max(rate, 1.0 / self.max_oversampling))

    def update(self, kept: int, played: int) -> None:
        if played:
            self.value = self.bounded(self.smoothing * kept / played + (1 - self.smoothing) * self.value)

    def prompts_for(self, needed: int) -> int:
        """Prompts to play so that about ``needed`` groups are kept: at least ``needed``."""
        return max(needed, min(round(needed / self.value), math.floor(needed * self.max_oversampling)))


def episode_problem(episode: EpisodeResult, uses_rewards: bool = True) -> str | None:
    """Why an episode cannot be trained on, or ``None`` when it can (a masked reward only matters
    when ``uses_rewards``)."""
    if episode.error:
        return episode.error
    if uses_rewards and episode.reward.masked:
        return episode.reward.error or "masked reward"
    if not episode.trajectory.turns:
        return "no model turn"
    if not episode.trajectory.has_tokens:
        return "the rollout engine returned no token ids"
    return None


class BatchBuilder:
    """Builds the rollout batch of each step from the ``rollout`` section; see the module docstring.

    It plays on the mix's env instances (``mix.envs``, closed by the trainer).
    """

    def __init__(
        self,
        policy: Policy,
        mix: EnvMix,
        estimator: AdvantageEstimator,
        rollout: RolloutConfig,
        *,
        results_path: str | Path | None = None,
        play: Callable[[RolloutRunner, list[tuple[str, Any]]], list[GroupResult]] | None = None,
    ):
        """``play(runner, items)`` plays a round's prompts (default: ``runner.run(items)``); a sharded run
        plays its rank's slice and gathers every rank's groups, in prompt order."""
        self.mix = mix
        self.play = play or (lambda runner, items: runner.run(items))
        self.estimator = estimator
        self.prompts_per_step = rollout.prompts_per_step
        self.max_rounds = rollout.max_rounds
        self.keep_rate = KeepRate(rollout.max_oversampling)
        self._warned_short = False
        self.runner = RolloutRunner(
            policy,
            sampling=SamplingParams(
                max_tokens=rollout.max_tokens, temperature=rollout.temperature, top_p=rollout.top_p
            ),
            group_size=rollout.group_size,
            concurrency=rollout.concurrency,
            envs=mix.envs,
            results_path=results_path,
        )

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs to size its rounds as the first session would have."""
        return {"keep_rate": self.keep_rate.value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.keep_rate.value = self.keep_rate.bounded(float(state["keep_rate"]))

    def build(self) -> RolloutBatch:
        batch = RolloutBatch(asked=self.prompts_per_step)
        start, busy = time.perf_counter(), self.runner.generation_s
        while len(batch.groups) < self.prompts_per_step and batch.rounds < self.max_rounds:
            batch.rounds += 1
            needed = self.prompts_per_step - len(batch.groups)
            played = self.play(self.runner, self.mix.sample(self.keep_rate.prompts_for(needed)))
            batch.played.extend(played)
            kept = sum(self._add_group(batch, group) for group in played)
            self.keep_rate.update(kept, len(played))
        batch.rollout_s = time.perf_counter() - start
        batch.generation_s = self.runner.generation_s - busy
        batch.generated_tokens = sum(e.trajectory.completion_tokens for g in batch.played for e in g.episodes)
        if not batch.empty and batch.fill_ratio < 1 and not self._warned_short:
            self._warned_short = True
            log.warning(
                "a step trained on %d of %d groups (fill ratio %.2f) after %d rollout round(s): too many groups "
                "had no learning signal. Raise rollout.max_oversampling (now %g) or rollout.max_rounds (now %d) "
                "for full batches; batch/fill_ratio in metrics.jsonl tracks it (this warning is shown once)",
                len(batch.groups),
                batch.asked,
                batch.fill_ratio,
                batch.rounds,
                self.keep_rate.max_oversampling,
                self.max_rounds,
            )
        return batch

    def _add_group(self, batch: RolloutBatch, group: GroupResult) -> bool:
        """Count the group in ``batch`` and add its sequences while the batch has room; whether it is kept."""
        problems = [episode_problem(e, self.estimator.uses_rewards) for e in group.episodes]
        valid = [p is None for p in problems]
        batch.samples_masked += valid.count(False)
        batch.mask_reasons.update(f"{group.env_id}: {p[:120]}" for p in problems if p is not None)
        verdict = self.estimator([e.reward.value for e in group.episodes], valid)
        if isinstance(verdict, Skip):
            if verdict.reason == "all_equal":
                batch.groups_filtered += 1
            elif verdict.reason == "below_threshold":
                batch.groups_below_threshold += 1
            else:
                batch.groups_masked += 1
            return False
        if len(batch.groups) >= self.prompts_per_step:
            batch.groups_surplus += 1
            return True
        batch.groups.append(group)
        for episode, ok, advantage in zip(group.episodes, valid, verdict.values, strict=True):
            if not ok:
                continue
            for seq in episode.trajectory.sequences():
                batch.sequences.append(
                    TrainSequence(
                        seq.prompt_ids,
                        seq.response_ids,
                        float(advantage),
                        group.env_id,
                        seq.logprobs,
                        seq.loss_mask,
                        len(batch.groups) - 1,
                    )
                )
        return True
