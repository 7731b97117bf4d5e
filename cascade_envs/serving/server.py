"""Serve one env over a protocol: ``start`` (async), ``serve_env`` (the CLI's, blocking) and
``BackgroundServer`` (on its own thread, for tests, benchmarks and notebooks)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from dataclasses import dataclass
from typing import Any

from ..env import Env
from ..http_server import Limits, run_until_stopped, serve
from .auth import check_access
from .protocols import ServeContext, protocol_factory
from .sessions import MAX_SESSIONS, REQUEST_DEADLINE_S, SESSION_TTL_S, SessionStore

CLOSE_WAIT_S = 5.0
"""On shutdown, how long open connections may take to finish."""


@dataclass
class Served:
    """A running server: its listening socket, handler, store and env; ``aclose`` stops all four."""

    server: asyncio.Server
    handler: Any
    store: SessionStore
    env: Env
    url: str
    token_required: bool = False

    async def aclose(self, close_env: bool = True) -> None:
        self.server.close()
        with contextlib.suppress(TimeoutError):  # 3.12+ waits for keep-alive connections too
            await asyncio.wait_for(self.server.wait_closed(), CLOSE_WAIT_S)
        if hasattr(self.handler, "aclose"):
            await self.handler.aclose()
        await self.store.aclose()
        if close_env:
            await self.env.aclose()


async def start(
    protocol: str,
    env: str | Env,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    token: str | None = None,
    allow_remote: bool = False,
    limits: Limits | None = None,
    max_sessions: int = MAX_SESSIONS,
    ttl_s: float = SESSION_TTL_S,
    request_deadline_s: float = REQUEST_DEADLINE_S,
    env_kwargs: dict[str, Any] | None = None,
    options: dict[str, Any] | None = None,
) -> Served:
    """Serve ``env`` (an id, made here with ``env_kwargs``, or an instance) over ``protocol``.

    Who may connect follows ``check_access(host, token, allow_remote)``.
    """
    required = check_access(host, token, allow_remote, what=f"{protocol} server")
    factory = protocol_factory(protocol)
    if isinstance(env, str):
        from ..registry import make

        env_id, instance = env, make(env, **(env_kwargs or {}))
    else:
        env_id, instance = getattr(env.spec, "id", None) or type(env).__name__, env
    store = SessionStore(
        instance, max_sessions=max_sessions, ttl_s=ttl_s, request_deadline_s=request_deadline_s
    )
    handler = factory(ServeContext(env_id, instance, store, dict(options or {})))
    store.start()
    server = await serve(handler, host, port, limits, token=required)
    bound = server.sockets[0].getsockname()
    url = f"http://{bound[0] if ':' not in bound[0] else f'[{bound[0]}]'}:{bound[1]}"
    return Served(server, handler, store, instance, url, required is not None)


def serve_env(protocol: str, env_id: str, host: str = "127.0.0.1", port: int = 8000, **kwargs: Any) -> None:
    """Run ``start(protocol, env_id, host, port, **kwargs)`` until interrupted (``cascade-envs serve``)."""

    async def main() -> None:
        served = await start(protocol, env_id, host, port, **kwargs)
        print(
            f"cascade-envs {protocol} server for {env_id} on {served.url} "
            f"(max {served.store.max_sessions} sessions, idle expiry {served.store.ttl_s:g} s"
            f"{', bearer token required' if served.token_required else ''})",
            flush=True,
        )
        try:
            await served.server.serve_forever()
        finally:
            await served.aclose()

    run_until_stopped(main, f"cascade-envs {protocol} server")


class BackgroundServer:
    """``start(...)`` on a thread of its own: ``with BackgroundServer("nemo-gym", env) as s: s.url``."""

    def __init__(self, protocol: str, env: str | Env, **kwargs: Any):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(start(protocol, env, **kwargs), self.loop)
        try:
            self.served: Served = future.result(timeout=120)
        except BaseException:
            self.loop.call_soon_threadsafe(self.loop.stop)
            raise
        self.url = self.served.url
        self.store = self.served.store

    def call(self, coro: Any, timeout: float = 60.0) -> Any:
        """Run ``coro`` on the server's loop and return its result (for inspecting the store)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self, close_env: bool = True) -> None:
        if self.loop.is_running():
            with contextlib.suppress(Exception):
                self.call(self.served.aclose(close_env))
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=30)

    def __enter__(self) -> BackgroundServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
