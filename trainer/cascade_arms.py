"""Control arms for a Cascade RL pipeline: the same model, data and optimizer steps, trained otherwise.

- ``no_mopd``: the pipeline with every MOPD stage (a stage whose loss reads teachers) trained as GRPO
  on the same prompts for the same steps (``algorithm=grpo``); the stages after it renamed
  ``<name>-no-mopd``. The stages before it keep their names, so in the same ``output_dir`` they are
  the cascade's own checkpoints (same config hash: skipped, not retrained).
- ``joint``: one GRPO stage over every env the cascade's chained stages train, each weighted by the
  prompts the cascade gave it (steps x prompts per step x its share of the stage's mix), for the
  sum of their steps. Branches (a teacher trained aside) are not on the student's path and are left out.

Each function returns a pipeline file's mapping, to be written next to the original and run with
``run_pipeline``.
"""

from __future__ import annotations

import json
from typing import Any

from .cascade import Pipeline, stage_data, stage_teachers
from .checks import config_from_dict
from .typed_yaml import read_yaml

NO_MOPD_SUFFIX = "-no-mopd"
JOINT = "joint"


def _is_mopd(pipeline: Pipeline, index: int) -> bool:
    stage = pipeline.stages[index]
    return bool(stage_teachers(stage, stage_data(pipeline, stage, pipeline.start_path)))


def _raw(pipeline: Pipeline) -> dict[str, Any]:
    data = read_yaml(pipeline.source)
    data["stages"] = [dict(s) for s in data["stages"]]
    return data


def no_mopd(pipeline: Pipeline) -> dict[str, Any]:
    """The pipeline with its MOPD stages trained as GRPO (see the module doc)."""
    data = _raw(pipeline)
    mopd = [_is_mopd(pipeline, i) for i in range(len(pipeline.stages))]
    first = next((i for i, is_mopd in enumerate(mopd) if is_mopd), None)
    if first is None:
        raise ValueError(f"{pipeline.source}: no MOPD stage (a stage with teachers) to take out")
    renamed = {s.name: s.name + NO_MOPD_SUFFIX for s in pipeline.stages[first:]}
    for i, stage in enumerate(data["stages"][first:], start=first):
        stage["name"] = renamed[stage["name"]]
        if stage.get("init") in renamed:
            stage["init"] = renamed[stage["init"]]
        if mopd[i]:
            stage["set"] = [*stage.get("set", []), "algorithm=grpo"]
    data["name"] = f"{data.get('name', 'cascade')}{NO_MOPD_SUFFIX}"
    return data


def joint(pipeline: Pipeline, config: str = "multi_domain_rl") -> dict[str, Any]:
    """One GRPO stage (``config``) over the cascade's mix and steps (see the module doc)."""
    prompts: dict[str, float] = {}
    kwargs: dict[str, dict[str, Any]] = {}
    steps = 0
    max_tokens = 0
    for stage in pipeline.stages:
        if not stage.chain:
            continue
        built = config_from_dict(_as_grpo(stage_data(pipeline, stage, pipeline.start_path)))
        weights, env_kwargs = built.mix_weights()
        total = sum(weights.values())
        for env_id, weight in weights.items():
            prompts[env_id] = (
                prompts.get(env_id, 0.0) + built.train.steps * built.rollout.prompts_per_step * weight / total
            )
            kwargs.setdefault(env_id, env_kwargs.get(env_id) or {})
        steps += built.train.steps
        max_tokens = max(max_tokens, built.rollout.max_tokens)
    envs = {
        env_id: {"weight": round(count / sum(prompts.values()), 6), "kwargs": kwargs[env_id]}
        for env_id, count in prompts.items()
    }
    data = _raw(pipeline)
    data["name"] = f"{data.get('name', 'cascade')}-{JOINT}"
    data["stages"] = [
        {
            "name": JOINT,
            "config": config,
            "set": [
                f"mix.envs={json.dumps(envs)}",
                f"train.steps={steps}",
                f"rollout.max_tokens={max_tokens}",
            ],
        }
    ]
    return data


def _as_grpo(data: dict[str, Any]) -> dict[str, Any]:
    """A stage's data as GRPO, which builds before its teachers (``auto``, a stage name) exist."""
    out = json.loads(json.dumps(data))
    if isinstance(out.get("mopd"), dict):
        out["algorithm"] = "grpo"
    return out
