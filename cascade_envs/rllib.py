"""A thin RLlib adapter: register cascade env ids with ``ray.tune.register_env``.

RLlib itself cannot train LLMs (its learners expect fixed-size tensor observations and actions,
not chat transcripts and generated text); this module only lets RLlib users build our envs by
name, e.g. ``AlgorithmConfig().environment("cascade/MCQA-v0", env_config={...})`` or through
RLlib's registry. Each name builds the Gymnasium env (``gymnasium.make`` via
``cascade_envs.gym``) with ``env_config`` as keyword arguments. To train LLMs on these envs use
``cascade_envs.trainer`` (with ``ray:`` in its config to spread the envs over a cluster).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any

from ._extras import require
from .registry import env_specs, spec


def register_rllib_envs(ids: Iterable[str] | None = None) -> list[str]:
    """Register ``ids`` (default: every registered cascade env) with RLlib; returns the ids registered.

    An unknown id raises ``UnknownIdError`` (a ``CascadeError``) before anything is registered.
    """
    require("ray.tune", "the RLlib adapter")
    from ray.tune.registry import register_env

    names = sorted(env_specs()) if ids is None else list(ids)
    for env_id in names:
        spec(env_id)  # raises naming the id and the known ones
    for env_id in names:
        register_env(env_id, functools.partial(make_gym_env, env_id))
    return names


def make_gym_env(env_id: str, env_config: Mapping[str, Any] | None = None) -> Any:
    """RLlib's env creator: the Gymnasium env of ``env_id`` with ``env_config`` as keyword arguments."""
    import gymnasium

    return gymnasium.make(f"cascade_envs.gym:{env_id}", **dict(env_config or {}))
