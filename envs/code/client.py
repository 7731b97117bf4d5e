"""Client of the verification service (``cascade-envs serve-sandbox``) for ``CodeEnv(verifier_url=...)``.

Back-pressure answers (429, 503) are retried with exponential backoff until the request's
deadline; anything else that goes wrong (service down, 5xx, a malformed answer) becomes a masked
reward carrying the error — never a silent 0.
"""

from __future__ import annotations

import asyncio
import random
import time
import weakref
from dataclasses import asdict
from typing import Any

import httpx

from ...core import Reward
from .judge import JudgeConfig

RETRY_STATUSES = (429, 503)
DOWN_S = 5.0


class VerifierClient:
    """Talks to one or more services (``url`` may be a list or comma-separated), least-loaded first."""

    def __init__(self, url: str | list[str], *, timeout_s: float = 600.0, config: JudgeConfig | None = None,
                 connect_retries: int = 3, max_connections: int = 256):
        urls = url.split(",") if isinstance(url, str) else list(url)
        self.urls = [u.strip().rstrip("/") for u in urls if u.strip()]
        if not self.urls:
            raise ValueError("verifier_url: no service URL given")
        self.in_flight = [0] * len(self.urls)
        self.down_until = [0.0] * len(self.urls)
        """A service that refused a connection is tried last for a few seconds."""
        self.timeout_s = timeout_s
        self.config = {k: v for k, v in asdict(config or JudgeConfig()).items() if k not in ("cpp_flags", "cache_size", "max_concurrency")}
        self.connect_retries = connect_retries
        self.max_connections = max_connections
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
            weakref.WeakKeyDictionary())

    def _client(self) -> httpx.AsyncClient:
        """One connection pool per event loop (sync callers may use a new loop each time)."""
        loop = asyncio.get_running_loop()
        if loop not in self._clients:
            self._clients[loop] = httpx.AsyncClient(timeout=httpx.Timeout(self.timeout_s + 10, connect=10),
                                                    limits=httpx.Limits(max_connections=self.max_connections))
        return self._clients[loop]

    async def verify(self, task: dict[str, Any], answer: str) -> Reward:
        payload = {"task": task, "answer": answer, "config": self.config, "deadline_s": self.timeout_s}
        deadline = time.monotonic() + self.timeout_s
        delay, failures = 0.05, 0
        while True:
            now = time.monotonic()
            index = min(range(len(self.urls)),
                        key=lambda i: (self.down_until[i] > now, self.in_flight[i], random.random()))
            url = self.urls[index]
            self.in_flight[index] += 1
            try:
                response = await self._client().post(f"{url}/verify", json=payload)
            except httpx.HTTPError as exc:
                failures += 1
                self.down_until[index] = time.monotonic() + DOWN_S
                if failures > self.connect_retries * len(self.urls) or time.monotonic() > deadline:
                    return Reward.failed(f"verification service unreachable at {url}: {type(exc).__name__}: {exc}")
            else:
                if response.status_code == 200:
                    return _reward(response)
                if response.status_code not in RETRY_STATUSES or time.monotonic() > deadline:
                    return Reward.failed(f"verification service at {url} answered {response.status_code}: "
                                         f"{response.text[:300]}")
            finally:
                self.in_flight[index] -= 1
            await asyncio.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 2.0)

    async def aclose(self) -> None:
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()


def _reward(response: httpx.Response) -> Reward:
    try:
        data = response.json()["reward"]
        return Reward(data["value"], data.get("components") or {}, data.get("reason"), data.get("error"),
                      bool(data.get("masked")))
    except Exception as exc:
        return Reward.failed(f"malformed answer from the verification service: {type(exc).__name__}: {exc}")
