"""``compute_score`` for verl's reward managers: cascade rewards of single-turn responses.

verl calls a custom reward function in two ways, and this one answers both:

- per sample (``compute_score(data_source, solution_str, ground_truth, extra_info)``: the reward
  loop's ``naive`` manager): one response, scored alone;
- over a batch (``compute_score(data_sources=, solution_strs=, ground_truths=, extra_infos=)``:
  ``BatchRewardManager``): responses to the same task are one group, so a group-scored env (GenRM)
  compares all G of them together.

Set it with ``reward.custom_reward_function.path=pkg://cascade_envs.integrations.verl.scoring`` (a
file path would load it outside its package) and ``.name=compute_score``; env constructor arguments
go in ``reward_kwargs.env_kwargs`` (``{env_id: {...}}``). The row comes from
``extra_info.task_json`` (``export_verl``). Each result is ``{"score", "cascade_masked",
"cascade_reason"}``; a masked reward scores NaN, never 0 (see the package docstring).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ...core import Reward, Row
from ...env import run_sync
from ._envs import _plain, env_set, sample_task

Result = dict[str, Any]


def reward_result(reward: Reward) -> Result:
    """A ``Reward`` as verl's reward dict: ``score`` is NaN when masked; the reason (or error) rides along."""
    return {
        "score": math.nan if reward.masked else float(reward.value),
        "cascade_masked": bool(reward.masked),
        "cascade_reason": str((reward.error if reward.masked else reward.reason) or ""),
    }


async def ascore_batch(
    data_sources: Sequence[Any],
    solution_strs: Sequence[str],
    extra_infos: Sequence[Any],
    env_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[Result]:
    """Score a batch: responses to the same task form one group (``Env.ascore_responses``)."""
    if not len(data_sources) == len(solution_strs) == len(extra_infos):
        raise ValueError("data_sources, solution_strs and extra_infos must have the same length")
    results: list[Result | None] = [None] * len(solution_strs)
    groups: dict[tuple[str, str], tuple[Row, list[int]]] = {}
    for i, (source, info) in enumerate(zip(data_sources, extra_infos, strict=True)):
        try:
            env_id, row = sample_task(source, info)
        except Exception as exc:
            results[i] = reward_result(Reward.failed(f"bad verl sample: {exc}"))
            continue
        groups.setdefault((env_id, str(_plain(info)["task_json"])), (row, []))[1].append(i)
    envs = env_set(env_kwargs)
    for (env_id, _), (row, indices) in groups.items():
        try:
            env = envs.env(env_id)
            rewards = await env.ascore_responses(row, [str(solution_strs[i]) for i in indices])
        except Exception as exc:
            rewards = [Reward.failed(f"{env_id}: {type(exc).__name__}: {exc}")] * len(indices)
        for i, reward in zip(indices, rewards, strict=True):
            results[i] = reward_result(reward)
    return [r if r is not None else reward_result(Reward.failed("not scored")) for r in results]


def compute_score(
    data_source: Any = None,
    solution_str: str | None = None,
    ground_truth: Any = None,
    extra_info: Any = None,
    *,
    data_sources: Sequence[Any] | None = None,
    solution_strs: Sequence[str] | None = None,
    ground_truths: Sequence[Any] | None = None,
    extra_infos: Sequence[Any] | None = None,
    env_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
    **_: Any,
) -> Result | list[Result]:
    """verl's custom reward function; see the module docstring (``ground_truth`` is unused: the row rules)."""
    if solution_strs is not None:
        sources = list(data_sources) if data_sources is not None else []  # numpy arrays, from verl
        infos = list(extra_infos) if extra_infos is not None else []
        return run_sync(ascore_batch(sources, list(solution_strs), infos, env_kwargs))
    if solution_str is None:
        raise ValueError("compute_score needs solution_str (one sample) or solution_strs (a batch)")
    (result,) = run_sync(ascore_batch([data_source], [solution_str], [extra_info], env_kwargs))
    return result
