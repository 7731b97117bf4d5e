"""Python functions as tools: ``Tool``, the ``@tool`` decorator, and ``Toolbox``, which runs calls.

``Toolbox.acall`` turns everything the policy can get wrong into a tool message it can read
(``ok=False``, ``"Error: ..."``): an unknown tool, arguments that break the tool's schema, a
``ToolError`` raised by the function, any other exception, a timeout. Mistakes of the env itself (a
hidden value missing from ``context``) raise. ``Toolbox.aturn`` answers a whole model reply: the
tool turn of every multi-turn env (parse, bound, dispatch, answer, end or go on).

Arguments are checked against the announced schema made strict by the function's signature: an
argument outside the schema's ``properties`` is unknown (so the policy can never pass a hidden
one), and a parameter the function needs is required even when the schema forgot it.
Top-level ``Enum`` parameters receive the member and ``int`` ones an int (see
``argument_converters``).

Async functions run under ``timeout_s``. Sync functions run inline on the event loop, unbounded:
they must be fast (a lookup in an in-memory table); anything slow or blocking belongs in an
async function.
"""

from __future__ import annotations

import asyncio
import copy
import difflib
import inspect
import json
import logging
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from ..core import CascadeError, Completion, Message
from ..reasoning import split_reasoning
from .calls import DEFAULT_TOOL_PARSER, ToolCall, normalise_tool, tool_parsers
from .schema import (
    argument_converters,
    function_description,
    function_name,
    parameters_from_function,
    tool_parameters,
    validate_arguments,
)
from .validation import clip

log = logging.getLogger("cascade_envs.tools")

TOOL_NAME_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
MAX_ERROR_CHARS = 1000
"""Bound of an error message built from an exception or an unknown tool's name."""
MAX_LISTED_NAMES = 10
"""Names of calls left unrun that a tool turn's message lists."""


class ToolError(CascadeError):
    """Raised by a tool function for an error the policy should read (bad id, no such row)."""


@dataclass(frozen=True)
class Tool:
    """A function the policy can call, with the name, description and JSON schema it is announced with."""

    name: str
    description: str
    parameters: dict
    """JSON schema (type object) of the arguments the policy passes."""
    fn: Callable[..., Any]
    """Sync or async; called with the arguments by name."""
    hidden: tuple[str, ...] = ()
    """Parameters the env injects (db handle, workspace) from ``Toolbox.acall``'s context; never in the schema."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not TOOL_NAME_RE.match(self.name):
            raise ValueError(
                f"a tool name is 1-64 letters, digits or _.:- characters, got {self.name!r} "
                "(Tool.from_function and @tool take name=)"
            )
        if not isinstance(self.parameters, dict) or self.parameters.get("type", "object") != "object":
            raise ValueError(f"tool {self.name!r}: parameters must be a JSON schema of type object")
        object.__setattr__(self, "hidden", tuple(self.hidden))

    @property
    def spec(self) -> dict:
        """The Chat-Completions tool spec, for ``with_tools``/``render_tools_prompt``."""
        function = {"name": self.name, "description": self.description, "parameters": self.parameters}
        return {"type": "function", "function": function}

    @classmethod
    def from_function(
        cls,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        parameters: dict | None = None,
        hidden: Iterable[str] = (),
    ) -> Tool:
        """A tool from ``fn``; ``description``/``parameters`` replace what its docstring and hints give."""
        hidden = tuple(hidden)
        tool_parameters(fn, hidden)  # refuses *args, **kwargs and unknown hidden names
        if parameters is None:
            parameters = parameters_from_function(fn, hidden=hidden)
        if description is None:
            description = function_description(fn)
        return cls(name or function_name(fn), description, copy.deepcopy(parameters), fn, hidden)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


@overload
def tool(
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    parameters: dict | None = None,
    hidden: Iterable[str] = (),
) -> Tool: ...
@overload
def tool(
    fn: None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    parameters: dict | None = None,
    hidden: Iterable[str] = (),
) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    parameters: dict | None = None,
    hidden: Iterable[str] = (),
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Decorator, bare (``@tool``) or with arguments (``@tool(hidden=["db"])``): the function becomes a ``Tool``.

    The ``Tool`` stays callable like the function. Decorate plain functions: a ``Tool`` does not bind
    ``self``, so for a method use ``Tool.from_function(obj.method)``.
    """
    hidden = tuple(hidden)

    def make(f: Callable[..., Any]) -> Tool:
        return Tool.from_function(f, name=name, description=description, parameters=parameters, hidden=hidden)

    return make if fn is None else make(fn)


@dataclass
class ToolResult:
    """The outcome of one tool call."""

    call: ToolCall
    content: str
    """What the policy reads: the rendered return value, or ``"Error: ..."``."""
    ok: bool
    error: str | None = None
    """Set when not ok: the content without the ``"Error: "`` prefix."""
    value: Any = None
    """The raw return value when ok."""
    seconds: float = 0.0

    def message(self) -> Message:
        """The tool message that answers the call."""
        return {"role": "tool", "tool_call_id": self.call.id, "name": self.call.name, "content": self.content}


@dataclass(slots=True)
class ToolTurn:
    """What one model reply did with the tools (``Toolbox.aturn``)."""

    messages: list[Message] = field(default_factory=list)
    """The tool messages that answer the reply (results, then ``Error:`` messages)."""
    calls: int = 0
    """Calls that ran."""
    errors: int = 0
    """Calls that failed, and call blocks that did not parse."""
    ended: bool = False
    """The reply made no call: it is the final answer and the episode ends."""

    @property
    def info(self) -> dict[str, int]:
        """The counts, as a ``Turn``'s info: ``tool_calls``, ``tool_errors``."""
        return {"tool_calls": self.calls, "tool_errors": self.errors}


class _Signature:
    """What a tool's function accepts: the strict schema its arguments are checked with, and converters."""

    def __init__(self, tool: Tool):
        accepted = {p.name: p for p in tool_parameters(tool.fn, tool.hidden)}
        properties = tool.parameters.get("properties") or {}
        declared = tool.parameters.get("required") or []
        if not isinstance(properties, dict) or not all(
            isinstance(s, (dict, bool)) for s in properties.values()
        ):
            raise ValueError(f"tool {tool.name!r}: 'properties' must map each parameter to a schema")
        if not isinstance(declared, list) or not all(isinstance(name, str) for name in declared):
            raise ValueError(f"tool {tool.name!r}: 'required' must be a list of parameter names")
        hidden = [name for name in properties if name in tool.hidden]
        if hidden:
            raise ValueError(f"tool {tool.name!r} announces hidden parameter(s) {hidden}")
        foreign = [name for name in properties if name not in accepted]
        if foreign:
            raise ValueError(
                f"tool {tool.name!r} announces parameter(s) {foreign} that "
                f"{function_name(tool.fn)!r} does not take"
            )
        needed = [name for name, p in accepted.items() if p.default is p.empty]
        required = list(dict.fromkeys([*declared, *needed]))
        self.schema = {
            **tool.parameters,
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        }
        self.converters = argument_converters(tool.fn, tool.hidden)


class _Timeout(Exception):
    pass


class Toolbox:
    """The tools of an env, by name; ``acall`` runs one call and never raises for the policy's mistakes.

    Iterating a toolbox yields its ``Tool`` objects (``names`` lists their names). ``drop_nulls``:
    an argument given as ``null`` counts as not given (as NeMo Gym's servers drop them).
    """

    def __init__(
        self,
        tools: Iterable[Tool | Callable[..., Any]],
        *,
        max_result_chars: int = 20_000,
        timeout_s: float = 30.0,
        drop_nulls: bool = False,
    ):
        if max_result_chars < 1:
            raise ValueError("max_result_chars must be at least 1")
        if not timeout_s > 0:
            raise ValueError("timeout_s must be positive")
        self.max_result_chars = int(max_result_chars)
        self.timeout_s = float(timeout_s)
        self.drop_nulls = bool(drop_nulls)
        self._tools: dict[str, Tool] = {}
        self._signatures: dict[str, _Signature] = {}
        for item in tools:
            one = item if isinstance(item, Tool) else Tool.from_function(item)
            if one.name in self._tools:
                raise ValueError(f"two tools are named {one.name!r}")
            self._signatures[one.name] = _Signature(one)
            self._tools[one.name] = one

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __getitem__(self, name: str) -> Tool:
        return self._tools[name]

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def specs(self) -> list[dict]:
        """``Tool.spec`` of each tool, for ``with_tools()``/``render_tools_prompt()``."""
        return [t.spec for t in self]

    def with_specs(self, specs: Sequence[dict]) -> Toolbox:
        """The same functions, announced and validated with ``specs`` (e.g. a task row's own tool list).

        Specs may be Chat-Completions (``{"type", "function": {...}}``) or Responses-API (flat) ones.
        Only the tools named in ``specs`` are exposed; a spec naming a function this toolbox lacks,
        or announcing a parameter its function does not take, raises ``ValueError``.
        """
        tools = []
        for spec in specs:
            function = normalise_tool(spec)["function"]
            base = self._tools.get(function["name"])
            if base is None:
                raise ValueError(
                    f"a tool spec names {function['name']!r}, which this toolbox lacks "
                    f"(it has: {', '.join(self.names) or 'no tools'})"
                )
            description = function.get("description")
            parameters = function.get("parameters") or {"type": "object", "properties": {}}
            tools.append(
                Tool(
                    base.name,
                    base.description if description is None else description,
                    copy.deepcopy(parameters),
                    base.fn,
                    base.hidden,
                )
            )
        return Toolbox(
            tools,
            max_result_chars=self.max_result_chars,
            timeout_s=self.timeout_s,
            drop_nulls=self.drop_nulls,
        )

    async def acall(self, call: ToolCall, context: Mapping[str, Any] | None = None) -> ToolResult:
        """Run ``call``; hidden parameters come from ``context`` (a missing one raises ``KeyError``).

        A call of a sync function (and any call that fails before running) never suspends: its
        coroutine finishes on the first ``send(None)``, so it can also be driven without a loop.
        """
        chosen = self._tools.get(call.name)
        if chosen is None:
            return self._failure(call, self._unknown_tool(call.name))
        context = context or {}
        missing = [name for name in chosen.hidden if name not in context]
        if missing:
            raise KeyError(
                f"tool {chosen.name!r} needs {missing} in the context (hidden parameters the env injects)"
            )
        signature = self._signatures[chosen.name]
        given = (
            {k: v for k, v in call.arguments.items() if v is not None} if self.drop_nulls else call.arguments
        )
        problems = validate_arguments(signature.schema, given)
        arguments = dict(given) if not problems else {}
        for name, convert in signature.converters.items():
            if arguments.get(name) is not None:
                try:
                    arguments[name] = convert(arguments[name])
                except ValueError as exc:
                    problems.append(f"argument {name!r}: {exc}")
        if problems:
            listed = "\n".join(f"- {p}" for p in problems)
            return self._failure(call, f"invalid arguments for {chosen.name}:\n{listed}")
        arguments.update({name: context[name] for name in chosen.hidden})
        start = time.perf_counter()
        try:
            value = await self._run(chosen.fn, arguments)
        except ToolError as exc:
            return self._failure(call, clip(str(exc) or f"{chosen.name} failed", MAX_ERROR_CHARS), start)
        except _Timeout:
            return self._failure(call, f"{chosen.name} timed out after {self.timeout_s:g} s", start)
        except Exception as exc:
            log.debug("tool %s raised", chosen.name, exc_info=True)
            return self._failure(
                call, clip(f"{chosen.name} failed: {type(exc).__name__}: {exc}", MAX_ERROR_CHARS), start
            )
        seconds = time.perf_counter() - start
        try:
            content = render_result(value)
        except (TypeError, ValueError) as exc:
            message = f"{chosen.name} returned a value that cannot be rendered as JSON: {exc}"
            return self._failure(call, clip(message, MAX_ERROR_CHARS), start)
        return ToolResult(call, self._cut(content), ok=True, value=value, seconds=seconds)

    async def aturn(
        self,
        reply: str,
        context: Mapping[str, Any] | None = None,
        *,
        max_calls: int,
        parser: str = DEFAULT_TOOL_PARSER,
        stop: Callable[[], str | None] | None = None,
    ) -> ToolTurn:
        """Answer one model reply with its tool calls: the tool turn of a multi-turn env.

        A reply cut at the length limit runs nothing (the env ends the episode truncated). The calls
        are parsed (``parser``) from the reply's answer, the reasoning split off, so calls inside
        ``<think>`` never run; a reply with no call (or an unterminated think block) ends the
        episode. At most ``max_calls`` run, in order, each given the hidden arguments in
        ``context``; a call block that does not parse is an ``Error:`` message (within the same
        bound). Calls past the bound, or after ``stop()`` gives a reason (the episode finished, the
        workspace is gone), are not run, and one ``Error:`` message says why, naming them.
        """
        if isinstance(reply, Completion) and reply.truncated:
            return ToolTurn()
        split = split_reasoning(reply)
        parsed = tool_parsers.get(parser)(split.answer)
        if split.unterminated or not (parsed.calls or parsed.errors):
            return ToolTurn(ended=True)
        turn, why = ToolTurn(errors=len(parsed.errors)), None
        for call in parsed.calls:
            why = stop() if stop is not None else None
            if why or turn.calls == max_calls:
                break
            result = await self.acall(call, context)
            turn.calls += 1
            turn.errors += not result.ok
            turn.messages.append(result.message())
        room = max_calls - turn.calls
        turn.messages += [_error_message(error) for error in parsed.errors[:room]]
        names = [call.name for call in parsed.calls[turn.calls :]]
        left = len(names) + max(0, len(parsed.errors) - room)
        if left:
            shown = ", ".join(names[:MAX_LISTED_NAMES]) + (", ..." if len(names) > MAX_LISTED_NAMES else "")
            why = why or f"only the first {max_calls} tool calls of a reply run"
            listed = f" ({shown})" if shown else ""
            turn.messages.append(_error_message(f"{why}; {left} more were not run{listed}"))
        return turn

    async def _run(self, fn: Callable[..., Any], arguments: dict[str, Any]) -> Any:
        result = fn(**arguments)
        if not inspect.isawaitable(result):
            return result
        deadline = asyncio.timeout(self.timeout_s)
        try:
            async with deadline:
                return await result
        except TimeoutError:
            if deadline.expired():
                raise _Timeout from None
            raise

    def _unknown_tool(self, name: str) -> str:
        close = difflib.get_close_matches(name, self.names, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        available = ", ".join(self.names) or "none"
        return clip(f"unknown tool {clip(name, 80)!r}{hint}; available tools: {available}", MAX_ERROR_CHARS)

    def _failure(self, call: ToolCall, error: str, start: float | None = None) -> ToolResult:
        seconds = 0.0 if start is None else time.perf_counter() - start
        return ToolResult(call, self._cut(f"Error: {error}"), ok=False, error=error, seconds=seconds)

    def _cut(self, content: str) -> str:
        if len(content) <= self.max_result_chars:
            return content
        dropped = len(content) - self.max_result_chars
        return f"{content[: self.max_result_chars]}\n[... {dropped} more characters cut]"


def _error_message(error: str) -> Message:
    return {"role": "tool", "content": f"Error: {error}"}


def render_result(value: Any) -> str:
    """What the policy reads of a return value: a ``str`` as is, anything else as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)
