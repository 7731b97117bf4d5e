"""The ``embedded`` judge: a local transformers model answering judge prompts in this process.

``judge_url="embedded"`` (the judge registered under that name, ``envs/__init__.py``) makes a judged env call the embedded
SmolLM2-135M-Instruct (or ``judge_model=`` a local checkpoint folder) directly, with no server:
what ``cascade-envs serve-judge`` serves, loaded with the same code (``server.load_policy``), once
per process and model, shared by every env that uses it. A 135M judge is close to noise: it shows
the judged path running end to end (prompt, parse, aggregate, mask) on a CPU, e.g. in the Cascade
smoke pipeline, not meaningful rewards. Replies are capped at ``max_tokens`` (default 64, far below
``serve-judge``'s 512: on a CPU each reply token of a batch costs a forward pass, and a 135M judge's
verdict does not improve with length) whatever an env asks for; a reply whose ``<think>`` block
never closes has no answer and is a ``JudgeError`` (the env masks the sample).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from ..core import Message
from ..policy import PolicyError, SamplingParams
from ..reasoning import split_reasoning
from .base import JudgeError, JudgeReplyError

NAME = "embedded"
DEFAULT_MAX_TOKENS = 64
_LOCK = threading.Lock()
_POLICIES: dict[tuple[str, str | None], Any] = {}


def shared_policy(model: str, device: str | None = None) -> Any:
    """The loaded ``HFPolicy`` of ``model`` (``embedded`` or a folder), loaded once per process."""
    from .server import load_policy

    with _LOCK:
        key = (model, device)
        if key not in _POLICIES:
            _POLICIES[key] = load_policy(model, device=device)[0]
        return _POLICIES[key]


class EmbeddedJudge:
    """A ``Judge`` over a local model in this process; ``model``: ``embedded`` or a checkpoint folder.

    ``timeout_s`` bounds each call (a reply not ready in time is a ``JudgeError``: the env masks the
    sample); ``concurrency`` is accepted as every registered judge's is; concurrent calls are batched
    by the model's ``HFPolicy`` (``device``: cuda when available).
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        concurrency: int = 32,
        timeout_s: float = 120.0,
        max_tokens: int | None = None,
        device: str | None = None,
    ):
        self.model = model or NAME
        self.max_tokens = max_tokens or DEFAULT_MAX_TOKENS
        if self.max_tokens < 1 or not timeout_s > 0:
            raise ValueError("max_tokens must be at least 1 and timeout_s positive")
        self.timeout_s = float(timeout_s)
        self.device = device
        self.policy = shared_policy(self.model, device)

    def __repr__(self) -> str:
        return f"EmbeddedJudge({self.model!r})"

    async def acomplete(
        self,
        messages: list[Message],
        *,
        max_tokens: int | None = None,
        temperature: float = 0.0,
        top_p: float = 1.0,
    ) -> str:
        limit = min(max_tokens or self.max_tokens, self.max_tokens)
        sampling = SamplingParams(max_tokens=limit, temperature=temperature, top_p=top_p)
        try:
            completion = await asyncio.wait_for(
                self.policy.agenerate(messages, sampling=sampling, thinking=True), self.timeout_s
            )
        except TimeoutError:
            raise JudgeError(f"{self!r}: no reply within {self.timeout_s:g} s") from None
        except PolicyError as exc:
            raise JudgeError(f"{self!r} failed to generate: {exc}") from exc
        split = split_reasoning(completion)
        if split.unterminated:
            raise JudgeReplyError(f"{self!r}: the reply's <think> block never closed within {limit} tokens")
        return split.answer

    async def aclose(self) -> None:
        """Nothing to release: the model is shared by every judge of the process."""
