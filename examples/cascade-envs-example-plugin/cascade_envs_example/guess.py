"""Guess-the-number: a plain ``gymnasium.Env`` (not a ``cascade_envs.Env``).

It shows that the cascade-envs registry accepts any Gymnasium environment class. The agent
guesses an integer in ``[low, high]``; the observation says whether the last guess was too low,
too high or right.
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium
from gymnasium import spaces

START, TOO_LOW, TOO_HIGH, CORRECT = range(4)


class GuessNumberEnv(gymnasium.Env[int, int]):
    """Reward 1 and termination on the right guess; truncation after ``max_steps`` guesses."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(self, low: int = 1, high: int = 100, max_steps: int = 7):
        if high < low:
            raise ValueError(f"high ({high}) must be >= low ({low})")
        if max_steps < 1:
            raise ValueError("max_steps must be at least 1")
        self.low, self.high, self.max_steps = low, high, max_steps
        self.action_space = spaces.Discrete(high - low + 1, start=low)
        self.observation_space = spaces.Discrete(4)
        self._secret = low
        self._steps = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[int, dict]:
        super().reset(seed=seed)
        secret = (options or {}).get("secret")
        if secret is None:
            secret = int(self.np_random.integers(self.low, self.high + 1))
        elif not self.low <= secret <= self.high:
            raise ValueError(f"secret {secret} is outside [{self.low}, {self.high}]")
        self._secret, self._steps = int(secret), 0
        return START, {}

    def step(self, action: int) -> tuple[int, float, bool, bool, dict]:
        if not self.action_space.contains(action):
            raise ValueError(f"a guess must be an integer in [{self.low}, {self.high}], got {action!r}")
        self._steps += 1
        guess = int(action)
        feedback = CORRECT if guess == self._secret else TOO_LOW if guess < self._secret else TOO_HIGH
        terminated = feedback == CORRECT
        truncated = not terminated and self._steps >= self.max_steps
        return feedback, float(terminated), terminated, truncated, {"steps": self._steps}
