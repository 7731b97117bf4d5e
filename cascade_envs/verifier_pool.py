"""CPU-bound answer checks off the event loop, with a time and a size limit per answer.

An env that parses, regex-matches or tokenizes model output owns one ``VerifierPool`` (made in
``__init__``, closed in ``aclose``) and runs its checks through it::

    self.verifier = VerifierPool(timeout_s=10, max_chars=100_000)
    ...
    self.verifier.check_size(answer)                      # raises VerifierLimit
    result = await self.verifier.run(check, task_part, answer, inline=cheap)

``run`` executes the check in a warm worker process of a lazily started ``WorkerPool`` (hard
timeout, memory cap), so one adversarial answer costs one worker for ``timeout_s`` and never
stalls the other episodes. ``inline=True`` runs it right here instead, for checks the env knows
are cheap (e.g. linear-time code on an answer below a few thousand characters), where a round
trip to a worker (~0.15 ms) would dominate. A limit hit raises ``VerifierLimit`` (its message
starts with ``"verifier limit: "``); whether that scores 0 or is masked is the env's rule: the
answer's fault (it is huge or pathological) gives ``Reward.zero(str(exc))``, the task's fault
gives ``Reward.failed(...)``. A crashed worker raises ``WorkerDied``, an exception in the check
``CallFailed`` (both ``WorkerError``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, Literal

from .workers import CallTimeout, WorkerPool

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_MEMORY_MB = 4096
LIMIT_PREFIX = "verifier limit: "


class VerifierLimit(Exception):
    """A check hit the time or size limit; ``kind`` is ``"time"`` or ``"size"``."""

    def __init__(self, message: str, kind: Literal["time", "size"]):
        super().__init__(LIMIT_PREFIX + message)
        self.kind = kind


class VerifierPool:
    """The worker processes that run one env's answer checks.

    ``timeout_s``: wall-clock limit per check; ``max_chars``: longest answer checked at all
    (``check_size``); ``workers``: processes (default up to 4, one per CPU), started on first use
    and kept warm; ``memory_mb``: address-space cap per worker; ``preload``: check functions
    whose modules the workers import at start-up and ``initializer``: a function each worker
    calls once at start-up (to load models), so neither counts against a check's time.
    """

    def __init__(
        self,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_chars: int | None = None,
        workers: int | None = None,
        memory_mb: int | None = DEFAULT_MEMORY_MB,
        preload: Sequence[Callable[..., Any]] = (),
        initializer: Callable[[], Any] | None = None,
    ):
        if not timeout_s > 0:
            raise ValueError("timeout_s must be positive")
        if max_chars is not None and max_chars < 1:
            raise ValueError("max_chars must be positive")
        self.timeout_s = float(timeout_s)
        self.max_chars = max_chars
        self.workers = int(workers or min(4, os.cpu_count() or 1))
        self.memory_mb = memory_mb
        self.preload = tuple(preload)
        self.initializer = initializer
        self._pool: WorkerPool | None = None

    @property
    def pool(self) -> WorkerPool:
        """The worker pool (made on first use; its processes start on its first call)."""
        if self._pool is None:
            self._pool = WorkerPool(
                None,
                self.workers,
                self.timeout_s,
                self.memory_mb,
                preload=self.preload,
                initializer=self.initializer,
            )
        return self._pool

    def check_size(self, answer: str) -> None:
        """Raise ``VerifierLimit`` (kind ``"size"``) when ``answer`` is longer than ``max_chars``."""
        if self.max_chars is not None and len(answer) > self.max_chars:
            raise VerifierLimit(
                f"answer has {len(answer)} characters, over the {self.max_chars} checked", "size"
            )

    async def run(
        self, fn: Callable[..., Any], *args: Any, inline: bool = False, timeout_s: float | None = None
    ) -> Any:
        """``fn(*args)`` in a worker (or here when ``inline``); a timeout raises ``VerifierLimit``.

        ``fn`` must be an importable top-level function; its arguments and result are pickled.
        """
        if inline:
            return fn(*args)
        limit = self.timeout_s if timeout_s is None else timeout_s
        try:
            return await self.pool.run(fn, *args, timeout_s=limit)
        except CallTimeout:
            raise VerifierLimit(f"the check took over {limit:g} s", "time") from None

    def close(self) -> None:
        """Stop the worker processes (a later ``run`` starts new ones)."""
        if self._pool is not None:
            self._pool.close()

    async def aclose(self) -> None:
        if self._pool is not None:
            await self._pool.aclose()
