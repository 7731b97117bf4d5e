"""``cascade/AgentlessRepair-v0``'s conformance case (``cascade_envs.testing.check_env``) and its in-process
judge: 10 when the candidate changes exactly the reference's lines, else 0. It reads the judge prompt
the env writes, so it also checks that the prompt carries both patches.
"""

from __future__ import annotations

import re
from typing import Any

from cascade_envs.data import read_rows
from cascade_envs.testing import Case, ScriptedJudge

ROW = next(row for _, row in read_rows("bundled:agentless/samples.jsonl"))
FIX = """<think>Reserving all available units must work: the comparison is off by one.</think>
```python
### warehouse/stock.py
<<<<<<< SEARCH
        if quantity >= level.available:
=======
        if quantity > level.available:
>>>>>>> REPLACE
```"""
"""The reference fix of the first bundled sample (northwind__warehouse-142) as an answer."""
WRONG_FIX = FIX.replace("quantity > level.available", "quantity > level.available + 1")


def changed_lines(patch: str) -> list[str]:
    return [line for line in patch.splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def section(prompt: str, title: str) -> re.Match[str] | None:
    """The fenced section ``title`` of a judge prompt (its text is group 2)."""
    return re.search(rf"<<{title} (Q[0-9a-f]+)>>\n(.*?)\n<</{title} \1>>", prompt, re.DOTALL)


def reference_verdict(messages: list[dict[str, Any]]) -> str:
    """Compares the CANDIDATE PATCH section of the judge prompt with its REFERENCE PATCH."""
    prompt = messages[-1]["content"]
    reference, candidate = section(prompt, "REFERENCE PATCH"), section(prompt, "CANDIDATE PATCH")
    if reference is None or candidate is None:
        return "I cannot find the patches."
    same = changed_lines(reference.group(2)) == changed_lines(candidate.group(2))
    return f"The candidate {'matches' if same else 'differs from'} the reference.\nSCORE: {10 if same else 0}"


CASE = Case(
    good_row=ROW,
    good_answer=FIX,
    bad_answer=WRONG_FIX,
    bad_rows=[({**ROW, "gold_files": []}, "gold_files"), ({**ROW, "patch": "nonsense"}, "patch")],
    env_kwargs={"judge_url": ScriptedJudge(reference_verdict)},
    other_kwargs={"top_k": 0},
)
