"""The trainer: any loss strategy over any env mix (extra ``train``; ``vllm`` for the vLLM engine).

Modules: ``config`` (the config types, one per section), ``typed_yaml`` (the YAML loader), ``checks``
(``load_config`` and validation), ``strategies`` (loss strategies by name: ``grpo``, ``mopd``, or a
plugin's), ``advantages`` (advantage estimators by name), ``losses`` (the loss functions),
``sources`` (log-prob sources: reference, inference, teacher), ``teachers`` (MOPD teacher rules and
loading), ``engine`` (rollout engines), ``batch`` (rollouts -> training batch with dynamic filtering),
``sequence``, ``model`` (loading, micro-batched log-probs), ``loop`` (the ``Trainer``), ``run``,
``checkpoint``, ``metrics``, ``cascade``/``cascade_run`` (pipelines), ``evaluation``, ``cli``
(``cascade-envs train``), ``parallel`` (sharded data-parallel training: FSDP2, DCP checkpoints,
torchrun). Importing this package imports nothing heavy.
"""

from __future__ import annotations

from typing import Any

_LAZY = {
    "Trainer": ("cascade_envs.trainer.loop", "Trainer"),
    "TrainingError": ("cascade_envs.trainer.loop", "TrainingError"),
    "Config": ("cascade_envs.trainer.config", "Config"),
    "load_config": ("cascade_envs.trainer.checks", "load_config"),
    "RolloutEngine": ("cascade_envs.trainer.engine", "RolloutEngine"),
    "HFEngine": ("cascade_envs.trainer.engine", "HFEngine"),
    "LossStrategy": ("cascade_envs.trainer.strategies", "LossStrategy"),
    "register_loss_strategy": ("cascade_envs.trainer.strategies", "register_loss_strategy"),
    "LogprobSource": ("cascade_envs.trainer.sources", "LogprobSource"),
    "group_advantages": ("cascade_envs.trainer.losses", "group_advantages"),
    "grpo_loss": ("cascade_envs.trainer.losses", "grpo_loss"),
    "mopd_loss": ("cascade_envs.trainer.losses", "mopd_loss"),
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
