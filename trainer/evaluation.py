"""Held-out evaluation of checkpoints over many envs (the table and plot: ``cascade_report``).

Every answer is greedy (temperature 0) with ``max_tokens`` per model turn; each env plays the first
``limit`` tasks of its task file (deterministic), ``group_size`` answers per task (1, except for envs
that score a group against itself, such as GenRM: give them 2 or more). A masked answer (judge
down, verifier crash) is counted apart and never averaged in as 0; an env whose every answer was
masked has no mean (``None``).
"""

from __future__ import annotations

import gc
import hashlib
import json
import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any

from ..core import CascadeError
from ..defaults import DEFAULT_CONCURRENCY
from ..env import run_sync
from ..env_set import EnvSet
from ..policy import SamplingParams
from ..rollout.metrics import MixMetrics
from ..rollout.runner import GroupResult, RolloutRunner
from .config import ModelConfig
from .engine import HFEngine
from .model import load_model

log = logging.getLogger("cascade_envs.trainer.evaluation")


@dataclass
class EvalSettings:
    """What every checkpoint of a pipeline is evaluated on (the pipeline file's ``eval:`` section)."""

    envs: dict[str, Any] = field(default_factory=dict)
    """``{env_id: env kwargs}`` (e.g. ``{tasks: bundled:instruction_following/easy_heldout.jsonl}``; null: none)."""
    max_tokens: int = 64
    limit: int | None = 16
    """Tasks per env: the first ``limit`` of its task file (null: all)."""
    group_sizes: dict[str, Any] = field(default_factory=dict)
    """Answers per task for envs that need more than 1 (``{cascade/GenRM-v0: 2}``)."""
    concurrency: int = 32
    regression_margin: float = 0.05
    """The regression alarm fires when a score falls more than this below its best earlier checkpoint."""

    def env_kwargs(self) -> dict[str, dict[str, Any]]:
        return {env_id: dict(kwargs or {}) for env_id, kwargs in self.envs.items()}

    def key(self, env_id: str) -> str:
        """A hash of everything that decides ``env_id``'s score (a stored score with another key is stale)."""
        spec = {
            "kwargs": self.envs.get(env_id) or {},
            "max_tokens": self.max_tokens,
            "limit": self.limit,
            "group_size": self.group_size(env_id),
        }
        return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:16]

    def group_size(self, env_id: str) -> int:
        return int(self.group_sizes.get(env_id, 1))


def evaluate_checkpoint(
    path: str, model: ModelConfig, settings: EvalSettings, env_ids: list[str] | None = None
) -> dict[str, dict[str, Any]]:
    """Load the checkpoint at ``path`` (``embedded`` too) and score it on ``env_ids`` (default: all), one env
    after the other (prompt lengths differ by 100x between envs, so batching them together would pad every
    prompt to the longest); ``{env_id: {mean, questions, answers, scored, masked, errors, truncated,
    mask_reasons, time_s, key}}``. An env that cannot be made (e.g. a judged env without a judge) raises."""
    ids = list(settings.envs) if env_ids is None else env_ids
    if not ids:
        return {}
    loaded, tokenizer = load_model(replace(model, path=path))
    engine = HFEngine(loaded.eval(), tokenizer)
    kwargs = settings.env_kwargs()
    sampling = SamplingParams(max_tokens=settings.max_tokens, temperature=0.0)
    results: dict[str, dict[str, Any]] = {}
    try:
        for env_id in ids:
            results[env_id] = result = {
                **score_env(
                    engine,
                    env_id,
                    kwargs.get(env_id, {}),
                    sampling,
                    group_size=settings.group_size(env_id),
                    limit=settings.limit,
                    concurrency=settings.concurrency,
                ),
                "key": settings.key(env_id),
            }
            log.info(
                "%s on %s: mean %s over %d scored answer(s), %d masked, %.1f s",
                path,
                env_id,
                "n/a" if result["mean"] is None else f"{result['mean']:.3f}",
                result["scored"],
                result["masked"],
                result["time_s"],
            )
    finally:
        run_sync(engine.aclose())
        del engine, loaded
        gc.collect()
    return results


def score_env(
    engine: Any,
    env_id: str,
    env_kwargs: dict[str, Any],
    sampling: SamplingParams,
    *,
    group_size: int = 1,
    limit: int | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
) -> dict[str, Any]:
    """The first ``limit`` tasks of ``env_id`` (made with ``env_kwargs``) answered ``group_size`` times by
    ``engine``: ``{mean, questions, answers, scored, masked, errors, truncated, mask_reasons, time_s}``;
    masked answers are counted apart, never as 0 (``mean`` is ``None`` when nothing was scored)."""
    start = time.perf_counter()
    envs = EnvSet({env_id: env_kwargs})
    try:
        tasks = list(envs.env(env_id).tasks or ())[:limit]
        if not tasks:
            raise CascadeError(f"{env_id} has no tasks to evaluate; give it a tasks file")
        runner = RolloutRunner(
            engine, sampling=sampling, group_size=group_size, envs=envs, concurrency=concurrency
        )
        groups = runner.run([(env_id, task) for task in tasks])
    finally:
        envs.close()
    return {**_summary(env_id, groups, len(tasks)), "time_s": round(time.perf_counter() - start, 3)}


def _summary(env_id: str, groups: list[GroupResult], questions: int) -> dict[str, Any]:
    stats = MixMetrics().add_groups(groups).stats.get(env_id)
    reasons: dict[str, int] = {}
    for group in groups:
        for episode in group.episodes:
            if episode.reward.masked:
                reason = (episode.reward.error or episode.error or "masked")[:120]
                reasons[reason] = reasons.get(reason, 0) + 1
    scored = stats.scored if stats else 0
    return {
        "mean": stats.mean_reward if stats and scored else None,
        "questions": questions,
        "answers": stats.episodes if stats else 0,
        "scored": scored,
        "masked": stats.masked if stats else 0,
        "errors": stats.errors if stats else 0,
        "truncated": stats.truncated if stats else 0,
        "mask_reasons": dict(sorted(reasons.items(), key=lambda kv: -kv[1])[:3]),
    }
