"""The structured-output check as top-level functions, run in a verifier worker process or inline.

Each returns ``None`` when the document validates, else ``(error_type, errors)``.

A document that validates must also carry a value (``schema.has_value``): at least one number,
boolean or non-blank string somewhere in it. ``null``, ``{}``, ``[]``, a CSV header with no data
rows, and skeletons whose every field is ``null``, ``""``, ``[]`` or ``{}`` are not answers
(``empty_document``): a strict schema whose properties are all nullable or arrays, or an array
schema without ``minItems``, would otherwise give a point to a reply that extracts nothing (a
one-line CSV reply is a header and zero rows, and ``[]`` validates). Numbers and booleans count,
``0`` and ``false`` included: they are answers, right or wrong.
"""

from __future__ import annotations

from typing import Any

from .formats import ParseError, coerce, parse, unfence
from .schema import has_value, strict_validator, validation_errors

Problem = tuple[str, list[str]]
EMPTY = "empty_document"


def check_document(schema_str: str, document: Any) -> Problem | None:
    """Validate an already parsed document (a tool call's arguments) against the strict schema."""
    try:
        errors = validation_errors(strict_validator(schema_str), document)
    except RecursionError:
        return "validation_error", ["the document is nested too deeply to validate"]
    if errors:
        return "validation_error", errors
    if not has_value(document):
        return EMPTY, [f"the document carries no value: {_shape(document)}"]
    return None


def check_text(schema_str: str, schema_type: str, text: str, allow_code_fence: bool) -> Problem | None:
    """Parse ``text`` as ``schema_type``, coerce CSV/XML leaves, validate against the strict schema."""
    try:
        document = parse(unfence(text) if allow_code_fence else text, schema_type)
    except ParseError as exc:
        return "parse_error", [str(exc)]
    problem = check_document(schema_str, coerce(document, schema_type, strict_validator(schema_str).schema))
    if problem and problem[0] == EMPTY and schema_type == "csv" and document == []:
        return EMPTY, ["the CSV has a header line but no data rows"]
    return problem


def _shape(document: Any) -> str:
    if document is None:
        return "null"
    if isinstance(document, (dict, list)) and not document:
        return "empty " + ("object" if isinstance(document, dict) else "array")
    if isinstance(document, str):
        return "a blank string"
    return "every field is null, blank or empty"
