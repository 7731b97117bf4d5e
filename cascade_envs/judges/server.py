"""``cascade-envs serve-judge``: a chat-completions server over a local model (the embedded SmolLM2).

It speaks the subset of the OpenAI API a judge client needs: ``GET /v1/models`` and
``POST /v1/chat/completions`` (``messages``, ``max_tokens``, ``temperature``, ``top_p``, ``seed``,
``stop``; no streaming, ``n = 1``). Concurrent requests are micro-batched by ``HFPolicy``; at most
``max_queue`` wait or run at once (beyond that: ``429``), and a request not answered within
``request_timeout_s`` gets ``504``. The HTTP layer (body limit, idle and request-arrival timeouts,
malformed HTTP) is the kernel's ``cascade_envs.http_server``.

A 135M model is a poor judge: its verdicts are close to noise. It exists so that every judged env
runs end to end (prompt, parse, aggregate, mask) on a laptop with no external service; use
``vllm serve`` with a real judge model for training.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core import CascadeError, Completion, Message
from ..http_server import IDLE_TIMEOUT_S, MAX_BODY_MB, REQUEST_TIMEOUT_S, Limits, run_until_stopped, serve
from ..policy import ContextOverflowError, Policy, PolicyError, SamplingParams
from ..reasoning import split_reasoning
from ..serving.auth import check_access
from .base import SERVE_JUDGE_PORT

log = logging.getLogger("cascade_envs.judges.server")
DEFAULT_MAX_TOKENS = 512
"""Default cap on the tokens of one reply (a request asking for more gets this many)."""
DEFAULT_MAX_QUEUE = 256
DEFAULT_REQUEST_TIMEOUT_S = 300.0
EMBEDDED_MODEL_NAME = "SmolLM2-135M-Instruct"


class BadRequest(Exception):
    """A request the server refuses: ``status`` and an OpenAI-style error body."""

    def __init__(self, status: int, message: str, param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param = status, message, param

    def body(self) -> dict[str, Any]:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.status}}


@dataclass(frozen=True)
class ChatRequest:
    messages: list[Message]
    sampling: SamplingParams


class ChatService:
    """The chat-completions routes over one ``Policy``, independent of the HTTP plumbing."""

    def __init__(
        self,
        policy: Policy,
        model_name: str,
        *,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        max_queue: int = DEFAULT_MAX_QUEUE,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
    ):
        if max_tokens < 1 or max_queue < 1 or not request_timeout_s > 0:
            raise ValueError("max_tokens and max_queue must be >= 1 and request_timeout_s > 0")
        self.policy, self.model_name = policy, model_name
        self.max_tokens, self.max_queue, self.request_timeout_s = max_tokens, max_queue, request_timeout_s
        self.stats = {"in_flight": 0, "served": 0, "rejected": 0, "timed_out": 0, "failed": 0}

    async def handle(self, method: str, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
        route = path.rstrip("/").removeprefix("/v1")
        try:
            if (method, route) == ("GET", "/models"):
                return 200, {
                    "object": "list",
                    "data": [{"id": self.model_name, "object": "model", "owned_by": "cascade-envs"}],
                }
            if (method, route) == ("POST", "/chat/completions"):
                return 200, await self._complete(self.parse(body))
            raise BadRequest(404, f"no route {method} {path}")
        except BadRequest as exc:
            return exc.status, exc.body()
        except Exception as exc:  # a bug: report it and keep serving
            self.stats["failed"] += 1
            log.exception("request failed")
            return 500, BadRequest(500, f"{type(exc).__name__}: {exc}").body()

    def parse(self, body: bytes) -> ChatRequest:
        """Validate a chat-completions body; ``BadRequest`` naming the field."""
        try:
            data = json.loads(body, parse_constant=_reject_constant)
        except (ValueError, RecursionError) as exc:  # not JSON, bad UTF-8, NaN, nested too deeply
            raise BadRequest(400, f"the body is not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise BadRequest(400, "the body must be a JSON object")
        model = data.get("model")
        if model is not None and model != self.model_name:
            raise BadRequest(
                404,
                f"the model {model!r} is not served here; this server serves {self.model_name!r}",
                "model",
            )
        if data.get("stream"):
            raise BadRequest(400, "streaming is not supported", "stream")
        if data.get("n", 1) != 1:
            raise BadRequest(400, "only n = 1 is supported", "n")
        limit = data.get("max_completion_tokens", data.get("max_tokens"))
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise BadRequest(400, f"max_tokens must be a positive integer, got {limit!r}", "max_tokens")
        sampling = SamplingParams(
            max_tokens=min(limit or self.max_tokens, self.max_tokens),
            temperature=_number(data, "temperature", 1.0),
            top_p=_number(data, "top_p", 1.0),
            seed=data.get("seed"),
            stop=data.get("stop"),
        )
        try:
            sampling.validate()
        except PolicyError as exc:
            raise BadRequest(400, str(exc).removeprefix("sampling.")) from None
        return ChatRequest(_messages(data.get("messages")), sampling)

    async def _complete(self, request: ChatRequest) -> dict[str, Any]:
        if self.stats["in_flight"] >= self.max_queue:
            self.stats["rejected"] += 1
            raise BadRequest(429, f"{self.max_queue} requests already waiting: retry later")
        self.stats["in_flight"] += 1
        try:
            async with asyncio.timeout(self.request_timeout_s):
                # thinking=True: the model's own chat template, with no empty think block appended
                completion = await self.policy.agenerate(
                    request.messages, sampling=request.sampling, thinking=True
                )
        except TimeoutError:
            self.stats["timed_out"] += 1
            raise BadRequest(504, f"no reply within {self.request_timeout_s:g} s") from None
        except ContextOverflowError as exc:
            raise BadRequest(
                400, f"This model's maximum context length was exceeded: {exc}", "messages"
            ) from None
        except PolicyError as exc:
            self.stats["failed"] += 1
            raise BadRequest(500, f"generation failed: {exc}") from None
        finally:
            self.stats["in_flight"] -= 1
        self.stats["served"] += 1
        return self._answer(completion)

    def _answer(self, completion: Completion) -> dict[str, Any]:
        """The chat-completions body; a ``<think>`` block goes to ``reasoning_content``, as vLLM's reasoning
        parsers do (an unclosed one leaves ``content`` null: the reply has no answer)."""
        split = split_reasoning(completion)
        message: dict[str, Any] = {
            "role": "assistant",
            "content": None if split.unterminated else split.answer,
        }
        if split.reasoning:
            message["reasoning_content"] = split.reasoning
        prompt_tokens = len(completion.prompt_token_ids or [])
        completion_tokens = len(completion.token_ids or [])
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": [
                {"index": 0, "message": message, "finish_reason": completion.finish_reason or "stop"}
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _number(data: dict[str, Any], name: str, default: float) -> float:
    value = data.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BadRequest(400, f"{name} must be a number, got {value!r}", name)
    return float(value)


def _messages(value: Any) -> list[Message]:
    if not isinstance(value, list) or not value:
        raise BadRequest(400, "messages must be a non-empty list", "messages")
    messages = []
    for i, message in enumerate(value):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str) or not message["role"]:
            raise BadRequest(400, f"messages[{i}] must be an object with a role", f"messages[{i}]")
        content = message.get("content")
        if not isinstance(content, str):
            raise BadRequest(400, f"messages[{i}].content must be a string", f"messages[{i}].content")
        messages.append({"role": message["role"], "content": content})
    return messages


def check_host(host: str, allow_remote: bool, token: str | None = None) -> str | None:
    """The shared rule of who may connect (``serving.auth.check_access``); the bearer token to require."""
    return check_access(host, token, allow_remote, what="judge")


def load_policy(model: str, *, device: str | None = None, max_batch_size: int = 16) -> tuple[Policy, str]:
    """``(policy, served name)`` for ``"embedded"`` or a local checkpoint folder."""
    from ..policies.hf import HFPolicy

    if model == "embedded":
        return HFPolicy.embedded(device=device, max_batch_size=max_batch_size), EMBEDDED_MODEL_NAME
    path = Path(model).expanduser()
    if not path.is_dir():
        raise CascadeError(f"--model {model!r}: expected 'embedded' or a local checkpoint folder")
    return HFPolicy(str(path), device=device, max_batch_size=max_batch_size), path.name


async def start_server(
    service: ChatService,
    host: str = "127.0.0.1",
    port: int = SERVE_JUDGE_PORT,
    *,
    max_body_mb: float = MAX_BODY_MB,
    idle_timeout_s: float = IDLE_TIMEOUT_S,
    request_timeout_s: float = REQUEST_TIMEOUT_S,
    token: str | None = None,
) -> asyncio.Server:
    """Serve ``service`` on ``host:port`` (0: a free port) with the kernel's HTTP layer.

    ``request_timeout_s`` here bounds the arrival of a request (408); the reply's own bound is the
    service's. ``token``: a bearer token every request must carry (else 401).
    """
    limits = Limits(max_body_mb, idle_timeout_s, request_timeout_s)
    return await serve(service, host, port, limits, token=token)


def serve_judge(
    host: str = "127.0.0.1",
    port: int = SERVE_JUDGE_PORT,
    model: str = "embedded",
    *,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    allow_remote: bool = False,
    token: str | None = None,
    device: str | None = None,
    max_batch_size: int = 16,
    max_queue: int = DEFAULT_MAX_QUEUE,
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
) -> None:
    """Run the judge server until interrupted (the ``cascade-envs serve-judge`` command)."""
    required = check_host(host, allow_remote, token)
    policy, name = load_policy(model, device=device, max_batch_size=max_batch_size)
    service = ChatService(
        policy, name, max_tokens=max_tokens, max_queue=max_queue, request_timeout_s=request_timeout_s
    )

    async def main() -> None:
        server = await start_server(service, host, port, token=required)
        bound = server.sockets[0].getsockname()
        note = "; a 135M model is a poor judge: for end-to-end runs only" if model == "embedded" else ""
        print(
            f"cascade-envs judge {name} on http://{bound[0]}:{bound[1]}/v1 (max {max_tokens} tokens a reply{note})",
            flush=True,
        )
        try:
            async with server:
                await server.serve_forever()
        finally:
            await policy.aclose()

    run_until_stopped(main, "cascade-envs judge")
