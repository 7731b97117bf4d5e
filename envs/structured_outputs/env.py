"""``cascade/StructuredOutput-v0``: the response must validate against the task's schema, made strict.

Rows use the NeMo Gym ``structured_outputs`` layout: ``schema_str`` (a JSON schema as text),
``schema_type`` (the format of the reply: json, yaml, toml, csv or xml) and ``response_mode``:

- ``"text"`` (default): the whole final answer is the document;
- ``"tool_call"``: the answer must make exactly one tool call (parsed from the text by the env's
  tool parser), named ``tool_name`` when the row gives one; its arguments, or the value under
  ``tool_payload_key``, are the document.

Reward 1 when the document validates, else 0 with ``components["error_type"]`` (``parse_error``,
``validation_error``, ``missing_tool_call``, ...) and ``components["errors"]`` (messages with
JSON paths). A schema that is not valid JSON or not a valid JSON schema fails at load with a
``TaskError`` naming ``schema_str``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from cascade_envs import Env, Reward, Task, TaskError

from .formats import PARSERS, XML_MISSING, ParseError, coerce, format_available, parse, unfence
from .schema import SchemaProblem, schema_text, strict_validator, validation_errors

RESPONSE_MODES = ("text", "tool_call")


def _fail(error_type: str, errors: list[str], **info: Any) -> Reward:
    return Reward.zero(f"{error_type}: {errors[0]}", error_type=error_type, errors=errors, **info)


class StructuredOutputEnv(Env):
    """Structured output checked against a strict JSON schema.

    ``allow_code_fence=True`` also accepts a reply wrapped in one markdown code fence (upstream
    does not, and neither does the default).
    """

    default_tasks: ClassVar[str | None] = "bundled:structured_outputs/samples.jsonl"

    def __init__(self, tasks: Any = None, *, allow_code_fence: bool = False, **kwargs: Any):
        self.allow_code_fence = bool(allow_code_fence)
        super().__init__(tasks, **kwargs)

    def load_task(self, row: dict[str, Any]) -> Task:
        task = super().load_task(row)
        try:
            strict_validator(schema_text(row.get("schema_str")))
        except SchemaProblem as exc:
            raise TaskError(str(exc), "schema_str") from exc
        schema_type = row.get("schema_type", "json")
        if not isinstance(schema_type, str) or schema_type.lower() not in PARSERS:
            raise TaskError(f"unsupported format {schema_type!r:.40}; supported: {sorted(PARSERS)}", "schema_type")
        if not format_available(schema_type.lower()):
            raise TaskError(XML_MISSING, "schema_type")
        mode = row.get("response_mode") or "text"
        if mode not in RESPONSE_MODES:
            raise TaskError(f"unknown mode {mode!r:.40}; choose from {RESPONSE_MODES}", "response_mode")
        for key in ("tool_name", "tool_payload_key"):
            if row.get(key) is not None and not isinstance(row[key], str):
                raise TaskError("must be a string", key)
        return task

    async def ascore(self, task: Task, answer: str) -> Reward:
        validator = strict_validator(schema_text(task["schema_str"]))
        schema_type = task.get("schema_type", "json").lower()
        mode = task.get("response_mode") or "text"
        info: dict[str, Any] = {"schema_type": schema_type, "response_mode": mode}
        if mode == "tool_call":
            document, problem = self._tool_payload(task, answer)
            if problem:
                return _fail(*problem, **info)
        else:
            if not answer.strip():
                return _fail("empty_response", ["the response is empty"], **info)
            try:
                document = parse(unfence(answer) if self.allow_code_fence else answer, schema_type)
            except ParseError as exc:
                return _fail("parse_error", [str(exc)], **info)
            document = coerce(document, schema_type, validator.schema)
        try:
            errors = validation_errors(validator, document)
        except RecursionError:
            return _fail("validation_error", ["the document is nested too deeply to validate"], **info)
        if errors:
            return _fail("validation_error", errors, **info)
        return Reward(1.0, info)

    def _tool_payload(self, task: Task, answer: str) -> tuple[Any, tuple[str, list[str]] | None]:
        """The document carried by the single tool call in ``answer``, or the problem with it."""
        parsed = self.parse_tool_calls(answer)
        attempts = len(parsed.calls) + len(parsed.errors)
        if attempts == 0:
            return None, ("missing_tool_call", ["no tool call in the response"])
        if attempts > 1:
            names = ", ".join(call.name for call in parsed.calls) or "unparseable calls"
            return None, ("multiple_tool_calls", [f"expected exactly one tool call, got {attempts}: {names}"])
        if parsed.errors:
            return None, ("tool_arguments_parse_error", parsed.errors)
        call = parsed.calls[0]
        expected = task.get("tool_name")
        if expected and call.name != expected:
            return None, ("wrong_tool_name", [f"expected tool {expected!r}, got {call.name!r}"])
        key = task.get("tool_payload_key")
        if key:
            if key not in call.arguments:
                return None, ("missing_tool_payload_key", [f"the call's arguments lack {key!r}"])
            return call.arguments[key], None
        return call.arguments, None
