"""``cascade/StructuredOutput-v0``'s conformance case (``cascade_envs.testing.check_env``): a bundled row
and its bad variants."""

import json
from typing import Any

from cascade_envs.data import read_rows
from cascade_envs.testing import Case

ROW = next(row for _, row in read_rows("bundled:structured_outputs/samples.jsonl"))

BAD_CHANGES: list[tuple[dict[str, Any], str]] = [
    ({"schema_str": "{not json"}, "schema_str"),
    ({"schema_str": json.dumps({"type": "strng"})}, "schema_str"),
    ({"schema_str": json.dumps({"type": "string", "pattern": "(unclosed"})}, "schema_str"),
    ({"schema_str": json.dumps({"properties": {"a": {"minimum": "zero"}}})}, "schema_str"),
    ({"schema_str": "[1, 2]"}, "schema_str"),
    ({"schema_str": None}, "schema_str"),
    ({"schema_type": "ini"}, "schema_type"),
    ({"schema_type": "docx"}, "schema_type"),
    ({"response_mode": "audio"}, "response_mode"),
    ({"tool_name": 3}, "tool_name"),
]

CASE = Case(
    good_row=ROW,
    good_answer='{"name": "Amara Okafor", "age": 41, "email": "amara.okafor@example.org"}',
    bad_answer="I could not find that data.",
    bad_rows=[({**ROW, **change}, field) for change, field in BAD_CHANGES],
)
