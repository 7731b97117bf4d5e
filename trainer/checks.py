"""Loading and checking a run config: every setting in range before any work starts.

``load_config`` reads a YAML file (``None``: the embedded default run, ``trainer/configs/default.yaml``)
with ``key.sub=value`` overrides; ``config_from_dict`` builds one from a mapping; both end in
``validate``, which the trainer runs again on a ``Config`` built or changed in code. A
``ConfigError`` names the key at fault.
"""

from __future__ import annotations

import typing
from importlib import resources
from pathlib import Path
from typing import Any

from .advantages import make_estimator
from .config import Config, ConfigError, TrainConfig
from .strategies import SourceName, make_strategy
from .teachers import check_teachers
from .typed_yaml import build, parse_override, read_yaml, set_path


def default_config_path() -> Path:
    return Path(str(resources.files("cascade_envs.trainer").joinpath("configs/default.yaml")))


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Read a YAML config (``None``: the embedded default) and apply ``key.sub=value`` overrides."""
    data = read_yaml(default_config_path() if path is None else path)
    for text in overrides:
        set_path(data, *parse_override(text))
    return config_from_dict(data)


def config_from_dict(data: dict[str, Any]) -> Config:
    config = build(Config, data)
    validate(config)
    return config


def validate(config: Config) -> None:
    """The types (as the loader checks them), every section's own check, then the rules across sections:
    the algorithm exists, its advantage estimator accepts ``rollout``, and its sources can be served."""
    build(Config, config.to_dict())
    for section in config.sections():
        section.check()
    strategy = make_strategy(config.algorithm, config.optim, config.mopd)
    make_estimator(strategy.advantage, config.rollout)
    unknown = sorted(set(strategy.sources) - set(typing.get_args(SourceName)))
    if unknown:
        raise ConfigError(
            f"algorithm {config.algorithm} reads log-prob source(s) {', '.join(unknown)}; "
            f"the trainer serves {', '.join(typing.get_args(SourceName))}"
        )
    if config.train.world_size > config.rollout.prompts_per_step:
        raise ConfigError(
            f"train.world_size {config.train.world_size} is above rollout.prompts_per_step "
            f"{config.rollout.prompts_per_step}: a rank would have no group to play; use at most "
            f"{config.rollout.prompts_per_step} ranks or more prompts per step"
        )
    if "teacher" in strategy.sources:
        weights, _ = config.mix_weights()
        check_teachers(config.mopd, weights, config.rollout.temperature)


def check_single_process(train: TrainConfig) -> None:
    """``ConfigError`` for the settings only a sharded run can use (``Trainer`` runs one plain process)."""
    if train.world_size > 1:
        raise ConfigError(
            f"train.world_size is {train.world_size}: start its ranks with cascade-envs train --nproc "
            f"{train.world_size} (or torchrun), not a single Trainer"
        )
    for key, on in (
        ("train.cpu_offload", train.cpu_offload),
        ("train.launcher: ray", train.launcher == "ray"),
    ):
        if on:
            raise ConfigError(
                f"{key} applies to sharded runs, and this is a single process: start ranks with "
                "cascade-envs train --nproc N (N >= 1) or torchrun, or drop it"
            )
