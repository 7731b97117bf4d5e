"""Parsing a response in the task's ``schema_type`` (json, yaml, toml, csv, xml) into plain data.

Parsing is as literal as upstream NeMo Gym's: a reply wrapped in a markdown code fence does not
parse unless the env is built with ``allow_code_fence=True``. YAML is read with the safe loader
and *without* anchors/aliases (an alias bomb would otherwise make validation exponential). XML is
read by ``xmltodict`` (entities disabled), so the schema describes the root element too. CSV is
read by ``csv.DictReader``: the first line is the header, each later non-blank line a row; a header
naming a column twice or a row with more cells than columns is a parse error. CSV cells and XML
leaves are strings; ``coerce`` converts them to the types the schema declares.
"""

from __future__ import annotations

import csv
import importlib.util
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
    return yaml.load(text, Loader=_NoAliasLoader)  # a SafeLoader subclass


def _csv(text: str) -> Any:
    """Rows as ``{column: cell}`` (``csv.DictReader``, as upstream), with two ambiguities refused:
    a header that names a column twice (DictReader would keep only the last cell) and a row with
    more cells than the header has columns. A row with fewer cells gets ``None`` for the rest."""
    reader = csv.DictReader(io.StringIO(text))
    header = reader.fieldnames or []
    seen: set[str] = set()
    for name in header:
        if name in seen:
            raise ParseError(f"the header names column {name[:100]!r} twice")
        seen.add(name)
    rows = []
    for row in reader:
        if None in row:
            raise ParseError(
                f"line {reader.line_num}: {len(header) + len(row[None])} cells, "
                f"the header has {len(header)} columns"
            )
        rows.append(row)
    return rows


def _xml(text: str) -> Any:
    import xmltodict

    return xmltodict.parse(text, disable_entities=True)


PARSERS: dict[str, Callable[[str], Any]] = {
    "json": json.loads,
    "yaml": _yaml,
    "toml": tomllib.loads,
    "csv": _csv,
    "xml": _xml,
}
XML_MISSING = "schema_type 'xml' needs the xmltodict package: pip install 'cascade-envs[verifiers]'"


def format_available(schema_type: str) -> bool:
    """False for a known format whose parser is not installed (xml without xmltodict)."""
    return schema_type != "xml" or importlib.util.find_spec("xmltodict") is not None


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


def _scalar(value: str, kind: Any) -> Any:
    """``value`` as the JSON type ``kind`` names, or unchanged when it does not convert."""
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


def _cell(value: Any, kind: Any) -> Any:
    """A CSV cell: empty means null where the type allows it; a type list tries each type."""
    if isinstance(kind, list):
        if value in (None, "") and "null" in kind:
            return None
        for option in (k for k in kind if k != "null"):
            converted = _cell(value, option)
            if option == "string" or not isinstance(converted, str):
                return converted
        return value
    return _scalar(value, kind) if isinstance(value, str) and value else value


def _column_type(columns: dict[str, Any], key: Any) -> Any:
    column = columns.get(key)
    return column.get("type", "string") if isinstance(column, dict) else "string"


def _coerce_csv(rows: list[dict[str, Any]], schema: Any) -> list[dict[str, Any]]:
    item = schema.get("items", schema) if isinstance(schema, dict) else {}
    columns = item.get("properties") if isinstance(item, dict) else None
    columns = columns if isinstance(columns, dict) else {}
    return [{key: _cell(value, _column_type(columns, key)) for key, value in row.items()} for row in rows]


def _coerce_xml(data: Any, schema: Any) -> Any:
    """Walk xmltodict output alongside the schema (as upstream does).

    A repeated element parses as ``{"tag": [...]}`` and a single one as ``{"tag": value}``: at an
    array position that one-key wrapper is dropped. An empty element (None) becomes "" where a
    string is expected. Leaves convert only for a single declared type.
    """
    kind = schema.get("type") if isinstance(schema, dict) else None
    if kind == "object" and isinstance(data, dict):
        properties = schema.get("properties") or {}
        return {
            key: _coerce_xml(value, properties[key]) if key in properties else value
            for key, value in data.items()
        }
    if kind == "array":
        if isinstance(data, dict) and len(data) == 1:
            data = next(iter(data.values()))
        items = data if isinstance(data, list) else [] if data is None else [data]
        return [_coerce_xml(item, schema.get("items", {})) for item in items]
    if data is None and kind == "string":
        return ""
    return _scalar(data, kind) if isinstance(data, str) else data


def coerce(document: Any, schema_type: str, schema: Any) -> Any:
    """Convert the string leaves of a CSV or XML document to the types the schema declares."""
    if schema_type == "csv":
        return _coerce_csv(document, schema)
    if schema_type == "xml":
        return _coerce_xml(document, schema)
    return document
