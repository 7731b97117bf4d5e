"""The structured-output check as top-level functions, run in a verifier worker process or inline.

Each returns ``None`` when the document validates, else ``(error_type, errors)``.
"""

from __future__ import annotations

from typing import Any

from .formats import ParseError, coerce, parse, unfence
from .schema import strict_validator, validation_errors

Problem = tuple[str, list[str]]


def check_document(schema_str: str, document: Any) -> Problem | None:
    """Validate an already parsed document (a tool call's arguments) against the strict schema."""
    try:
        errors = validation_errors(strict_validator(schema_str), document)
    except RecursionError:
        return "validation_error", ["the document is nested too deeply to validate"]
    return ("validation_error", errors) if errors else None


def check_text(schema_str: str, schema_type: str, text: str, allow_code_fence: bool) -> Problem | None:
    """Parse ``text`` as ``schema_type``, coerce CSV/XML leaves, validate against the strict schema."""
    try:
        document = parse(unfence(text) if allow_code_fence else text, schema_type)
    except ParseError as exc:
        return "parse_error", [str(exc)]
    return check_document(schema_str, coerce(document, schema_type, strict_validator(schema_str).schema))
