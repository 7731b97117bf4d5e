"""``cascade/Math-v0``'s conformance case (``cascade_envs.testing.check_env``): a bundled row and its bad variants."""

from cascade_envs.data import read_rows
from cascade_envs.testing import Case

ROW = next(row for _, row in read_rows("bundled:math/samples.jsonl"))

CASE = Case(
    good_row=ROW,
    good_answer="<think>2^3 = 1 mod 7, 2^100 = 2^1.</think>The remainder is \\boxed{2}.",
    bad_answer="\\boxed{3}",
    bad_rows=[
        ({**ROW, "expected_answer": ""}, "expected_answer"),
        ({**ROW, "expected_answer": None}, "expected_answer"),
        ({**ROW, "expected_answer": True}, "expected_answer"),
        ({**ROW, "question": 3}, "question"),
    ],
)
