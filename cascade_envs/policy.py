"""The policy protocol: what turns chat messages into a ``Completion``, and its sampling settings.

A leaf module (no engine imports): the runner, the engines in ``cascade_envs.policies`` and the
trainer's engines all depend on it. ``render_chat_prompt`` is the one prompt renderer of the local
engines.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from .core import CascadeError, Completion, Message
from .defaults import DEFAULT_MAX_TOKENS, DEFAULT_TEMPERATURE, DEFAULT_TOP_P
from .reasoning import EMPTY_THINK

_ENDS_WITH_EMPTY_THINK = re.compile(r"<think>\s*</think>\s*$")


class PolicyError(CascadeError):
    """The policy could not produce a completion (after its retries)."""


class ContextOverflowError(PolicyError):
    """The prompt (plus the tokens to generate) does not fit the model's context window.

    The runner ends a multi-turn episode that meets it as truncated (the env's truncation rule),
    not as an error.
    """


@dataclass
class SamplingParams:
    max_tokens: int = DEFAULT_MAX_TOKENS
    temperature: float = DEFAULT_TEMPERATURE
    top_p: float = DEFAULT_TOP_P
    seed: int | None = None
    stop: list[str] | None = None

    def validate(self) -> None:
        """Reject settings a local engine cannot honour, naming the field (``PolicyError``)."""
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise PolicyError(f"sampling.max_tokens must be a positive int, got {self.max_tokens!r}")
        if not isinstance(self.temperature, (int, float)) or not 0 <= self.temperature < math.inf:
            raise PolicyError(f"sampling.temperature must be >= 0, got {self.temperature!r}")
        if not isinstance(self.top_p, (int, float)) or not 0 < self.top_p <= 1:
            raise PolicyError(f"sampling.top_p must be in (0, 1], got {self.top_p!r}")
        if self.seed is not None and not isinstance(self.seed, int):
            raise PolicyError(f"sampling.seed must be an int or None, got {self.seed!r}")
        stop = self.stop
        if stop is not None and not (
            isinstance(stop, str)
            or (isinstance(stop, (list, tuple)) and all(isinstance(s, str) for s in stop))
        ):
            raise PolicyError(f"sampling.stop must be a list of strings, got {stop!r}")


def render_chat_prompt(tokenizer: Any, messages: list[Message], thinking: bool = True) -> str:
    """Prompt text for a local engine: the tokenizer's chat template with the generation prompt.

    In non-thinking mode the prompt ends with an empty ``<think></think>`` block (the
    Nemotron-Cascade-2 convention), unless the template already wrote one.
    """
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise PolicyError(f"messages must be a list of dicts, got {type(messages).__name__}")
    if not getattr(tokenizer, "chat_template", None):
        raise PolicyError("the tokenizer has no chat template; pass a tokenizer that has one")
    try:
        text = tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False, enable_thinking=thinking
        )
    except Exception as exc:
        raise PolicyError(f"the chat template failed on these messages: {type(exc).__name__}: {exc}") from exc
    if not thinking and not _ENDS_WITH_EMPTY_THINK.search(text):
        text += EMPTY_THINK
    return text


@runtime_checkable
class Policy(Protocol):
    async def agenerate(
        self, messages: list[Message], *, sampling: SamplingParams, thinking: bool = True
    ) -> Completion: ...

    async def aclose(self) -> None: ...
