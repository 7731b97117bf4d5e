"""``cascade/SWE-v0``'s conformance case (``cascade_envs.testing.check_env``): the bundled ``inilite`` task,
fixed as its gold patch does. It needs the OpenHands SDK (Python >= 3.12): ``.ci/swe.sh`` runs it."""

import json
from typing import Any

from cascade_envs.data import read_rows
from cascade_envs.testing import Case

ROW = next(row for _, row in read_rows("bundled:swe/tasks.jsonl") if row["repo"].endswith("/inilite"))


def tool_call(name: str, **arguments: Any) -> str:
    """A ``<tool_call>`` block."""
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


FIX = tool_call(
    "file_editor",
    command="str_replace",
    path="/testbed/inilite/reader.py",
    old_str='        parts = line.split("=")\n        key, value = parts[0].strip(), parts[1].strip()\n',
    new_str='        key, _, value = line.partition("=")\n        key, value = key.strip(), value.strip()\n',
)
"""The edit of the gold patch."""
FINISH = tool_call("finish", message="Done.")

CASE = Case(
    good_row=ROW,
    good_answer=FIX + FINISH,
    bad_answer=tool_call("terminal", command="ls") + FINISH,
    bad_rows=[
        ({**ROW, "FAIL_TO_PASS": "[]"}, "FAIL_TO_PASS"),
        ({**ROW, "repo_snapshot": None}, "repo_snapshot"),
    ],
    env_kwargs={"command_timeout_s": 10},
    requires=("openhands",),
)
