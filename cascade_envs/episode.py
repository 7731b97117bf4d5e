"""The state of one episode, kept apart from the env that plays it.

An ``Env`` instance lives for a whole run and owns what is costly (task source, judge and verifier
clients, worker pools, sandboxes); it plays many episodes at once, each an ``Episode``. Stateful
envs keep what one episode needs (a workplace database, a repository checkout) in
``Episode.state``, prepared by ``Env.on_reset`` and released by ``Env.on_end``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from .core import Completion, Message, Reward

TaskT = TypeVar("TaskT")


@dataclass(slots=True)
class Turn:
    """What the env answers to one model turn.

    ``observation``: the new messages (tool results, a user reply). ``done``: the episode ended.
    ``reward``: set only when the env itself fixes the episode's reward here (e.g. a fatal error);
    otherwise the episode is scored with its group after it ends.
    """

    observation: list[Message] = field(default_factory=list)
    reward: Reward | None = None
    done: bool = False
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Episode(Generic[TaskT]):
    """One episode in play: its task (as its env loaded it), its transcript, where it stands."""

    task: TaskT
    task_id: str
    messages: list[Message]
    """The whole transcript so far: the prompt, then each model turn and the env's answers."""
    thinking: bool = True
    max_turns: int = 1
    completions: list[Completion] = field(default_factory=list)
    turns: int = 0
    terminated: bool = False
    truncated: bool = False
    outcome: Reward | None = None
    """A reward the env fixed during the episode (turn limit, context overflow, an env failure);
    group scoring keeps it instead of scoring the answer."""
    state: Any = None
    """Env-specific state of this episode (set by ``Env.on_reset``)."""

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated

    @property
    def final(self) -> Completion:
        """The last model turn (the answer of a single-turn episode)."""
        return self.completions[-1] if self.completions else Completion("")
