"""Tool calls in text: announcing tools in the system prompt and parsing calls from model output.

Envs never rely on a server-side tool parser: the tools go inside ``<tools></tools>`` in the system
prompt and calls come back as ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, as in
the Nemotron-Cascade-2 chat template. Other formats plug in through ``tool_parsers``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core import Message
from ..registry import Registry


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]
    id: str = ""


@dataclass
class ParsedToolCalls:
    """Calls found in a response, the text around them, and the calls that could not be parsed."""

    calls: list[ToolCall] = field(default_factory=list)
    content: str = ""
    errors: list[str] = field(default_factory=list)


ToolParser = Callable[[str], ParsedToolCalls]
tool_parsers: Registry[ToolParser] = Registry("tool parser")

_TOOL_CALL_RE = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)


def parse_xml_json_tool_calls(text: str) -> ParsedToolCalls:
    """Parse ``<tool_call>{json}</tool_call>`` blocks; broken ones are reported in ``errors``."""
    result = ParsedToolCalls(content=_TOOL_CALL_RE.sub("", text).strip())
    for index, match in enumerate(_TOOL_CALL_RE.finditer(text)):
        body = match.group(1).strip()
        try:
            payload = json.loads(body)
        except json.JSONDecodeError as exc:
            result.errors.append(f"tool call {index}: invalid JSON ({exc.msg} at char {exc.pos})")
            continue
        if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):
            result.errors.append(f"tool call {index}: expected an object with a string 'name'")
            continue
        arguments = payload.get("arguments", payload.get("parameters", {}))
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                result.errors.append(f"tool call {index}: 'arguments' is a string but not JSON")
                continue
        if not isinstance(arguments, dict):
            result.errors.append(f"tool call {index}: 'arguments' must be an object")
            continue
        result.calls.append(ToolCall(payload["name"], arguments, id=f"call_{index}"))
    return result


tool_parsers.register("xml_json", parse_xml_json_tool_calls)
DEFAULT_TOOL_PARSER = "xml_json"


def normalise_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """Accept Chat Completions (``{"type", "function": {...}}``) and Responses API (flat) tool specs."""
    if "function" in tool:
        fn = tool["function"]
    else:
        fn = {k: tool[k] for k in ("name", "description", "parameters", "strict") if k in tool}
    if not isinstance(fn.get("name"), str):
        raise ValueError(f"a tool needs a string 'name': {tool!r:.200}")
    return {"type": "function", "function": fn}


def render_tools_prompt(tools: Sequence[dict[str, Any]]) -> str:
    """The system-prompt section that announces ``tools`` and the call format."""
    lines = "\n".join(json.dumps(normalise_tool(t), ensure_ascii=False) for t in tools)
    return (
        "# Tools\n\n"
        "You can call the functions whose signatures are listed inside <tools></tools>:\n"
        f"<tools>\n{lines}\n</tools>\n\n"
        "To call a function, write a JSON object with its name and arguments inside "
        "<tool_call></tool_call> tags, one call per block:\n"
        '<tool_call>\n{"name": "function_name", "arguments": {"arg": "value"}}\n</tool_call>'
    )


def with_tools(messages: list[Message], tools: Sequence[dict[str, Any]]) -> list[Message]:
    """Return ``messages`` with the tools section appended to (or forming) the system prompt."""
    if not tools:
        return list(messages)
    section = render_tools_prompt(tools)
    if messages and messages[0].get("role") == "system":
        head = {**messages[0], "content": f"{messages[0].get('content') or ''}\n\n{section}".strip()}
        return [head, *messages[1:]]
    return [{"role": "system", "content": section}, *messages]
