"""Shared pieces of the tts tests: math rows, a context over the math env, a scripted reply cycle."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import cycle
from typing import Any

from cascade_envs.policy import SamplingParams
from cascade_envs.tts import Budget, SolveContext


def math_row(i: int, gold: str) -> dict[str, Any]:
    question = f"Problem {i}: what is the answer?"
    return {
        "id": f"m{i}",
        "responses_create_params": {"input": [{"role": "user", "content": question}]},
        "expected_answer": gold,
    }


def context(env: Any, policy: Any, strategy: str, **kwargs: Any) -> tuple[SolveContext, list[Any]]:
    """A context over ``env`` whose recorded attempts land in the returned list."""
    records: list[Any] = []
    kwargs.setdefault("budget", Budget())
    ctx = SolveContext(
        env,
        policy,
        "cascade/Math-v0",
        strategy,
        SamplingParams(max_tokens=64, seed=0),
        record=records.append,
        **kwargs,
    )
    return ctx, records


def replies(texts: Iterable[str]) -> Callable[[list[dict[str, Any]]], str]:
    """A ScriptedPolicy script giving ``texts`` in turn, whatever the prompt."""
    it = cycle(list(texts))
    return lambda messages: next(it)
