"""OpenAI Responses items (NeMo Gym's lingua franca) to and from cascade's text turns and messages.

A model turn arrives as a Responses ``response`` whose ``output`` holds ``reasoning``, ``message``
and ``function_call`` items (model servers may add ``prompt_token_ids``, ``generation_token_ids``,
``generation_log_probs``). ``completion_of`` makes the cascade ``Completion`` of it: reasoning as
``<think>...</think>``, the message text, and each function call as a text-mode
``<tool_call>{"name", "arguments"}</tool_call>`` block (what cascade envs parse), with the token ids
and log-probs kept (NeMo Gym's model servers put a turn's whole generation on its last item). Malformed items are a ``BadRequest`` naming the field.

The other way (the client side, ``env``): ``turn_items`` makes the items of one cascade turn (its
reasoning, its text, its function calls and their outputs) and ``response_object`` the
``response`` that a ``/verify`` request carries; ``completion_of`` reads back the text they came from.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from ...core import Completion, Message
from ...serving.errors import BadRequest

MAX_ITEMS = 4096
"""Output items accepted in one response."""
MODEL = "cascade-envs"
"""The ``model`` of the responses the client side builds."""


@dataclass(frozen=True)
class FunctionCall:
    """A ``function_call`` item: its ``call_id``, tool ``name`` and JSON ``arguments`` (parsed, or the raw text)."""

    call_id: str
    name: str
    arguments: Any


def _text_parts(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise BadRequest(f"{where}.content must be a string or a list of parts")
    texts = []
    for j, part in enumerate(content):
        if not isinstance(part, dict):
            raise BadRequest(f"{where}.content[{j}] must be an object")
        text = part.get("text", part.get("refusal", ""))
        if not isinstance(text, str):
            raise BadRequest(f"{where}.content[{j}].text must be a string")
        texts.append(text)
    return "".join(texts)


def output_items(response: Any) -> list[dict[str, Any]]:
    """``response["output"]``, checked to be a list of typed objects (``BadRequest`` otherwise)."""
    if not isinstance(response, dict):
        raise BadRequest("'response' must be a Responses API object")
    output = response.get("output")
    if not isinstance(output, list):
        raise BadRequest("response.output must be a list of items")
    if len(output) > MAX_ITEMS:
        raise BadRequest(f"response.output has {len(output)} items; at most {MAX_ITEMS}")
    for i, item in enumerate(output):
        if not isinstance(item, dict) or not isinstance(item.get("type"), str):
            raise BadRequest(f"response.output[{i}] must be an object with a string 'type'")
    return output


def function_call(item: dict[str, Any], where: str) -> FunctionCall:
    name, call_id, arguments = item.get("name"), item.get("call_id"), item.get("arguments", "{}")
    if not isinstance(name, str) or not name or not isinstance(call_id, str):
        raise BadRequest(f"{where} needs string 'name' and 'call_id'")
    if not isinstance(arguments, str):
        raise BadRequest(f"{where}.arguments must be a JSON string")
    try:
        parsed: Any = json.loads(arguments)
    except json.JSONDecodeError:
        parsed = arguments  # the env's parser reports the broken call to the model
    return FunctionCall(call_id, name, parsed)


def _ints(value: Any, where: str) -> list[int] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise BadRequest(f"{where} must be a list of integers")
    return value


def _floats(value: Any, where: str) -> list[float] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value
    ):
        raise BadRequest(f"{where} must be a list of finite numbers")
    return [float(v) for v in value]


def tool_call_text(name: str, arguments: Any) -> str:
    """A call in cascade's text mode (the default ``xml_json`` tool parser's format)."""
    return (
        f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments}, ensure_ascii=False)}\n</tool_call>"
    )


def completion_of(
    response: Any, *, after_last_tool_output: bool = False
) -> tuple[Completion, list[FunctionCall]]:
    """The cascade ``Completion`` of one model turn, and its function calls in order.

    ``after_last_tool_output``: read only the items after the last ``function_call_output`` (a
    ``/verify`` body holds a whole multi-step rollout; its final turn is the answer).
    """
    items = output_items(response)
    start = 0
    if after_last_tool_output:
        outputs = [i for i, item in enumerate(items) if item["type"] == "function_call_output"]
        start = outputs[-1] + 1 if outputs else 0
    thinking: list[str] = []
    parts: list[str] = []
    calls: list[FunctionCall] = []
    token_ids: list[int] = []
    logprobs: list[float] = []
    prompt_ids: list[int] | None = None
    for i in range(start, len(items)):
        item, where = items[i], f"response.output[{i}]"
        kind = item["type"]
        if kind == "reasoning":
            summary = item.get("summary") or []
            if not isinstance(summary, list):
                raise BadRequest(f"{where}.summary must be a list")
            thinking.append(_text_parts(summary, where + ".summary") if summary else "")
        elif kind == "message":
            if item.get("role", "assistant") != "assistant":
                continue  # input echoed back: not the model's turn
            parts.append(_text_parts(item.get("content", ""), where))
        elif kind == "function_call":
            call = function_call(item, where)
            calls.append(call)
            parts.append(tool_call_text(call.name, call.arguments))
        else:
            continue  # function_call_output and other item kinds are not the model's text
        ids = _ints(item.get("generation_token_ids"), where + ".generation_token_ids")
        lps = _floats(item.get("generation_log_probs"), where + ".generation_log_probs")
        if prompt_ids is None:
            prompt_ids = _ints(item.get("prompt_token_ids"), where + ".prompt_token_ids")
        if ids is not None:  # model servers put a turn's whole generation on its last item
            token_ids.extend(ids)
            logprobs.extend(lps or [])
    text = "\n".join(p for p in parts if p)
    reasoning = "\n".join(t for t in thinking if t)
    if reasoning:
        text = f"<think>{reasoning}</think>{text}"
    details = response.get("incomplete_details")
    finish = (
        "length" if isinstance(details, dict) and details.get("reason") == "max_output_tokens" else "stop"
    )
    keep = bool(token_ids)
    completion = Completion(
        text,
        finish,
        token_ids if keep else None,
        logprobs if keep and len(logprobs) == len(token_ids) else None,
        prompt_ids if keep else None,
    )
    return completion, calls


def input_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """Cascade chat messages as Responses ``input`` items (``tool`` messages become user text)."""
    items = []
    for message in messages:
        role = message.get("role")
        content = message.get("content") or ""
        if role not in ("user", "assistant", "system", "developer"):
            role, content = "user", f"[{role} output]\n{content}"
        items.append({"role": role, "content": content, "type": "message"})
    return items


def observation_text(messages: list[Message]) -> str | None:
    """The env's answer to a turn as one observation string (None when it said nothing)."""
    texts = [str(m.get("content") or "") for m in messages]
    joined = "\n\n".join(t for t in texts if t)
    return joined or None


# ----- the client side: cascade turns as Responses items -------------------------------------------


def message_item(text: str, item_id: str = "msg_0") -> dict[str, Any]:
    """An assistant ``message`` item holding ``text``."""
    content = [{"type": "output_text", "text": text, "annotations": []}]
    return {"id": item_id, "type": "message", "role": "assistant", "status": "completed", "content": content}


def turn_items(
    turn: int, reasoning: str, text: str, calls: list[tuple[FunctionCall, str]]
) -> list[dict[str, Any]]:
    """The items of model turn ``turn``: its ``reasoning``, its visible ``text`` (each when not empty),
    then each function call with the ``function_call_output`` that answered it."""
    items: list[dict[str, Any]] = []
    if reasoning:
        summary = [{"type": "summary_text", "text": reasoning}]
        items.append({"id": f"rs_{turn}", "type": "reasoning", "summary": summary})
    if text:
        items.append(message_item(text, f"msg_{turn}"))
    for call, _ in calls:
        arguments = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
        items.append(
            {
                "id": f"fc_{call.call_id}",
                "type": "function_call",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": arguments,
                "status": "completed",
            }
        )
    items += [{"type": "function_call_output", "call_id": c.call_id, "output": out} for c, out in calls]
    return items


def response_object(
    output: list[dict[str, Any]], *, tools: list[Any] | None = None, incomplete: bool = False
) -> dict[str, Any]:
    """A Responses ``response`` with ``output`` (``incomplete``: its last turn was cut at the length limit)."""
    return {
        "id": "resp_cascade",
        "object": "response",
        "created_at": 0.0,
        "model": MODEL,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": list(tools or []),
        "status": "incomplete" if incomplete else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
    }
