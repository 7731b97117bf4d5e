"""Ray scale-out: env instances in Ray actors spread over a cluster, used through proxies.

``attach_ray(mix, "auto")`` swaps every env of an ``EnvMix`` for a ``RayEnv`` that scores (and,
for stateful envs, plays) through a pool of ``EnvActor``s built from the same env id and kwargs;
the runner, trainer and eval use the mix as before. Without a Ray address nothing here is
imported and everything runs in one process. See ``pool.py`` for dispatch and the failure rule,
``proxy.py`` for what runs where, ``placement.py`` for placement groups.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .pool import ActorPool, EpisodeLost, PoolCallFailed
from .proxy import RayEnv, is_stateful

if TYPE_CHECKING:
    from ..mix import EnvMix

__all__ = ["ActorPool", "EpisodeLost", "PoolCallFailed", "RayEnv", "attach_ray", "is_stateful"]


def attach_ray(
    mix: EnvMix, address: str | None, *, env_actors: int = 0, actor_options: dict[str, Any] | None = None
) -> EnvMix:
    """Make ``mix`` play and score through Ray actors (``env_actors`` per env; 0: one per cluster CPU).

    ``address``: ``None`` leaves the mix as it is (Ray is not imported); ``"auto"`` joins a running
    cluster; ``"local"`` starts a local Ray with this machine's CPUs. Call it before handing
    ``mix.envs`` to a runner. Closing ``mix.envs`` kills the actors (and stops a Ray started here).
    """
    if address is None:
        return mix
    attached: dict[str, RayEnv] = {}
    try:
        for env_id, env in mix.envs.items():
            if isinstance(env, RayEnv):
                continue
            kwargs = {**mix.envs.env_kwargs.get(env_id, {}), "tasks": []}  # rows come with each call
            pool = ActorPool(
                env_id, kwargs, num_actors=env_actors, actor_options=actor_options, address=address
            )
            try:
                attached[env_id] = RayEnv(env, pool)
            except BaseException:
                _close_pool(pool)
                raise
    except BaseException:
        for proxy in attached.values():
            _close_pool(proxy.pool)
        raise
    for env_id, proxy in attached.items():
        mix.envs[env_id] = proxy
    return mix


def _close_pool(pool: ActorPool) -> None:
    from ..env import run_sync

    run_sync(pool.aclose())
