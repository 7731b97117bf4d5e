"""Strict JSON schemas: every declared property required, no others allowed, at every level.

``strictify`` walks the schema keyword by keyword, so only real subschemas are touched (a property
that happens to be *named* ``properties`` is left alone) and the branches of ``anyOf``/``oneOf``/
``allOf``/``prefixItems`` are made strict too, as OpenAI's strict mode does. (Upstream NeMo Gym
only recurses through mappings, so branches inside lists stay lenient there; see the tests.)
An object schema with no ``properties`` stays as it is. A schema that declares ``properties``
(or ``items``/``prefixItems``) but no ``type`` (nor ``enum``, ``const``, ``$ref`` or a
combinator) is typed ``object`` (``array``): in plain JSON Schema those keywords only constrain
values of that kind, so any string or number would validate, e.g. a YAML reply that is one
sentence. Strict mode means the described structure, and upstream NeMo Gym (which leaves them
untyped) differs here.

``admits_only_empty`` finds schemas under which only an empty document validates (``null``,
``{}``, ``[]``, blank strings): the env rejects such rows at load, since an empty document never
scores (see ``verify.py``).

Validation follows JSON Schema draft 2020-12 (or the schema's own ``$schema``), with no format
assertions and no remote ``$ref`` retrieval. Compiled validators are cached by schema text.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from jsonschema import Draft202012Validator, SchemaError
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for
from referencing import Registry

from cascade_envs.reasoning import has_visible_text

SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
SCHEMA_ONES = (
    "items", "additionalItems", "contains", "not", "if", "then", "else", "propertyNames",
    "unevaluatedItems", "unevaluatedProperties", "additionalProperties",
)  # fmt: skip
MAX_REPORTED_ERRORS = 5
_IMPLIED_TYPES = (("properties", "object"), ("items", "array"), ("prefixItems", "array"))
_TYPE_GIVEN = ("type", "enum", "const", "$ref", "$dynamicRef", "allOf", "anyOf", "oneOf", "not", "if")


class SchemaProblem(ValueError):
    """The task's schema is not valid JSON or not a valid JSON schema."""


def strictify(schema: Any) -> Any:
    """A strict copy of ``schema`` (the input is not modified)."""
    if isinstance(schema, list):  # ``items`` as a list in older drafts
        return [strictify(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key in SCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {name: strictify(sub) for name, sub in out[key].items()}
    for key in (*SCHEMA_LISTS, *SCHEMA_ONES):
        if key in out:
            out[key] = strictify(out[key])
    if isinstance(out.get("properties"), dict):
        out["required"] = list(out["properties"])
        out["additionalProperties"] = False
    if not any(key in out for key in _TYPE_GIVEN):
        implied = next((kind for key, kind in _IMPLIED_TYPES if isinstance(out.get(key), (dict, list))), None)
        if implied:
            out["type"] = implied
    return out


def has_value(document: Any) -> bool:
    """Whether ``document`` carries at least one value: a number, a boolean or a non-blank string.

    ``null``, blank strings (no visible character: ``reasoning.has_visible_text``), and objects and
    arrays holding nothing else carry none. Object keys are names, not values.
    """
    stack = [document]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, (list, tuple)):
            stack.extend(node)
        elif isinstance(node, str):
            if has_visible_text(node):
                return True
        elif node is not None:
            return True
    return False


def admits_only_empty(schema: Any, depth: int = 0) -> bool:
    """True when no document that carries a value (``has_value``) can validate against the strict
    ``schema``. Conservative: False whenever unsure (references, combinators, open objects)."""
    if schema is False:
        return True
    if not isinstance(schema, dict) or depth > 64:
        return False
    if "const" in schema:
        return not has_value(schema["const"])
    if isinstance(schema.get("enum"), list):
        return not any(has_value(v) for v in schema["enum"])
    if any(
        key in schema
        for key in (
            "$ref",
            "$dynamicRef",
            "allOf",
            "anyOf",
            "oneOf",
            "not",
            "if",
            "patternProperties",
            "prefixItems",
            "contains",
            "additionalItems",
            "unevaluatedProperties",
            "unevaluatedItems",
        )
    ):
        return False
    kinds = schema.get("type")
    kinds = [kinds] if isinstance(kinds, str) else kinds
    if not isinstance(kinds, list) or not kinds:
        return False
    for kind in kinds:
        if kind == "null":
            continue
        if kind == "object":
            props = schema.get("properties")
            if schema.get("additionalProperties") is not False or not isinstance(props, dict):
                return False
            if not all(admits_only_empty(sub, depth + 1) for sub in props.values()):
                return False
        elif kind == "array":
            items = schema.get("items")
            if schema.get("maxItems") != 0 and items is not False and not admits_only_empty(items, depth + 1):
                return False
        elif kind == "string":
            if schema.get("maxLength") != 0:
                return False
        else:
            return False
    return True


@functools.lru_cache(maxsize=2048)
def strict_validator(schema_text: str) -> Validator:
    """The validator of the strict form of ``schema_text``; raises ``SchemaProblem``."""
    try:
        schema = json.loads(schema_text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise SchemaProblem(f"schema is not valid JSON: {exc}") from exc
    if not isinstance(schema, (dict, bool)):
        raise SchemaProblem(f"a schema must be a JSON object, got {type(schema).__name__}")
    strict = strictify(schema)
    cls = validator_for(strict, default=Draft202012Validator)
    try:
        cls.check_schema(strict)
    except SchemaError as exc:
        raise SchemaProblem(f"invalid JSON schema: {exc.message} (at {exc.json_path})") from exc
    return cls(strict, registry=Registry())


def schema_text(value: Any) -> str:
    """The row's schema as canonical text (rows carry a JSON string; a mapping is accepted too)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    raise SchemaProblem(f"expected a JSON schema string, got {type(value).__name__}")


def validation_errors(validator: Validator, instance: Any) -> list[str]:
    """Up to ``MAX_REPORTED_ERRORS`` messages, shallowest first, each with its JSON path."""
    errors = sorted(validator.iter_errors(instance), key=lambda e: (len(e.path), e.json_path))
    return [f"{e.json_path}: {e.message[:200]}" for e in errors[:MAX_REPORTED_ERRORS]]


_COSTLY_KEYWORDS = frozenset({"pattern", "patternProperties", "uniqueItems", "$dynamicRef", "$recursiveRef"})
_DEFS = ("$defs", "definitions")


def _refs(node: Any, found: set[str], costly: list[bool], top: bool = True) -> None:
    """Collect ``$ref`` targets under ``node`` (not inside a definitions block below the top)."""
    if isinstance(node, list):
        for item in node:
            _refs(item, found, costly, False)
    elif isinstance(node, dict):
        if _COSTLY_KEYWORDS & node.keys():
            costly.append(True)
        if isinstance(node.get("$ref"), str):
            found.add(node["$ref"])
        for key, value in node.items():
            if top and key in _DEFS:
                continue
            for sub in value.values() if key in SCHEMA_MAPS and isinstance(value, dict) else [value]:
                _refs(sub, found, costly, False)


@functools.lru_cache(maxsize=2048)
def costly_to_validate(schema_text: str) -> bool:
    """Whether validating even a short document may cost more than linear time.

    True when the schema uses a regex (``pattern``, ``patternProperties``), ``uniqueItems``
    (quadratic), dynamic references, or recursion through ``$ref`` (with combinators that can be
    exponential in the document's depth); also for refs other than ``#`` and ``#/$defs/<name>``.
    """
    try:
        schema = json.loads(schema_text)
    except (ValueError, RecursionError):
        return True
    if not isinstance(schema, dict):
        return False
    defs = {
        f"#/{block}/{name}": sub
        for block in _DEFS
        if isinstance(schema.get(block), dict)
        for name, sub in schema[block].items()
    }
    graph: dict[str, set[str]] = {}
    costly: list[bool] = []
    try:
        for name, node in [("#", schema), *defs.items()]:
            graph[name] = set()
            _refs(node, graph[name], costly, top=name == "#")
    except RecursionError:
        return True
    if costly or any(ref not in graph for refs in graph.values() for ref in refs):
        return True
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def cyclic(name: str) -> bool:
        state[name] = 1
        for ref in graph[name]:
            if state.get(ref) == 1 or (ref not in state and cyclic(ref)):
                return True
        state[name] = 2
        return False

    return cyclic("#")
