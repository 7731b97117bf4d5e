"""Whose fault is a judge call that gave no verdict: the answer's (a 0) or the judge's (a mask).

The rule (``blame``), one for every judged env: an answer the judge gave no verdict on scores 0,
with the reason, when

1. every failed call got a reply that holds no verdict (``JudgeReplyError``: no text, reasoning
   that never closed, text that does not parse), not a failed call (down, 5xx, rate-limited past
   its budget, past its deadline: those mask, as an answer within the env's size limit cannot
   cause them while the judge answers others; see ``Failure``);
2. the judge gave a verdict, in the same window, on a request this answer did not shape
   (``Health``): a control request made only of trusted text (``Canary``), or, for a group judge,
   other comparisons of the group; and
3. the failure is this answer's alone (``isolated``): a single-answer request holds no other
   answer; a comparison is this answer's when its partner was judged elsewhere, or when this
   answer alone against a trusted stand-in fails too.

Otherwise the sample is masked with the reason, and a judge that fails its control request is
logged: a judge that fails for everyone still masks, and says so. The control matters because a
GRPO group is one model's answers: a model that derails the judge on all of them must get 0s, not
masks, so the evidence that the judge works cannot come from the group alone.

Timeouts stay masks: an answer is bounded by the env's ``max_answer_chars`` and the judge's
reply by ``max_tokens`` (a reply cut there still arrives, and is a reply without a verdict), so a
call that runs past its deadline says more about the judge's load than about the answer.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..core import Reward
from .base import JudgeError, JudgeReplyError
from .quoting import DEFENCES

log = logging.getLogger("cascade_envs.judges")

FailureKind = Literal["reply", "judge", "deadline"]
"""Why a judge call gave no verdict: its reply held none; the call failed (HTTP, timeout, after the
client's retries); the group deadline passed first."""
CONTROL_TTL_S = 60.0
MAX_CONTROL_KEYS = 4096


@dataclass(frozen=True)
class Failure:
    """A judge call that gave no verdict: its kind and what went wrong, for the reward's reason."""

    kind: FailureKind
    detail: str

    @classmethod
    def of(cls, error: JudgeError, prefix: str = "") -> Failure:
        """The failure of a call that raised ``error``."""
        return cls("reply" if isinstance(error, JudgeReplyError) else "judge", f"{prefix}{error}")


@dataclass(frozen=True)
class Health:
    """Whether the judge gave a verdict on a request the answer did not shape, and which."""

    ok: bool
    evidence: str
    """What the judge did, e.g. "gave a verdict on a control request that holds no answer"."""


def blame(
    failures: Sequence[Failure], health: Health | None, /, *, isolated: bool = True, **components: Any
) -> Reward:
    """The reward of an answer the judge gave no verdict on: 0 when the fault is the answer's, else
    masked (the rule: the module docstring). ``health``: ``None`` when none was sought (a failed call
    needs none). ``components`` go into the reward, with ``judge_fault`` ("answer" or "judge")."""
    if not failures:
        raise ValueError("blame needs at least one failure")
    more = f" (and {len(failures) - 1} more without a verdict)" if len(failures) > 1 else ""
    detail = failures[0].detail + more
    replies = all(f.kind == "reply" for f in failures)
    if DEFENCES.blame and replies and health is not None and health.ok and isolated:
        return Reward.zero(
            f"the judge gave no verdict on this answer, while it {health.evidence}: {detail}",
            judge_fault="answer",
            **components,
        )
    if not replies or health is None:
        why = ""
    elif not health.ok:
        why = f"; {health.evidence}"
    elif not isolated:
        why = "; the failure is not this answer's alone"
    else:
        why = "; every failed reply is masked (the blame defence is off)"
    return Reward.failed(detail + why, judge_fault="judge", **components)


class Canary:
    """Control requests: whether the judge gives a verdict on a request made of trusted text only.

    ``check(key, probe)`` runs ``probe`` (a judge call that raises ``JudgeError`` when it gives no
    verdict) at most once per ``key`` (the control's task) per ``ttl_s`` seconds; concurrent checks
    of one key share one call, which is cancelled when every one of them is. The result is cached,
    a failure too (the answers of that window mask; a failure is logged). ``stats`` counts probes,
    passes, failures and reuses. Owned by one env (no process-wide cache).
    """

    def __init__(self, ttl_s: float = CONTROL_TTL_S, max_keys: int = MAX_CONTROL_KEYS):
        if not ttl_s >= 0 or max_keys < 1:
            raise ValueError("the control's ttl_s must be >= 0 and max_keys >= 1")
        self.ttl_s, self.max_keys = float(ttl_s), max_keys
        self.stats: Counter[str] = Counter()
        self._results: OrderedDict[Hashable, tuple[float, Health]] = OrderedDict()
        self._running: dict[tuple[int, Hashable], tuple[asyncio.Task[Health], list[int]]] = {}

    async def check(self, key: Hashable, probe: Callable[[], Awaitable[object]]) -> Health:
        """The judge's health on ``key``'s control request (cached, or ``probe``'s call now); ``key``
        is kept as a digest of its ``repr`` (a task's texts may be long)."""
        key = hashlib.sha256(repr(key).encode("utf-8", "surrogatepass")).hexdigest()
        cached = self._fresh(key)
        if cached is not None:
            self.stats["reused"] += 1
            return cached
        slot = (id(asyncio.get_running_loop()), key)
        if slot not in self._running:
            task = asyncio.ensure_future(self._probe(key, probe))
            self._running[slot] = (task, [0])
            task.add_done_callback(lambda _: self._running.pop(slot, None))
        task, waiters = self._running[slot]
        waiters[0] += 1
        try:
            return await asyncio.shield(task)
        finally:
            waiters[0] -= 1
            if not waiters[0] and not task.done():
                task.cancel()

    def _fresh(self, key: Hashable) -> Health | None:
        found = self._results.get(key)
        if found is None:
            return None
        at, health = found
        age = time.monotonic() - at
        if age > self.ttl_s:
            return None
        return Health(health.ok, f"{health.evidence} ({age:.0f} s ago)") if age >= 1 else health

    async def _probe(self, key: Hashable, probe: Callable[[], Awaitable[object]]) -> Health:
        self.stats["probes"] += 1
        try:
            await probe()
        except JudgeError as exc:
            self.stats["failed"] += 1
            log.warning("the judge gave no verdict on a control request, so failed replies mask: %s", exc)
            health = Health(False, f"the judge failed a control request that holds no answer too: {exc}")
        else:
            self.stats["passed"] += 1
            health = Health(True, "gave a verdict on a control request that holds no answer")
        self._results[key] = (time.monotonic(), health)
        self._results.move_to_end(key)
        while len(self._results) > self.max_keys:
            self._results.popitem(last=False)
        return health
