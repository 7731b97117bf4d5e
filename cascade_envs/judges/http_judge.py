"""``HTTPJudge``: a judge behind an OpenAI-compatible chat-completions endpoint (``vllm serve``).

Requests go through the kernel's ``RetryingClient``: one connection pool, a concurrency limit per
endpoint, the least busy endpoint first, a deadline per attempt, and retries with backoff on
5xx/429/timeouts/malformed bodies within a retry budget. The reply text is
``choices[0].message.content``; a body without it is a ``JudgeError`` naming what was missing.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core import Message
from ..http import HTTPRequestError, RetryingClient
from .base import JUDGE_API_KEY_ENV, JudgeError, JudgeReplyError

MAX_BACKOFF_S = 10.0
"""The longest wait between two attempts (a ``Retry-After`` included); the retry budget bounds the sum."""


@dataclass
class _LoopClient:
    """The HTTP client and model lookup of one event loop (httpx pools are bound to a loop)."""

    http: RetryingClient
    model_lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class HTTPJudge:
    """A ``Judge`` over one or more equivalent chat-completions endpoints (URLs ending in ``/v1``).

    ``model``: the served model name (``None``: ask ``GET models`` once and use the only one served);
    ``concurrency``: requests in flight per endpoint; ``timeout_s``: the deadline of one attempt;
    ``max_retries``: retries after the first attempt; ``retry_budget_s``: no attempt starts later
    than this after the first (default ``2 * timeout_s``, so a call lasts at most
    ``retry_budget_s + timeout_s``); ``api_key``: bearer token (default ``$CASCADE_ENVS_JUDGE_API_KEY``;
    ``OPENAI_API_KEY`` is never sent, so a hosted-service key cannot leak to a self-hosted judge).
    """

    def __init__(
        self,
        urls: str | Sequence[str],
        *,
        model: str | None = None,
        concurrency: int = 32,
        timeout_s: float = 120.0,
        max_retries: int = 3,
        retry_budget_s: float | None = None,
        backoff_s: float = 0.5,
        api_key: str | None = None,
    ):
        url_list = urls.split(",") if isinstance(urls, str) else list(urls)
        self.urls = [u.strip().rstrip("/") for u in url_list if u.strip()]
        if not self.urls:
            raise ValueError("HTTPJudge: no judge URL given")
        if concurrency < 1 or not timeout_s > 0 or max_retries < 0:
            raise ValueError("HTTPJudge: concurrency must be >= 1, timeout_s > 0 and max_retries >= 0")
        self.model = model
        self.concurrency = concurrency
        self.timeout_s = float(timeout_s)
        self.max_retries = max_retries
        self.retry_budget_s = 2 * self.timeout_s if retry_budget_s is None else float(retry_budget_s)
        self.backoff_s = backoff_s
        key = api_key if api_key is not None else os.environ.get(JUDGE_API_KEY_ENV)
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopClient] = (
            weakref.WeakKeyDictionary()
        )
        self.stats: Counter[str] = Counter()
        """Requests, retries and failures so far, by reason, over every event loop (``RetryingClient.stats``)."""

    def __repr__(self) -> str:
        return f"HTTPJudge({','.join(self.urls)!r}, model={self.model!r})"

    def _client(self) -> _LoopClient:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            client = self._clients[loop] = _LoopClient(
                RetryingClient(
                    self.urls,
                    headers=self._headers,
                    timeout_s=self.timeout_s,
                    deadline_s=self.timeout_s,
                    max_retries=self.max_retries,
                    backoff_s=self.backoff_s,
                    max_backoff_s=max(self.backoff_s, MAX_BACKOFF_S),
                    retry_budget_s=self.retry_budget_s,
                    concurrency=self.concurrency * len(self.urls),
                    per_url_concurrency=self.concurrency,
                )
            )
            client.http.stats = self.stats  # one tally whichever loop made the call
        return client

    async def _request(self, client: _LoopClient, method: str, path: str, body: Any = None) -> Any:
        try:
            return await client.http.request_json(method, path, body)
        except HTTPRequestError as exc:
            raise JudgeError(f"judge call failed: {exc}") from exc

    async def _model_name(self, client: _LoopClient) -> str:
        if self.model is not None:
            return self.model
        async with client.model_lock:
            if self.model is None:
                self.model = served_model(await self._request(client, "GET", "models"), self.urls[0])
            return self.model

    async def acomplete(
        self,
        messages: list[Message],
        *,
        max_tokens: int | None = None,
        temperature: float = 0.0,
        top_p: float = 1.0,
    ) -> str:
        """The judge's reply text to ``messages``; raises ``JudgeError`` when there is none."""
        client = self._client()
        body: dict[str, Any] = {
            "model": await self._model_name(client),
            "messages": messages,
            "temperature": temperature,
            "top_p": top_p,
        }
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        return reply_text(await self._request(client, "POST", "chat/completions", body))

    async def aclose(self) -> None:
        """Close the connection pool of the running event loop."""
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.http.aclose()


def reply_text(data: Any) -> str:
    """``choices[0].message.content`` of a chat-completions body; ``JudgeError`` naming what is wrong."""
    if not isinstance(data, dict):
        raise JudgeError(
            f"malformed judge reply: a JSON {type(data).__name__}, not an object: {str(data)[:200]}"
        )
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise JudgeError(f"malformed judge reply: no choices: {str(data)[:200]}")
    message = choices[0].get("message") if isinstance(choices[0], dict) else None
    if not isinstance(message, dict):
        raise JudgeError(f"malformed judge reply: choices[0] has no message: {str(choices[0])[:200]}")
    content = message.get("content")
    if not isinstance(content, str):
        what = "missing" if content is None else f"a {type(content).__name__}"
        finish = choices[0].get("finish_reason")
        raise JudgeReplyError(f"judge reply has no text (content is {what}, finish_reason {finish!r})")
    return content


def served_model(data: Any, url: str) -> str:
    """The only model listed by a ``GET /models`` body; ``JudgeError`` when none or several."""
    try:
        ids = [str(item["id"]) for item in data["data"]]
    except (KeyError, TypeError) as exc:
        raise JudgeError(f"{url}/models: malformed model list: {str(data)[:200]}") from exc
    if len(ids) != 1:
        listed = ", ".join(ids) if ids else "none"
        raise JudgeError(f"{url}/models serves {len(ids)} models ({listed}): pass judge_model=")
    return ids[0]
