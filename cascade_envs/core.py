"""Core value types shared by environments, the rollout runner and the trainer."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gymnasium import spaces

Message = dict[str, Any]
"""A chat message: ``{"role": ..., "content": ...}`` plus optional keys (``tool_calls``, ``name``)."""

Row = dict[str, Any]
"""A task row as read from a task file (the public layouts); ``Env.load_task`` makes it a typed task."""


class CascadeError(Exception):
    """Base class of the errors this package raises on purpose."""


def json_object(text: str | None, flag: str) -> dict[str, Any]:
    """``text`` (a command-line value such as ``--env-kwargs``) as a JSON object; empty text is ``{}``."""
    try:
        value = json.loads(text or "{}")
    except json.JSONDecodeError as exc:
        raise CascadeError(f"{flag} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise CascadeError(f"{flag} must be a JSON object")
    return value


class TaskError(CascadeError):
    """A task row is malformed; ``field`` names the offending key (or ``None`` for the whole row)."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field

    def __str__(self) -> str:
        msg = super().__str__()
        return f"field {self.field!r}: {msg}" if self.field else msg


@dataclass
class Reward:
    """The score of one response.

    ``value`` is what the trainer optimises. ``components`` holds named sub-scores and diagnostics
    (e.g. which instructions failed). ``reason`` says why a response scored what it did (e.g.
    "no \\boxed{} answer"). ``error`` + ``masked`` mark a verifier/judge failure: the sample is
    dropped from the loss instead of being scored 0.
    """

    value: float
    components: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None
    error: str | None = None
    masked: bool = False

    def __post_init__(self) -> None:
        self.value = float(self.value)
        if math.isnan(self.value) and not self.masked:
            self.masked, self.error = True, self.error or "reward is NaN"

    @classmethod
    def failed(cls, error: str, **components: Any) -> Reward:
        """A masked reward: the verifier could not score this response."""
        return cls(0.0, components, error=error, masked=True)

    @classmethod
    def zero(cls, reason: str, **components: Any) -> Reward:
        """A legitimate 0: the response was scored and does not earn reward."""
        return cls(0.0, components, reason=reason)

    def to_dict(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "components": self.components,
            "reason": self.reason,
            "error": self.error,
            "masked": self.masked,
        }


class Completion(str):
    """A model's raw output text, plus what the generator knows about it.

    It *is* a ``str`` (the action of every env), so plain text works everywhere; engines attach
    ``finish_reason`` ("stop" | "length" | ...), sampled ``token_ids`` and their ``logprobs``.
    """

    finish_reason: str | None
    token_ids: list[int] | None
    logprobs: list[float] | None
    prompt_token_ids: list[int] | None

    def __new__(
        cls,
        text: str,
        finish_reason: str | None = None,
        token_ids: list[int] | None = None,
        logprobs: list[float] | None = None,
        prompt_token_ids: list[int] | None = None,
    ) -> Completion:
        obj = super().__new__(cls, text)
        obj.finish_reason = finish_reason
        obj.token_ids = token_ids
        obj.logprobs = logprobs
        obj.prompt_token_ids = prompt_token_ids
        return obj

    @property
    def truncated(self) -> bool:
        """True when generation stopped at the length limit."""
        return self.finish_reason == "length"

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": str(self),
            "finish_reason": self.finish_reason,
            "token_ids": self.token_ids,
            "logprobs": self.logprobs,
            "prompt_token_ids": self.prompt_token_ids,
        }


def as_completion(action: Any) -> Completion:
    """Coerce an action (``str``, ``bytes`` or ``Completion``) to a ``Completion``.

    Bytes that are not valid UTF-8 are decoded with replacement characters rather than rejected:
    the verifier then scores what the model actually produced.
    """
    if isinstance(action, Completion):
        return action
    if isinstance(action, str):
        return Completion(action)
    if isinstance(action, (bytes, bytearray)):
        return Completion(bytes(action).decode("utf-8", errors="replace"))
    raise TypeError(f"an action must be the model's text (str), got {type(action).__name__}")


class TextSpace(spaces.Space[str]):
    """Space of arbitrary Unicode strings (the model's raw output)."""

    def __init__(self, max_length: int | None = None, seed: int | None = None):
        super().__init__(shape=None, dtype=None, seed=seed)
        self.max_length = max_length

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        n = int(self.np_random.integers(0, 64))
        return "".join(chr(int(c)) for c in self.np_random.integers(32, 127, size=n))

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and (self.max_length is None or len(x) <= self.max_length)

    def __repr__(self) -> str:
        return f"TextSpace(max_length={self.max_length})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TextSpace) and other.max_length == self.max_length


class ChatSpace(spaces.Space[list]):
    """Space of chat-message lists: each element a dict with a string ``role`` and ``content``."""

    ROLES = ("system", "user", "assistant", "tool")

    def __init__(self, seed: int | None = None):
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> list[Message]:
        words = ["solve", "the", "task", "answer", "briefly", "please"]
        n = int(self.np_random.integers(1, 8))
        text = " ".join(str(w) for w in self.np_random.choice(np.array(words), size=n))
        return [{"role": "user", "content": text}]

    def contains(self, x: Any) -> bool:
        return isinstance(x, list) and all(
            isinstance(m, dict)
            and m.get("role") in self.ROLES
            and isinstance(m.get("content"), (str, type(None), list))
            for m in x
        )

    def __repr__(self) -> str:
        return "ChatSpace()"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ChatSpace)
