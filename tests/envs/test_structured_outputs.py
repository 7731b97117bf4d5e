"""cascade/StructuredOutput-v0: strict schemas, every format and response mode, NeMo Gym parity, bad input."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cascade_envs import make
from cascade_envs.env import run_sync
from cascade_envs.envs.structured_outputs.env import StructuredOutputEnv
from cascade_envs.envs.structured_outputs.schema import strictify

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "address": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "zip": {"type": ["string", "null"]}},
        },
        "tags": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}}},
    },
}
GOOD = {"name": "Ada", "age": 36, "address": {"city": "London", "zip": None}, "tags": [{"k": "x"}]}


def row(schema=PERSON, **extra) -> dict:
    return {"prompt": "Extract the person.", "schema_str": json.dumps(schema), **extra}


def score(text, task: dict | None = None, env: StructuredOutputEnv | None = None):
    env = env or StructuredOutputEnv([])
    return run_sync(env.areward(task or row(), text))


# ----- strict schemas ---------------------------------------------------------------------------


def test_strictify_requires_every_property_and_forbids_others_recursively():
    original = copy.deepcopy(PERSON)
    strict = strictify(PERSON)
    assert original == PERSON  # the input is not modified
    assert strict["required"] == ["name", "age", "address", "tags"]
    assert strict["additionalProperties"] is False
    assert strict["properties"]["address"]["required"] == ["city", "zip"]
    assert strict["properties"]["tags"]["items"]["additionalProperties"] is False


def test_strictify_reaches_combinators_and_defs_but_not_property_names():
    schema = {
        "$defs": {"p": {"properties": {"a": {}}}},
        "anyOf": [{"properties": {"b": {}}}, {"type": "null"}],
        "properties": {"properties": {"type": "string"}},
    }
    strict = strictify(schema)
    assert strict["$defs"]["p"]["required"] == ["a"]
    assert strict["anyOf"][0]["additionalProperties"] is False
    assert strict["anyOf"][1] == {"type": "null"}
    assert strict["properties"] == {"properties": {"type": "string"}}  # a property named "properties"
    assert strict["required"] == ["properties"]
    assert "additionalProperties" not in strictify({"type": "object"})  # no properties: left open


def test_valid_document_scores_one():
    reward = score(json.dumps(GOOD))
    assert reward.value == 1.0 and reward.components == {"schema_type": "json", "response_mode": "text"}


@pytest.mark.parametrize(
    ("document", "path"),
    [
        ({k: v for k, v in GOOD.items() if k != "age"}, "$"),  # optional made required
        ({**GOOD, "extra": 1}, "$"),  # additional property
        ({**GOOD, "age": "36"}, "$.age"),  # wrong type
        ({**GOOD, "address": {"city": "London"}}, "$.address"),  # nested required
        ({**GOOD, "tags": [{"k": "x", "v": 2}]}, "$.tags[0]"),  # inside array items
    ],
)
def test_schema_violations_score_zero_with_paths(document, path):
    reward = score(json.dumps(document))
    assert reward.value == 0.0 and not reward.masked
    assert reward.components["error_type"] == "validation_error"
    assert reward.components["errors"][0].startswith(f"{path}: ")
    assert reward.reason.startswith("validation_error: ")


def test_reports_several_errors_shallowest_first():
    reward = score(json.dumps({"name": 1, "age": "x", "address": {"city": 2, "zip": None}, "tags": []}))
    errors = reward.components["errors"]
    assert len(errors) == 3 and errors[0].startswith("$.age") and errors[-1].startswith("$.address.city")


def test_code_fence_is_a_parse_error_unless_allowed():
    fenced = f"```json\n{json.dumps(GOOD)}\n```"
    assert score(fenced).components["error_type"] == "parse_error"
    assert score(fenced, env=StructuredOutputEnv([], allow_code_fence=True)).value == 1.0


def test_yaml_toml_and_csv_documents():
    schema = {"type": "object", "properties": {"host": {"type": "string"}, "port": {"type": "integer"}}}
    assert score("host: db\nport: 5432\n", row(schema, schema_type="yaml")).value == 1.0
    assert score("host: db\nport: '5432'\n", row(schema, schema_type="yaml")).value == 0.0
    assert score('host = "db"\nport = 5432\n', row(schema, schema_type="toml")).value == 1.0
    assert score("host = db", row(schema, schema_type="toml")).components["error_type"] == "parse_error"
    table = {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "pop": {"type": "integer"},
                "cap": {"type": "boolean"},
                "note": {"type": ["integer", "null"]},
            },
        },
    }
    good = "city,pop,cap,note\nOslo,709000,true,\nBergen,291000,0,7\n"
    assert score(good, row(table, schema_type="csv")).value == 1.0
    bad = score("city,pop,cap,note\nOslo,many,true,\n", row(table, schema_type="csv"))
    assert bad.components["errors"] == ["$[0].pop: 'many' is not of type 'integer'"]


XML_SCHEMA = {
    "type": "object",
    "properties": {
        "record": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "age": {"type": "integer"},
                "score": {"type": "number"},
                "active": {"type": "boolean"},
                "nickname": {"type": "string"},
                "skills": {"type": "array", "items": {"type": "string"}},
            },
        }
    },
}


@pytest.mark.parametrize(
    ("xml", "error_type"),
    [
        (
            "<record><name>Ada</name><age>36</age><score>9.5</score><active>true</active><nickname/>"
            "<skills><s>math</s><s>code</s></skills></record>",
            None,
        ),
        (
            "<record><name>Ada</name><age>36</age><score>9</score><active>0</active><nickname></nickname>"
            "<skills><s>math</s></skills></record>",
            None,
        ),  # one item, "0"
        (
            "<record><name>Ada</name><age>thirty</age><score>9</score><active>1</active><nickname/>"
            "<skills/></record>",
            "validation_error",
        ),  # not an integer
        (
            "<record><name>Ada</name><age>36</age><score>9</score><active>1</active><nickname/><skills/>"
            "<extra>1</extra></record>",
            "validation_error",
        ),
        ("<record><name>Ada</name><age>36", "parse_error"),
        (
            '<!DOCTYPE r [<!ENTITY e "boom">]><record><name>&e;</name></record>',
            "parse_error",
        ),  # entities refused
    ],
)
def test_xml_documents(xml, error_type):
    reward = score(xml, row(XML_SCHEMA, schema_type="xml"))
    assert reward.components.get("error_type") == error_type, reward.reason
    assert reward.value == (1.0 if error_type is None else 0.0)


def test_yaml_aliases_are_refused():
    bomb = "a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\n"
    reward = score(bomb, row({"type": "object"}, schema_type="yaml"))
    assert reward.components["error_type"] == "parse_error" and "anchors" in reward.reason


# ----- tool-call mode ---------------------------------------------------------------------------

TOOLS = [
    {
        "type": "function",
        "name": "save_person",
        "parameters": {"type": "object", "properties": {"person": PERSON}},
    },
    {"type": "function", "name": "save_city", "parameters": {"type": "object", "properties": {"city": {}}}},
]


def tool_row(**extra) -> dict:
    params = {"input": [{"role": "user", "content": "Extract the person."}], "tools": TOOLS}
    return {
        "responses_create_params": params,
        "schema_str": json.dumps(PERSON),
        "response_mode": "tool_call",
        "tool_name": "save_person",
        "tool_payload_key": "person",
        **extra,
    }


def call(name: str, arguments) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


@pytest.mark.parametrize(
    ("text", "error_type"),
    [
        (call("save_person", {"person": GOOD}), None),
        ("Here you go: " + json.dumps(GOOD), "missing_tool_call"),
        (call("save_person", {"person": GOOD}) * 2, "multiple_tool_calls"),
        (call("save_person", {"person": GOOD}) + "<tool_call>{oops</tool_call>", "multiple_tool_calls"),
        (call("save_city", {"person": GOOD}), "wrong_tool_name"),
        (
            '<tool_call>{"name": "save_person", "arguments": {bad json}}</tool_call>',
            "tool_arguments_parse_error",
        ),
        (call("save_person", GOOD), "missing_tool_payload_key"),
        (call("save_person", {"person": {**GOOD, "age": 1.5}}), "validation_error"),
    ],
)
def test_tool_call_mode(text, error_type):
    reward = score(text, tool_row())
    assert reward.value == (1.0 if error_type is None else 0.0)
    assert reward.components.get("error_type") == error_type


def test_tool_call_without_name_or_payload_key_uses_the_arguments():
    task = tool_row(tool_name=None, tool_payload_key=None)
    assert score(call("anything", GOOD), task).value == 1.0


def test_tools_are_announced_in_the_prompt():
    env = StructuredOutputEnv([tool_row()])
    obs, _ = env.reset(seed=0)
    assert obs[0]["role"] == "system" and "save_person" in obs[0]["content"]


# ----- rows -------------------------------------------------------------------------------------


def test_schema_given_as_an_object_is_accepted():
    assert score(json.dumps(GOOD), {**row(), "schema_str": PERSON}).value == 1.0


def test_bundled_samples_score_their_reference_and_reject_broken_ones():
    env = make("cascade/StructuredOutput-v0")
    assert len(env.tasks) >= 10
    assert {t.task.schema_type for t in env.tasks} == {"json", "yaml", "toml", "csv", "xml"}
    assert {t.task.response_mode for t in env.tasks} == {"text", "tool_call"}
    for task in (t.row for t in env.tasks):
        reference = task["reference_response"]
        assert run_sync(env.areward(task, reference)).value == 1.0, task["id"]
        truncated = run_sync(env.areward(task, reference[: len(reference) // 2]))
        assert truncated.value == 0.0 and truncated.components["error_type"], task["id"]


# ----- NeMo Gym parity ------------------------------------------------------------------------


def rollout_text(rollout: dict) -> str:
    return "".join(
        part["text"]
        for item in rollout["response"]["output"]
        if item["type"] == "message"
        for part in item["content"]
        if part["type"] == "output_text"
    )


def schema_in_prompt(params: dict) -> str:
    """The recorded rollouts do not carry ``schema_str``; their prompts quote it: take the largest
    JSON object found in the user messages."""
    decoder, found = json.JSONDecoder(), []
    for message in params["input"]:
        text = message["content"]
        for start in (i for i, c in enumerate(text) if c == "{"):
            try:
                found.append(decoder.raw_decode(text, start)[0])
            except json.JSONDecodeError:
                continue
    return json.dumps(max(found, key=lambda s: len(json.dumps(s))))


def test_nemo_gym_rows_load_and_score_tool_calls(shared_data: Path):
    folder = shared_data / "nemo-gym-rows" / "structured_outputs"
    env = StructuredOutputEnv(str(folder / "example.jsonl"))
    assert len(env.tasks) == 5
    for task in (t.row for t in env.tasks):
        assert task["response_mode"] == "tool_call"
        names = [tool["name"] for tool in task["responses_create_params"]["tools"]]
        assert task["tool_name"] in names
        other = next(n for n in names if n != task["tool_name"]) if len(names) > 1 else "not_a_tool"
        payload = {task["tool_payload_key"]: {}} if task["tool_payload_key"] else {}
        assert run_sync(env.areward(task, call(other, payload))).components["error_type"] == "wrong_tool_name"
        assert run_sync(env.areward(task, "prose")).components["error_type"] == "missing_tool_call"
        empty = run_sync(env.areward(task, call(task["tool_name"], payload)))
        assert empty.components["error_type"] == "validation_error"  # {} lacks the required fields


def test_nemo_gym_rollouts_get_their_recorded_rewards(shared_data: Path):
    folder = shared_data / "nemo-gym-rows" / "structured_outputs"
    env = StructuredOutputEnv([])
    rewards = []
    for line in (folder / "example_rollouts.jsonl").read_text().splitlines():
        rollout = json.loads(line)
        task = {
            "responses_create_params": rollout["responses_create_params"],
            "schema_str": schema_in_prompt(rollout["responses_create_params"]),
            "schema_type": "json",
        }
        reward = run_sync(env.areward(task, rollout_text(rollout)))
        assert reward.value == rollout["reward"]
        rewards.append(reward.value)
    assert rewards == [0.0, 0.0, 1.0, 0.0, 0.0]  # four replies are fenced: upstream does not unfence either


# ----- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["\x00" * 100, "[" * 200_000, '{"a":' * 100_000])
def test_nul_bytes_and_deeply_nested(text):
    start = time.perf_counter()
    reward = score(text)
    assert reward.value == 0.0 and not reward.masked and reward.reason
    assert time.perf_counter() - start < 2.0


def test_megabyte_document():
    big = json.dumps({**GOOD, "name": "x" * 1_000_000})
    env = StructuredOutputEnv([], max_answer_chars=2_000_000)
    try:
        score(json.dumps(GOOD) + " " * 2000, env=env)  # start the worker: start-up is not part of a check
        start = time.perf_counter()
        assert score(big, env=env).value == 1.0
        assert score(big[:-1], env=env).components["error_type"] == "parse_error"
        assert time.perf_counter() - start < 2.0
    finally:
        env.close()
    assert score(big).reason == "verifier limit: answer has 1000089 characters, over the 200000 checked"


def test_unresolvable_reference_is_a_masked_failure():
    reward = score("{}", row({"$ref": "https://example.invalid/schema.json"}))
    assert reward.masked and "Unresolvable" in reward.error


@settings(max_examples=200, deadline=None)
@given(
    document=st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(st.sampled_from(["name", "age", "x"]), inner, max_size=3)
        ),
        max_leaves=12,
    ),
    fmt=st.sampled_from(["json", "yaml", "toml", "csv", "xml"]),
    mode=st.sampled_from(["text", "tool_call"]),
)
def test_random_documents_never_crash(document, fmt, mode):
    text = json.dumps(document) if mode == "text" else call("save_person", {"person": document})
    task = tool_row(schema_type=fmt) if mode == "tool_call" else row(schema_type=fmt)
    reward = score(text, task)
    assert reward.value in (0.0, 1.0) and not reward.masked


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=300), fmt=st.sampled_from(["json", "yaml", "toml", "csv", "xml"]))
def test_random_text_never_crashes(text, fmt):
    reward = score(text, row(schema_type=fmt))
    assert reward.value in (0.0, 1.0) and not reward.masked
