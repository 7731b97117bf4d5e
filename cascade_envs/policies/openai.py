"""``OpenAIChatPolicy``: any OpenAI-compatible chat-completions server (``vllm serve`` included).

It talks over httpx with a concurrency limit, timeouts and retries with backoff, and records the
sampled token ids and logprobs when the server returns them.
"""

from __future__ import annotations

import asyncio
import os
import re
from typing import Any

from ..core import Completion, Message
from ..http import HTTPRequestError, RetryingClient
from ..policy import ContextOverflowError, PolicyError, SamplingParams

_CONTEXT_OVERFLOW = re.compile(
    r"context length|context window|maximum context|too many tokens|prompt is too long", re.I
)


class OpenAIChatPolicy:
    """A chat-completions client for an OpenAI-compatible endpoint (``base_url`` ends in ``/v1``).

    Requests go through the kernel's ``RetryingClient``: each attempt has an overall deadline
    (``timeout_s``, covering a server that trickles its answer), 5xx/429/timeouts are retried with
    backoff within ``retry_budget_s`` (default: four deadlines), and a 400 saying the prompt does
    not fit raises ``ContextOverflowError``. ``stats`` counts what was retried and what failed.
    """

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        api_key: str | None = None,
        *,
        timeout_s: float = 600.0,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        retry_budget_s: float | None = None,
        concurrency: int = 256,
        extra_body: dict[str, Any] | None = None,
    ):
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.extra_body = extra_body or {}
        key = api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
        self._http = RetryingClient(
            self.base_url,
            headers={"Authorization": f"Bearer {key}"},
            timeout_s=timeout_s,
            max_retries=max_retries,
            backoff_s=backoff_s,
            retry_budget_s=retry_budget_s if retry_budget_s is not None else 4 * timeout_s,
            concurrency=concurrency,
        )
        self._model_lock = asyncio.Lock()

    @property
    def stats(self) -> Any:
        """Requests, retries and failures so far, by reason (see ``RetryingClient.stats``)."""
        return self._http.stats

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
        data = await self._request(
            "POST", "/chat/completions", self._body(model, messages, sampling, thinking)
        )
        return parse_chat_completion(data)

    async def _request(self, method: str, path: str, body: dict | None = None) -> Any:
        try:
            return await self._http.request_json(method, path, body)
        except HTTPRequestError as exc:
            if exc.status == 400 and _CONTEXT_OVERFLOW.search(exc.body or ""):
                raise ContextOverflowError(f"{self.base_url}{path}: {(exc.body or '')[:300]}") from exc
            raise PolicyError(str(exc)) from exc

    async def aclose(self) -> None:
        await self._http.aclose()


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
    entries = (
        (choice.get("logprobs") or {}).get("content") if isinstance(choice.get("logprobs"), dict) else None
    )
    if isinstance(entries, list):
        logprobs = [float(e.get("logprob", 0.0)) for e in entries if isinstance(e, dict)]
    token_ids = choice.get("token_ids")
    return Completion(
        content,
        finish_reason=choice.get("finish_reason"),
        token_ids=list(token_ids) if isinstance(token_ids, list) else None,
        logprobs=logprobs,
        prompt_token_ids=data.get("prompt_token_ids")
        if isinstance(data.get("prompt_token_ids"), list)
        else None,
    )
