"""``JudgedEnv``: the base of envs scored by an LLM judge, with the constructor every judged env shares."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Hashable, Iterable
from typing import Any, TypeVar

from ..core import Message, Reward, Row
from ..data import TaskT
from ..env import Env
from .base import Judge, JudgeError, JudgeReplyError
from .fault import CONTROL_TTL_S, Canary, Failure, blame
from .quoting import DEFENCES, Quote
from .resolve import JudgeSource, make_judge

T = TypeVar("T")
QUOTE_CHARS = 200
"""How much of an unparseable reply a ``JudgeError`` quotes."""


class JudgedEnv(Env[TaskT]):
    """Base of envs scored by an LLM judge; every judged env takes the same constructor arguments.

    ``judge_url``: a URL, a list of URLs (least busy first), a registered judge name, or a ``Judge``
    object; ``None`` reads ``$CASCADE_ENVS_JUDGE_URL``, else construction raises ``JudgeUnavailable``
    (one line saying how to start ``cascade-envs serve-judge``). ``judge_model``: the served model
    (``None``: ``$CASCADE_ENVS_JUDGE_MODEL``, else the only one the endpoint serves);
    ``judge_concurrency``: calls in flight per endpoint; ``judge_timeout_s``: the deadline of one
    attempt (each request of an ``HTTPJudge``, retries included, ends within three times that);
    ``judge_max_tokens``: the judge's reply budget (default: the env's, e.g. GenRM's 16384; a server
    whose context is smaller rejects every call, so lower it to fit); ``judge_control_ttl_s``: how
    long the outcome of a control request is reused (``judges.fault.Canary``). A ``Judge`` object is
    used as given. Nothing touches the network at construction.

    Subclasses quote the answer with a ``judges.quoting.Quote``, call ``ajudge`` with it, and turn
    a ``JudgeError`` into a reward with ``ablame`` (a 0 when the failure is the answer's, else masked:
    ``judges.fault``); one whose settings need no judge (e.g. a similarity reward) says so in
    ``uses_judge``, and then none is made.
    """

    judge_max_tokens: int = 4096
    judge_temperature: float = 0.0

    def __init__(
        self,
        tasks: str | os.PathLike[str] | Iterable[Row] | None = None,
        *,
        judge_url: JudgeSource = None,
        judge_model: str | None = None,
        judge_concurrency: int = 32,
        judge_timeout_s: float = 120.0,
        judge_max_tokens: int | None = None,
        judge_control_ttl_s: float = CONTROL_TTL_S,
        **env_kwargs: Any,
    ):
        owner = type(self).__name__
        if judge_max_tokens is not None:
            if (
                not isinstance(judge_max_tokens, int)
                or isinstance(judge_max_tokens, bool)
                or judge_max_tokens < 1
            ):
                raise ValueError(f"judge_max_tokens must be a positive int, got {judge_max_tokens!r}")
            self.judge_max_tokens = judge_max_tokens
        self.judge: Judge = (
            make_judge(
                judge_url,
                model=judge_model,
                concurrency=judge_concurrency,
                timeout_s=judge_timeout_s,
                owner=owner,
            )
            if self.uses_judge()
            else NoJudge(owner)
        )
        self.canary = Canary(judge_control_ttl_s)
        super().__init__(tasks, **env_kwargs)

    def uses_judge(self) -> bool:
        """Whether this env's settings (set before ``JudgedEnv.__init__``) score with a judge."""
        return True

    async def ajudge(
        self, messages: list[Message], parse: Callable[[str], T], quote: Quote | None = None, **sampling: Any
    ) -> T:
        """One judge call and ``parse`` of its reply (first scrubbed of echoes of ``quote``'s answers).

        ``sampling`` overrides ``max_tokens``/``temperature``/``top_p`` (defaults: the class's
        ``judge_max_tokens``/``judge_temperature``, top_p 1). Raises ``JudgeError`` when the call
        fails after its retries, ``JudgeReplyError`` when the reply holds no verdict (``parse``
        raises ``ValueError``: the message quotes the reply).
        """
        options = {"max_tokens": self.judge_max_tokens, "temperature": self.judge_temperature, **sampling}
        try:
            reply = await self.judge.acomplete(messages, **options)
        except JudgeError:
            raise
        except Exception as exc:
            raise JudgeError(f"judge {self.judge!r} raised {type(exc).__name__}: {exc}") from exc
        try:
            return parse(quote.scrub(reply) if quote is not None else reply)
        except ValueError as exc:
            raise JudgeReplyError(f"unparseable judge reply ({exc}): {_quote(reply)}") from exc

    async def ablame(
        self,
        error: JudgeError,
        key: Hashable,
        control: Callable[[], Awaitable[object]],
        prefix: str = "",
        **components: Any,
    ) -> Reward:
        """The reward of a single answer whose judge call raised ``error`` (``judges.fault.blame``).

        A reply without a verdict is weighed against ``control``, a judge call on ``key``'s control
        request (the same task with trusted text where the answer was; it raises ``JudgeError`` when
        it gives no verdict), made at most once per key and window (``self.canary``). ``prefix``
        opens the failure's text; ``components`` go into the reward.
        """
        failure = Failure.of(error, prefix)
        weigh = failure.kind == "reply" and DEFENCES.blame
        health = await self.canary.check(key, control) if weigh else None
        return blame([failure], health, **components)

    async def aclose(self) -> None:
        """Close the judge, then the env's other resources."""
        try:
            await self.judge.aclose()
        finally:
            await super().aclose()


class NoJudge:
    """The judge of an env configured to score without one: calling it is an error, never a 0."""

    def __init__(self, owner: str):
        self.owner = owner

    async def acomplete(self, messages: list[Message], **sampling: Any) -> str:
        raise JudgeError(f"{self.owner} is configured to score without a judge")

    async def aclose(self) -> None:
        pass


def _quote(reply: str) -> str:
    start = reply[:QUOTE_CHARS]
    return repr(start) + (f" ... ({len(reply)} chars)" if len(reply) > QUOTE_CHARS else "")
