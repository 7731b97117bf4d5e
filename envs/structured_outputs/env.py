"""``cascade/StructuredOutput-v0``: the response must validate against the task's schema, made strict.

Rows use the NeMo Gym ``structured_outputs`` layout: ``schema_str`` (a JSON schema as text),
``schema_type`` (the format of the reply: json, yaml, toml, csv or xml) and ``response_mode``:

- ``"text"`` (default): the whole final answer is the document;
- ``"tool_call"``: the answer must make exactly one tool call (parsed from the text by the env's
  tool parser), named ``tool_name`` when the row gives one; its arguments, or the value under
  ``tool_payload_key``, are the document.

Reward 1 when the document validates and carries a value, else 0 with
``components["error_type"]`` (``parse_error``, ``validation_error``, ``empty_document``,
``missing_tool_call``, ...) and ``components["errors"]`` (messages with JSON paths).

A reply that contains no answer never scores 1, in any format: the validated document must carry
at least one number, boolean or non-blank string (``verify.py``). So ``null``, ``{}``, ``[]``, a
TOML or YAML reply that is only a comment, a CSV reply that is only a header line (any one-line
reply: ``csv.DictReader`` reads it as the header of zero rows), an XML root with empty children,
and skeletons of blank fields all score 0 with ``empty_document``. A CSV must have a header
naming each column of the schema's items once, then at least one data row. Typeless schemas that
declare ``properties`` are read as objects (``schema.py``), so a bare sentence (a YAML string)
does not validate against them.

A schema that is not valid JSON or not a valid JSON schema fails at load with a ``TaskError``
naming ``schema_str``; so does one under which only an empty document validates (e.g.
``{"type": "object", "properties": {}}``), since no answer to it could score.

Limits: parsing and validation run in the env's ``VerifierPool`` (worker processes, started on
first use, closed by ``aclose``) with a hard ``timeout_s`` per answer; answers over
``max_answer_chars`` are not parsed. Both are the answer's fault and score 0 with a reason
starting "verifier limit: ": the schema compiled and was checked when the task loaded, so what
remains costly is the document (huge, deeply nested, or a string that makes a schema ``pattern``
backtrack catastrophically; a model can learn to avoid those, and the same schema validates
sensible answers quickly). Masked instead (the verifier's or the task's fault): the worker
crashed or ran out of memory, or the check raised.

Answers of at most ``inline_chars`` characters (default 1000; an eighth of that for YAML, whose
pure-Python parser costs ~8x more per character) are checked in-process when the schema has
nothing that can cost more than linear time on a short document (``schema.costly_to_validate``:
a regex, ``uniqueItems``, recursive ``$ref``): parse + validate cost ~0.55 µs per JSON
character, so a 1000-character answer costs ~0.55 ms, and the ~0.15 ms worker round trip would
make short answers 1.5-3x dearer; longer answers lose under 1.3x to it and are checked in
parallel on as many cores as there are workers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from cascade_envs import Env, Prompt, Reward, Row, TaskError
from cascade_envs.verifier_pool import VerifierLimit, VerifierPool
from cascade_envs.workers import WorkerError

from .formats import PARSERS, XML_MISSING, format_available
from .schema import SchemaProblem, admits_only_empty, costly_to_validate, schema_text, strict_validator
from .verify import check_document, check_text

RESPONSE_MODES = ("text", "tool_call")
MAX_ANSWER_CHARS = 200_000
TIMEOUT_S = 10.0
INLINE_CHARS = 1000
_COST_PER_CHAR = {"yaml": 8}  # relative to JSON, measured


def _fail(error_type: str, errors: list[str], **info: Any) -> Reward:
    return Reward.zero(f"{error_type}: {errors[0]}", error_type=error_type, errors=errors, **info)


@dataclass(frozen=True)
class StructuredOutputTask:
    """A row, checked: its schema (canonical text, compiled and checked at load), format and response mode."""

    prompt: Prompt
    schema: str
    schema_type: str = "json"
    """Lower-case: json, yaml, toml, csv or xml."""
    response_mode: str = "text"
    tool_name: str | None = None
    tool_payload_key: str | None = None


class StructuredOutputEnv(Env[StructuredOutputTask]):
    """Structured output checked against a strict JSON schema.

    ``allow_code_fence=True`` also accepts a reply wrapped in one markdown code fence (upstream
    does not, and neither does the default). ``timeout_s``: hard limit per answer's check;
    ``max_answer_chars``: longer answers score 0 unchecked; ``inline_chars``: see the module doc;
    ``workers``: verifier processes (default up to 4, one per CPU).
    """

    default_tasks: ClassVar[str | None] = "bundled:structured_outputs/samples.jsonl"

    def __init__(
        self,
        tasks: Any = None,
        *,
        allow_code_fence: bool = False,
        timeout_s: float = TIMEOUT_S,
        max_answer_chars: int = MAX_ANSWER_CHARS,
        inline_chars: int = INLINE_CHARS,
        workers: int | None = None,
        **kwargs: Any,
    ):
        self.allow_code_fence = bool(allow_code_fence)
        self.inline_chars = int(inline_chars)
        self.verifier = VerifierPool(
            timeout_s=timeout_s, max_chars=max_answer_chars, workers=workers, preload=(check_text,)
        )
        super().__init__(tasks, **kwargs)

    def load_task(self, row: Row) -> StructuredOutputTask:
        prompt = Prompt.of(row)
        try:
            schema = schema_text(row.get("schema_str"))
            validator = strict_validator(schema)
        except SchemaProblem as exc:
            raise TaskError(str(exc), "schema_str") from exc
        if admits_only_empty(validator.schema):
            raise TaskError(
                "only an empty document (null, {}, [], blank strings) validates against this schema, "
                "and an empty document is not an answer",
                "schema_str",
            )
        schema_type = row.get("schema_type", "json")
        if not isinstance(schema_type, str) or schema_type.lower() not in PARSERS:
            raise TaskError(
                f"unsupported format {schema_type!r:.40}; supported: {sorted(PARSERS)}", "schema_type"
            )
        if not format_available(schema_type.lower()):
            raise TaskError(XML_MISSING, "schema_type")
        mode = row.get("response_mode") or "text"
        if mode not in RESPONSE_MODES:
            raise TaskError(f"unknown mode {mode!r:.40}; choose from {RESPONSE_MODES}", "response_mode")
        for key in ("tool_name", "tool_payload_key"):
            if row.get(key) is not None and not isinstance(row[key], str):
                raise TaskError("must be a string", key)
        return StructuredOutputTask(
            prompt, schema, schema_type.lower(), mode, row.get("tool_name"), row.get("tool_payload_key")
        )

    async def acheck(self, task: StructuredOutputTask, answer: str) -> Reward | None:
        """The public check: the schema is given in the prompt, so it is the whole check."""
        return await self.ascore(task, answer)

    async def ascore(self, task: StructuredOutputTask, answer: str) -> Reward:
        schema, schema_type, mode = task.schema, task.schema_type, task.response_mode
        info: dict[str, Any] = {"schema_type": schema_type, "response_mode": mode}
        try:
            self.verifier.check_size(answer)
            inline = self._cheap(schema, schema_type, answer)
            if mode == "tool_call":
                document, problem = self._tool_payload(task, answer)
                if not problem:
                    problem = await self.verifier.run(check_document, schema, document, inline=inline)
            else:
                problem = await self.verifier.run(
                    check_text, schema, schema_type, answer, self.allow_code_fence, inline=inline
                )
        except VerifierLimit as exc:
            return Reward.zero(str(exc), error_type="verifier_limit", **info)
        except WorkerError as exc:
            return Reward.failed(f"structured-output verifier failed: {exc}", **info)
        if problem:
            return _fail(*problem, **info)
        return Reward(1.0, info)

    def _cheap(self, schema: str, schema_type: str, answer: str) -> bool:
        """Whether checking ``answer`` in-process costs less than a worker round trip (bounded)."""
        if len(answer) * _COST_PER_CHAR.get(schema_type, 1) > self.inline_chars:
            return False
        return not costly_to_validate(schema)

    async def aclose(self) -> None:
        """Stop the verifier workers."""
        await self.verifier.aclose()
        await super().aclose()

    def _tool_payload(
        self, task: StructuredOutputTask, answer: str
    ) -> tuple[Any, tuple[str, list[str]] | None]:
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
        expected = task.tool_name
        if expected and call.name != expected:
            return None, ("wrong_tool_name", [f"expected tool {expected!r}, got {call.name!r}"])
        key = task.tool_payload_key
        if key:
            if key not in call.arguments:
                return None, ("missing_tool_payload_key", [f"the call's arguments lack {key!r}"])
            return call.arguments[key], None
        return call.arguments, None
