"""``cascade/MCQA-v0``'s conformance case (``cascade_envs.testing.check_env``): a bundled row and its bad variants."""

from typing import Any

from cascade_envs.data import read_rows
from cascade_envs.testing import Case

ROW = next(row for _, row in read_rows("bundled:mcqa/samples.jsonl"))

BAD_CHANGES: list[tuple[dict[str, Any], str]] = [
    ({"options": None}, "options"),
    ({"options": []}, "options"),
    ({"options": [{"AB": "x"}]}, "options"),
    ({"options": [{"A": 3}]}, "options"),
    ({"options": [{"A": None}]}, "options"),
    ({"expected_answer": "Z"}, "expected_answer"),
    ({"expected_answer": 1}, "expected_answer"),
    ({"grading_mode": "fuzzy"}, "grading_mode"),
    ({"template_metadata": "x"}, "template_metadata"),
    ({"template_metadata": {"output_regex": 3}}, "template_metadata.output_regex"),
    ({"template_metadata": {"output_regex": ["ok: (\\w)", None]}}, "template_metadata.output_regex"),
    ({"options": None, "template_metadata": {"output_regex": "(unclosed"}}, "options"),  # nothing could score
]

CASE = Case(
    good_row=ROW,
    good_answer="<think>Nitrogen is about 78%.</think>\\boxed{B}",
    bad_answer="\\boxed{A}",
    bad_rows=[({**ROW, **change}, field) for change, field in BAD_CHANGES],
)
