"""Ray transport for verification: ``CodeEnv(ray_actors=N)`` judges on the generic env actor pool.

Each actor (``cascade_envs.distributed.ActorPool``) holds a code env (the class that made this
client, so this module imports no env) with its judge settings and its own sandbox, reserves one CPU and judges one response at a time, so Ray's
scheduler spreads them over the cluster. Ray must be installed (``pip install 'cascade-envs[ray]'``);
the pool joins the running Ray instance, or starts a local one. An actor that dies is replaced and
the response judged again on a live one; one that keeps dying gives a masked reward naming why.
"""

from __future__ import annotations

from typing import Any

from ...core import Reward
from .task import CodeProblem


class RayVerifier:
    """The code env's verifier client over an ``ActorPool`` of code env actors."""

    def __init__(
        self,
        env_class: type,
        num_actors: int,
        settings: dict[str, Any],
        *,
        address: str | None = None,
        actor_options: dict[str, Any] | None = None,
    ):
        """``env_class``: the code env class; ``settings``: its keyword arguments in each actor (sandbox, limits)."""
        from ...distributed import ActorPool

        kwargs = {
            **settings,
            "tasks": [],
            "max_concurrency": 1,
        }  # one response at a time per actor, on its CPU
        options = {"num_cpus": 1, "max_concurrency": 1, **(actor_options or {})}
        self.pool = ActorPool(
            env_class, kwargs, num_actors=num_actors, actor_options=options, address=address
        )

    @property
    def actors(self) -> list[Any]:
        return self.pool.actors

    async def verify(self, task: CodeProblem, answer: str) -> Reward:
        """Judge ``answer`` on the least-loaded actor; actors that keep dying give a masked reward."""
        from ...distributed import PoolCallFailed

        try:
            reward: Reward = await self.pool.call("score_answer", task, answer)
        except PoolCallFailed as exc:
            return Reward.failed(f"Ray verifier: {exc}")
        return reward

    async def aclose(self, wait_s: float = 30.0) -> None:
        await self.pool.aclose(wait_s)
