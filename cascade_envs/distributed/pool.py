"""``ActorPool``: Ray actors each holding one env instance, with least-loaded dispatch.

Dispatch: a call goes to the actor with the fewest calls in flight plus episodes held, and waits
while every actor has ``max_concurrency`` calls in flight (a Ray actor option, default 8 here).
Failure rule: an actor found dead (node lost, out-of-memory kill, ``ray.kill``) is replaced by a
fresh one in its slot. A stateless call (``call``) is then retried on the least-loaded live actor,
at most ``retries`` times (default 2), so nothing is lost; past that it raises ``PoolCallFailed``
with the reason, which callers turn into a masked reward. A sticky call (``call_on``: the turn of
an episode whose state lives in that actor) cannot be retried: the state died with the actor, so
it raises ``EpisodeLost``. Every call has a time bound (``call_timeout_s``, default 600 s); a call
past it raises ``PoolCallFailed`` and is not retried.

Pool keys in ``actor_options`` (not passed to Ray): ``call_timeout_s``, ``retries``,
``ready_timeout_s`` (actor start-up, default 300 s) and ``placement_strategy`` (``placement.py``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import re
import threading
from typing import Any

from ..core import CascadeError
from . import placement, session
from .actor import EnvActor, UnknownEpisode

log = logging.getLogger("cascade_envs.distributed")

POOL_KEYS = {"call_timeout_s": 600.0, "retries": 2, "ready_timeout_s": 300.0, "placement_strategy": None}
DEFAULT_MAX_CONCURRENCY = 8


class PoolCallFailed(CascadeError):
    """A call could not be served (actors kept dying, or it ran past its time bound)."""


class EpisodeLost(CascadeError):
    """The actor holding a stateful episode died or was replaced: the episode cannot go on."""


def _number(options: dict[str, Any], key: str, minimum: float) -> float:
    value = options[key]
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value < minimum:
        raise CascadeError(f"actor_options.{key}: expected a number >= {minimum:g}, got {value!r}")
    return float(value)


class ActorPool:
    """``num_actors`` Ray actors (0: one per CPU of the cluster), each building ``entry(**kwargs)``.

    ``entry`` is an env id or an ``Env`` subclass; ``actor_options`` go to Ray's ``.options()``
    (``num_cpus``, ``resources``, ``runtime_env``...) except the pool keys of the module docstring.
    The actors are started and checked here: an env that cannot be built raises now, naming why.
    """

    def __init__(
        self,
        entry: str | type,
        kwargs: dict[str, Any] | None = None,
        *,
        num_actors: int = 0,
        actor_options: dict[str, Any] | None = None,
        address: str | None = None,
    ):
        if not isinstance(num_actors, int) or isinstance(num_actors, bool) or num_actors < 0:
            raise CascadeError(f"env_actors: expected a whole number >= 0, got {num_actors!r}")
        options = dict(actor_options or {})
        pool = {key: options.pop(key, default) for key, default in POOL_KEYS.items()}
        self.call_timeout_s = _number(pool, "call_timeout_s", 0.001)
        self.retries = int(_number(pool, "retries", 0))
        ready_timeout_s = _number(pool, "ready_timeout_s", 0.001)
        self.max_concurrency = int(options.setdefault("max_concurrency", DEFAULT_MAX_CONCURRENCY))
        if self.max_concurrency < 1:
            raise CascadeError(
                f"actor_options.max_concurrency: expected at least 1, got {self.max_concurrency}"
            )
        options.setdefault(
            "max_restarts", 0
        )  # a dead actor is replaced here, where its lost episodes are known
        self.name = entry if isinstance(entry, str) else entry.__name__
        self.entry, self.kwargs = entry, dict(kwargs or {})
        self._ray = ray = session.connect(address)
        self._closed = False
        try:
            count = num_actors or max(1, int(ray.cluster_resources().get("CPU", 1)))
            self.group = None
            if pool["placement_strategy"] is not None:
                options.setdefault("num_cpus", 1)
                self.group = placement.reserve(
                    ray, count, pool["placement_strategy"], options["num_cpus"], ready_timeout_s
                )
            self._options = options
            self._class = ray.remote(EnvActor)
            self.handles: list[Any] = [self._new_actor(i) for i in range(count)]
            self._check_ready(ready_timeout_s)
        except BaseException:
            self._shutdown_now()
            session.release()
            raise
        self.generation = [0] * count
        self.load = [0] * count
        self.held = [0] * count
        self._lock = threading.Lock()
        self._waiters: collections.deque[tuple[asyncio.Future[int], int | None]] = collections.deque()

    @property
    def actors(self) -> list[Any]:
        """The live actor handles, one per slot."""
        return list(self.handles)

    def __len__(self) -> int:
        return len(self.handles)

    def _new_actor(self, index: int) -> Any:
        options = dict(self._options)
        if self.group is not None:
            options.update(placement.bundle_options(self.group, index))
        return self._class.options(**options).remote(self.entry, self.kwargs)

    def _check_ready(self, timeout_s: float) -> None:
        ray = self._ray
        refs = [actor.ready.remote() for actor in self.handles]
        ready, pending = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        if pending:
            raise CascadeError(
                f"{self.name}: {len(pending)} of {len(refs)} env actors did not start within "
                f"{timeout_s:g} s (options {self._options}; cluster {ray.cluster_resources()})"
            )
        try:
            ray.get(ready)
        except ray.exceptions.RayError as exc:
            raise CascadeError(
                f"{self.name}: an env actor failed to start: {_last_error_line(exc)}"
            ) from None

    # ----- slots: least-loaded, bounded -----------------------------------------------------------

    def _free(self, want: int | None) -> int | None:
        if want is not None:
            return want if self.load[want] < self.max_concurrency else None
        free = [i for i in range(len(self.load)) if self.load[i] < self.max_concurrency]
        return min(free, key=lambda i: self.load[i] + self.held[i]) if free else None

    async def _acquire(self, want: int | None = None) -> int:
        loop = asyncio.get_running_loop()
        with self._lock:
            index = self._free(want)
            if index is not None:
                self.load[index] += 1
                return index
            future: asyncio.Future[int] = loop.create_future()
            self._waiters.append((future, want))
        try:
            return await future
        except asyncio.CancelledError:
            with self._lock:
                if (future, want) in self._waiters:
                    self._waiters.remove((future, want))
            if future.done() and not future.cancelled():
                self._release(future.result())
            raise

    def _release(self, index: int) -> None:
        """Free a slot of actor ``index``: hand it to the first waiter that can take it, or count it free."""
        with self._lock:
            for entry in self._waiters:
                if entry[1] in (None, index):
                    self._waiters.remove(entry)
                    future = entry[0]
                    future.get_loop().call_soon_threadsafe(self._hand, future, index)
                    return
            self.load[index] -= 1

    def _hand(self, future: asyncio.Future[int], index: int) -> None:
        if future.cancelled():
            self._release(index)
        else:
            future.set_result(index)

    # ----- calls ----------------------------------------------------------------------------------

    async def call(self, method: str, *args: Any) -> Any:
        """``method(*args)`` on the least-loaded actor, retried on another after an actor death."""
        if self._closed:
            raise PoolCallFailed(f"{self.name}: the actor pool is closed")
        deaths: list[str] = []
        for _ in range(self.retries + 1):
            index = await self._acquire()
            generation = self.generation[index]
            try:
                return await self._send(index, method, args)
            except _ActorDied as exc:
                deaths.append(str(exc))
                self._replace(index, generation, str(exc))
            finally:
                self._release(index)
        raise PoolCallFailed(
            f"{self.name}: Ray env actors died {len(deaths)} times serving {method}; last: {deaths[-1]}"
        )

    async def call_on(self, index: int, generation: int, method: str, *args: Any) -> Any:
        """``method(*args)`` on actor ``index`` as it was at ``generation`` (a sticky episode's actor)."""
        if self._closed:
            raise EpisodeLost(f"{self.name}: the actor pool is closed")
        if self.generation[index] != generation:
            raise EpisodeLost(f"{self.name}: the Ray actor holding this episode died and was replaced")
        await self._acquire(index)
        try:
            if self.generation[index] != generation:
                raise EpisodeLost(f"{self.name}: the Ray actor holding this episode died and was replaced")
            try:
                return await self._send(index, method, args)
            except _ActorDied as exc:
                self._replace(index, generation, str(exc))
                raise EpisodeLost(f"{self.name}: the Ray actor holding this episode died: {exc}") from None
            except UnknownEpisode as exc:
                raise EpisodeLost(f"{self.name}: {exc}") from None
        finally:
            self._release(index)

    async def pick(self) -> tuple[int, int]:
        """The least-loaded slot for a new sticky episode: ``(index, generation)``, counted as held."""
        index = await self._acquire()
        with self._lock:
            self.held[index] += 1
        self._release(index)
        return index, self.generation[index]

    def drop(self, index: int, generation: int) -> None:
        """A sticky episode of slot ``index`` ended (or was lost)."""
        with self._lock:
            if self.generation[index] == generation and self.held[index] > 0:
                self.held[index] -= 1

    async def _send(self, index: int, method: str, args: tuple[Any, ...]) -> Any:
        ray = self._ray
        ref = getattr(self.handles[index], method).remote(*args)
        try:
            return await asyncio.wait_for(ref, timeout=self.call_timeout_s)
        except TimeoutError:
            ray.cancel(ref)
            raise PoolCallFailed(
                f"{self.name}: {method} on a Ray env actor took over {self.call_timeout_s:g} s"
            ) from None
        except ray.exceptions.RayTaskError as exc:  # the method itself raised: give back its exception
            cause = getattr(exc, "cause", None)
            raise cause if isinstance(cause, Exception) else exc from None
        except (
            ray.exceptions.RayActorError,
            ray.exceptions.WorkerCrashedError,
            ray.exceptions.ObjectLostError,
        ) as exc:
            raise _ActorDied(f"{type(exc).__name__}: {_short(exc)}") from None

    def _replace(self, index: int, generation: int, reason: str) -> None:
        with self._lock:
            if self._closed or self.generation[index] != generation:
                return  # another call already replaced it
            self.generation[index] += 1
            self.held[index] = 0
            old, self.handles[index] = self.handles[index], self._new_actor(index)
        log.warning("%s: Ray env actor %d died (%s); replaced it", self.name, index, reason)
        with contextlib.suppress(Exception):  # already gone
            self._ray.kill(old, no_restart=True)

    # ----- closing --------------------------------------------------------------------------------

    async def aclose(self, wait_s: float = 30.0) -> None:
        """Kill every actor and wait (at most ``wait_s``) until each is gone, then release Ray.

        ``ray.kill`` only asks the control store; a call sent right after it can still be served,
        so an actor counts as gone once it refuses a call.
        """
        if self._closed:
            return
        handles = self._shutdown_now()
        ray = self._ray
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        for actor in handles:
            while loop.time() < deadline:
                try:
                    await asyncio.wait_for(actor.ready.remote(), timeout=max(0.1, deadline - loop.time()))
                except (TimeoutError, ray.exceptions.RayActorError):
                    break
                await asyncio.sleep(0.05)
        session.release()

    def _shutdown_now(self) -> list[Any]:
        self._closed = True
        handles, self.handles = getattr(self, "handles", []), []
        for actor in handles:
            with contextlib.suppress(Exception):
                self._ray.kill(actor, no_restart=True)
        if getattr(self, "group", None) is not None:
            placement.remove(self.group)
            self.group = None
        return handles


class _ActorDied(Exception):
    pass


def _short(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]


def _last_error_line(exc: BaseException) -> str:
    """The ``SomeError: message`` line that ends a remote traceback (or the start of the text)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    errors = [line for line in lines if re.match(r"^[\w.]+(Error|Exception)\b.*:", line)]
    return errors[-1][:300] if errors else _short(exc)
