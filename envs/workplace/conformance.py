"""``cascade/Workplace-v0``'s conformance case (``cascade_envs.testing.check_env``).

An outcome-scored env: the "answer" is the tool calls (repeated each turn, they are idempotent);
the episode ends at the turn limit and is scored on its final state.
"""

import json
from typing import Any

from cascade_envs.data import read_rows
from cascade_envs.testing import Case

ROW = next(row for _, row in read_rows("bundled:workplace/tasks.jsonl") if row["id"] == 42)


def tool_calls(calls: list[dict[str, Any]]) -> str:
    """``<tool_call>`` blocks of ``{"name", "arguments"}`` calls (arguments as NeMo Gym's JSON text)."""
    return "".join(
        f'<tool_call>{{"name": {json.dumps(c["name"])}, "arguments": {c["arguments"]}}}</tool_call>'
        for c in calls
    )


CASE = Case(
    good_row=ROW,
    good_answer=tool_calls(ROW["ground_truth"]),
    bad_answer=tool_calls(ROW["ground_truth"][:1]),
    bad_rows=[({**ROW, "ground_truth": "[{"}, "ground_truth")],
)
