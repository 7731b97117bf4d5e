"""``EnvSet``: the env instances of a run, one per env id, and the one owner of their lifetimes.

An env lives for the whole run, with its clients, worker pools and sandboxes. Every part that
samples or plays envs shares one set: ``EnvMix`` samples tasks from its set, the ``RolloutRunner``
plays on the set it is given, and whoever made the set closes it, once (``aclose`` or ``async with``).
Envs handed in at construction (``borrowed``) are played but never closed here: their maker closes them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from .env import Env, run_sync
from .registry import make


class EnvSet(Mapping[str, Env[Any]]):
    """One env instance per id: made on first use with ``env_kwargs[env_id]``, closed together."""

    def __init__(
        self,
        env_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
        *,
        borrowed: Mapping[str, Env[Any]] | None = None,
    ) -> None:
        self.env_kwargs = {env_id: dict(kwargs) for env_id, kwargs in (env_kwargs or {}).items()}
        self._envs: dict[str, Env[Any]] = dict(borrowed or {})
        self._borrowed = set(self._envs)

    def env(self, env_id: str) -> Env[Any]:
        """The instance that plays ``env_id`` (made once, on first use)."""
        env = self._envs.get(env_id)
        if env is None:
            made = make(env_id, **self.env_kwargs.get(env_id, {}))
            if not isinstance(made, Env):
                raise TypeError(
                    f"{env_id} is a {type(made).__name__}, not a cascade_envs.Env: it cannot be played"
                )
            self._envs[env_id] = env = made
        return env

    def kwargs_of(self, env_id: str) -> dict[str, Any] | None:
        """The kwargs this set makes ``env_id`` with; ``None`` for an env it was handed made (kwargs unknown)."""
        return None if env_id in self._borrowed else self.env_kwargs.get(env_id, {})

    def __getitem__(self, env_id: str) -> Env[Any]:
        return self._envs[env_id]

    def __setitem__(self, env_id: str, env: Env[Any]) -> None:
        """Play ``env`` for ``env_id`` from now on, and own it (e.g. a Ray proxy that wraps the old one)."""
        self._envs[env_id] = env
        self._borrowed.discard(env_id)

    def __iter__(self) -> Iterator[str]:
        return iter(self._envs)

    def __len__(self) -> int:
        return len(self._envs)

    async def aclose(self) -> None:
        """Close every env this set made or was handed with ``__setitem__`` (their clients, pools, sandboxes)."""
        owned = [env for env_id, env in self._envs.items() if env_id not in self._borrowed]
        self._envs.clear()
        self._borrowed.clear()
        for env in owned:
            with contextlib.suppress(Exception):
                await env.aclose()

    def close(self) -> None:
        run_sync(self.aclose())

    async def __aenter__(self) -> EnvSet:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
