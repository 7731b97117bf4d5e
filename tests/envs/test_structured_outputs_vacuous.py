"""cascade/StructuredOutput-v0: a reply that contains no answer never scores 1, in any format.

The rule (``envs/structured_outputs/verify.py``): a document that validates must also carry a value,
at least one number, boolean or non-blank string. Before it, any one-line CSV reply won a CSV task
(``csv.DictReader`` reads the line as a header of zero rows and ``[]`` validates), ``[]`` won every
array-of-objects task, and skeletons of blank fields won schemas whose fields are strings, nullable
or arrays. Checked on the bundled samples and on the schemas of the NeMo Gym rows in every format.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from cascade_envs import TaskError, make
from cascade_envs.env import run_sync
from cascade_envs.envs.structured_outputs.env import StructuredOutputEnv
from cascade_envs.envs.structured_outputs.formats import parse
from cascade_envs.envs.structured_outputs.schema import (
    admits_only_empty,
    has_value,
    strict_validator,
    strictify,
)
from cascade_envs.reasoning import NO_ANSWER

NO_DATA = "I could not find that data."


@pytest.fixture(scope="module")
def env():
    env = StructuredOutputEnv([], inline_chars=10**6)  # in-process: these answers are short
    yield env
    env.close()


def score(env: StructuredOutputEnv, task: dict, text: str):
    return run_sync(env.areward(task, text))


def text_row(schema: dict, fmt: str) -> dict:
    return {"prompt": "Extract it.", "schema_str": json.dumps(schema), "schema_type": fmt}


def call(name: str, arguments: Any) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def assert_no_point(reward, text: str, expect: str | None = None) -> None:
    assert reward.value == 0.0 and not reward.masked, (text, reward)
    if expect:
        assert reward.components["error_type"] == expect, (text, reward.reason)


def bundled_rows() -> list[dict[str, Any]]:
    return [t.row for t in make("cascade/StructuredOutput-v0").tasks]


# ----- one test per format: the vacuous pass, then a real answer still winning ------------------


def test_csv_one_line_reply_is_a_header_without_rows(env):
    task = next(t for t in bundled_rows() if t["schema_type"] == "csv")
    header = task["reference_response"].splitlines()[0]
    for text in (NO_DATA, header, header + "\n", header + "\n\n\n"):
        reward = score(env, task, text)
        assert_no_point(reward, text, "empty_document")
        assert reward.reason == "empty_document: the CSV has a header line but no data rows"
    assert score(env, task, task["reference_response"]).value == 1.0


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("city,city,population,is_capital\nX,Canberra,467000,true\n", "the header names column 'city' twice"),
        (
            "city,population,is_capital\nCanberra,467000,true,extra\n",
            "line 2: 4 cells, the header has 3 columns",
        ),
    ],
)
def test_csv_ambiguous_tables_are_parse_errors(env, text, error):
    task = next(t for t in bundled_rows() if t["schema_type"] == "csv")
    reward = score(env, task, text)
    assert_no_point(reward, text, "parse_error")
    assert reward.components["errors"] == [error]


OPTIONAL_FIELDS = {
    "type": "object",
    "properties": {
        "notes": {"type": ["string", "null"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "extra": {"type": "object", "properties": {"who": {"type": ["string", "null"]}}},
    },
}


@pytest.mark.parametrize(
    ("fmt", "text"),
    [
        ("json", '{"notes": null, "tags": [], "extra": {"who": null}}'),
        ("json", '{"notes": "  ", "tags": [""], "extra": {"who": "\\u200b"}}'),  # blank and invisible strings
        ("yaml", "notes: ~\ntags: []\nextra: {who: null}\n"),
        ("xml", "<r><notes/><tags/><extra><who/></extra></r>"),
    ],
)
def test_skeletons_of_blank_fields_carry_no_value(env, fmt, text):
    schema = {"type": "object", "properties": {"r": OPTIONAL_FIELDS}} if fmt == "xml" else OPTIONAL_FIELDS
    if fmt == "xml":  # xml leaves are strings: an empty element is "" for strings, [] for arrays
        schema = json.loads(json.dumps(schema).replace('["string", "null"]', '"string"'))
    assert_no_point(score(env, text_row(schema, fmt), text), text, "empty_document")


def test_one_value_is_enough(env):
    task = text_row(OPTIONAL_FIELDS, "json")
    assert score(env, task, '{"notes": "a note", "tags": [], "extra": {"who": null}}').value == 1.0
    assert score(env, task, '{"notes": null, "tags": [], "extra": {"who": "Ada"}}').value == 1.0
    zero = text_row(
        {"type": "object", "properties": {"n": {"type": "integer"}, "ok": {"type": "boolean"}}}, "json"
    )
    assert score(env, zero, '{"n": 0, "ok": false}').value == 1.0  # 0 and false are answers, right or wrong


@pytest.mark.parametrize(
    ("schema", "fmt", "text"),
    [
        (
            {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "string"}}}},
            "json",
            "[]",
        ),
        (
            {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "string"}}}},
            "yaml",
            "[]",
        ),
        ({"type": "object"}, "json", "{}"),
        ({"type": "object"}, "yaml", "{}"),
        ({"type": "object"}, "toml", "# " + NO_DATA),  # a comment is an empty table
        ({"type": "object", "additionalProperties": {"type": "string"}}, "toml", "# nothing"),
        ({"type": ["object", "null"], "properties": {"a": {"type": "string"}}}, "json", "null"),
        ({"type": ["object", "null"], "properties": {"a": {"type": "string"}}}, "yaml", "~"),
        ({"type": "string"}, "json", '""'),
    ],
)
def test_empty_documents_score_zero_in_every_format(env, schema, fmt, text):
    assert_no_point(score(env, text_row(schema, fmt), text), text, "empty_document")


def test_a_sentence_does_not_validate_against_a_typeless_object_schema(env):
    """``properties`` without ``type`` constrains only objects in JSON Schema; strict mode types it."""
    schema = {"properties": {"name": {"type": "string"}}}
    for fmt, text in (("yaml", NO_DATA), ("json", json.dumps(NO_DATA)), ("json", "0")):
        assert_no_point(score(env, text_row(schema, fmt), text), text, "validation_error")
    assert score(env, text_row(schema, "yaml"), "name: Ada\n").value == 1.0
    assert strictify(schema)["type"] == "object"
    assert strictify({"items": {"type": "string"}})["type"] == "array"
    assert "type" not in strictify(
        {"anyOf": [{"type": "null"}], "properties": {"a": {}}}
    )  # a combinator decides
    assert "type" not in strictify({"enum": [1], "properties": {}})


def test_tool_call_payloads_need_a_value(env):
    tasks = [t for t in bundled_rows() if t["response_mode"] == "tool_call"]
    for task in tasks:
        key = task.get("tool_payload_key")
        for empty in ({}, [], None):
            arguments = {key: empty} if key else empty
            assert_no_point(score(env, task, call(task["tool_name"], arguments)), str(arguments))
        assert score(env, task, task["reference_response"]).value == 1.0


# ----- the bundled samples: references win, no vacuous reply does ------------------------------

VACUOUS = {
    "json": ["{}", "[]", "null", '""', json.dumps(NO_DATA)],
    "yaml": ["{}", "[]", "~", "---", "# " + NO_DATA, NO_DATA, "''"],
    "toml": ["# " + NO_DATA, "# nothing\n# here"],
    "csv": [NO_DATA, "a,b\n", "\n"],
    "xml": ["<shipment/>", "<shipment></shipment>", f"<shipment>{NO_DATA}</shipment>", "<data/>"],
}


def blank(value: Any) -> Any:
    """The skeleton of a document: every string blank, every array empty, numbers and booleans null."""
    if isinstance(value, dict):
        return {k: blank(v) for k, v in value.items()}
    if isinstance(value, list):
        return []
    return "" if isinstance(value, str) else None


def test_bundled_samples_give_no_point_without_an_answer(env):
    tasks = bundled_rows()
    for task in tasks:
        fmt, reference = task["schema_type"], task["reference_response"]
        assert score(env, task, reference).value == 1.0, task["id"]
        if task["response_mode"] == "tool_call":
            continue  # test_tool_call_payloads_need_a_value
        replies = list(VACUOUS[fmt])
        if fmt == "csv":
            replies.append(reference.splitlines()[0])
        if fmt in ("json", "yaml"):
            skeleton = blank(parse(reference, fmt))
            replies.append(json.dumps(skeleton) if fmt == "json" else yaml.safe_dump(skeleton))
        for text in replies:
            assert_no_point(score(env, task, text), text)
        think_only = score(env, task, f"<think>{reference}</think>")
        assert_no_point(think_only, "think-only")
        assert think_only.reason == NO_ANSWER


# ----- the NeMo Gym rows: their tool calls, and their schemas in every text format ---------------


def _types(schema: dict) -> list[str]:
    kind = schema.get("type", "object")
    return [kind] if isinstance(kind, str) else list(kind)


def filled(schema: dict) -> Any:
    """A plausible instance of ``schema`` with a value in every field."""
    if "enum" in schema:
        return schema["enum"][0]
    for branch in ("anyOf", "oneOf"):
        if branch in schema:
            return filled(schema[branch][0])
    kind = next(t for t in _types(schema) if t != "null")
    if kind == "object":
        return {k: filled(v) for k, v in (schema.get("properties") or {}).items()}
    if kind == "array":
        return [filled(schema.get("items") or {"type": "string"})] * max(1, schema.get("minItems", 1))
    if kind in ("integer", "number"):
        return max(1, schema.get("minimum", 1))
    return {"boolean": True}.get(kind, "x" * max(1, schema.get("minLength", 1)))


def skeleton(schema: dict) -> Any:
    """The emptiest document of ``schema``'s shape: null where allowed, "" and [] elsewhere."""
    kinds = _types(schema)
    if "null" in kinds:
        return None
    if "object" in kinds:
        return {k: skeleton(v) for k, v in (schema.get("properties") or {}).items()}
    return {"array": [], "string": ""}.get(kinds[0])


def nemo_rows(shared_data: Path) -> list[dict]:
    path = shared_data / "nemo-gym-rows" / "structured_outputs" / "example.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_nemo_gym_tool_calls_with_empty_payloads_score_zero(env, shared_data):
    """Rows 2 and 5 ask for an array of records: ``{"extraction": []}`` validated and scored 1."""
    vacuous_before = 0
    for row in nemo_rows(shared_data):
        schema = json.loads(row["schema_str"])
        key = row["tool_payload_key"]
        payloads = [{}, [], None, skeleton(schema)]
        if _types(schema) == ["array"]:
            payloads.append([skeleton(schema["items"])])
        for payload in payloads:
            arguments = {key: payload} if key else payload
            reward = score(env, row, call(row["tool_name"], arguments))
            assert_no_point(reward, str(arguments)[:80])
            if not strict_validator(row["schema_str"]).is_valid(
                payload
            ):  # it validates: only the rule stops it
                continue
            vacuous_before += 1
            assert reward.components["error_type"] == "empty_document"
        good = filled(schema)
        assert score(env, row, call(row["tool_name"], {key: good} if key else good)).value == 1.0
    assert vacuous_before >= 3  # [] for rows 2 and 5, and row 2's record of blank strings


@pytest.mark.parametrize("fmt", ["json", "yaml", "csv", "xml", "toml"])
def test_nemo_gym_schemas_in_every_text_format(env, shared_data, fmt):
    for row in nemo_rows(shared_data):
        schema = json.loads(row["schema_str"])
        is_table = _types(schema) == ["array"]
        if (fmt == "csv" and not is_table) or (fmt in ("xml", "toml") and is_table):
            continue  # csv needs an array of records; xml and toml need an object at the root
        if fmt == "xml":
            schema = {"type": "object", "properties": {"data": schema}}
        task = text_row(schema, fmt)
        replies = list(VACUOUS[fmt])
        if fmt == "csv":
            columns = list(schema["items"]["properties"])
            replies += [",".join(columns), ",".join(columns) + "\n" + ",".join("" for _ in columns)]
        elif fmt in ("json", "yaml"):
            empty = skeleton(schema)
            replies += (
                [json.dumps(empty), yaml.safe_dump(empty)] if fmt == "json" else [yaml.safe_dump(empty)]
            )
        elif fmt == "xml":
            replies.append(
                "<data>" + "".join(f"<{k}/>" for k in schema["properties"]["data"]["properties"]) + "</data>"
            )
        for text in replies:
            assert_no_point(score(env, task, text), text[:80])
        good = filled(schema)
        if fmt == "json":
            assert score(env, task, json.dumps(good)).value == 1.0
        elif fmt == "yaml":
            assert score(env, task, yaml.safe_dump(good)).value == 1.0
        elif fmt == "csv":
            columns = list(schema["items"]["properties"])
            text = ",".join(columns) + "\n" + ",".join(str(good[0][c]).lower() for c in columns) + "\n"
            assert score(env, task, text).value == 1.0


# ----- rows no answer could win are refused at load -------------------------------------------


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {}},
        {"type": "null"},
        {"type": "array", "items": {"type": "object", "properties": {}}},
        {"type": "object", "properties": {"a": {"type": "null"}, "b": {"type": "array", "maxItems": 0}}},
        {"const": ""},
        {"enum": [None, ""]},
    ],
)
def test_schemas_that_admit_only_empty_documents_are_refused(schema):
    with pytest.raises(TaskError) as info:
        StructuredOutputEnv([]).load_task(text_row(schema, "json"))
    assert info.value.field == "schema_str" and "empty document" in str(info.value)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object"},
        {"type": "array"},
        {},
        True,
        {"type": "object", "properties": {"a": {}}},
        {"anyOf": [{"type": "null"}, {"type": "string"}]},
        {"$ref": "#/$defs/x", "$defs": {"x": {"type": "null"}}},
        {"type": "object", "properties": {"a": {"type": "null"}}, "patternProperties": {"^x": {}}},
    ],
)
def test_schemas_that_may_carry_a_value_load(schema):
    strict = strict_validator(json.dumps(schema)).schema
    assert not admits_only_empty(strict)


# ----- the property ------------------------------------------------------------------------------

LENIENT = {
    "type": "object",
    "properties": {
        "a": {"type": ["string", "null"]},
        "b": {"type": "array", "items": {"type": ["string", "integer", "null"]}},
        "c": {"type": ["object", "null"], "properties": {"d": {"type": ["boolean", "null"]}}},
    },
}

leaf = st.none() | st.sampled_from(["", " ", "\u200b", "x"]) | st.booleans() | st.integers(-2, 2)


@settings(max_examples=300, deadline=None)
@given(
    a=st.none() | st.sampled_from(["", " ", "\t\n", "\ufeff", "x"]),
    b=st.lists(leaf, max_size=3),
    c=st.none() | st.fixed_dictionaries({"d": st.none() | st.booleans()}),
    fmt=st.sampled_from(["json", "yaml"]),
    mode=st.sampled_from(["text", "tool_call"]),
)
def test_a_winning_document_always_carries_a_value(env, a, b, c, fmt, mode):
    document = {"a": a, "b": b, "c": c}
    if mode == "tool_call":
        task = {**text_row(LENIENT, "json"), "response_mode": "tool_call"}
        reward = score(env, task, call("save", document))
    else:
        reward = score(
            env, text_row(LENIENT, fmt), json.dumps(document) if fmt == "json" else yaml.safe_dump(document)
        )
    assert not reward.masked
    if reward.value == 1.0:
        assert has_value(document)
    elif strict_validator(json.dumps(LENIENT)).is_valid(document):
        assert reward.components["error_type"] == "empty_document" and not has_value(document)
