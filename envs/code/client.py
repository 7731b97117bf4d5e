"""Client of the verification service (``cascade-envs serve-sandbox``) for ``CodeEnv(verifier_url=...)``.

Requests go through the kernel's ``RetryingClient``: back-pressure (429) is retried with backoff
until the request's deadline, transport errors, 5xx and malformed answers a few times, spread over
the services named (least loaded first, one that refused a connection last). What still fails
becomes a masked reward carrying the error — never a silent 0.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from dataclasses import asdict
from typing import Any

from ...core import Reward
from ...http import HTTPRequestError, RetryingClient
from .judge import JudgeConfig
from .task import CodeProblem

CONNECT_TIMEOUT_S = 10.0
HTTP_TOO_LARGE = 413
SLACK_S = 10.0
"""How long past its deadline a verification may take to come back (the service answers 504 at it)."""


class VerifierClient:
    """Talks to one or more services (``url`` may be a list or comma-separated), least-loaded first.

    ``token``: the bearer token of a service started with ``--token`` (default ``$CASCADE_ENVS_TOKEN``).
    """

    def __init__(
        self,
        url: str | list[str],
        *,
        timeout_s: float = 600.0,
        config: JudgeConfig | None = None,
        connect_retries: int = 3,
        max_connections: int = 256,
        token: str | None = None,
    ):
        token = token if token is not None else os.environ.get("CASCADE_ENVS_TOKEN")
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        urls = url.split(",") if isinstance(url, str) else list(url)
        self.urls = [u.strip().rstrip("/") for u in urls if u.strip()]
        if not self.urls:
            raise ValueError("verifier_url: no service URL given")
        self.timeout_s = timeout_s
        self.config = {
            k: v
            for k, v in asdict(config or JudgeConfig()).items()
            if k not in ("cpp_flags", "cache_size", "max_concurrency")
        }
        self.connect_retries = connect_retries
        self.max_connections = max_connections
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, RetryingClient] = (
            weakref.WeakKeyDictionary()
        )

    def _client(self) -> RetryingClient:
        """One client per event loop (sync callers may use a new loop each time)."""
        loop = asyncio.get_running_loop()
        if loop not in self._clients:
            self._clients[loop] = RetryingClient(
                self.urls,
                headers=self.headers,
                timeout_s=self.timeout_s + SLACK_S,
                connect_timeout_s=CONNECT_TIMEOUT_S,
                max_retries=self.connect_retries * len(self.urls),
                backoff_s=0.05,
                max_backoff_s=2.0,
                retry_budget_s=self.timeout_s,
                concurrency=self.max_connections,
            )
        return self._clients[loop]

    async def verify(self, task: CodeProblem, answer: str) -> Reward:
        """Score ``answer`` on a service, which is sent the row's ``verifier_metadata`` as given.

        A request over the service's body limit (413) is weighed with a control: the same task with an
        empty answer. When the service takes that, the answer's own size was too much: a 0, as a local
        run's memory limit would give, so a model cannot buy a mask with a huge answer. When the control
        is refused too, the task is at fault and the sample is masked."""
        try:
            data = await self._post(task, answer)
        except HTTPRequestError as exc:
            if exc.status == HTTP_TOO_LARGE and answer:
                return await self._weigh_too_large(task, answer, exc)
            what = "unreachable" if exc.status is None else "failed"
            return Reward.failed(f"verification service {what}: {exc}")
        return _reward(data)

    async def _post(self, task: CodeProblem, answer: str) -> Any:
        row = {"verifier_metadata": task.metadata}
        payload = {"task": row, "answer": answer, "config": self.config, "deadline_s": self.timeout_s}
        return await self._client().request_json("POST", "/verify", payload)

    async def _weigh_too_large(self, task: CodeProblem, answer: str, error: HTTPRequestError) -> Reward:
        try:
            await self._post(task, "")
        except HTTPRequestError as control:
            return Reward.failed(
                f"verification service failed: {error}; the task alone failed too (control request: {control})"
            )
        return Reward.zero(
            f"verifier limit: the answer ({len(answer):,} characters) is over the verification service's "
            "request size limit"
        )

    async def aclose(self) -> None:
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()


def _reward(data: Any) -> Reward:
    try:
        reward = data["reward"]
        return Reward(
            reward["value"],
            reward.get("components") or {},
            reward.get("reason"),
            reward.get("error"),
            bool(reward.get("masked")),
        )
    except Exception as exc:
        return Reward.failed(f"malformed answer from the verification service: {type(exc).__name__}: {exc}")
