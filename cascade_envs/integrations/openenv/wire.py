"""OpenEnv's wire format for a cascade env: actions, observations, state, schemas, error messages.

Pure translation (no I/O, no ``openenv`` import), matching ``openenv-core`` 0.3's server:

- an action is ``{"message": str, "tool_calls": [{"name", "arguments"}], "metadata": {}}``:
  the model's reply as it wrote it (tool calls in the env's text format), and optionally calls
  given apart, which are written into the reply in the env's format (``xml_json`` only);
- a result is ``{"observation": {...}, "reward": float | None, "done": bool}``; the observation
  holds the *new* messages (the prompt at reset, the env's answers after a step), ``task_id``,
  ``turn``, ``truncated`` and, once the episode is done, ``reward_info`` (our ``Reward.to_dict()``);
- a masked reward (the verifier could not score) is ``reward: null`` with ``done: true`` and
  ``reward_info.masked: true`` and its ``error``: never 0. (OpenEnv's ``serialize_observation``
  drops an observation's ``metadata`` from the wire, so the reason travels in ``reward_info``.)
- state is ``{"episode_id", "step_count", "task_id", "done", "env_id"}`` (OpenEnv's ``State``
  allows extra fields);
- errors are ``{"type": "error", "data": {"message", "code"}}`` with OpenEnv's ``WSErrorCode``s.
"""

from __future__ import annotations

import json
from typing import Any

from ...core import Reward

INVALID_JSON = "INVALID_JSON"
UNKNOWN_TYPE = "UNKNOWN_TYPE"
VALIDATION_ERROR = "VALIDATION_ERROR"
EXECUTION_ERROR = "EXECUTION_ERROR"
CAPACITY_REACHED = "CAPACITY_REACHED"
SESSION_ERROR = "SESSION_ERROR"

RESET_KEYS = {"seed", "episode_id", "task", "index", "task_id"}
"""What a reset may carry: a task (``task``: a row; ``index``: a position in the env's tasks;
``task_id``: a row's id; ``seed``: a seeded draw; none: a random draw) and an ``episode_id``."""
MAX_EPISODE_ID = 255


class WireError(ValueError):
    """A message that does not fit the protocol: answered as an error with ``code``."""

    def __init__(self, message: str, code: str = VALIDATION_ERROR):
        super().__init__(message)
        self.code = code


def error(message: str, code: str, **extra: Any) -> dict[str, Any]:
    """An OpenEnv ``WSErrorResponse``."""
    return {"type": "error", "data": {"message": message, "code": code, **extra}}


def parse_message(raw: str | bytes) -> dict[str, Any]:
    """A client message as a JSON object with a string ``type`` (``WireError`` otherwise)."""
    try:
        message = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise WireError(f"Invalid JSON: {exc}", INVALID_JSON) from None
    if not isinstance(message, dict):
        raise WireError(f"a message must be a JSON object, got {type(message).__name__}")
    if not isinstance(message.get("type", ""), str):
        raise WireError("a message's 'type' must be a string")
    return message


def reset_options(data: Any) -> dict[str, Any]:
    """A reset's ``data``, checked (``WireError`` names the bad key)."""
    if not isinstance(data, dict):
        raise WireError("reset 'data' must be a JSON object")
    unknown = sorted(set(data) - RESET_KEYS)
    if unknown:
        raise WireError(f"unknown reset keys {unknown}; a reset takes {sorted(RESET_KEYS)}")
    seed, index = data.get("seed"), data.get("index")
    for name, value in (("seed", seed), ("index", index)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise WireError(f"'{name}' must be a non-negative integer, got {value!r}")
    if data.get("task") is not None and not isinstance(data["task"], dict):
        raise WireError("'task' must be a task row (a JSON object)")
    for name in ("task_id", "episode_id"):
        value = data.get(name)
        if value is not None and (not isinstance(value, str) or len(value) > MAX_EPISODE_ID):
            raise WireError(f"'{name}' must be a string of at most {MAX_EPISODE_ID} characters")
    if sum(data.get(k) is not None for k in ("task", "index", "task_id")) > 1:
        raise WireError("give at most one of 'task', 'index' and 'task_id'")
    return data


def action_text(data: Any, tool_parser: str) -> str:
    """The reply text of a step's action (``WireError`` for an action that does not fit the schema)."""
    if not isinstance(data, dict):
        raise WireError("an action must be a JSON object")
    unknown = sorted(set(data) - {"message", "tool_calls", "metadata"})
    if unknown:
        raise WireError(f"unknown action fields {unknown}; an action has 'message' and 'tool_calls'")
    text = data.get("message", "")
    if not isinstance(text, str):
        raise WireError("'message' must be a string")
    if not isinstance(data.get("metadata", {}), dict):
        raise WireError("'metadata' must be an object")
    calls = data.get("tool_calls") or []
    if not isinstance(calls, list):
        raise WireError("'tool_calls' must be a list")
    if calls and tool_parser != "xml_json":
        raise WireError(f"this env reads tool calls with {tool_parser!r}: write them in 'message'")
    written = []
    for i, call in enumerate(calls):
        if (
            not isinstance(call, dict)
            or not isinstance(call.get("name"), str)
            or set(call) - {"name", "arguments"}
        ):
            raise WireError(f"tool_calls[{i}] must be an object with a string 'name' and 'arguments'")
        arguments = call.get("arguments", {})
        if isinstance(arguments, str):  # OpenAI's style: the arguments as a JSON string
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                raise WireError(f"tool_calls[{i}].arguments is a string but not JSON") from None
        if not isinstance(arguments, dict):
            raise WireError(f"tool_calls[{i}].arguments must be an object")
        written.append(f"<tool_call>{json.dumps({'name': call['name'], 'arguments': arguments})}</tool_call>")
    return "\n".join([text, *written]) if written and text else "\n".join(written) or text


def reward_value(reward: Reward | None) -> float | None:
    """OpenEnv's ``reward``: the value, or None when there is none yet or it is masked (never 0)."""
    return None if reward is None or reward.masked else reward.value


def result(
    messages: list[dict[str, Any]],
    *,
    task_id: str,
    turn: int,
    done: bool = False,
    truncated: bool = False,
    reward: Reward | None = None,
) -> dict[str, Any]:
    """A reset's or step's result (OpenEnv's ``serialize_observation`` shape)."""
    observation = {
        "messages": messages,
        "task_id": task_id,
        "turn": turn,
        "truncated": truncated,
        "reward_info": reward.to_dict() if reward is not None else None,
    }
    return {"observation": observation, "reward": reward_value(reward), "done": done}


_MESSAGE = {
    "type": "object",
    "properties": {"role": {"type": "string"}, "content": {"type": "string"}},
    "required": ["role", "content"],
}
_TOOL_CALL = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "arguments": {"anyOf": [{"type": "object"}, {"type": "string"}]},
    },
    "required": ["name"],
    "additionalProperties": False,
}
ACTION_SCHEMA: dict[str, Any] = {
    "title": "CascadeAction",
    "description": "The model's reply to the last observation.",
    "type": "object",
    "properties": {
        "metadata": {"type": "object", "description": "Additional metadata for the action"},
        "message": {
            "type": "string",
            "default": "",
            "description": "The reply as the model wrote it, tool calls included in the env's format",
        },
        "tool_calls": {
            "type": "array",
            "items": _TOOL_CALL,
            "default": [],
            "description": "Tool calls given apart; written after 'message' as <tool_call>{json}</tool_call>",
        },
    },
    "additionalProperties": False,
}
OBSERVATION_SCHEMA: dict[str, Any] = {
    "title": "CascadeObservation",
    "description": "What the env answers: the new chat messages, and the reward once the episode is done.",
    "type": "object",
    "properties": {
        "done": {"type": "boolean", "default": False},
        "reward": {
            "anyOf": [{"type": "number"}, {"type": "null"}],
            "default": None,
            "description": "The episode's reward at its end; null before it and when masked (see reward_info)",
        },
        "metadata": {"type": "object"},
        "messages": {"type": "array", "items": _MESSAGE, "description": "New chat messages"},
        "task_id": {"type": "string"},
        "turn": {"type": "integer", "minimum": 0, "description": "Model turns played so far"},
        "truncated": {"type": "boolean", "description": "The episode was cut (turn limit, length)"},
        "reward_info": {
            "anyOf": [{"type": "object"}, {"type": "null"}],
            "description": "At the end: value, masked, reason, error, components",
        },
    },
    "required": ["messages", "task_id", "turn"],
    "additionalProperties": False,
}
STATE_SCHEMA: dict[str, Any] = {
    "title": "CascadeState",
    "type": "object",
    "properties": {
        "episode_id": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
        "step_count": {"type": "integer", "minimum": 0, "default": 0},
        "task_id": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
        "done": {"type": "boolean", "default": False},
        "env_id": {"type": "string"},
    },
    "additionalProperties": True,
}
