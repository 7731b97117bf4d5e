"""Trajectories: the tokens of one episode, as the trainer consumes them (DESIGN.md §6).

The runner records every model turn (``TurnRecord``: prompt and completion token ids, logprobs,
finish reason, timings). ``Trajectory.sequences()`` turns an episode into training sequences:

- one sequence when every turn's prompt starts with the previous prompt plus the previous
  completion (the chat template re-renders the history as a prefix of the next prompt). The
  sequence is the first prompt followed by everything after it, with a loss mask of 1 on the
  tokens the policy sampled and 0 on the tokens the env or the template added (tool results,
  user turns, role headers), so a T-turn episode trains on O(T) tokens;
- otherwise one sequence per turn (the prompt is the whole rendered history, O(T²) tokens),
  reported through ``prefix_broken_at``, which the runner logs once per env.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class TurnRecord:
    """One model turn as the engine produced it."""

    prompt_ids: list[int] | None
    completion_ids: list[int] | None
    logprobs: list[float] | None
    finish_reason: str | None
    generate_s: float = 0.0
    """Wall-clock seconds the policy took for this turn."""
    env_s: float = 0.0
    """Wall-clock seconds the env took to answer this turn (tool execution)."""

    @property
    def has_tokens(self) -> bool:
        return bool(self.prompt_ids) and self.completion_ids is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "prompt_ids": self.prompt_ids,
            "completion_ids": self.completion_ids,
            "logprobs": self.logprobs,
            "finish_reason": self.finish_reason,
            "generate_s": round(self.generate_s, 6),
            "env_s": round(self.env_s, 6),
        }


@dataclass(slots=True)
class TokenSequence:
    """A training sequence: a prompt, then response tokens with a loss mask (1 = sampled by the policy).

    ``logprobs`` are the inference engine's log-probabilities of the response tokens (0.0 where
    the mask is 0), or ``None`` when the engine reported none.
    """

    prompt_ids: list[int]
    response_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float] | None = None

    @property
    def policy_tokens(self) -> int:
        return sum(self.loss_mask)


@dataclass(slots=True)
class Trajectory:
    """Every model turn of one episode, in order."""

    turns: list[TurnRecord] = field(default_factory=list)

    @property
    def has_tokens(self) -> bool:
        """True when every turn carries token ids (an HTTP server may return none)."""
        return bool(self.turns) and all(t.has_tokens for t in self.turns)

    @property
    def completion_tokens(self) -> int:
        return sum(len(t.completion_ids or ()) for t in self.turns)

    @property
    def prefix_broken_at(self) -> int | None:
        """The first turn whose prompt does not extend the previous prompt + completion (else None)."""
        for k in range(1, len(self.turns)):
            prev, turn = self.turns[k - 1], self.turns[k]
            head = list(prev.prompt_ids or ()) + list(prev.completion_ids or ())
            if (turn.prompt_ids or [])[: len(head)] != head:
                return k
        return None

    def sequences(self) -> list[TokenSequence]:
        """The training sequences of this episode (see the module docstring); [] without tokens."""
        if not self.has_tokens:
            return []
        if len(self.turns) == 1 or self.prefix_broken_at is not None:
            return [_turn_sequence(t) for t in self.turns]
        first = self.turns[0]
        prompt = list(first.prompt_ids or ())
        response: list[int] = []
        mask: list[int] = []
        logprobs: list[float] | None = [] if all(_has_logprobs(t) for t in self.turns) else None
        for turn in self.turns:
            inserted = list(turn.prompt_ids or ())[len(prompt) + len(response) :]
            completion = list(turn.completion_ids or ())
            response += inserted + completion
            mask += [0] * len(inserted) + [1] * len(completion)
            if logprobs is not None:
                logprobs += [0.0] * len(inserted) + list(turn.logprobs or ())
        return [TokenSequence(prompt, response, mask, logprobs)]

    def training_tokens(self) -> int:
        """Tokens the trainer runs a forward pass over for this episode."""
        return sum(len(s.prompt_ids) + len(s.response_ids) for s in self.sequences())

    def to_dict(self) -> dict[str, Any]:
        return {"turns": [t.to_dict() for t in self.turns]}


def _has_logprobs(turn: TurnRecord) -> bool:
    return turn.logprobs is not None and len(turn.logprobs) == len(turn.completion_ids or ())


def _turn_sequence(turn: TurnRecord) -> TokenSequence:
    completion = list(turn.completion_ids or ())
    logprobs = list(turn.logprobs or ()) if _has_logprobs(turn) else None
    return TokenSequence(list(turn.prompt_ids or ()), completion, [1] * len(completion), logprobs)
