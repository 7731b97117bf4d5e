"""The client side of NeMo Gym's resources-server protocol: seed a session, call tools, verify.

``ResourcesClient(url)`` speaks to one resources server (NeMo Gym's own, or ``cascade-envs serve
--protocol nemo-gym``). Every request has a deadline (``timeout_s``: connect, upload and the whole
answer). A ``Session`` holds the cookies of one episode's server session (NeMo Gym keys its
per-rollout state by the session cookie); each request sends them and each answer's ``Set-Cookie``
updates them. Nothing is shared between sessions: the HTTP client keeps no cookies of its own.

- ``seed(row)``: ``POST /seed_session`` with the row; a new ``Session``.
- ``call_tool(session, name, arguments)``: ``POST /<name>`` with the arguments. Any answer the
  server gives, an error status included, is the tool's output (``ToolOutput``): NeMo Gym's tools
  report errors so that the model can recover. Tool calls are never retried (a tool may write).
- ``verify(session, row, response)``: ``POST /verify`` with the row and the episode's ``response``;
  a ``Verified`` reward with the verifier's metrics.
- ``control(row)``: a fresh session of ``row`` verified with ``CONTROL_ANSWER``, a fixed answer no
  model wrote; ``None`` when the server verified it, else what failed.

What the server did not serve raises ``ServerFault``: no answer within the deadline (a dead or
hung server, a refused connection), an error status from ``/seed_session`` or ``/verify``, or a
verify answer without a finite numeric ``reward``, or one the server itself masked
(``mask_sample``, NeMo Gym's flag for a sample whose reward measures the environment's failure).
"""

from __future__ import annotations

import asyncio
import json
import math
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.cookies import CookieError, SimpleCookie
from typing import Any

import httpx

from ...core import CascadeError
from ...http import HTTPRequestError, RetryingClient
from .responses import message_item, response_object

CONTROL_ANSWER = "I do not know the answer."
"""The answer of ``control``'s verify request: text no model wrote, so its fate is the server's alone."""
VERIFY_FIELDS = ("reward", "mask_sample", "failure_kind", "failure_reason", "reward_components")
"""Fields of a verify answer that are not metrics."""


class ServerFault(CascadeError):
    """A request the resources server did not serve; the message says which and how."""


@dataclass
class Session:
    """The cookies of one server session, sent with each of its requests and updated by each answer."""

    cookies: dict[str, str] = field(default_factory=dict)

    def headers(self) -> dict[str, str]:
        if not self.cookies:
            return {}
        return {"Cookie": "; ".join(f"{name}={value}" for name, value in self.cookies.items())}

    def update(self, headers: httpx.Headers) -> None:
        for line in headers.get_list("set-cookie"):
            jar: SimpleCookie = SimpleCookie()
            try:
                jar.load(line)
            except CookieError:
                continue  # a cookie the server cannot have meant for us
            self.cookies.update({name: morsel.value for name, morsel in jar.items()})


@dataclass(frozen=True)
class ToolOutput:
    """A tool route's answer: ``raw`` as the server sent it (``function_call_output``), ``status`` its HTTP status."""

    raw: str
    status: int

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def shown(self) -> str:
        """What the model reads: a ``{"output": X}`` answer as ``X`` (text as is, else JSON), any other
        answer as sent; an error status first, as ``Error: HTTP <status>: ...``."""
        if not self.ok:
            return f"Error: HTTP {self.status}: {self.raw}"
        try:
            data = json.loads(self.raw)
        except json.JSONDecodeError:
            return self.raw
        if isinstance(data, dict) and list(data) == ["output"]:
            output = data["output"]
            return output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
        return self.raw


@dataclass(frozen=True)
class Verified:
    """A verify answer's reward: its ``value``, the verifier's numeric ``metrics`` (``reward_components``
    and the numeric fields it added to the request), and ``reason`` (its ``failure_reason``, if any)."""

    value: float
    metrics: dict[str, float]
    reason: str | None


class ResourcesClient:
    """HTTP client of one resources server; see the module docstring. ``retries``: further attempts of
    a ``/seed_session`` or ``/verify`` that got no answer or a 5xx; ``concurrency``: requests in flight."""

    def __init__(self, url: str, *, timeout_s: float, retries: int = 0, concurrency: int = 256):
        if not timeout_s > 0 or retries < 0 or concurrency < 1:
            raise ValueError("timeout_s must be positive, retries >= 0 and concurrency >= 1")
        self.url = url.rstrip("/")
        self.timeout_s, self.retries, self.concurrency = float(timeout_s), retries, concurrency
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[int, RetryingClient]] = (
            weakref.WeakKeyDictionary()
        )

    def _client(self, retries: int) -> RetryingClient:
        """One client per event loop (sync callers may use a new loop each time) and retry count."""
        clients = self._clients.setdefault(asyncio.get_running_loop(), {})
        if retries not in clients:
            clients[retries] = RetryingClient(
                self.url,
                timeout_s=self.timeout_s,
                max_retries=retries,
                backoff_s=0.2,
                max_backoff_s=2.0,
                concurrency=self.concurrency,
            )
        return clients[retries]

    async def _post(self, path: str, body: Any, session: Session, retries: int) -> Any:
        answer = await self._client(retries).exchange("POST", path, body, headers=session.headers())
        session.update(answer.headers)
        return answer.data

    async def seed(self, row: Mapping[str, Any]) -> Session:
        """A new server session seeded with ``row``."""
        session = Session()
        try:
            await self._post("/seed_session", dict(row), session, self.retries)
        except HTTPRequestError as exc:
            raise ServerFault(f"/seed_session failed: {exc}") from None
        return session

    async def call_tool(self, session: Session, name: str, arguments: Any) -> ToolOutput:
        """The answer of tool ``name`` to ``arguments``; ``ServerFault`` when none came."""
        try:
            data = await self._post(f"/{name}", arguments, session, 0)
        except HTTPRequestError as exc:
            if exc.status is None:
                raise ServerFault(f"tool {name!r} got no answer: {exc.problem}") from None
            return ToolOutput(exc.body or "", exc.status)  # an error status, or a body that is not JSON
        return ToolOutput(json.dumps(data, ensure_ascii=False), 200)

    async def verify(self, session: Session, row: Mapping[str, Any], response: dict[str, Any]) -> Verified:
        """The reward the server gives ``response`` to ``row`` in ``session``."""
        try:
            data = await self._post("/verify", {**row, "response": response}, session, self.retries)
        except HTTPRequestError as exc:
            raise ServerFault(f"/verify failed: {exc}") from None
        return verified(data, row)

    async def control(self, row: Mapping[str, Any]) -> str | None:
        """``None`` when the server verifies ``CONTROL_ANSWER`` to ``row`` in a fresh session, else why not."""
        try:
            session = await self.seed(row)
            await self.verify(session, row, response_object([message_item(CONTROL_ANSWER)]))
        except ServerFault as exc:
            return str(exc)
        return None

    async def aclose(self) -> None:
        clients = self._clients.pop(asyncio.get_running_loop(), {})
        for client in clients.values():
            await client.aclose()


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def verified(data: Any, request: Mapping[str, Any]) -> Verified:
    """The ``Verified`` of a verify answer to ``request``; ``ServerFault`` when it holds no valid reward."""
    if not isinstance(data, dict):
        raise ServerFault(f"/verify answered {type(data).__name__}, not a JSON object")
    reason = data.get("failure_reason")
    reason = f"{data.get('failure_kind') or 'failure'}: {reason}" if reason else None
    if data.get("mask_sample") is True:
        raise ServerFault(f"the server masked the sample ({reason or 'no reason given'})")
    reward: Any = data.get("reward")
    if not _number(reward):
        raise ServerFault(f"/verify answered without a finite numeric 'reward' (got {str(reward)[:80]!r})")
    metrics = {
        name: float(value)
        for name, value in data.items()
        if name not in request and name not in VERIFY_FIELDS and (_number(value) or isinstance(value, bool))
    }
    components = data.get("reward_components")
    if isinstance(components, dict):
        metrics.update({str(k): float(v) for k, v in components.items() if _number(v)})
    return Verified(float(reward), metrics, reason)
