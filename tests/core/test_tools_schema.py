"""Tool schemas derived from Python functions, and argument validation against JSON schemas."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from enum import Enum, IntEnum
from typing import TYPE_CHECKING, Annotated, Any, Literal, NewType, NotRequired, Optional, TypedDict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cascade_envs.tools import schema_from_function, type_schema, validate_arguments
from cascade_envs.tools.docstrings import parse_docstring
from cascade_envs.tools.schema import argument_converters

if TYPE_CHECKING:
    from sqlite3 import Connection  # resolvable only by a type checker: a hidden parameter's type


class Priority(Enum):
    LOW = "low"
    HIGH = "high"


class Level(IntEnum):
    ONE = 1
    TWO = 2


class Window(TypedDict):
    start: str
    minutes: NotRequired[int]


EmailId = NewType("EmailId", str)


def search_emails(query: str, date_min: str | None = None, page: int = 1, page_size: int = 5) -> list[dict]:
    """Search the inbox for emails whose subject, body or sender contain every word of the query.

    Results come newest first.

    Args:
        query (str): Words to look for,
            case-insensitive.
        date_min: Earliest sent date (YYYY-MM-DD).
        page (int): Page of results, from 1.
        page_size: Emails per page.

    Returns:
        The matching emails.
    """
    return []


def create_event(
    event_name: str,
    participant_email: str,
    duration: int,
    notes: Optional[str] = None,  # noqa: UP045 - the typing spelling is read too
) -> str:
    """Create a calendar event.

    :param str event_name: Title of the event.
    :param participant_email: Who is invited;
        one address.
    :param duration: Length in minutes.
    :returns: the new event's id.
    """
    return "00000001"


def update_task(
    task_id: EmailId,
    field: Literal["status", "assigned_to_email", "due_date"],
    priority: Priority = Priority.LOW,
    level: Level | None = None,
    tags: list[int] = [],  # noqa: B006 - the default is only read
    pairs: tuple[str, int] = ("a", 1),
    labels: Sequence[str] = (),
    counts: dict[str, int] | None = None,
    extra: Mapping = {},
    window: Window | None = None,
    anything=None,
    value: Any = None,
    page: Annotated[int, "Page number, from 1.", {"minimum": 1}] = 1,
) -> None:
    """Update one field of a task."""


def test_google_docstring_gives_descriptions_required_and_defaults():
    description, parameters = schema_from_function(search_emails)
    assert (
        description
        == "Search the inbox for emails whose subject, body or sender contain every word of the query."
    )
    assert parameters == {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "Words to look for, case-insensitive."},
            "date_min": {
                "type": ["string", "null"],
                "description": "Earliest sent date (YYYY-MM-DD).",
                "default": None,
            },
            "page": {"type": "integer", "description": "Page of results, from 1.", "default": 1},
            "page_size": {"type": "integer", "description": "Emails per page.", "default": 5},
        },
        "required": ["query"],
        "additionalProperties": False,
    }


def test_sphinx_docstring_gives_descriptions():
    description, parameters = schema_from_function(create_event)
    assert description == "Create a calendar event."
    assert parameters["required"] == ["event_name", "participant_email", "duration"]
    props = parameters["properties"]
    assert props["event_name"] == {"type": "string", "description": "Title of the event."}
    assert props["participant_email"]["description"] == "Who is invited; one address."
    assert props["duration"] == {"type": "integer", "description": "Length in minutes."}
    assert props["notes"] == {"type": ["string", "null"], "default": None}


def test_types_map_to_json_schema():
    _, parameters = schema_from_function(update_task)
    props = parameters["properties"]
    assert parameters["required"] == ["task_id", "field"]
    assert props["task_id"] == {"type": "string"}
    assert props["field"] == {"type": "string", "enum": ["status", "assigned_to_email", "due_date"]}
    assert props["priority"] == {"type": "string", "enum": ["low", "high"], "default": "low"}
    assert props["level"] == {"type": ["integer", "null"], "enum": [1, 2, None], "default": None}
    assert props["tags"] == {"type": "array", "items": {"type": "integer"}, "default": []}
    assert props["pairs"] == {
        "type": "array",
        "prefixItems": [{"type": "string"}, {"type": "integer"}],
        "minItems": 2,
        "maxItems": 2,
        "default": ["a", 1],
    }
    assert props["labels"] == {"type": "array", "items": {"type": "string"}, "default": []}
    assert props["counts"] == {
        "type": ["object", "null"],
        "additionalProperties": {"type": "integer"},
        "default": None,
    }
    assert props["extra"] == {"type": "object", "default": {}}
    assert props["window"] == {
        "type": ["object", "null"],
        "properties": {"start": {"type": "string"}, "minutes": {"type": "integer"}},
        "required": ["start"],
        "additionalProperties": False,
        "default": None,
    }
    assert props["anything"] == {"default": None} and props["value"] == {"default": None}
    assert props["page"] == {
        "type": "integer",
        "description": "Page number, from 1.",
        "minimum": 1,
        "default": 1,
    }


@pytest.mark.parametrize(
    ("hint", "schema"),
    [
        (bool, {"type": "boolean"}),
        (float, {"type": "number"}),
        (int | str, {"type": ["integer", "string"]}),
        (list[int] | str, {"anyOf": [{"type": "array", "items": {"type": "integer"}}, {"type": "string"}]}),
        (
            list[int] | str | None,
            {
                "anyOf": [
                    {"type": "array", "items": {"type": "integer"}},
                    {"type": "string"},
                    {"type": "null"},
                ]
            },
        ),
        (Optional[list[str]], {"type": ["array", "null"], "items": {"type": "string"}}),  # noqa: UP045
        (Literal[1, "x", True], {"type": ["integer", "string", "boolean"], "enum": [1, "x", True]}),
        (tuple[float, ...], {"type": "array", "items": {"type": "number"}}),
        (Any | None, {}),
        (list, {"type": "array"}),
    ],
)
def test_type_schema(hint, schema):
    assert type_schema(hint) == schema


def test_hidden_parameters_are_dropped_and_must_exist():
    def read_row(row_id: str, *, db: Connection) -> dict:
        """Read one row."""
        return {}

    _, parameters = schema_from_function(read_row, hidden=["db"])
    assert list(parameters["properties"]) == ["row_id"] and parameters["required"] == ["row_id"]
    with pytest.raises(ValueError, match=r"hidden parameter\(s\) \['workspace'\].*'read_row'"):
        schema_from_function(read_row, hidden=["db", "workspace"])
    with pytest.raises(ValueError, match=r"cannot resolve the type of parameter 'db'.*parameters="):
        schema_from_function(read_row)  # the policy would see db, whose type is unknown at runtime


def test_functions_a_tool_cannot_wrap():
    def star_args(*paths: str) -> None: ...
    def star_kwargs(name: str, **options: Any) -> None: ...
    def positional(name: str, /) -> None: ...
    def opaque(when: complex) -> None: ...

    with pytest.raises(ValueError, match=r"'star_args' takes \*paths"):
        schema_from_function(star_args)
    with pytest.raises(ValueError, match=r"'star_kwargs' takes \*\*options"):
        schema_from_function(star_kwargs)
    with pytest.raises(ValueError, match="'name' is positional-only"):
        schema_from_function(positional)
    with pytest.raises(ValueError, match=r"'opaque': parameter 'when'.*no JSON schema.*parameters="):
        schema_from_function(opaque)


def test_methods_and_partials():
    class Inbox:
        def find(self, sender: str, limit: int = 10) -> list[str]:
            """Find emails by sender."""
            return []

    description, parameters = schema_from_function(Inbox().find)
    assert description == "Find emails by sender." and list(parameters["properties"]) == ["sender", "limit"]
    description, parameters = schema_from_function(functools.partial(search_emails, page_size=20))
    assert description.startswith("Search the inbox")
    assert parameters["properties"]["page_size"]["default"] == 20


def test_docstring_without_blank_line_before_sections():
    doc = parse_docstring("""Look up a customer
    by id.
    Args:
        customer_id: The id.
    Returns:
        customer_name: not a parameter.
    """)
    assert doc.summary == "Look up a customer by id." and doc.params == {"customer_id": "The id."}
    assert parse_docstring(None).summary == "" and parse_docstring("").params == {}


def test_argument_converters_target_enum_and_int_parameters():
    converters = argument_converters(update_task)
    assert set(converters) == {"priority", "level", "page"}
    assert converters["priority"]("high") is Priority.HIGH and converters["level"](2) is Level.TWO
    assert converters["page"](3.0) == 3 and type(converters["page"](3.0)) is int
    with pytest.raises(ValueError, match="'urgent' is not a valid Priority"):
        converters["priority"]("urgent")


# ----- validation -------------------------------------------------------------------------------

SEARCH = schema_from_function(search_emails)[1]


def test_valid_arguments_have_no_problems():
    assert validate_arguments(SEARCH, {"query": "budget", "date_min": None, "page": 2}) == []
    assert validate_arguments(SEARCH, {"query": "budget", "page": 3.0}) == []  # integral float


def test_type_problems_name_the_argument():
    assert validate_arguments(SEARCH, {"query": "q", "page": "1"}) == [
        "argument 'page': expected integer, got string \"1\""
    ]
    assert validate_arguments(SEARCH, {"query": "q", "page": True}) == [
        "argument 'page': expected integer, got boolean true"
    ]
    assert validate_arguments(SEARCH, {"query": "q", "page": 1.5}) == [
        "argument 'page': expected integer, got number 1.5"
    ]
    assert validate_arguments(SEARCH, {"query": None}) == ["argument 'query': expected string, got null"]
    assert validate_arguments({"type": "number"}, True) == ["arguments: expected number, got boolean true"]
    assert validate_arguments({"type": "number"}, 2) == []
    assert validate_arguments(SEARCH, [1]) == ["arguments: expected object, got array [1]"]


def test_missing_and_unknown_arguments_are_all_reported():
    problems = validate_arguments(SEARCH, {"page": "x", "db": "handle", "sort": 1})
    assert problems == [
        "missing required argument 'query'",
        "argument 'page': expected integer, got string \"x\"",
        "unknown argument 'db'; accepted: query, date_min, page, page_size",
        "unknown argument 'sort'; accepted: query, date_min, page, page_size",
    ]
    closed = {"type": "object", "properties": {}, "additionalProperties": False}
    assert validate_arguments(closed, {"x": 1}) == ["unknown argument 'x'; it takes none"]
    assert validate_arguments({"type": "object", "properties": {}}, {"x": 1}) == []  # open by default


def test_enum_and_const_compare_as_json():
    assert validate_arguments({"enum": [1, 2]}, 1.0) == []
    assert validate_arguments({"enum": [1, 2]}, True) == ["arguments: true is not one of 1, 2"]
    assert validate_arguments({"enum": [True]}, 1) == ["arguments: 1 is not one of true"]
    assert validate_arguments({"enum": [[1, {"a": None}]]}, [1.0, {"a": None}]) == []
    assert validate_arguments({"const": "x"}, "y") == ['arguments: expected "x", got "y"']
    field = {"type": "object", "properties": {"field": {"type": "string", "enum": ["status", "due_date"]}}}
    assert validate_arguments(field, {"field": "owner"}) == [
        'argument \'field\': "owner" is not one of "status", "due_date"'
    ]


def test_bounds_lengths_and_patterns():
    number = {"type": "integer", "minimum": 1, "maximum": 50}
    assert validate_arguments(number, 0) == ["arguments: must be >= 1, got 0"]
    assert validate_arguments(number, 51) == ["arguments: must be <= 50, got 51"]
    assert validate_arguments({"exclusiveMinimum": 0, "exclusiveMaximum": 1}, 0) == [
        "arguments: must be > 0, got 0"
    ]
    assert validate_arguments({"exclusiveMaximum": 1}, 1) == ["arguments: must be < 1, got 1"]
    assert validate_arguments({"minimum": 0, "exclusiveMinimum": True}, 0) == [
        "arguments: must be > 0, got 0"
    ]
    assert validate_arguments({"minimum": 0}, "text") == []  # a number keyword ignores strings
    date = {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$", "minLength": 10, "maxLength": 10}
    assert validate_arguments(date, "2023-11-30") == []
    assert validate_arguments(date, "30/11/2023") == [
        "arguments: \"30/11/2023\" does not match the pattern '^\\\\d{4}-\\\\d{2}-\\\\d{2}$'"
    ]
    assert validate_arguments(date, "2023-1-1") == [
        "arguments: expected at least 10 characters, got 8",
        "arguments: \"2023-1-1\" does not match the pattern '^\\\\d{4}-\\\\d{2}-\\\\d{2}$'",
    ]
    broken = validate_arguments({"type": "string", "pattern": "(unclosed"}, "x")
    assert len(broken) == 1 and "invalid pattern '(unclosed'" in broken[0]
    assert validate_arguments({"type": "array", "minItems": 1, "maxItems": 2}, []) == [
        "arguments: expected at least 1 items, got 0"
    ]
    assert validate_arguments({"type": "array", "maxItems": 2}, [1, 2, 3]) == [
        "arguments: expected at most 2 items, got 3"
    ]


def test_nested_objects_and_arrays_name_the_path():
    schema = {
        "type": "object",
        "properties": {
            "filter": {
                "type": "object",
                "properties": {
                    "sender": {"type": "string"},
                    "ids": {"type": "array", "items": {"type": "integer"}},
                },
                "required": ["sender"],
                "additionalProperties": False,
            },
            "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]},
        },
    }
    assert validate_arguments(schema, {"filter": {"ids": [1, "2"], "x": 0}, "pair": ["a", "b"]}) == [
        "missing required argument 'filter.sender'",
        "argument 'filter.ids[1]': expected integer, got string \"2\"",
        "unknown argument 'filter.x'; accepted: sender, ids",
        "argument 'pair[1]': expected integer, got string \"b\"",
    ]
    draft7_tuple = {"type": "array", "items": [{"type": "string"}]}
    assert validate_arguments(draft7_tuple, [1, "anything"]) == [
        "argument '[0]': expected string, got integer 1"
    ]
    typed_values = {"type": "object", "additionalProperties": {"type": "integer"}}
    assert validate_arguments(typed_values, {"a": 1, "b": "2"}) == [
        "argument 'b': expected integer, got string \"2\""
    ]


def test_any_of_and_one_of():
    id_or_name = {"anyOf": [{"type": "integer"}, {"type": "string", "minLength": 1}]}
    assert validate_arguments(id_or_name, 7) == [] and validate_arguments(id_or_name, "x") == []
    assert validate_arguments(id_or_name, "") == [
        'arguments: matches none of the allowed forms (expected integer, got string "" | '
        "expected at least 1 characters, got 0)"
    ]
    one = {"oneOf": [{"type": "integer"}, {"type": "number"}]}
    assert validate_arguments(one, 1.5) == []
    assert validate_arguments(one, 2) == [
        "arguments: matches 2 of the allowed forms, but must match exactly one"
    ]


def test_problems_and_messages_are_bounded():
    problems = validate_arguments(SEARCH, {"query": "q", **{f"arg{i}": i for i in range(25)}})
    assert len(problems) == 11 and problems[-1] == "... and 15 more problems"
    long = validate_arguments(
        {"type": "object", "properties": {}, "additionalProperties": False}, {"x" * 1000: 1}
    )
    assert len(long[0]) == 300 and long[0].endswith("…")
    shown = validate_arguments({"type": "integer"}, "y" * 1000)[0]
    assert shown.startswith('arguments: expected integer, got string "yyy') and shown.endswith("…")
    assert len(shown) < 120


def test_unknown_keywords_and_boolean_schemas():
    assert validate_arguments({"type": "string", "format": "email", "x-custom": 1}, "not an email") == []
    assert validate_arguments({"type": "object", "properties": {"a": False}}, {"a": 1}) == [
        "argument 'a': no value is allowed here"
    ]
    assert validate_arguments({"type": "object", "properties": {"a": True}}, {"a": [1]}) == []


# ----- agreement with the reference implementation ----------------------------------------------

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-1, 3),
    st.sampled_from([0.0, 1.0, 2.0, -1.5, 3.25]),
    st.sampled_from(["", "a", "ab", "abc1", "2023-11-30", "Zed"]),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3)
    ),
    max_leaves=8,
)
_type_names = st.sampled_from(["string", "integer", "number", "boolean", "null", "array", "object"])


def _schemas(inner: st.SearchStrategy[dict]) -> st.SearchStrategy[dict]:
    keyword = st.one_of(
        st.builds(
            lambda t: {"type": t},
            st.one_of(_type_names, st.lists(_type_names, min_size=1, max_size=3, unique=True)),
        ),
        st.builds(lambda v: {"enum": v}, st.lists(_scalars, min_size=1, max_size=3)),
        st.builds(lambda v: {"const": v}, _values),
        st.builds(
            lambda k, n: {k: n},
            st.sampled_from(["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"]),
            st.integers(-3, 3),
        ),
        st.builds(
            lambda k, n: {k: n},
            st.sampled_from(["minLength", "maxLength", "minItems", "maxItems"]),
            st.integers(0, 3),
        ),
        st.builds(lambda p: {"pattern": p}, st.sampled_from(["^a", "\\d", "^[A-Z]", "b$"])),
        st.builds(
            lambda p, r, a: {"properties": p, "required": r, "additionalProperties": a},
            st.dictionaries(st.sampled_from(["a", "b"]), inner, max_size=2),
            st.lists(st.sampled_from(["a", "b", "c"]), max_size=2, unique=True),
            st.one_of(st.booleans(), inner),
        ),
        st.builds(lambda i: {"items": i}, inner),
        st.builds(lambda p: {"prefixItems": p}, st.lists(inner, min_size=1, max_size=2)),
        st.builds(
            lambda k, b: {k: b}, st.sampled_from(["anyOf", "oneOf"]), st.lists(inner, min_size=1, max_size=3)
        ),
    )
    return st.lists(keyword, min_size=1, max_size=3).map(
        lambda parts: {k: v for p in parts for k, v in p.items()}
    )


_schema_strategy = st.recursive(st.just({}), _schemas, max_leaves=6)


@settings(max_examples=400, deadline=None)
@given(schema=_schema_strategy, value=_values)
def test_agrees_with_jsonschema(schema, value):
    jsonschema = pytest.importorskip("jsonschema")
    expected = jsonschema.Draft202012Validator(schema).is_valid(value)
    problems = validate_arguments(schema, value)
    assert (problems == []) == expected, (schema, value, problems)


_LEAF_SCHEMAS = [
    *({"type": t} for t in ["string", "integer", "number", "boolean", "null", "array", "object"]),
    {"type": ["integer", "null"]},
    {"type": ["string", "array"]},
    {"enum": [1, 2]},
    {"enum": [True]},
    {"enum": [0]},
    {"enum": ["a", None]},
    {"enum": [[1], {"a": 1}]},
    {"const": 1},
    {"const": False},
    {"const": [1.0]},
    {"minimum": 1},
    {"maximum": 1},
    {"exclusiveMinimum": 1},
    {"exclusiveMaximum": 1},
    {"minLength": 2},
    {"maxLength": 1},
    {"minItems": 2},
    {"maxItems": 1},
    {"pattern": "^a"},
    {"pattern": "\\d"},
    {"items": {"type": "integer"}},
    {"prefixItems": [{"type": "string"}], "items": False},
    {"required": ["a"]},
    {"properties": {"a": {"type": "string"}}, "additionalProperties": False},
    {"additionalProperties": {"type": "boolean"}},
    {"anyOf": [{"type": "integer"}, {"minLength": 2}]},
    {"oneOf": [{"type": "integer"}, {"type": "number"}]},
    {"type": "integer", "minimum": 0, "maximum": 2, "enum": [0, 1, 5]},
]
_LEAF_VALUES = [
    None,
    True,
    False,
    0,
    1,
    2,
    -1,
    1.0,
    0.0,
    1.5,
    2.0,
    "",
    "a",
    "ab",
    "b1",
    [],
    [1],
    [1.0, 2],
    ["a", 1],
    [True],
    {},
    {"a": 1},
    {"a": "x"},
    {"b": True},
    {"a": "x", "b": 1},
]


def test_agrees_with_jsonschema_on_every_keyword():
    jsonschema = pytest.importorskip("jsonschema")
    for schema in _LEAF_SCHEMAS:
        validator = jsonschema.Draft202012Validator(schema)
        for value in _LEAF_VALUES:
            problems = validate_arguments(schema, value)
            assert (problems == []) == validator.is_valid(value), (schema, value, problems)


_KEYWORDS = [
    "type",
    "enum",
    "const",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "prefixItems",
    "minItems",
    "maxItems",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "anyOf",
    "oneOf",
]


@settings(max_examples=300, deadline=None)
@given(schema=st.dictionaries(st.sampled_from(_KEYWORDS), _values, max_size=4), value=_values)
def test_malformed_schemas_never_make_validation_raise(schema, value):
    problems = validate_arguments(schema, value)
    assert isinstance(problems, list) and all(isinstance(p, str) for p in problems)
