"""A typed OpenEnv client for a cascade env served with ``cascade-envs serve --protocol openenv``.

``CascadeEnvClient`` is an ``openenv.core.EnvClient`` (async; ``.sync()`` for the synchronous
wrapper) whose actions and observations are the pydantic models below, built on OpenEnv's
``Action``/``Observation``/``State``::

    async with CascadeEnvClient(base_url="http://127.0.0.1:8000") as env:
        result = await env.reset(index=0)          # or seed=, task_id=, task=<row>
        while not result.done:
            reply = my_model(result.observation.messages)
            result = await env.step(CascadeAction(message=reply))
        result.reward                              # None when the reward is masked
        result.observation.reward_info             # value, masked, reason, error, components
"""

from __future__ import annotations

from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.env_server.types import Action, Observation, State
from pydantic import BaseModel, ConfigDict, Field


class CascadeToolCall(BaseModel):
    """A tool call given apart from the reply's text."""

    model_config = ConfigDict(extra="forbid")
    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)


class CascadeAction(Action):
    """The model's reply: its text (tool calls written in the env's format) and/or calls apart."""

    message: str = ""
    tool_calls: list[CascadeToolCall] = Field(default_factory=list)


class CascadeObservation(Observation):
    """The new chat messages; at the end, ``reward`` (None when masked) and ``reward_info``."""

    messages: list[dict[str, Any]] = Field(default_factory=list)
    task_id: str = ""
    turn: int = 0
    truncated: bool = False
    reward_info: dict[str, Any] | None = None


class CascadeState(State):
    """OpenEnv's state plus the task and env ids and whether the episode is done."""

    task_id: str | None = None
    done: bool = False
    env_id: str | None = None


class CascadeEnvClient(EnvClient[CascadeAction, CascadeObservation, CascadeState]):
    """OpenEnv's ``EnvClient`` for a cascade env server (see the module docstring)."""

    def _step_payload(self, action: CascadeAction) -> dict[str, Any]:
        if isinstance(action, str):  # a bare reply is a convenience
            action = CascadeAction(message=action)
        return action.model_dump(exclude_defaults=True)

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[CascadeObservation]:
        observation = CascadeObservation(
            **payload.get("observation", {}), reward=payload.get("reward"), done=payload.get("done", False)
        )
        return StepResult(observation=observation, reward=observation.reward, done=observation.done)

    def _parse_state(self, payload: dict[str, Any]) -> CascadeState:
        return CascadeState(**payload)
