"""``OpenAIChatPolicy``: any OpenAI-compatible chat-completions server (``vllm serve`` included).

It talks over httpx with a concurrency limit, timeouts and retries with backoff, and records the
sampled token ids and logprobs when the server returns them.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
from typing import Any

from ..core import Completion, Message
from ..policy import ContextOverflowError, PolicyError, SamplingParams

_CONTEXT_OVERFLOW = re.compile(r"context length|context window|maximum context|too many tokens|prompt is too long", re.I)

RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


class OpenAIChatPolicy:
    """A chat-completions client for an OpenAI-compatible endpoint (``base_url`` ends in ``/v1``)."""

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        api_key: str | None = None,
        *,
        timeout_s: float = 600.0,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        concurrency: int = 256,
        extra_body: dict[str, Any] | None = None,
    ):
        import httpx

        self.base_url = base_url.rstrip("/")
        self.model = model
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.extra_body = extra_body or {}
        key = api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
        self._client = httpx.AsyncClient(
            base_url=self.base_url,
            timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0)),
            headers={"Authorization": f"Bearer {key}"},
            limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency),
        )
        self._semaphore = asyncio.Semaphore(concurrency)
        self._model_lock = asyncio.Lock()

    async def _model_name(self) -> str:
        async with self._model_lock:
            if self.model is None:
                data = await self._request("GET", "/models")
                try:
                    self.model = str(data["data"][0]["id"])
                except (KeyError, IndexError, TypeError) as exc:
                    raise PolicyError(f"{self.base_url}/models lists no model; pass model=") from exc
            return self.model

    def _body(self, model: str, messages: list[Message], sampling: SamplingParams, thinking: bool) -> dict:
        body: dict[str, Any] = {
            "model": model,
            "messages": messages,
            "max_tokens": sampling.max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "logprobs": True,
            # vLLM extensions (ignored by other servers): token ids and the thinking switch.
            "return_token_ids": True,
            "chat_template_kwargs": {"enable_thinking": thinking},
        }
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        if sampling.stop:
            body["stop"] = sampling.stop
        return {**body, **self.extra_body}

    async def agenerate(
        self, messages: list[Message], *, sampling: SamplingParams, thinking: bool = True
    ) -> Completion:
        model = await self._model_name()
        async with self._semaphore:
            data = await self._request("POST", "/chat/completions", self._body(model, messages, sampling, thinking))
        return parse_chat_completion(data)

    async def _request(self, method: str, path: str, body: dict | None = None) -> Any:
        import httpx

        last = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                await asyncio.sleep(self.backoff_s * 2 ** (attempt - 1) * (0.5 + random.random()))
            try:
                response = await self._client.request(method, path, json=body)
            except httpx.TimeoutException:
                last = "timed out"
                continue
            except httpx.TransportError as exc:
                last = f"connection failed ({type(exc).__name__}: {exc})"
                continue
            if response.status_code in RETRY_STATUS:
                last = f"HTTP {response.status_code}: {response.text[:200]}"
                continue
            if response.status_code == 400 and _CONTEXT_OVERFLOW.search(response.text):
                raise ContextOverflowError(f"{self.base_url}{path}: {response.text[:300]}")
            if response.status_code >= 400:
                raise PolicyError(f"{method} {self.base_url}{path}: HTTP {response.status_code}: {response.text[:300]}")
            try:
                return response.json()
            except (json.JSONDecodeError, UnicodeDecodeError):
                last = f"malformed JSON in the response: {response.text[:200]!r}"
                continue
        raise PolicyError(f"{method} {self.base_url}{path}: {last} (after {self.max_retries + 1} attempts)")

    async def aclose(self) -> None:
        await self._client.aclose()


def parse_chat_completion(data: Any) -> Completion:
    """Turn a chat-completions JSON body into a ``Completion``; a malformed body is a ``PolicyError``."""
    try:
        choice = data["choices"][0]
        message = choice["message"]
    except (KeyError, IndexError, TypeError) as exc:
        raise PolicyError(f"malformed chat completion (no choices[0].message): {str(data)[:200]}") from exc
    content = message.get("content") or ""
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if not isinstance(content, str):
        raise PolicyError(f"malformed chat completion: content is {type(content).__name__}")
    if isinstance(reasoning, str) and reasoning:
        content = f"<think>{reasoning}</think>{content}"
    logprobs = None
    entries = (choice.get("logprobs") or {}).get("content") if isinstance(choice.get("logprobs"), dict) else None
    if isinstance(entries, list):
        logprobs = [float(e.get("logprob", 0.0)) for e in entries if isinstance(e, dict)]
    token_ids = choice.get("token_ids")
    return Completion(
        content,
        finish_reason=choice.get("finish_reason"),
        token_ids=list(token_ids) if isinstance(token_ids, list) else None,
        logprobs=logprobs,
        prompt_token_ids=data.get("prompt_token_ids") if isinstance(data.get("prompt_token_ids"), list) else None,
    )
