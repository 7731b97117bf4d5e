"""Parsing a response in the task's ``schema_type`` (json, yaml, toml, csv) into plain data.

Parsing is as literal as upstream NeMo Gym's: a reply wrapped in a markdown code fence does not
parse unless the env is built with ``allow_code_fence=True``. YAML is read with the safe loader
and *without* anchors/aliases (an alias bomb would otherwise make validation exponential). CSV
cells are strings; they are coerced to the types the schema declares for each column.
"""

from __future__ import annotations

import csv
import io
import json
import re
import tomllib
from collections.abc import Callable
from typing import Any

import yaml

_FENCE = re.compile(r"\A\s*```[\w+-]*[ \t]*\n(.*?)\n?```\s*\Z", re.S)


class ParseError(ValueError):
    """The response is not a document of the expected format."""


class _NoAliasLoader(yaml.SafeLoader):
    """Safe YAML loader that rejects anchors and aliases."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            raise ParseError("YAML aliases are not allowed")
        event = self.peek_event()
        if getattr(event, "anchor", None) is not None:
            raise ParseError("YAML anchors are not allowed")
        return super().compose_node(parent, index)


def unfence(text: str) -> str:
    """The body of a reply that is one fenced code block (```json ... ```), else the text itself."""
    match = _FENCE.match(text)
    return match.group(1) if match else text


def _yaml(text: str) -> Any:
    return yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506 - a SafeLoader subclass


def _csv(text: str) -> Any:
    return list(csv.DictReader(io.StringIO(text)))


PARSERS: dict[str, Callable[[str], Any]] = {
    "json": json.loads,
    "yaml": _yaml,
    "toml": tomllib.loads,
    "csv": _csv,
}


def parse(text: str, schema_type: str) -> Any:
    """Parse ``text``; raises ``ParseError`` with the parser's message."""
    try:
        return PARSERS[schema_type](text)
    except ParseError:
        raise
    except RecursionError as exc:
        raise ParseError("document is nested too deeply") from exc
    except Exception as exc:  # each parser has its own error classes
        raise ParseError(f"{type(exc).__name__}: {str(exc)[:200]}") from exc


def _coerce_cell(value: Any, kind: Any) -> Any:
    """A CSV cell converted to the JSON type ``kind`` (a name or a list of names) when it can be."""
    if isinstance(kind, list):
        if value in (None, "") and "null" in kind:
            return None
        for option in kind:
            if option != "null":
                converted = _coerce_cell(value, option)
                if option == "string" or not isinstance(converted, str):
                    return converted
        return value
    if not isinstance(value, str) or value == "":
        return value
    try:
        if kind == "integer":
            return int(value)
        if kind == "number":
            return float(value)
    except ValueError:
        return value
    if kind == "boolean" and value.lower() in ("true", "1", "false", "0"):
        return value.lower() in ("true", "1")
    return value


def _column_type(columns: dict[str, Any], key: Any) -> Any:
    column = columns.get(key)
    return column.get("type", "string") if isinstance(column, dict) else "string"


def coerce_csv(rows: list[dict[str, Any]], schema: Any) -> list[dict[str, Any]]:
    """Coerce each row's cells to the column types of the schema's ``items`` (or the schema)."""
    item = schema.get("items", schema) if isinstance(schema, dict) else {}
    columns = item.get("properties") if isinstance(item, dict) else None
    columns = columns if isinstance(columns, dict) else {}
    return [{key: _coerce_cell(value, _column_type(columns, key)) for key, value in row.items()} for row in rows]
