"""Ray transport for verification: a pool of actors, one per CPU, each with its own ``Judge``.

``CodeEnv(ray_actors=N)`` scores through this pool instead of in-process or over HTTP. Ray must
be installed (``pip install 'cascade-envs[ray]'``); the pool joins the running Ray instance, or
starts a local one when none is running. Each actor reserves one CPU and judges one response at a
time, so Ray's scheduler spreads them over the cluster. A call to an actor that dies (a node lost,
an out-of-memory kill) gives a masked reward; the actor is restarted by Ray and serves the next call.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from typing import Any

from ..._extras import require
from ...core import Reward
from .judge import Judge, JudgeConfig
from .task import parse_code_task


class JudgeActor:
    """One Ray actor: a sandbox backend and a compile cache that live as long as the actor."""

    def __init__(self, sandbox: str | None, config: dict[str, Any]):
        self.judge = Judge(sandbox, JudgeConfig(**config))

    async def verify(self, task: dict[str, Any], answer: str) -> Reward:
        return await self.judge.ascore(parse_code_task(task), answer)

    def ready(self) -> bool:
        return True


class RayVerifier:
    def __init__(self, num_actors: int = 0, *, sandbox: str | None = None, config: JudgeConfig | None = None,
                 address: str | None = None, actor_options: dict[str, Any] | None = None):
        require("ray", "the Ray verification transport")
        import ray

        if not ray.is_initialized():
            ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
        self.num_actors = num_actors or max(1, int(ray.available_resources().get("CPU", 1)))
        options = {"num_cpus": 1, "max_restarts": -1, "max_concurrency": 1, **(actor_options or {})}
        actor_class = ray.remote(JudgeActor).options(**options)
        settings = asdict(config or JudgeConfig())
        settings["max_concurrency"] = 1
        self.actors: list[Any] = [actor_class.remote(sandbox, settings) for _ in range(self.num_actors)]
        self.load = [0] * self.num_actors

    async def verify(self, task: dict[str, Any], answer: str) -> Reward:
        """Score on the least-loaded actor; an actor failure gives a masked reward."""
        from ray.exceptions import RayError

        index = min(range(self.num_actors), key=self.load.__getitem__)
        self.load[index] += 1
        try:
            return await self.actors[index].verify.remote(task, answer)
        except RayError as exc:
            return Reward.failed(f"Ray verifier actor failed: {type(exc).__name__}: {str(exc)[:300]}")
        finally:
            self.load[index] -= 1

    async def aclose(self, wait_s: float = 30.0) -> None:
        """Kill every actor and wait (at most ``wait_s``) until each is gone.

        ``ray.kill`` only asks the control store; a call sent right after it can still be served,
        so the pool counts as closed once each actor refuses a call.
        """
        import ray
        from ray.exceptions import RayActorError

        actors, self.actors, self.load = self.actors, [], []
        for actor in actors:
            ray.kill(actor)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        for actor in actors:
            while loop.time() < deadline:
                try:
                    await asyncio.wait_for(actor.ready.remote(), timeout=max(0.1, deadline - loop.time()))
                except (TimeoutError, RayActorError):
                    break
                await asyncio.sleep(0.05)
